"""The fast int8 Add kernels (QAdd variants "fast": portable C with exact input tables and one
multiply-high requantization, SMMLA / SSAT on a DSP core; "mve": Helium, 4 lanes, VLDRW gather,
VQDMLASH / VQRDMLASH, VQSHL #24) and their helpers in runtime_c/include/tinyc_simd.h.

Host (fast): every variant equals the golden model bit for bit on broadcast shapes (an input
broadcast across the innermost run, scalars, outer broadcasting), runs not a multiple of 4, both
roundings (ONNX half even, TFLite double rounding), all three output forms of ``add_plan`` (incl.
crafted exact ties), saturating outputs and fused clamps; ASan + UBSan clean. Slow (QEMU): on
mps3-an547 and mps2-an386 a QDQ Add model is bit-exact with fewer instructions than the scalar
kernel and the firmware holds the intended instructions; a small firmware checks the vector
requantization helpers (tinyc_vmbqm_r / tinyc_vmbqm_even_r and the new ones) lane for lane against
the scalar tinyc_q.h forms over random and edge operands on the M55 itself.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tinyc
import tinyc.reference
from tinyc.ir import Graph
from tinyc.numerics import fixed_point as arith
from tinyc.numerics.qparams import add_qtensor
from tinyc.ops import get_op
from tinyc.ops.qelementwise import add_params_of, add_plan, build_qadd
from tinyc.resources import runtime_dir
from tinyc.schedule import default_schedules
from util import compile_ir, sanitized_project

#: (a shape, b shape) with the innermost-run cases: both contiguous (tails of 3, 1, 2), b broadcast
#: across the inner run, a broadcast across it, a scalar operand, outer broadcasting, runs < 4.
SHAPES = [((1, 5, 7, 9), (1, 5, 7, 9)), ((2, 3, 13), (13,)), ((2, 3, 13), (2, 3, 1)), ((3, 1, 6), (1, 5, 1)),
          ((7,), ()), ((1, 2, 3), (1, 2, 3)), ((2, 1, 1), (2, 5, 17)), ((4, 18), (4, 18))]


def add_graph(seed: int, ashape: tuple[int, ...], bshape: tuple[int, ...], scales: tuple[float, float, float],
              zps: tuple[int, int, int], clamp: Any, rounding: str) -> tuple[Graph, dict[str, np.ndarray]]:
    """One QAdd node y = a + b with the given grids, fused clamp and output rounding."""
    rng = np.random.default_rng(seed)
    out = tuple(int(d) for d in np.broadcast_shapes(ashape, bshape))
    g = Graph(f"add{seed}")
    add_qtensor(g, "a", ashape, scales[0], zps[0])
    add_qtensor(g, "b", bshape, scales[1], zps[1])
    add_qtensor(g, "y", out, scales[2], zps[2])
    g.inputs = ["a", "b"]
    node = build_qadd(g, "add", "a", "b", "y", clamp)
    if rounding != "tflite":
        node.attrs["rounding"] = rounding
    g.nodes.append(node)
    g.outputs = ["y"]
    g.output_names = ["y"]
    feeds = {k: rng.integers(-128, 128, s).astype(np.int8) for k, s in (("a", ashape), ("b", bshape))}
    return g, feeds


def _cases() -> list[tuple[Any, ...]]:
    """(seed, shapes, scales, zero points, clamp, rounding): random grids, plus crafted ones: exact
    ties (scales 1/2, 1/4 -> 1: every sum lands on quarters), equal scales (both inputs affine),
    tiny / large output scales (saturation both ways), ReLU and two-sided clamps."""
    rng = np.random.default_rng(19)
    out = []
    for i, (sa, sb) in enumerate(SHAPES):
        for rounding in ("tflite", "half_even"):
            s1, s2 = (float(np.float32(np.exp(rng.uniform(np.log(1e-3), np.log(0.5))))) for _ in range(2))
            so = float(np.float32((s1 + s2) * rng.uniform(0.3, 2.0)))
            zps = tuple(int(v) for v in rng.integers(-100, 100, 3))
            clamp = [None, (0.0, None), (0.0, 40 * so), (-30 * so, None)][int(rng.integers(4))]
            out.append((i, (sa, sb), (s1, s2, so), zps, clamp, rounding))
    crafted = [((0.5, 0.25, 1.0), (3, -7, 2), None), ((0.02, 0.02, 0.03), (0, 5, -128), (0.0, None)),
               ((0.1, 0.05, 0.001), (10, -20, 0), None), ((0.1, 0.07, 2.5), (0, 0, 0), (-1.0, 1.0)),
               ((0.25, 0.5, 0.125), (-128, 127, -1), (0.0, 6.0))]
    for j, (scales, zps, clamp) in enumerate(crafted):
        for rounding in ("tflite", "half_even"):
            out.append((100 + j, SHAPES[j % len(SHAPES)], scales, zps, clamp, rounding))
    return out


CASES = _cases()


def _plan_of(g: Graph) -> dict[str, Any] | None:
    return add_plan(add_params_of(g.nodes[0].attrs))


def test_plan_forms_cover_all() -> None:
    """The cases reach every output form of add_plan: one rounding ("up"), TFLite's exact double
    rounding ("tflite"), the branch-free helpers where half-even ties occur ("helper"); the crafted
    tie case has ties (the "up" form is wrong there, so the plan must not pick it)."""
    forms = set()
    for seed, (sa, sb), scales, zps, clamp, rounding in CASES:
        g, _ = add_graph(seed, sa, sb, scales, zps, clamp, rounding)
        plan = _plan_of(g)
        assert plan is not None
        forms.add((plan["form"], rounding))
        assert plan["form"] != "tflite" or rounding == "tflite"
    assert {("up", "half_even"), ("up", "tflite"), ("tflite", "tflite"), ("helper", "half_even")} <= forms, forms
    g, _ = add_graph(100, (4,), (4,), (0.5, 0.25, 1.0), (3, -7, 2), None, "half_even")
    assert _plan_of(g)["form"] == "helper"
    # an output multiplier >= 1/2 (positive shift) has no fast form: only the scalar kernel
    g, _ = add_graph(1, (4,), (4,), (1.0, 1.0, 1e-6), (0, 0, 0), None, "tflite")
    assert _plan_of(g) is None and get_op("QAdd").knobs(g.nodes[0], g)["variant"] == ["scalar"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[5]}")
def test_add_variants_bit_exact(tmp_path: Path, case: tuple[Any, ...]) -> None:
    """Every applicable variant (scalar, fast, mve: the MVE code through its C emulation) equals the
    golden model on the same inputs, and every value of both inputs meets every value of the other
    once (the 256 x 256 grid) besides the random feeds."""
    seed, (sa, sb), scales, zps, clamp, rounding = case
    g, feeds = add_graph(seed, sa, sb, scales, zps, clamp, rounding)
    variants = get_op("QAdd").knobs(g.nodes[0], g)["variant"]
    assert "fast" in variants and "scalar" in variants
    golden = tinyc.reference.run_graph(g, feeds)["y"]
    for v in variants:
        out = tmp_path / v
        compile_ir(g, out, {"add": {"variant": v}})
        np.testing.assert_array_equal(tinyc.run(out, feeds)["y"], golden, err_msg=f"{v} {case}")
    # all 65536 pairs, with a tail of 0 (and the MVE loop through 16384 full iterations)
    q = np.arange(-128, 128, dtype=np.int8)
    gg, _ = add_graph(seed, (256, 256), (256, 256), scales, zps, clamp, rounding)
    ff = {"a": np.repeat(q, 256).reshape(256, 256), "b": np.tile(q, 256).reshape(256, 256)}
    gold = tinyc.reference.run_graph(gg, ff)["y"]
    for v in variants:
        out = tmp_path / f"all_{v}"
        compile_ir(gg, out, {"add": {"variant": v}})
        np.testing.assert_array_equal(tinyc.run(out, ff)["y"], gold, err_msg=f"all pairs {v} {case}")


def test_defaults_per_target() -> None:
    """The M55 runs "mve", DSP / plain cores and the host "fast", OpenCL the scalar kernel; MVE
    needs the extension (knob_isa)."""
    g, _ = add_graph(0, (1, 8, 8, 16), (1, 8, 8, 16), (0.05, 0.03, 0.06), (1, 2, -128), (0.0, None), "half_even")
    name = g.nodes[0].name
    assert default_schedules(g, "mcu+dsp+mve")[name]["variant"] == "mve"
    assert default_schedules(g, "mcu+dsp")[name]["variant"] == "fast"
    assert default_schedules(g, "host")[name]["variant"] == "fast"
    assert default_schedules(g, "opencl")[name]["variant"] == "scalar"
    q = get_op("QAdd")
    assert q.knob_isa("variant", "mve") == "mve" and q.knob_isa("variant", "fast") is None


def test_add_sanitized(tmp_path: Path) -> None:
    """ASan + UBSan, strict C99: the fast and MVE-emulated kernels (tables, gathers, VCTP tails,
    broadcast runs, every output form) stay inside their buffers and never overflow."""
    picks = [c for c in CASES if c[0] in (0, 2, 3, 4, 100, 101, 102)]
    for i, (seed, (sa, sb), scales, zps, clamp, rounding) in enumerate(picks):
        g, feeds = add_graph(seed, sa, sb, scales, zps, clamp, rounding)
        golden = tinyc.reference.run_graph(g, feeds)["y"]
        for v in ("fast", "mve"):
            d = tmp_path / f"{i}_{v}"
            d.mkdir()
            compile_ir(g, d / "p", {"add": {"variant": v}}, build=False)
            got = sanitized_project(d / "p", g, feeds, d)
            np.testing.assert_array_equal(got["y"], golden, err_msg=f"{v} {seed} {rounding}")


# -- QAvgPool "mve" ---------------------------------------------------------------------------------

#: (x shape NHWC, kernel, strides, pads, dilations, global, ceil_mode, count_include_pad); channel
#: counts with tails of every length (16-channel tiles, 4-lane vectors).
POOLS = [((1, 8, 8, 64), [8, 8], [1, 1], [0, 0, 0, 0], [1, 1], True, 0, 0),
         ((1, 3, 3, 37), [3, 3], [1, 1], [0, 0, 0, 0], [1, 1], True, 0, 0),
         ((2, 7, 6, 19), [3, 2], [2, 1], [1, 0, 1, 1], [1, 1], False, 1, 0),
         ((1, 9, 9, 6), [3, 3], [2, 2], [1, 1, 1, 1], [1, 2], False, 0, 1),
         ((1, 1, 10, 33), [1, 4], [1, 3], [0, 1, 0, 2], [1, 1], False, 0, 0),
         ((1, 5, 5, 3), [2, 2], [1, 1], [0, 0, 0, 0], [1, 1], False, 0, 0)]


def _pool_graph(i: int, rounding: str) -> tuple[Graph, dict[str, np.ndarray]]:
    from tinyc.ops.qpool import build_qavgpool
    shape, k, st, pads, dil, glob, ceil, cip = POOLS[i]
    rng = np.random.default_rng(i)
    si = float(np.float32(rng.uniform(0.005, 0.2)))
    so = float(np.float32(si * [1.0, 0.5, 0.9, 1.7, 0.05, 4.0][i]))
    g = Graph(f"pool{i}")
    add_qtensor(g, "x", shape, si, int(rng.integers(-128, 128)))
    g.inputs = ["x"]
    add_qtensor(g, "y", (1,), so, int(rng.integers(-20, 20)))
    node = build_qavgpool(g, "avg", "x", "y", dict(kind="avg", kernel=k, strides=st, pads=pads, dilations=dil,
                                                   layout="NHWC", is_global=glob, ceil_mode=ceil,
                                                   count_include_pad=cip), source="avg")
    if rounding != "tflite":
        node.attrs["rounding"] = rounding
    ((oshape, _),) = get_op("QAvgPool").infer(node, g)
    g.tensor("y").shape = tuple(oshape)
    g.nodes.append(node)
    g.outputs = ["y"]
    g.output_names = ["y"]
    return g, {"x": rng.integers(-128, 128, shape).astype(np.int8)}


@pytest.mark.parametrize("rounding", ["tflite", "half_even"])
@pytest.mark.parametrize("i", range(len(POOLS)))
def test_avgpool_mve_bit_exact(tmp_path: Path, i: int, rounding: str) -> None:
    """The MVE average pool (through the emulation) equals the golden model: global and windowed,
    padding with and without the pad in the count, ceil mode, dilation, channel tails."""
    g, feeds = _pool_graph(i, rounding)
    assert get_op("QAvgPool").knobs(g.nodes[0], g)["variant"] == ["mve", "scalar"]
    golden = tinyc.reference.run_graph(g, feeds)["y"]
    for v in ("mve", "scalar"):
        compile_ir(g, tmp_path / v, {"avg": {"variant": v}})
        np.testing.assert_array_equal(tinyc.run(tmp_path / v, feeds)["y"], golden, err_msg=v)
    if i in (1, 2):
        d = tmp_path / "san"
        d.mkdir()
        compile_ir(g, d / "p", {"avg": {"variant": "mve"}}, build=False)
        np.testing.assert_array_equal(sanitized_project(d / "p", g, feeds, d)["y"], golden)


# -- the vector requantization helpers: one C program, host (emulation) and device (intrinsics) ----

HELPERS_C = r"""
#include <stdint.h>
#include "tinyc_simd.h"

