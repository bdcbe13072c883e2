"""The branch-free requantizations the tiled kernels call for every output (tinyc_q_mbqm_even_r,
tinyc_q_mbqm_r in runtime_c/include/tinyc_q.h), in their 32-bit-word form for Cortex-M4: equal to
the golden arithmetic (tinyc/numerics/fixed_point.py) bit for bit over the whole documented domain
(multiplier in [0, 2^31), 0 <= rshift <= 31, any int32 accumulator): every shift, random and edge
accumulators and multipliers, and exact ties built on purpose. On the host (under UBSan), and on
the emulated Cortex-M4 (mps2-an386) as the firmware compiles them (-O3, a bare-metal test image
whose exit status counts the mismatches), where they also compile to far fewer instructions than
before (about 12 / 11 instead of 21 / 15)."""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tinyc.numerics import fixed_point as qa
from util import REPO

INCLUDE = REPO / "runtime_c" / "include"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
I32_MIN, I32_MAX = qa.INT32_MIN, qa.INT32_MAX
HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None

HARNESS = r"""
#include "tinyc_q.h"
void h_rq(const int32_t *x, const int32_t *m, const int32_t *r, int32_t even, int32_t *o, int n)
{ int i; for (i = 0; i < n; ++i) o[i] = even ? tinyc_q_mbqm_even_r(x[i], m[i], r[i]) : tinyc_q_mbqm_r(x[i], m[i], r[i]); }
"""


