"""The generated context API (docs/c-api.md): an arena the caller owns, inputs and outputs in place
(zero copy), several instances, one arena shared by models compiled together, the arena's
alignment and size checked; the I/O macros and quantize helpers (bit-equal to the host's
quantization); NO_STATIC_ARENA; section placement. On the host with gcc -std=c99 -Wall -Wextra
-Werror and ASan/UBSan, and on the emulated mps2-an386 (QEMU) with arm-none-eabi-gcc."""
from __future__ import annotations

import json
import re
import shutil
import socket
import struct
import subprocess

import numpy as np
import pytest
from onnx import helper

from util import make_model, rng

import tinyc.api as api
from tinyc.numerics.literals import c_float

STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
HAVE_GCC = shutil.which("gcc") is not None
HAVE_ARM = all(shutil.which(t) for t in ("arm-none-eabi-gcc", "arm-none-eabi-readelf", "cmake"))
HAVE_QEMU = shutil.which("qemu-system-arm") is not None
needs_gcc = pytest.mark.skipif(not HAVE_GCC, reason="needs gcc")


def _model(seed: int, name: str, n: int, k: int):
    """x[1, n] -> Gemm -> Tanh -> Gemm -> y[1, k]: the hidden tensor reuses the input's bytes only
    when the planner wants to (PRESERVED says which)."""
    w1 = rng(seed).normal(size=(2 * n, n)).astype(np.float32)
    w2 = rng(seed + 1).normal(size=(k, 2 * n)).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w1"], ["h"], transB=1), helper.make_node("Tanh", ["h"], ["t"]),
             helper.make_node("Gemm", ["t", "w2"], ["y"], transB=1)]
    return make_model(nodes, [("x", [1, n])], [("y", [1, k])], {"w1": w1, "w2": w2}, name=name)


def _floats(name: str, values) -> str:
    return f"static const float {name}[{len(values)}] = {{{', '.join(c_float(float(v)) for v in values)}}};\n"


