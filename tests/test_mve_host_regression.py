"""Regression: the int8 QConv and QMatMul kernels built for the host with gcc -O3 and wide vectors.

The defect: QConv "pointwise" + mac "mve", oc_tile 32, px_tile 1, "channels_outer", input
2x1x1x6, 48 output channels gave all 96 outputs wrong (all zero) when the host C was built by
gcc 12.2 with -O3 -mavx2 or the host default -O3 -march=native. Not undefined behaviour (ASan +
UBSan clean, unchanged by -fno-strict-aliasing / -fwrapv, clang exact) but a gcc wrong-code bug:
IPA-CP makes the static layer function's input and output pointers constant addresses in the one
arena, IVOPTs then writes the vectorised output store through the input's induction variable as
MEM[0B + (-7 * &arena) + iv * 8] (a zero base), the late pure-const pass / ipa-modref take that
for a NULL dereference and skip it, the function is found pure and its caller deletes the call.
TINYC_KERNEL_ENTRY() (runtime_c/include/tinyc_rt.h), the first statement of every C kernel, keeps
the function visibly impure for gcc.

Checked here, deterministically: that exact case alone, through the user path (CMake build with
boards/host.toml's flags, ctypes) and built directly with the host default flags and with
-O3 -mavx2; and a sweep of the neighbouring register tiles (oc_tile 16/32/48/64, px_tile 1/2,
both loop orders), and every product form / variant at the failing tile (the bug is not MVE's:
unguarded, the "pointwise" and "direct" kernels of every mac form lost the same tile) — golden
model == C bit for bit, and gcc finds no layer function pure or const (a layer that writes its
output must never be: that is exactly how the call got deleted).
"""
from __future__ import annotations

import itertools
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tinyc
import tinyc.reference
from tinyc.codegen import generate
from tinyc.ops import get_op
from tinyc.schedule import default_schedules
from tinyc.targets import host
from util import compile_ir

from test_ops_qconv import _x, conv_graph

GCC = shutil.which("gcc")
pytestmark = pytest.mark.skipif(GCC is None, reason="needs gcc (the defect is a gcc optimiser bug)")

#: the reported case
CASE: dict[str, Any] = dict(xs=(2, 1, 1, 6), oc=48, k=(1, 1))
SCHED: dict[str, Any] = dict(variant="pointwise", mac="mve", oc_tile=32, px_tile=1, loop_order="channels_outer",
                             wide_weights=False)
SEED = 0


def _has_avx2() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        return " avx2" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


FLAG_SETS = [pytest.param(tuple(host.default_cflags().split()), id="host-default"),
             pytest.param(("-O3", "-mavx2"), id="O3-mavx2",
                          marks=pytest.mark.skipif(not _has_avx2(), reason="needs an x86-64 CPU with AVX2"))]


def _write(g: Any, overrides: dict[str, dict[str, Any]], out: Path) -> None:
    sched = default_schedules(g)
    for name, knobs in overrides.items():
        sched[name] = {**sched[name], **knobs}
    gen = generate(g, schedules=sched)
    host.write_project(out, gen.files, gen.manifest, host.default_cflags())


def _gcc_run(out: Path, g: Any, x: np.ndarray, flags: tuple[str, ...]) -> tuple[dict[str, np.ndarray], list[str]]:
    """Build the generated project's runner with gcc and exactly `flags` (strict C99, warnings as
    errors), run it once on x; (outputs by name, names of the functions gcc found pure / const)."""
    srcs = [str(p) for p in sorted(out.glob("*.c")) if p.name != "main.c"] + [str(out / "runtime/src/tinyc_rt.c")]
    dumps = out / "dumps"
    dumps.mkdir()
    exe = out / "runner"
    subprocess.run([GCC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", *flags,
                    "-fdump-tree-local-pure-const-details", "-dumpdir", f"{dumps}/",
                    "-I", str(out), "-I", str(out / "runtime/include"), str(out / "main.c"), *srcs,
                    "-o", str(exe), "-lm"], check=True, capture_output=True, text=True)
    np.ascontiguousarray(x, dtype=np.int8).tofile(out / "x.bin")
    ys = [out / f"y{i}.bin" for i in range(len(g.outputs))]
    subprocess.run([str(exe), str(out / "x.bin"), *map(str, ys)], check=True, capture_output=True, text=True)
    got = {name: np.fromfile(path, dtype=np.int8).reshape(g.tensor(name).shape) for name, path in zip(g.outputs, ys)}
    pure = sorted({m for f in dumps.glob("*local-pure-const*")
                   for m in re.findall(r"Function found to be (?:pure|const): (\w+)", f.read_text())})
    return got, pure


def _assert_exact(got: dict[str, np.ndarray], golden: dict[str, np.ndarray], scheds: list[dict[str, Any]],
                  what: str) -> None:
    for i, s in enumerate(scheds):
        y, ref = got[f"y{i}"], golden[f"y{i}"]
        assert ref.any(), "test data: a golden output of zeros would not show unwritten outputs"
        np.testing.assert_array_equal(y, ref, err_msg=f"{what} {s}: {int((y != ref).sum())} of {y.size} outputs differ")