static uint32_t rs = 2463534242u;
static uint32_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 17;
    rs ^= rs << 5;
    return rs;
}

/* accumulators: both ends of int32, powers of two and their neighbours, small, anything */
static int32_t pick_acc(void)
{
    const uint32_t k = rnd() % 8u, e = rnd() % 31u;
    const int32_t d = (int32_t)(rnd() % 5u) - 2;
    switch (k) {
    case 0: return INT32_MIN + (int32_t)(rnd() % 4u);
    case 1: return INT32_MAX - (int32_t)(rnd() % 4u);
    case 2: return (int32_t)((uint32_t)1 << e) + d;
    case 3: return -(int32_t)((uint32_t)1 << e) + d;
    case 4: return (int32_t)(rnd() % 2001u) - 1000;
    default: return tinyc_simd_u2i(rnd());
    }
}

/* multipliers in [0, 2^31): 2^30 (exact ties), near 2^30 and 2^31 - 1, random, a few tiny */
static int32_t pick_mul(void)
{
    const uint32_t k = rnd() % 6u;
    switch (k) {
    case 0: return 1073741824;
    case 1: return 1073741824 + (int32_t)(rnd() % 8u);
    case 2: return INT32_MAX - (int32_t)(rnd() % 8u);
    case 3: return (int32_t)(rnd() % 64u);
    default: return 1073741824 + (int32_t)(rnd() % 1073741824u);
    }
}