# One program for the host and the board: PUT writes a line (stdio on the host, the UART on the
# board). Models a (8 -> 4) and b (16 -> 8), compiled together with a shared arena.
PROGRAM = r"""
#include <stdint.h>
#include <string.h>
#include "tinyc_rt.h"
#include "a.h"
#include "b.h"
#include "tinyc_shared_arena.h"
#include "inputs.h"

#ifdef TEST_ON_HOST
#include <stdio.h>
static void put(const char *s) { fputs(s, stdout); }
#define FINISH(rc) return (rc)
#else
#include "tinyc_port.h"
static void put(const char *s)
{
    uint32_t n = 0;
    while (s[n]) {
        ++n;
    }
    tinyc_port_write((const uint8_t *)s, n);
}
#define FINISH(rc) do { tinyc_port_exit(rc); return (rc); } while (0)
#endif

static void puthex(uint32_t v)
{
    static const char d[] = "0123456789abcdef";
    char buf[10];
    int i;
    buf[0] = ' ';
    for (i = 0; i < 8; ++i) {
        buf[1 + i] = d[(v >> (28 - 4 * i)) & 0xFu];
    }
    buf[9] = '\0';
    put(buf);
}

static void line(const char *tag, const float *v, int n)
{
    int i;
    put(tag);
    for (i = 0; i < n; ++i) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        puthex(u);
    }
    put("\n");
}

static void code(const char *tag, int rc)
{
    put(tag);
    puthex((uint32_t)rc);
    put("\n");
}

static TINYC_ALIGN(16) uint8_t arena1[A_ARENA_BYTES + 16];
static TINYC_ALIGN(16) uint8_t arena2[A_ARENA_BYTES];
static TINYC_ALIGN(16) uint8_t shared[TINYC_SHARED_ARENA_BYTES];

static int inside(const void *p, const uint8_t *arena, uint32_t bytes)
{
    const uint8_t *q = (const uint8_t *)p;
    return q >= arena && q < arena + bytes;
}

int main(void)
{
    a_ctx c1, c2, bad, sa;
    b_ctx sb;
    float y[8];
    int rc = 0;
#ifndef TEST_ON_HOST
    tinyc_port_init();
#endif
    /* two instances of a, each on its own arena, inputs written in place */
    rc |= a_init(&c1, arena1, A_ARENA_BYTES);
    rc |= a_init(&c2, arena2, sizeof arena2);
    code("init", rc);
    code("in1", inside(a_input(&c1, A_IN_X_INDEX), arena1, A_ARENA_BYTES));
    code("out1", inside(a_output(&c1, A_OUT_Y_INDEX), arena1, A_ARENA_BYTES));
    memcpy(a_input(&c1, 0), XA1, A_IN_X_BYTES);
    memcpy(a_input(&c2, 0), XA2, A_IN_X_BYTES);
    rc |= a_run_ctx(&c1);
    rc |= a_run_ctx(&c2);
    line("a1", (const float *)a_output(&c1, 0), A_OUT_Y_SIZE);
    line("a2", (const float *)a_output(&c2, 0), A_OUT_Y_SIZE);
    /* one arena for a and b (TINYC_SHARED_ARENA_BYTES): a, b, then a again */
    rc |= a_init(&sa, shared, TINYC_SHARED_ARENA_BYTES);
    rc |= b_init(&sb, shared, TINYC_SHARED_ARENA_BYTES);
    memcpy(a_input(&sa, 0), XA1, A_IN_X_BYTES);
    rc |= a_run_ctx(&sa);
    line("sa1", (const float *)a_output(&sa, 0), A_OUT_Y_SIZE);
    memcpy(b_input(&sb, 0), XB, B_IN_X_BYTES);
    rc |= b_run_ctx(&sb);
    line("sb", (const float *)b_output(&sb, 0), B_OUT_Y_SIZE);
    memcpy(a_input(&sa, 0), XA2, A_IN_X_BYTES);
    rc |= a_run_ctx(&sa);
    line("sa2", (const float *)a_output(&sa, 0), A_OUT_Y_SIZE);
    /* the one-call API over the static shared arena */
    rc |= a_run(XA1, y);
    line("oa", y, A_OUT_Y_SIZE);
    rc |= b_run(XB, y);
    line("ob", y, B_OUT_Y_SIZE);
    code("rc", rc);
    /* refusals */
    code("null", a_init(0, arena1, A_ARENA_BYTES));
    code("nullarena", a_init(&bad, 0, A_ARENA_BYTES));
    code("misaligned", a_init(&bad, arena1 + 4, A_ARENA_BYTES));
    code("small", a_init(&bad, arena1, A_ARENA_BYTES - 1u));
    code("notinit", a_run_ctx(&bad));
    code("badin", a_input(&bad, 0) != 0);
    code("range", a_input(&c1, A_NUM_INPUTS) != 0 || a_output(&c1, A_NUM_OUTPUTS) != 0);
    code("layer", a_run_layer_ctx(&c1, A_NUM_LAYERS));
    FINISH(rc);
}
"""


def _inputs():
    g = np.random.default_rng(5)
    return (g.normal(size=8).astype(np.float32), g.normal(size=8).astype(np.float32),
            g.normal(size=16).astype(np.float32))


def _golden(tmp_path, xa1, xa2, xb):
    """Each model compiled alone on the host, run through tinyc (the reference for the C API)."""
    out = {}
    for name, (n, k), seed, xs in (("a", (8, 4), 1, {"a1": xa1, "a2": xa2}), ("b", (16, 8), 3, {"b": xb})):
        res = api.compile(_model(seed, name, n, k), tmp_path / f"gold_{name}")
        for tag, x in xs.items():
            out[tag] = api.run(res.output_dir, {"x": x.reshape(1, n)})["y"].ravel()
    return out


def _parse(text: str) -> dict[str, list[int]]:
    found = {}
    for ln in text.splitlines():
        parts = ln.split()
        if parts and all(re.fullmatch(r"[0-9a-f]{8}", p) for p in parts[1:]):
            found[parts[0]] = [int(p, 16) for p in parts[1:]]
    return found


def _as_floats(words: list[int]) -> np.ndarray:
    return np.array(struct.unpack(f"<{len(words)}f", struct.pack(f"<{len(words)}I", *words)), np.float32)