def _build_run_check(out: Path, g: Any, ov: dict[str, dict[str, Any]], x: np.ndarray,
                     scheds: list[dict[str, Any]], flags: tuple[str, ...]) -> None:
    """Write the project, build it with exactly `flags`, run it: golden == C bit for bit, and gcc
    found no layer function pure or const."""
    golden = tinyc.reference.run_graph(g, {"x": x})
    _write(g, ov, out)
    got, pure = _gcc_run(out, g, x, flags)
    _assert_exact(got, golden, scheds, " ".join(flags))
    assert not [f for f in pure if f.startswith("layer")], f"gcc found layer functions pure/const: {pure}"


def test_reported_case_user_path(tmp_path: Path) -> None:
    """The case as a user meets it: CMake project with the host default cflags, run via ctypes."""
    g, ov = conv_graph(SEED, **CASE, schedules=[SCHED])
    x = _x(SEED, g)
    golden = tinyc.reference.run_graph(g, {"x": x})
    compile_ir(g, tmp_path, ov)
    _assert_exact(tinyc.run(tmp_path, {"x": x}), golden, [SCHED], "cmake/ctypes")


@pytest.mark.parametrize("flags", FLAG_SETS)
def test_reported_case_gcc_flags(tmp_path: Path, flags: tuple[str, ...]) -> None:
    """The case alone in its project (as reported), built with exactly these gcc flags."""
    g, ov = conv_graph(SEED, **CASE, schedules=[SCHED])
    x = _x(SEED, g)
    _build_run_check(tmp_path, g, ov, x, [SCHED], flags)


@pytest.mark.parametrize("flags", FLAG_SETS)
def test_every_product_form(tmp_path: Path, flags: tuple[str, ...]) -> None:
    """The bug is not MVE's: unguarded, gcc 12.2 deleted the same tile (oc_tile 32, px_tile 1,
    channels_outer) of "pointwise" and "direct" with every product form (i16x2, dsp, mve, i16,
    i32). Each form and variant at that tile and its neighbours, plus "baseline"."""
    g, _ = conv_graph(SEED, **CASE)
    ks = get_op("QConv").knobs(g.nodes[0], g)
    scheds = [dict(SCHED, variant=v, mac=m, oc_tile=t, px_tile=p, loop_order=lo)
              for v in ("pointwise", "direct") for m in ks["mac"]
              for t, p, lo in ((32, 1, "channels_outer"), (32, 2, "channels_outer"), (32, 1, "pixels_outer"))]
    scheds.append(dict(variant="baseline", mac="i32"))
    g, ov = conv_graph(SEED, **CASE, schedules=scheds)
    x = _x(SEED, g)
    _build_run_check(tmp_path, g, ov, x, scheds, flags)


#: (case, oc_tile values): oc_tile 64 needs more than 48 channels
SWEEP = [(CASE, (16, 32, 48)), (dict(xs=(2, 1, 1, 6), oc=96, k=(1, 1)), (16, 32, 64))]


@pytest.mark.parametrize("flags", FLAG_SETS)
@pytest.mark.parametrize("case,tiles", SWEEP, ids=lambda v: f"oc{v['oc']}" if isinstance(v, dict) else None)
def test_neighbour_tiles(tmp_path: Path, case: dict[str, Any], tiles: tuple[int, ...], flags: tuple[str, ...]) -> None:
    """oc_tile x px_tile 1/2 x both loop orders, one QConv node each in one project."""
    scheds = [dict(SCHED, oc_tile=t, px_tile=p, loop_order=lo)
              for t, p, lo in itertools.product(tiles, (1, 2), ("channels_outer", "pixels_outer"))]
    g, ov = conv_graph(SEED, **case, schedules=scheds)
    x = _x(SEED, g)
    _build_run_check(tmp_path, g, ov, x, scheds, flags)


@pytest.mark.parametrize("flags", FLAG_SETS)
def test_qmatmul_same_tile(tmp_path: Path, flags: tuple[str, ...]) -> None:
    """The same bug outside QConv: a fully connected 2x8 -> 64 (plain C, mac i32, n_tile 64,
    m_tile 1) gave all 128 outputs zero with the host default flags before every kernel got
    TINYC_KERNEL_ENTRY. Each product form at that tile and its neighbours."""
    from test_ops_q_fc import fc_graph
    g, _ = fc_graph(SEED, (2, 8), 64)
    ks = get_op("QMatMul").knobs(g.nodes[0], g)
    scheds = [dict(mac=m, n_tile=t, m_tile=mt) for m in ks["mac"] for t, mt in ((64, 1), (32, 1), (64, 2))]
    g, ov = fc_graph(SEED, (2, 8), 64, schedules=scheds)
    x = np.random.default_rng(7).integers(-128, 128, (2, 8)).astype(np.int8)
    _build_run_check(tmp_path, g, ov, x, scheds, flags)