static uint32_t sum = 2166136261u;
static void mix(int32_t v)
{
    sum = (sum ^ (uint32_t)v) * 16777619u;
}

/* Returns the number of lanes that differ from the scalar forms; *count: lanes compared. */
static uint32_t check(uint32_t rounds, uint32_t *count)
{
    uint32_t bad = 0, n = 0, i;
    int l;
    for (i = 0; i < rounds; ++i) {
        int32_t acc[4], mul[4], r[4], re[4], mask[4], hm1[4];
        for (l = 0; l < 4; ++l) {
            acc[l] = pick_acc();
            mul[l] = pick_mul();
            r[l] = (int32_t)((i + (uint32_t)l) % 32u);
            re[l] = 1 + (int32_t)((i + 3u * (uint32_t)l) % 30u);
            if ((rnd() & 3u) == 0u) { /* an exact tie of acc * mul / 2^(31 + re) */
                mul[l] = 1073741824;
                acc[l] = (int32_t)((rnd() % 255u) * 2u + 1u) * (int32_t)((uint32_t)1 << (re[l] > 22 ? 22 : re[l]));
                if (rnd() & 1u) {
                    acc[l] = -acc[l];
                }
            }
            mask[l] = (int32_t)(((uint32_t)1 << re[l]) - 1u);
            hm1[l] = (int32_t)(((uint32_t)1 << (re[l] - 1)) - 1u);
        }
        {
            const tinyc_s32x4 va = tinyc_vset4_s32(acc[0], acc[1], acc[2], acc[3]);
            const tinyc_s32x4 vm = tinyc_vset4_s32(mul[0], mul[1], mul[2], mul[3]);
            const tinyc_s32x4 vr = tinyc_vset4_s32(-r[0], -r[1], -r[2], -r[3]);
            const tinyc_s32x4 vre = tinyc_vset4_s32(-re[0], -re[1], -re[2], -re[3]);
            const tinyc_s32x4 vk = tinyc_vset4_s32(mask[0], mask[1], mask[2], mask[3]);
            const tinyc_s32x4 vh = tinyc_vset4_s32(hm1[0], hm1[1], hm1[2], hm1[3]);
            int32_t o1[4], o2[4], o3[4], o4[4], o5[4], o6[4], o7[4];
            tinyc_vst_s32(o1, tinyc_vmbqm_r(va, vm, vr));
            tinyc_vst_s32(o2, tinyc_vmbqm_even_r(va, vm, vre, vk, vh));
            tinyc_vst_s32(o3, tinyc_vmbqm_r_n(va, mul[0], -re[0]));
            tinyc_vst_s32(o4, tinyc_vmbqm_even_r_s(va, mul[0], -re[0]));
            tinyc_vst_s32(o5, tinyc_vqdmlash_s32(tinyc_vshr_r_s32(va, 2), vm, hm1[1]));
            tinyc_vst_s32(o6, tinyc_vqrdmlash_s32(tinyc_vshr_r_s32(va, 2), vm, hm1[1]));
            tinyc_vst_s32(o7, tinyc_vsat_shr_s8(va, re[0] > 24 ? 24 : re[0]));
            for (l = 0; l < 4; ++l) {
                const int64_t p = (int64_t)(acc[l] / 4 - (acc[l] % 4 < 0 ? 1 : 0)) * mul[l];
                const int32_t q7 = tinyc_q_asr(acc[l], re[0] > 24 ? 24 : re[0]);
                bad += o1[l] != tinyc_q_mbqm_r(acc[l], mul[l], r[l]);
                bad += o2[l] != tinyc_q_mbqm_even_r(acc[l], mul[l], re[l]);
                bad += o3[l] != tinyc_q_mbqm_r(acc[l], mul[0], re[0]);
                bad += o4[l] != tinyc_q_mbqm_even_r(acc[l], mul[0], re[0]);
                bad += o5[l] != (int32_t)(hm1[1] + tinyc_q_asr64(p, 31));
                bad += o6[l] != (int32_t)(hm1[1] + tinyc_q_asr64(p + ((int64_t)1 << 30), 31));
                bad += o7[l] != (q7 < -128 ? -128 : (q7 > 127 ? 127 : q7));
                bad += tinyc_smmla(acc[l], mul[l], hm1[l]) != tinyc_simd_wrap((int64_t)hm1[l] + tinyc_q_asr64((int64_t)acc[l] * mul[l], 32));
                bad += tinyc_smmlar(acc[l], mul[l], hm1[l]) != tinyc_simd_wrap((int64_t)hm1[l] + tinyc_q_asr64((int64_t)acc[l] * mul[l] + ((int64_t)1 << 31), 32));
                {
                    const int32_t q20 = tinyc_q_asr(acc[l], 20);
                    bad += tinyc_sat_s8(q20) != (q20 < -128 ? -128 : (q20 > 127 ? 127 : q20));
                }
                mix(o1[l]); mix(o2[l]); mix(o3[l]); mix(o4[l]); mix(o5[l]); mix(o6[l]); mix(o7[l]);
                n += 10u;
            }
        }
    }
    *count = n;
    return bad;
}
"""

HOST_MAIN = r"""
#include <stdio.h>
int main(void)
{
    uint32_t n;
    const uint32_t bad = check(20000u, &n);
    printf("REQ n=%lu bad=%lu sum=%lu\n", (unsigned long)n, (unsigned long)bad, (unsigned long)sum);
    return bad != 0u;
}
"""

DEVICE_MAIN = r"""
#include "tinyc_cm.h"
static void put(const char *t)
{
    while (*t) {
        tinyc_cm_uart_putc((uint8_t)*t++);
    }
}
static void putu(uint32_t v)
{
    char b[12];
    int i = 11;
    b[i] = 0;
    do {
        b[--i] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v);
    put(b + i);
}
int main(void)
{
    uint32_t n, bad;
    tinyc_cm_uart_init();
    bad = check(20000u, &n);
    put("REQ n=");
    putu(n);
    put(" bad=");
    putu(bad);
    put(" sum=");
    putu(sum);
    put("\n");
    return bad != 0u;
}
"""


def _host_helpers(tmp: Path) -> str:
    src = tmp / "h3.c"
    src.write_text(HELPERS_C + HOST_MAIN)
    exe = tmp / "h3"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-g",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-I", str(runtime_dir() / "include"),
                    str(src), "-o", str(exe)], check=True, capture_output=True, text=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.strip()


def test_helpers_host(tmp_path: Path) -> None:
    """The emulated helpers equal the scalar tinyc_q.h forms and the int64 definitions (UBSan on)."""
    line = _host_helpers(tmp_path)
    assert " bad=0 " in line and line.startswith("REQ n=800000"), line


# -- QEMU ------------------------------------------------------------------------------------------------

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None


def _qdq_add_model(shape_b: list[int]) -> Any:
    """A QDQ ONNX model: y = Relu(a + b) (b maybe broadcast) and z = y + a, int8 throughout."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    shape = [1, 12, 12, 37]
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
             (("sa", 0.043), ("sb", 0.027), ("sy", 0.051), ("sz", 0.061))]
    inits += [numpy_helper.from_array(np.array(v, np.int8), n) for n, v in
              (("za", 3), ("zb", -9), ("zy", -128), ("zz", 5))]
    nodes = [helper.make_node("QuantizeLinear", ["a", "sa", "za"], ["aq"]),
             helper.make_node("DequantizeLinear", ["aq", "sa", "za"], ["ad"]),
             helper.make_node("QuantizeLinear", ["b", "sb", "zb"], ["bq"]),
             helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["bd"]),
             helper.make_node("Add", ["ad", "bd"], ["s"], name="add1"),
             helper.make_node("Relu", ["s"], ["sr"]),
             helper.make_node("QuantizeLinear", ["sr", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["yd"]),
             helper.make_node("Add", ["yd", "ad"], ["t"], name="add2"),
             helper.make_node("QuantizeLinear", ["t", "sz", "zz"], ["zq"]),
             helper.make_node("DequantizeLinear", ["zq", "sz", "zz"], ["z"])]
    g = helper.make_graph(nodes, "adds", [helper.make_tensor_value_info("a", TensorProto.FLOAT, shape),
                                          helper.make_tensor_value_info("b", TensorProto.FLOAT, shape_b)],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, shape)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _add_layers(out: Path, feeds: dict[str, np.ndarray]) -> float:
    prof = tinyc.profile(out, feeds)
    return float(sum(lay[prof["units"]] for lay in prof["layers"] if "add" in lay["name"].lower()))


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm")
@pytest.mark.parametrize("board,variant,mnemonics", [("mps2-an386", "fast", ("smmla", "ssat")),
                                                     ("mps3-an547", "mve", ("vqdmlash", "vstrb.32", "uxtw #2"))])