def _check(found: dict[str, list[int]], golden: dict[str, np.ndarray]) -> None:
    assert found["init"] == [0] and found["rc"] == [0], found
    assert found["in1"] == [1] and found["out1"] == [1]  # pointers into the caller's arena: zero copy
    np.testing.assert_allclose(_as_floats(found["a1"]), golden["a1"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_as_floats(found["a2"]), golden["a2"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_as_floats(found["sb"]), golden["b"], rtol=1e-5, atol=1e-6)
    assert not np.allclose(golden["a1"], golden["a2"])  # the two instances really differ
    # the same code on the same input gives the same bits, whichever arena it ran on
    assert found["sa1"] == found["a1"] and found["sa2"] == found["a2"] and found["oa"] == found["a1"]
    assert found["ob"] == found["sb"]
    assert found["null"] == [1] and found["nullarena"] == [1]  # TINYC_ERR_NULL_ARGUMENT
    assert found["misaligned"] == [3]  # TINYC_ERR_ARENA_MISALIGNED
    assert found["small"] == [4]  # TINYC_ERR_ARENA_TOO_SMALL
    assert found["notinit"] == [5]  # TINYC_ERR_NOT_INITIALISED (a failed init leaves it so)
    assert found["badin"] == [0] and found["range"] == [0]
    assert found["layer"] == [2]  # TINYC_ERR_BAD_LAYER


def _shared_sources(tmp_path, xa1, xa2, xb, **options):
    res = api.compile_models([_model(1, "a", 8, 4), _model(3, "b", 16, 8)], tmp_path / "both", shared_arena=True,
                             names=["a", "b"], **options)
    out = res.output_dir
    (out / "inputs.h").write_text(_floats("XA1", xa1) + _floats("XA2", xa2) + _floats("XB", xb))
    (out / "program.c").write_text(PROGRAM)
    return res


@needs_gcc
def test_two_instances_and_a_shared_arena_on_host_with_sanitizers(tmp_path):
    xa1, xa2, xb = _inputs()
    res = _shared_sources(tmp_path, xa1, xa2, xb)
    out = res.output_dir
    report = json.loads((out / "report.json").read_text())
    assert [m["prefix"] for m in report["models"]] == ["a", "b"]
    arenas = [m["arena_bytes"] for m in report["models"]]
    assert report["shared_arena_bytes"] == max(arenas)
    assert f"#define TINYC_SHARED_ARENA_BYTES {max(arenas)}u" in (out / "tinyc_shared_arena.h").read_text()
    exe = tmp_path / "prog"
    srcs = [out / f for f in ("program.c", "a.c", "a_weights.c", "b.c", "b_weights.c", "tinyc_shared_arena.c",
                              "runtime/src/tinyc_rt.c")]
    cmd = ["gcc", *STRICT, "-O1", "-g", "-DTEST_ON_HOST", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           "-I", str(out), "-I", str(out / "runtime/include"), *map(str, srcs), "-o", str(exe), "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "runtime error" not in run.stderr, run.stdout + run.stderr
    _check(_parse(run.stdout), _golden(tmp_path, xa1, xa2, xb))


@needs_gcc
def test_no_static_arena_build_has_no_arena_and_copies_nothing(tmp_path):
    """With <M>_NO_STATIC_ARENA the object has no writable storage at all (the arena is the
    caller's) and no memcpy: run_ctx works on the inputs where the caller wrote them."""
    res = api.compile(_model(1, "a", 8, 4), tmp_path / "a")
    out = res.output_dir
    text = (out / "a.h").read_text()
    assert "#define A_ARENA_ALIGN 16u" in text and "#define A_IN_X_DTYPE_FLOAT32 1" in text
    assert "#define A_IN_X_RANK 2" in text and "#define A_IN_X_DIM1 8" in text and "#define A_OUT_Y_BYTES 16u" in text
    syms = {}
    for flag in ([], ["-DA_NO_STATIC_ARENA"]):
        obj = tmp_path / f"a{len(flag)}.o"
        subprocess.run(["gcc", *STRICT, "-O2", *flag, "-I", str(out), "-I", str(out / "runtime/include"), "-c",
                        str(out / "a.c"), "-o", str(obj)], check=True, capture_output=True, text=True)
        nm = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
        syms[len(flag)] = {(p[-2], p[-1]) for p in (ln.split() for ln in nm.splitlines()) if len(p) >= 2}
    assert ("b", "a_arena") in syms[0] and ("T", "a_run") in syms[0]
    assert not any(kind in "bBdD" for kind, _ in syms[1]), syms[1]
    assert ("U", "memcpy") not in syms[1] and ("T", "a_run_ctx") in syms[1] and ("T", "a_run") not in syms[1]


@needs_gcc
def test_quantize_helpers_equal_the_host_quantization(tmp_path):
    """The header's <m>_in_x_quantize / _dequantize give the host's values bit for bit: ties
    (half to even), saturation, infinities, signed zeros, and NaN (-> the zero point; the host
    refuses NaN data)."""
    from tinyc.numerics.fixed_point import quantize
    from tinyc.quantize.feeds import to_model_input
    from tinyc.quantize.io import to_float_output

    calib = {"x": np.random.default_rng(0).normal(size=(32, 1, 8)).astype(np.float32) * 3 + 1}
    res = api.compile(_model(1, "q", 8, 4), tmp_path / "q", quantize="int8", calib=calib, io_dtype="int8")
    out = res.output_dir
    manifest = json.loads((out / "tinyc.json").read_text())
    spec, ospec = manifest["inputs"][0], manifest["outputs"][0]
    scale, zp = np.float32(spec["quant"]["scale"]), int(spec["quant"]["zero_point"])
    header = (out / "q.h").read_text()
    assert f"#define Q_IN_X_ZERO_POINT ({zp})" in header and "#define Q_IN_X_QMIN (-128)" in header
    ks = np.arange(-140, 141, dtype=np.float32)
    ties = (ks + np.float32(0.5)) * scale
    xs = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, -np.float32(np.inf)),
                         ks * scale, np.random.default_rng(1).normal(size=200).astype(np.float32) * 4,
                         np.array([0.0, -0.0, 1e30, -1e30, 3e38, -3e38, 1e-40, np.inf, -np.inf, np.nan],
                                  np.float32)]).astype(np.float32)
    finite = np.isfinite(xs)
    expect = quantize(xs[finite], scale, zp, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(expect, to_model_input(spec, xs[finite]))  # what tinyc run feeds
    words = ", ".join(f"0x{int(u):08x}u" for u in xs.view(np.uint32))
    (out / "check.c").write_text(f"""
#include <stdio.h>
#include <string.h>
#include "q.h"
static const uint32_t X[{len(xs)}] = {{{words}}};
int main(void)
{{
    int k;
    for (k = 0; k < {len(xs)}; ++k) {{
        float x;
        memcpy(&x, &X[k], 4);
        printf("%d\\n", (int)q_in_x_quantize(x));
    }}
    for (k = -128; k < 128; ++k) {{
        float f = q_out_y_dequantize((int8_t)k);
        uint32_t u;
        memcpy(&u, &f, 4);
        printf("%08x\\n", (unsigned)u);
    }}
    return 0;
}}
""")
    exe = tmp_path / "check"
    subprocess.run(["gcc", *STRICT, "-O2", "-fsanitize=undefined", "-fno-sanitize-recover=all", "-I", str(out),
                    str(out / "check.c"), "-o", str(exe)], check=True, capture_output=True, text=True)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    got = np.array([int(v) for v in lines[:len(xs)]], np.int8)
    np.testing.assert_array_equal(got[finite], expect)
    np.testing.assert_array_equal(got[~finite], quantize(xs[~finite][:2], scale, zp, -128, 127).tolist() + [zp])
    deq = np.array([int(v, 16) for v in lines[len(xs):]], np.uint32).view(np.float32)
    host = to_float_output(ospec, np.arange(-128, 128).astype(np.int8))
    np.testing.assert_array_equal(deq.view(np.uint32), host.view(np.uint32))


@pytest.mark.slow
@pytest.mark.skipif(not (HAVE_ARM and HAVE_QEMU), reason="needs arm-none-eabi-gcc, cmake and QEMU")
def test_two_instances_and_a_shared_arena_on_an_emulated_board(tmp_path):
    """The same program cross-compiled for mps2-an386 (the board's flags, -Werror) and run in
    QEMU; its arena and weights placed in their own sections by the baked-in defaults, which the
    linker script gets rules for."""
    from tinyc.codegen import generate
    from tinyc.codegen.emitter import Placement
    from tinyc.codegen.shared_arena import shared_arena_files
    from tinyc.device.flashers import start
    from tinyc.ir.isa import Isa
    from tinyc.pipeline import prepare
    from tinyc.targets.board import build_board_project, write_board_project
    from tinyc.targets.boards import load_board

    xa1, xa2, xb = _inputs()
    board = load_board("mps2-an386")
    place = Placement(True, ".tinyc_arena", ".tinyc_weights")
    target = Isa.of_board(board).name
    gens = [generate(prepare(_model(seed, name, n, k))[0], prefix=name, target=target, placement=place)
            for seed, name, n, k in ((1, "a", 8, 4), (3, "b", 16, 8))]
    files = {**gens[0].files, **gens[1].files}
    files.update(shared_arena_files([{"prefix": g.manifest["prefix"], "arena_bytes": g.report["arena_bytes"]}
                                     for g in gens], ".tinyc_arena"))
    files["inputs.h"] = _floats("XA1", xa1) + _floats("XA2", xa2) + _floats("XB", xb)
    out = tmp_path / "fw"
    manifest = dict(gens[0].manifest)
    write_board_project(out, files, manifest, board, main_source=PROGRAM)
    (out / "report.json").write_text(json.dumps(gens[0].report))
    result = build_board_project(out)
    elf = result["elf"]
    syms = subprocess.run(["arm-none-eabi-readelf", "-sW", elf], capture_output=True, text=True, check=True).stdout
    heads = subprocess.run(["arm-none-eabi-readelf", "-SW", elf], capture_output=True, text=True, check=True).stdout
    index = {m.group(2): int(m.group(1)) for m in re.finditer(r"\[\s*(\d+)\]\s+(\S+)", heads)}
    assert ".tinyc_arena" in index and ".tinyc_weights" in index, heads

    def section_of(sym: str) -> int:
        m = re.search(rf"^\s*\d+:\s+\S+\s+\d+\s+OBJECT\s+\S+\s+\S+\s+(\d+)\s+{sym}$", syms, re.M)
        assert m, sym
        return int(m.group(1))

    assert section_of("tinyc_shared_arena") == index[".tinyc_arena"]
    assert section_of("a_w0") == index[".tinyc_weights"]
    with start(board, elf) as session:
        port = int(session.url.rsplit(":", 1)[1])
        data = b""
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.settimeout(20)
            while chunk := sock.recv(4096):
                data += chunk
        assert session.wait_exit(10) == 0, data
    _check(_parse(data.decode("ascii", "replace")), _golden(tmp_path, xa1, xa2, xb))


@pytest.mark.slow
@pytest.mark.skipif(not (HAVE_ARM and HAVE_QEMU), reason="needs arm-none-eabi-gcc, cmake and QEMU")
def test_harness_firmware_runs_on_the_context_api_with_a_chosen_arena_section(tmp_path):
    """The firmware project's serial harness runs the model through <m>_run_ctx on its own arena
    (the static one compiled out), which --arena-section places: `tinyc run` gives the host's
    outputs, and the arena symbol sits in the named output section."""
    res = api.compile(_model(1, "a", 8, 4), tmp_path / "fw", board="mps2-an386", arena_section=".sram_model",
                      weights_section=".model_weights")
    out = res.output_dir
    main = (out / "main.c").read_text()
    assert "a_run_ctx(&harness_ctx)" in main and "A_NO_STATIC_ARENA" in (out / "CMakeLists.txt").read_text()
    x = np.random.default_rng(2).normal(size=(3, 1, 8)).astype(np.float32)
    got = api.run(out, {"x": x})["y"]
    host = api.compile(_model(1, "a", 8, 4), tmp_path / "host")
    np.testing.assert_allclose(got, api.run(host.output_dir, {"x": x})["y"], rtol=1e-5, atol=1e-6)
    elf = json.loads((out / "report.json").read_text())["firmware"]["elf"]
    nm = subprocess.run(["arm-none-eabi-nm", elf], capture_output=True, text=True, check=True).stdout
    assert not re.search(r" [bBdD] a_arena$", nm, re.M)  # the one-call API's arena is not in RAM
    heads = subprocess.run(["arm-none-eabi-objdump", "-t", elf], capture_output=True, text=True, check=True).stdout
    assert re.search(r"\s\.sram_model\s+[0-9a-f]+\s+harness_arena$", heads, re.M), heads
    assert re.search(r"\s\.model_weights\s+[0-9a-f]+\s+a_w0$", heads, re.M)


@needs_gcc
def test_the_documented_example_builds_and_runs(tmp_path):
    """docs/c-api.md's complete example, built as the page says (ctx API only, no static arena)."""
    from util import REPO
    text = (REPO / "docs" / "c-api.md").read_text()
    code = re.search(r"## A complete example\s+```c\n(.*?)```", text, re.S).group(1)
    res = api.compile(str(REPO / "examples" / "digits" / "digits_cnn.onnx"), tmp_path / "digits")
    out = res.output_dir
    (tmp_path / "example.c").write_text(code)
    exe = tmp_path / "example"
    subprocess.run(["gcc", *STRICT, "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-DDIGITS_CNN_NO_STATIC_ARENA", "-I", str(out), "-I", str(out / "runtime/include"),
                    str(tmp_path / "example.c"), str(out / "digits_cnn.c"), str(out / "digits_cnn_weights.c"),
                    str(out / "runtime/src/tinyc_rt.c"), "-o", str(exe), "-lm"], check=True, capture_output=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    image = (np.arange(64) % 8 / 8.0).astype(np.float32).reshape(1, 1, 8, 8)
    digit = int(np.argmax(api.run(out, {"input": image})["logits"]))
    assert run.stdout.strip() == f"rc 0 digit {digit}"


@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and cmake")
def test_several_models_in_one_library_folder(tmp_path):
    """`--board B --format library` with two models of the same name: prefixes de-duplicated, one
    archive (built with the board's compiler, -Werror) holding both and the shared arena."""
    res = api.compile_models([_model(1, "kws", 8, 4), _model(3, "kws", 16, 8)], tmp_path / "lib",
                             board="mps2-an386", format="library", shared_arena=True)
    assert [m["prefix"] for m in res.report["models"]] == ["kws", "kws_2"]
    manifest = json.loads((res.output_dir / "tinyc.json").read_text())
    assert [m["prefix"] for m in manifest["models"]] == ["kws", "kws_2"]
    assert {"kws_2.c", "tinyc_shared_arena.c"} <= set(manifest["sources"])
    lib = api.build_project(res.output_dir)["library"]
    nm = subprocess.run(["arm-none-eabi-nm", lib], capture_output=True, text=True, check=True).stdout
    for sym in ("kws_run_ctx", "kws_2_run_ctx", "kws_run", "kws_2_init"):
        assert re.search(rf" T {sym}$", nm, re.M), sym
    assert re.search(r" B tinyc_shared_arena$", nm, re.M) and not re.search(r" b kws_arena$", nm, re.M)


def test_models_that_fit_alone_but_not_together_are_refused(tmp_path):
    """Two models for one library: each fits the board's RAM alone, their two arenas do not; the
    error names both, the numbers, and --shared-arena as the remedy, which then fits; a failed
    compile leaves no folder behind."""
    from pathlib import Path

    from tinyc.errors import BuildError

    models = [_model(1, "a", 64, 4), _model(3, "b", 64, 8)]
    alone = [api.compile(m, tmp_path / f"alone{k}", board="mps2-an386", format="library").report["arena_bytes"]
             for k, m in enumerate(models)]
    text = (Path(__file__).resolve().parents[1] / "boards" / "mps2-an386.toml").read_text()
    text = text.replace('name = "mps2-an386"', 'name = "two-small"')
    stack = int(re.search(r"stack_size = (\S+)", text).group(1), 0)
    io = 2 * 64 * 4 + 4 * 4 + 8 * 4  # both models' inputs and outputs (float)
    ram = stack + max(alone) + io + 64  # room for one arena and both models' I/O...
    assert ram < stack + sum(alone) + io  # ...but not for both arenas
    text = re.sub(r"ram_size = \S+", f"ram_size = {ram}", text)
    (tmp_path / "boards").mkdir()
    (tmp_path / "boards" / "two-small.toml").write_text(text)
    opts = dict(board="two-small", board_dir=tmp_path / "boards", format="library", names=["a", "b"])
    with pytest.raises(BuildError) as err:
        api.compile_models(models, tmp_path / "lib", **opts)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("the set of models 'a', 'b' does not fit board 'two-small': RAM needs")
    assert f"arena {sum(alone)} + inputs/outputs {io}" in msg, msg
    assert f"--shared-arena, if the models never run at the same time: one arena of {max(alone)} B" in msg, msg
    assert not (tmp_path / "lib").exists()
    res = api.compile_models(models, tmp_path / "lib", shared_arena=True, **opts)
    assert res.report["shared_arena_bytes"] == max(alone)