def cases(n_random: int, seed: int = 19) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(acc, multiplier, rshift) triples: for every rshift 0..31 random accumulators (full range
    and small magnitudes) x random multipliers, the edges of both, and exact ties of p / 2^(31+r)
    (p = acc * M an odd multiple of 2^(30+r), with even and odd quotients, both signs) and their
    neighbours p +- 1 (M = 1 steps p by one)."""
    g = np.random.default_rng(seed)
    acc_edges = [I32_MIN, I32_MIN + 1, -(1 << 30), -(1 << 16), -3, -2, -1, 0, 1, 2, 3, 1 << 16, (1 << 30) - 1,
                 1 << 30, I32_MAX - 1, I32_MAX]
    mul_edges = [0, 1, 2, 3, (1 << 30) - 1, 1 << 30, (1 << 30) + 1, I32_MAX - 1, I32_MAX]
    xs, ms, rs = [], [], []
    for r in range(32):
        a = g.integers(I32_MIN, I32_MAX, n_random, endpoint=True)
        a[: n_random // 2] >>= g.integers(0, 31, n_random // 2)  # small accumulators as well
        m = g.integers(0, I32_MAX, n_random, endpoint=True)
        m[: n_random // 4] = g.integers(1 << 30, I32_MAX, n_random // 4, endpoint=True)  # quantize_multiplier's
        ea, em = np.meshgrid(acc_edges, mul_edges)
        # ties: acc = a0 * 2^e, M = m0 * 2^k, a0 and m0 odd, e + k = 30 + r -> p / 2^(31+r) = a0 m0 / 2
        k = g.integers(max(0, r - 1), 31, 64)
        e = 30 + r - k
        span = np.int64(1) << (31 - e)  # |a0| < 2^(31-e), 1 <= m0 < 2^(31-k)
        a0 = 2 * (g.integers(0, 1 << 40, 64) % span) - span + 1
        m0 = 2 * (g.integers(0, 1 << 40, 64) % np.maximum((np.int64(1) << (31 - k)) // 2, 1)) + 1
        tie_a, tie_m = a0 << e, m0 << k
        # neighbours of ties with M = 1: p = acc itself, ties at acc = (2q+1) * 2^(30+r) (only r <= 0 fits)
        near = (2 * g.integers(-1, 1, 16, endpoint=True) + 1) * (1 << 30) + g.integers(-2, 2, 16, endpoint=True)
        near = np.clip(near, I32_MIN, I32_MAX)
        a = np.concatenate([a, ea.ravel(), tie_a, tie_a + 1, tie_a - 1, near])
        m = np.concatenate([m, em.ravel(), tie_m, tie_m, tie_m, np.ones(near.size, np.int64)])
        a = np.clip(a, I32_MIN, I32_MAX)
        xs.append(a)
        ms.append(m)
        rs.append(np.full(a.size, r))
    return np.concatenate(xs), np.concatenate(ms), np.concatenate(rs)


def golden(x: np.ndarray, m: np.ndarray, r: np.ndarray, even: bool) -> np.ndarray:
    return np.asarray(qa.multiply_by_quantized_multiplier(x, m, -r, "half_even" if even else "tflite"))


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("rqm4")
    (d / "h.c").write_text(HARNESS)
    subprocess.run([cc, *STRICT, "-O2", "-fPIC", "-shared", "-fsanitize=undefined", "-fno-sanitize-recover=all",
                    f"-I{INCLUDE}", str(d / "h.c"), "-o", str(d / "libh.so")], check=True, capture_output=True)
    return ctypes.CDLL(str(d / "libh.so"))


def c_rq(lib, x, m, r, even: bool) -> np.ndarray:
    x, m, r = (np.ascontiguousarray(v, np.int32) for v in (x, m, r))
    o = np.empty_like(x)
    p = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    lib.h_rq(p(x), p(m), p(r), ctypes.c_int32(int(even)), p(o), ctypes.c_int(x.size))
    return o


@pytest.mark.parametrize("even", [True, False], ids=["half_even", "tflite"])
def test_requant_host_every_shift(clib, even: bool) -> None:
    x, m, r = cases(40_000)
    np.testing.assert_array_equal(c_rq(clib, x, m, r, even), golden(x, m, r, even))


def test_requant_ties_are_really_ties() -> None:
    """The constructed ties are exact halves (so the test exercises the tie rule), with both parities."""
    x, m, r = cases(8)
    p = x.astype(object) * m.astype(object)
    ties = [(int(a), int(s)) for a, s in zip(p, r) if a % (1 << (31 + int(s))) == 1 << (30 + int(s))]
    assert len(ties) > 32 * 12 and {s for _, s in ties} == set(range(32))
    qs = {(a >> (31 + s)) & 1 for a, s in ties}
    assert qs == {0, 1}


def _objdump_function(obj: Path, name: str) -> list[str]:
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(obj)], check=True, capture_output=True, text=True).stdout
    body = dis.split(f"<{name}>:")[1].split("\n\n")[0]
    return [ln for ln in body.splitlines() if re.match(r"\s+[0-9a-f]+:\s", ln) and "nop" not in ln]


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None, reason="needs arm-none-eabi-gcc")
def test_requant_m4_instruction_count(tmp_path: Path) -> None:
    """arm-none-eabi-gcc -O3 -mcpu=cortex-m4: one SMULL / SMLAL and no 64-bit shift helper; whole
    functions (both paths) of at most 24 / 18 instructions (they were 36 / 21)."""
    src = tmp_path / "f.c"
    src.write_text('#include "tinyc_q.h"\n'
                   "int32_t f_even(int32_t a, int32_t m, int32_t r) { return tinyc_q_mbqm_even_r(a, m, r); }\n"
                   "int32_t f_tfl(int32_t a, int32_t m, int32_t r) { return tinyc_q_mbqm_r(a, m, r); }\n")
    obj = tmp_path / "f.o"
    subprocess.run(["arm-none-eabi-gcc", *STRICT, "-O3", "-mcpu=cortex-m4", "-mthumb", f"-I{INCLUDE}", "-c", str(src),
                    "-o", str(obj)], check=True, capture_output=True)
    even, tfl = _objdump_function(obj, "f_even"), _objdump_function(obj, "f_tfl")
    assert sum("smull" in ln for ln in even) == 1 and sum("smlal" in ln or "smull" in ln for ln in tfl) == 1
    assert len(even) <= 24 and len(tfl) <= 18, ("\n".join(even), "\n".join(tfl))


FIRMWARE = r"""
#include <stdint.h>
#include "tinyc_q.h"
#include "rq_cases.h"
extern uint32_t __stack_top__[];
void reset(void) __attribute__((noreturn));
void fault(void) __attribute__((noreturn));
__attribute__((section(".isr_vector"), used)) const void *const vectors[16] = {
    __stack_top__, (const void *)reset, (const void *)fault, (const void *)fault, (const void *)fault,
    (const void *)fault, (const void *)fault};