def test_add_on_board(tmp_path: Path, board: str, variant: str, mnemonics: tuple[str, ...]) -> None:
    """Two residual-style Adds (one with b broadcast across rows) on the board: the default variant
    is the board's fast one, bit-exact vs the golden model, fewer instructions than "scalar", and
    the firmware contains its instructions (objdump -m armv8.1-m.main decodes MVE)."""
    r = np.random.default_rng(3)
    for shape_b in ([1, 12, 12, 37], [1, 1, 12, 37]):
        model = _qdq_add_model(shape_b)
        feeds = {"a": r.integers(-128, 128, (1, 12, 12, 37)).astype(np.int8),
                 "b": r.integers(-128, 128, shape_b).astype(np.int8)}
        counts = {}
        for v in (variant, "scalar"):
            out = tmp_path / f"{v}_{len(shape_b)}_{shape_b[1]}"
            sched = {} if v == variant else {"add1": {"variant": v}, "add2": {"variant": v}}
            tinyc.compile(model, out, board=board, build=True, io_dtype="int8", schedules=sched)
            if v == variant:
                assert f"variant={variant}" in (out / "report.md").read_text()
            val = tinyc.validate(out, feeds)
            assert all(o["bit_exact_vs_golden"] for o in val["outputs"].values()), (v, val["outputs"])
            counts[v] = _add_layers(out, feeds)
            if v == variant:
                elf = next((out / "build").glob("*.elf"))
                dis = subprocess.run(["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", str(elf)], check=True,
                                     capture_output=True, text=True).stdout
                for mn in mnemonics:
                    assert mn in dis, f"no {mn} in the {variant} firmware"
        assert counts[variant] * 3 < counts["scalar"], counts


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm")
@pytest.mark.parametrize("board", ["mps3-an547", "mps2-an386"])
def test_helpers_on_device(tmp_path: Path, board: str) -> None:
    """tinyc_vmbqm_r / tinyc_vmbqm_even_r (and _n), VQDMLASH, VQRDMLASH, the VQSHL int8 saturation,
    SMMLA / SMMLAR / SSAT on the core itself (intrinsics, not the emulation) equal the scalar forms
    lane for lane over 20000 x 4 random and edge operands (ends of int32, multipliers 2^30 and near
    2^31, every shift in the domain, exact ties), and give the same checksum as the host emulation."""
    from tinyc.targets.board import build_board_project
    g, _ = add_graph(0, (4,), (4,), (0.05, 0.03, 0.06), (1, 2, 3), None, "tflite")
    out = tmp_path / "fw"
    tinyc.compile(g, out, board=board, build=False)
    (out / "main.c").write_text(HELPERS_C + DEVICE_MAIN)
    res = build_board_project(out, force=True)
    elf = Path(res["elf"]) if "elf" in res else next((out / "build").glob("*.elf"))
    if board == "mps3-an547":
        dis = subprocess.run(["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", str(elf)], check=True,
                             capture_output=True, text=True).stdout
        for mn in ("vqrdmulh", "vqdmulh", "vrshl", "vqdmlash", "vqrdmlash"):
            assert mn in dis, mn
    machine = board
    proc = subprocess.run(["qemu-system-arm", "-M", machine, "-nographic", "-nic", "none", "-monitor", "none",
                           "-semihosting-config", "enable=on,target=native", "-serial", "stdio",
                           "-kernel", str(elf)], capture_output=True, text=True, timeout=120)
    line = next((s for s in proc.stdout.splitlines() if s.startswith("REQ ")), proc.stdout + proc.stderr)
    assert proc.returncode == 0 and " bad=0 " in line, line
    assert line == _host_helpers(tmp_path), (line, "host")