static void __attribute__((noreturn)) leave(uint32_t code)
{
    static uint32_t block[2];
    block[0] = 0x20026u;
    block[1] = code;
    {
        register uint32_t r0 __asm__("r0") = 0x20u;
        register uint32_t *r1 __asm__("r1") = block;
        __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    }
    for (;;) {
    }
}
void fault(void) { leave(250u); }
/* noinline: the functions as the kernels' requantization loops compile them, one call per value */
__attribute__((noinline)) int32_t even_r(int32_t a, int32_t m, int32_t r) { return tinyc_q_mbqm_even_r(a, m, r); }
__attribute__((noinline)) int32_t tfl_r(int32_t a, int32_t m, int32_t r) { return tinyc_q_mbqm_r(a, m, r); }
void reset(void)
{
    uint32_t bad = 0u;
    int32_t i;
    for (i = 0; i < RQ_N; ++i) {
        bad += (uint32_t)(even_r(rq_x[i], rq_m[i], rq_r[i]) != rq_even[i]);
        bad += (uint32_t)(tfl_r(rq_x[i], rq_m[i], rq_r[i]) != rq_tfl[i]);
    }
    leave(bad > 200u ? 200u : bad);
}
"""

LINK = """
MEMORY { FLASH (rx) : ORIGIN = 0x00000000, LENGTH = 4M  RAM (rwx) : ORIGIN = 0x20000000, LENGTH = 4M }
SECTIONS {
  .text : { KEEP(*(.isr_vector)) *(.text*) *(.rodata*) } > FLASH
  .bss (NOLOAD) : { *(.bss*) *(COMMON) } > RAM
  __stack_top__ = ORIGIN(RAM) + LENGTH(RAM);
}
"""


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_requant_on_cortex_m4(tmp_path: Path) -> None:
    """The same cases, computed on the emulated Cortex-M4 (mps2-an386) by the -O3 firmware code."""
    x, m, r = cases(1_000)
    ev, tf = golden(x, m, r, True), golden(x, m, r, False)
    arr = lambda name, a: f"static const int32_t {name}[{a.size}] = {{{', '.join(str(int(v)) for v in a)}}};\n"  # noqa: E731
    (tmp_path / "rq_cases.h").write_text(
        f"#define RQ_N {x.size}\n" + arr("rq_x", x) + arr("rq_m", m) + arr("rq_r", r) + arr("rq_even", ev)
        + arr("rq_tfl", tf))
    (tmp_path / "fw.c").write_text(FIRMWARE)
    (tmp_path / "link.ld").write_text(LINK)
    elf = tmp_path / "fw.elf"
    subprocess.run(["arm-none-eabi-gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O3", "-mcpu=cortex-m4",
                    "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-nostdlib", "-nostartfiles",
                    f"-I{INCLUDE}", f"-I{tmp_path}", "-T", str(tmp_path / "link.ld"), str(tmp_path / "fw.c"),
                    "-o", str(elf)], check=True, capture_output=True, text=True)
    run = subprocess.run(["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-nic", "none", "-monitor", "none",
                          "-serial", "null", "-semihosting-config", "enable=on,target=native", "-kernel", str(elf)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"{run.returncode} mismatches (250: fault) {run.stderr[-500:]}"
    # and the firmware's functions are the short forms (no __aeabi_l* helper, one SMULL each)
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], check=True, capture_output=True, text=True).stdout
    assert "__aeabi_l" not in dis
    assert len(_objdump_function(elf, "even_r")) <= 24 and len(_objdump_function(elf, "tfl_r")) <= 18