def _qdq_pool_model() -> Any:
    """A QDQ ONNX model: a padded 3x3 AveragePool then a GlobalAveragePool, int8 throughout."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("s0", 0.05), ("s1", 0.031), ("s2", 0.02))]
    inits += [numpy_helper.from_array(np.array(v, np.int8), n) for n, v in (("z0", 4), ("z1", -3), ("z2", 7))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s0", "z0"], ["xd"]),
             helper.make_node("AveragePool", ["xd"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("QuantizeLinear", ["p", "s1", "z1"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "s1", "z1"], ["pd"]),
             helper.make_node("GlobalAveragePool", ["pd"], ["g"], name="gpool"),
             helper.make_node("QuantizeLinear", ["g", "s2", "z2"], ["gq"]),
             helper.make_node("DequantizeLinear", ["gq", "s2", "z2"], ["y"])]
    g = helper.make_graph(nodes, "pools", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 37, 11, 11])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 37, 1, 1])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm")
@pytest.mark.parametrize("board", ["mps3-an547", "mps2-an386"])
def test_avgpool_on_board(tmp_path: Path, board: str) -> None:
    """On mps3-an547 the average pools default to "mve": bit-exact, fewer instructions than the
    scalar kernel, VLDRB.S32 / VSTRB.32 in the firmware. On mps2-an386 the scalar kernel with its
    Cortex-M channel tile of 8 (tails of 5 channels here) is bit-exact."""
    feeds = {"x": np.random.default_rng(5).integers(-128, 128, (1, 37, 11, 11)).astype(np.int8)}
    counts = {}
    for v in ("mve", "scalar") if board == "mps3-an547" else ("scalar",):
        out = tmp_path / v
        sched = {} if v == "mve" or board != "mps3-an547" else {"pool": {"variant": v}, "gpool": {"variant": v}}
        tinyc.compile(_qdq_pool_model(), out, board=board, build=True, io_dtype="int8", schedules=sched)
        val = tinyc.validate(out, feeds)
        assert all(o["bit_exact_vs_golden"] for o in val["outputs"].values()), (v, val["outputs"])
        assert f"variant={v}" in (out / "report.md").read_text()
        prof = tinyc.profile(out, feeds)
        counts[v] = float(sum(lay[prof["units"]] for lay in prof["layers"] if "pool" in lay["name"].lower()))
        if v == "mve":
            elf = next((out / "build").glob("*.elf"))
            dis = subprocess.run(["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", str(elf)], check=True,
                                 capture_output=True, text=True).stdout
            assert "vldrb.s32" in dis and "vstrb.32" in dis
    assert board != "mps3-an547" or counts["mve"] * 2 < counts["scalar"], counts
