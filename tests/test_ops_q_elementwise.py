"""int8 QAdd / QMul / QLut / QRequantize / QConcat: the compiled C equals the numpy golden model bit for
bit (random shapes with broadcasting, random grids, fused clamps, constant operands); the golden model is
within 1 LSB of onnxruntime on the equivalent QDQ models and on the com.microsoft QLinear* nodes
(int8 and uint8); one ASan/UBSan run; clear UnsupportedErrors for bad input."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import tinyc
import tinyc.reference
from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.ops.qconcat import build_qconcat
from tinyc.ops.qelementwise import build_qadd, build_qlut, build_qmul, build_qrequantize
from tinyc.passes.layout import optimize_transposes
from tinyc.numerics import fixed_point as arith
from tinyc.numerics.qparams import add_qconstant, add_qtensor

from util import REPO, ort_run, sanitized_run

ONNX_T = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}
RANGE = {"int8": (-128, 127), "uint8": (0, 255)}
#: (ONNX op, its float64 function for the table, the ONNX node's attributes)
UNARY: list[tuple[str, Callable[[np.ndarray], np.ndarray], dict[str, Any]]] = [
    ("Sigmoid", lambda v: 1.0 / (1.0 + np.exp(-v)), {}),
    ("Tanh", np.tanh, {}),
    ("LeakyRelu", lambda v: np.where(v >= 0, v, v * float(np.float32(0.1))), {"alpha": 0.1}),
    ("Exp", np.exp, {}),
    ("Softsign", lambda v: v / (1 + np.abs(v)), {}),
]
AGREEMENT: dict[str, list[int]] = {}  # op -> [outputs 1 LSB off, outputs compared]


def _scale(rng: np.random.Generator, lo: float = 1e-3, hi: float = 0.5) -> float:
    return float(np.float32(np.exp(rng.uniform(np.log(lo), np.log(hi)))))


def _zp(rng: np.random.Generator, dtype: str = "int8") -> int:
    lo, hi = RANGE[dtype]
    return int(rng.integers(lo + 20, hi - 20))


def _ints(rng: np.random.Generator, shape: tuple[int, ...], dtype: str = "int8") -> np.ndarray:
    lo, hi = RANGE[dtype]
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def _bshape(rng: np.random.Generator, full: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to `full`: some leading dims dropped, some dims set to 1."""
    nd = int(rng.integers(0, len(full) + 1))
    return tuple(1 if rng.random() < 0.4 else d for d in full[len(full) - nd:])


def _clamp(rng: np.random.Generator, s: float) -> tuple[float | None, float | None] | None:
    k = int(rng.integers(0, 4))
    return [None, (0.0, None), (0.0, float(np.float32(40 * s))), (float(np.float32(-30 * s)), None)][k]


def _run_c(graph: Graph, feeds: dict[str, np.ndarray], out: Path) -> dict[str, np.ndarray]:
    tinyc.compile(graph, out, build=True)
    return tinyc.run(out, feeds)


# ---------------------------------------------------------------------------------------------
# 1. golden == C, bit for bit
# ---------------------------------------------------------------------------------------------
def _random_graph(seed: int, rank: int, const_b: bool) -> tuple[Graph, dict[str, np.ndarray]]:
    """One graph with every op: QAdd/QMul (broadcasting both ways, maybe a constant operand, random
    clamp), a QLut, QRequantize int8 -> uint8 -> int8 and a pure zero-point shift, and a QConcat whose
    inputs take the copy, shift and rescale paths (plus a constant)."""
    rng = np.random.default_rng(seed)
    full = tuple(int(d) for d in rng.integers(1, 6, rank))
    ashape, bshape = _bshape(rng, full), _bshape(rng, full)
    if rng.random() < 0.5 or not ashape:  # a feeds the Concat too: rank >= 1
        ashape = full
    out = tuple(int(d) for d in np.broadcast_shapes(ashape, bshape))
    g = Graph(f"q{seed}")
    sa, sb = _scale(rng), _scale(rng)
    za, zb = _zp(rng), _zp(rng)
    add_qtensor(g, "a", ashape, sa, za)
    g.inputs = ["a"]
    feeds = {"a": _ints(rng, ashape)}
    if const_b:
        b = add_qconstant(g, "b", _ints(rng, bshape), sb, zb)
    else:
        b = "b"
        add_qtensor(g, b, bshape, sb, zb)
        g.inputs.append(b)
        feeds[b] = _ints(rng, bshape)
    s_add = float(np.float32((sa + sb) * rng.uniform(0.3, 2.0)))
    s_mul = float(np.float32(sa * sb * 128 * rng.uniform(0.1, 3.0)))
    add_qtensor(g, "y_add", out, s_add, _zp(rng))
    add_qtensor(g, "y_mul", out, s_mul, _zp(rng))
    a_first = rng.random() < 0.5
    x1, x2 = ("a", b) if a_first else (b, "a")
    g.nodes.append(build_qadd(g, "add", x1, x2, "y_add", _clamp(rng, s_add)))
    g.nodes.append(build_qmul(g, "mul", x1, x2, "y_mul", _clamp(rng, s_mul)))
    name, fn, _ = UNARY[int(rng.integers(len(UNARY)))]
    add_qtensor(g, "y_lut", ashape, _scale(rng, 1e-3, 0.1), _zp(rng))
    g.nodes.append(build_qlut(g, "lut", "a", "y_lut", fn, source=name))
    add_qtensor(g, "y_u8", ashape, _scale(rng), _zp(rng, "uint8"), "uint8")
    add_qtensor(g, "y_back", ashape, _scale(rng), _zp(rng))
    zs = _zp(rng)
    add_qtensor(g, "y_shift", ashape, sa, zs + 1 if zs == za else zs)  # another zero point: the "shift" path
    g.nodes += [build_qrequantize(g, "to_u8", "a", "y_u8"), build_qrequantize(g, "to_i8", "y_u8", "y_back"),
                build_qrequantize(g, "shift", "a", "y_shift")]
    axis = int(rng.integers(-len(ashape), len(ashape))) if ashape else 0
    c = add_qconstant(g, "c", _ints(rng, ashape), _scale(rng), _zp(rng))
    cat = list(ashape)
    cat[axis] *= 4
    add_qtensor(g, "y_cat", tuple(cat), sa, za)  # a: copy, y_shift: shift, y_lut and c: rescale
    g.nodes.append(build_qconcat(g, "cat", ["a", "y_shift", "y_lut", c], "y_cat", axis))
    g.outputs = ["y_add", "y_mul", "y_lut", "y_u8", "y_back", "y_shift", "y_cat"]
    g.output_names = list(g.outputs)
    return g, feeds


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), rank=st.integers(1, 4), const_b=st.booleans())
def test_golden_equals_c(tmp_path_factory: pytest.TempPathFactory, seed: int, rank: int, const_b: bool) -> None:
    g, feeds = _random_graph(seed, rank, const_b)
    assert [n.attrs["modes"] for n in g.nodes if n.op == "QConcat"] == [["copy", "shift", "rescale", "rescale"]]
    golden = tinyc.reference.run_graph(g, feeds)
    y = _run_c(g, feeds, tmp_path_factory.mktemp("qew"))
    for name in g.outputs:
        assert y[name].dtype == golden[name].dtype and y[name].shape == golden[name].shape, name
        np.testing.assert_array_equal(y[name], golden[name], err_msg=f"{name} (seed {seed})")


HARNESS = r"""
#include "tinyc_q.h"
void h_mul(const int8_t *a, const int8_t *b, int32_t za, int32_t zb, int32_t m, int32_t s, int32_t zo,
           int32_t lo, int32_t hi, int8_t *o, int n)
{ int i; for (i = 0; i < n; ++i) o[i] = tinyc_q_mul(a[i], b[i], za, zb, m, s, zo, lo, hi, TINYC_Q_ROUND_TFLITE); }
void h_rescale(const int32_t *q, int32_t zi, int32_t m, int32_t s, int32_t k, int32_t zo, int32_t lo, int32_t hi,
               int32_t *o, int n)
{ int i; for (i = 0; i < n; ++i) o[i] = tinyc_q_rescale(q[i], zi, m, s, k, zo, lo, hi); }
void h_shift(const int32_t *q, int32_t zi, int32_t zo, int32_t lo, int32_t hi, int32_t *o, int n)
{ int i; for (i = 0; i < n; ++i) o[i] = tinyc_q_shift_zp(q[i], zi, zo, lo, hi); }
"""


def test_c_helpers_equal_arith_exhaustively(tmp_path: Path) -> None:
    """tinyc_q_mul / tinyc_q_rescale / tinyc_q_shift_zp == arith on every input value (UBSan on)."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "h.c").write_text(HARNESS)
    cmd = [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-fPIC", "-shared",
           f"-I{REPO / 'runtime_c' / 'include'}", str(tmp_path / "h.c"), "-o", str(tmp_path / "libh.so")]
    if subprocess.run(cmd[:1] + ["-fsanitize=undefined", "-fno-sanitize-recover=all"] + cmd[1:],
                      capture_output=True).returncode != 0:
        subprocess.run(cmd, check=True, capture_output=True)
    lib = ctypes.CDLL(str(tmp_path / "libh.so"))
    P = np.ctypeslib.as_ctypes_type
    i32 = ctypes.c_int32
    rng = np.random.default_rng(7)
    q8 = np.arange(-128, 128)
    a = np.repeat(q8, 256).astype(np.int8)
    b = np.tile(q8, 256).astype(np.int8)
    o = np.empty_like(a)
    for s1, s2, so in [(0.02, 0.03, 0.05), (0.5, 0.5, 1e-4), (1e-3, 1e-3, 10.0), (0.1, 0.2, 0.004)]:
        m, sh = arith.requant_params(np.float32(s1), np.float32(s2), np.float32(so))
        za, zb, zo = (int(v) for v in rng.integers(-128, 128, 3))
        lo, hi = sorted(int(v) for v in rng.integers(-128, 128, 2))
        lib.h_mul(a.ctypes.data_as(ctypes.POINTER(P(np.int8))), b.ctypes.data_as(ctypes.POINTER(P(np.int8))),
                  i32(za), i32(zb), i32(int(m)), i32(int(sh)), i32(zo), i32(lo), i32(hi),
                  o.ctypes.data_as(ctypes.POINTER(P(np.int8))), len(a))
        np.testing.assert_array_equal(o, arith.mul_int8(a, b, za, zb, int(m), int(sh), zo, lo, hi))
    for din, dout in [("int8", "int8"), ("uint8", "int8"), ("int8", "uint8"), ("uint8", "uint8")]:
        q = np.arange(*RANGE[din]).astype(np.int32)
        q = np.append(q, RANGE[din][1]).astype(np.int32)
        r = np.empty_like(q)
        qp = q.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        rp = r.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        lo, hi = RANGE[dout]
        for ratio in (1e-12, 1e-3, 0.37, 0.5, 1.0 + 1e-6, 3.3, 1e4, 1e9):
            pr = arith.rescale_params(1.0, 1.0 / ratio) or (0, 0, 0)
            zi, zo = int(rng.integers(*RANGE[din])), int(rng.integers(*RANGE[dout]))
            lib.h_rescale(qp, i32(zi), i32(pr[0]), i32(pr[1]), i32(pr[2]), i32(zo), i32(lo), i32(hi), rp, len(q))
            np.testing.assert_array_equal(r, arith.rescale(q, zi, zo, lo, hi, pr[0], pr[1], pr[2]))
            lib.h_shift(qp, i32(zi), i32(zo), i32(lo), i32(hi), rp, len(q))
            np.testing.assert_array_equal(r, arith.rescale(q, zi, zo, lo, hi))


# ---------------------------------------------------------------------------------------------
# 2. golden vs onnxruntime on the equivalent QDQ models
# ---------------------------------------------------------------------------------------------
def _qdq(inputs: dict[str, tuple[np.ndarray, float, int]], body: Callable[[list[str]], list[onnx.NodeProto]],
         y: tuple[float, int, str]) -> onnx.ModelProto:
    """int inputs -> DequantizeLinear -> body (float, last output 'f') -> QuantizeLinear -> y."""
    nodes, inits, vis = [], [], []
    deq = []
    for name, (x, s, zp) in inputs.items():
        inits += [numpy_helper.from_array(np.array(s, np.float32), f"{name}_s"),
                  numpy_helper.from_array(np.array(zp, x.dtype), f"{name}_zp")]
        nodes.append(helper.make_node("DequantizeLinear", [name, f"{name}_s", f"{name}_zp"], [f"{name}_f"]))
        vis.append(helper.make_tensor_value_info(name, ONNX_T[str(x.dtype)], list(x.shape)))
        deq.append(f"{name}_f")
    nodes += body(deq)
    s, zp, dt = y
    inits += [numpy_helper.from_array(np.array(s, np.float32), "y_s"), numpy_helper.from_array(np.array(zp, dt), "y_zp")]
    nodes.append(helper.make_node("QuantizeLinear", ["f", "y_s", "y_zp"], ["y"]))
    g = helper.make_graph(nodes, "qdq", vis, [helper.make_tensor_value_info("y", ONNX_T[dt], None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _clamp_nodes(src: str, clamp: tuple[float | None, float | None] | None) -> list[onnx.NodeProto]:
    if clamp is None:
        return [helper.make_node("Identity", [src], ["f"])]
    lo, hi = clamp
    return [helper.make_node("Clip", [src, "lo" if lo is not None else "", "hi" if hi is not None else ""], ["f"])]


def _clamp_inits(m: onnx.ModelProto, clamp: tuple[float | None, float | None] | None) -> None:
    for nm, v in zip(("lo", "hi"), clamp or (None, None)):
        if v is not None:
            m.graph.initializer.append(numpy_helper.from_array(np.array(v, np.float32), nm))


def _compare(op: str, golden: np.ndarray, ref: np.ndarray) -> None:
    assert golden.dtype == ref.dtype and golden.shape == ref.shape, op
    d = np.abs(golden.astype(np.int64) - ref.astype(np.int64))
    assert d.max(initial=0) <= 1, (op, int(d.max()))
    cnt = AGREEMENT.setdefault(op, [0, 0])
    cnt[0] += int((d == 1).sum())
    cnt[1] += d.size


def _golden(g: Graph, node: Node, feeds: dict[str, np.ndarray]) -> np.ndarray:
    g.nodes.append(node)
    g.outputs = g.output_names = ["y"]
    return tinyc.reference.run_graph(g, feeds)["y"]


def _ir_inputs(inputs: dict[str, tuple[np.ndarray, float, int]]) -> Graph:
    g = Graph("g")
    for name, (x, s, zp) in inputs.items():
        add_qtensor(g, name, x.shape, s, zp, str(x.dtype))
        g.inputs.append(name)
    return g


def test_vs_onnxruntime_qdq() -> None:
    rng = np.random.default_rng(1234)
    for case in range(40):
        full = tuple(int(d) for d in rng.integers(1, 7, int(rng.integers(1, 5))))
        ashape, bshape = full, _bshape(rng, full)
        if case % 2:
            ashape, bshape = bshape, ashape
        sa, sb = _scale(rng), _scale(rng)
        ins = {"a": (_ints(rng, ashape), sa, _zp(rng)), "b": (_ints(rng, bshape), sb, _zp(rng))}
        feeds = {k: v[0] for k, v in ins.items()}
        out = tuple(int(d) for d in np.broadcast_shapes(ashape, bshape))
        for op, build, so in (("Add", build_qadd, (sa + sb) * rng.uniform(0.3, 2.0)),
                              ("Mul", build_qmul, sa * sb * 128 * rng.uniform(0.1, 3.0))):
            so, zo = float(np.float32(so)), _zp(rng)
            clamp = _clamp(rng, so)
            m = _qdq(ins, lambda d, op=op, clamp=clamp: [helper.make_node(op, d, ["t"]), *_clamp_nodes("t", clamp)],
                     (so, zo, "int8"))
            _clamp_inits(m, clamp)
            g = _ir_inputs(ins)
            add_qtensor(g, "y", out, so, zo)
            _compare(f"Q{op}", _golden(g, build(g, op, "a", "b", "y", clamp), feeds), ort_run(m, feeds)[0])

        name, fn, attrs = UNARY[case % len(UNARY)]
        so, zo = _scale(rng, 1e-3, 0.1), _zp(rng)
        one = {"a": ins["a"]}
        m = _qdq(one, lambda d, name=name, attrs=attrs: [helper.make_node(name, d, ["f"], **attrs)], (so, zo, "int8"))
        g = _ir_inputs(one)
        add_qtensor(g, "y", ashape, so, zo)
        _compare("QLut", _golden(g, build_qlut(g, name, "a", "y", fn), {"a": feeds["a"]}), ort_run(m, {"a": feeds["a"]})[0])

        din, dout = ("int8", "uint8", "int8", "uint8")[case % 4], ("int8", "int8", "uint8", "uint8")[case % 4]
        x = {"x": (_ints(rng, ashape, din), _scale(rng), _zp(rng, din))}
        so = float(np.float32(x["x"][1] * (1.0 if case % 5 == 0 else rng.uniform(0.2, 5.0))))
        zo = _zp(rng, dout)
        m = _qdq(x, lambda d: [helper.make_node("Identity", d, ["f"])], (so, zo, dout))
        g = _ir_inputs(x)
        add_qtensor(g, "y", ashape, so, zo, dout)
        _compare("QRequantize", _golden(g, build_qrequantize(g, "rq", "x", "y"), {"x": x["x"][0]}),
                 ort_run(m, {"x": x["x"][0]})[0])

        axis = int(rng.integers(-len(full), len(full)))
        parts = {}
        for k in range(int(rng.integers(1, 4))):
            sh = list(full)
            sh[axis] = int(rng.integers(1, 4))
            parts[f"x{k}"] = (_ints(rng, tuple(sh)), _scale(rng), _zp(rng))
        so, zo = _scale(rng), _zp(rng)
        if case % 3 == 0:  # x0 on the output grid: copy
            so, zo = parts["x0"][1], parts["x0"][2]
        elif case % 3 == 1:  # x0 on the output's scale: zero-point shift
            so = parts["x0"][1]
        m = _qdq(parts, lambda d, axis=axis: [helper.make_node("Concat", d, ["f"], axis=axis)], (so, zo, "int8"))
        g = _ir_inputs(parts)
        oshape = list(full)
        oshape[axis] = sum(v[0].shape[axis] for v in parts.values())
        add_qtensor(g, "y", tuple(oshape), so, zo)
        pf = {k: v[0] for k, v in parts.items()}
        _compare("QConcat", _golden(g, build_qconcat(g, "cat", list(parts), "y", axis), pf), ort_run(m, pf)[0])
    print("\nQDQ agreement (outputs 1 LSB off / compared):",
          {k: f"{v[0]}/{v[1]}" for k, v in AGREEMENT.items()})
    for op, (off, total) in AGREEMENT.items():
        assert off <= total // 20, (op, off, total)


# ---------------------------------------------------------------------------------------------
# 3. com.microsoft QLinear* importers
# ---------------------------------------------------------------------------------------------
def ms_model(dtype: str, seed: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """QLinearAdd (broadcast), QLinearMul (constant B), QLinearSigmoid, QLinearLeakyRelu and
    QLinearConcat (of two graph inputs and a constant) in one model. Every node reads graph inputs or
    constants, so each output compares one op with onnxruntime (no 1-LSB differences compounding)."""
    rng = np.random.default_rng(seed)
    T, et = np.dtype(dtype), ONNX_T[dtype]
    shape, bshape, zshape = (2, 3, 4, 5), (3, 1, 5), (2, 2, 4, 5)
    inits: dict[str, np.ndarray] = {}

    def grid(name: str, s: float) -> list[str]:
        inits[f"{name}_s"] = np.array(s, np.float32)
        inits[f"{name}_zp"] = np.array(_zp(rng, dtype), T)
        return [f"{name}_s", f"{name}_zp"]

    sx, sy = _scale(rng), _scale(rng)
    inits["w"] = _ints(rng, bshape, dtype)
    inits["k"] = _ints(rng, (2, 1, 4, 5), dtype)
    x, y = ["x", *grid("x", sx)], ["y", *grid("y", sy)]
    nodes = [
        helper.make_node("QLinearAdd", [*x, *y, *grid("add", (sx + sy) * 0.8)], ["add"], domain="com.microsoft",
                         name="qadd"),
        helper.make_node("QLinearMul", [*x, "w", *grid("w", 0.02), *grid("mul", sx * 0.02 * 90)], ["mul"],
                         domain="com.microsoft", name="qmul"),
        helper.make_node("QLinearSigmoid", [*x, *grid("sig", 1 / 256)], ["sig"], domain="com.microsoft", name="qsig"),
        helper.make_node("QLinearLeakyRelu", [*y, *grid("lrelu", sy * 0.7)], ["lrelu"], domain="com.microsoft",
                         name="qlrelu", alpha=0.2),
        helper.make_node("QLinearConcat", [*grid("cat", sx * 1.3), *x, "z", *grid("z", _scale(rng)), "k", *grid("k", 0.05)],
                         ["cat"], domain="com.microsoft", name="qcat", axis=1),
    ]
    outs = {"add": shape, "mul": shape, "sig": shape, "lrelu": bshape, "cat": (2, 6, 4, 5)}
    g = helper.make_graph(
        nodes, f"ms_{dtype}", [helper.make_tensor_value_info(n, et, list(sh))
                               for n, sh in (("x", shape), ("y", bshape), ("z", zshape))],
        [helper.make_tensor_value_info(o, et, list(sh)) for o, sh in outs.items()],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m, {"x": _ints(rng, shape, dtype), "y": _ints(rng, bshape, dtype), "z": _ints(rng, zshape, dtype)}


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_ms_importers_vs_onnxruntime_and_c(dtype: str, tmp_path: Path) -> None:
    off = total = 0
    for seed in range(6):
        m, feeds = ms_model(dtype, seed)
        g = tinyc.load(m)
        golden = dict(zip([o.name for o in m.graph.output],
                          [tinyc.reference.run_graph(g, feeds)[t] for _, t in g.public_outputs()]))
        ref = dict(zip([o.name for o in m.graph.output], ort_run(m, feeds)))
        for k, v in golden.items():
            assert v.dtype == np.dtype(dtype) and v.shape == ref[k].shape, k
            d = np.abs(v.astype(np.int64) - ref[k].astype(np.int64))
            assert d.max() <= 1, (dtype, seed, k, int(d.max()))
            off, total = off + int((d == 1).sum()), total + d.size
        if seed == 0:
            ops = [n.op for n in g.nodes]
            assert {"QAdd", "QMul", "QLut", "QConcat"} <= set(ops), ops
            assert ("QRequantize" in ops) == (dtype == "uint8"), ops
            tinyc.compile(m, tmp_path / "c", build=True)
            y = tinyc.run(tmp_path / "c", feeds)
            for k, v in golden.items():
                np.testing.assert_array_equal(y[k], v, err_msg=k)
    print(f"\ncom.microsoft {dtype}: {off}/{total} outputs 1 LSB off onnxruntime")
    assert off <= total // 20


def test_ms_uint8_chain_shares_int8_twins() -> None:
    """uint8 QOperators in a chain: each uint8 tensor gets one int8 twin, and a uint8 output read by
    the next QOperator is not converted back and forth."""
    c = {"s": np.array(0.05, np.float32), "z": np.array(130, np.uint8), "s2": np.array(1 / 256, np.float32),
         "z2": np.array(0, np.uint8)}
    nodes = [helper.make_node("QLinearAdd", ["x", "s", "z", "x", "s", "z", "s", "z"], ["a"], domain="com.microsoft"),
             helper.make_node("QLinearSigmoid", ["a", "s", "z", "s2", "z2"], ["y"], domain="com.microsoft"),
             helper.make_node("QLinearMul", ["x", "s", "z", "a", "s", "z", "s", "z"], ["p"], domain="com.microsoft")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.UINT8, [4, 8])],
                          [helper.make_tensor_value_info(o, TensorProto.UINT8, [4, 8]) for o in ("y", "p")],
                          initializer=[numpy_helper.from_array(v, k) for k, v in c.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    graph = tinyc.load(m)
    assert [n.op for n in graph.nodes].count("QRequantize") == 3  # x in; y, p out
    x = _ints(np.random.default_rng(2), (4, 8), "uint8")
    golden = tinyc.reference.run_graph(graph, {"x": x})
    for (pub, t), ref in zip(graph.public_outputs(), ort_run(m, {"x": x})):
        assert np.abs(golden[t].astype(np.int64) - ref.astype(np.int64)).max() <= 1, pub


def test_ms_sanitized(tmp_path: Path) -> None:
    m, feeds = ms_model("uint8", 3)
    g = tinyc.load(m)
    golden = tinyc.reference.run_graph(g, feeds)
    y = sanitized_run(m, feeds, tmp_path)
    for pub, t in g.public_outputs():
        np.testing.assert_array_equal(y[pub], golden[t], err_msg=pub)


# ---------------------------------------------------------------------------------------------
# 4. layout: transposes move through the int8 ops
# ---------------------------------------------------------------------------------------------
def test_transposes_push_through() -> None:
    rng = np.random.default_rng(5)
    g = Graph("perm")
    add_qtensor(g, "x", (1, 4, 5, 3), 0.05, 2)
    g.inputs = ["x"]
    add_qtensor(g, "t", (1, 3, 4, 5), 0.05, 2)
    g.nodes.append(Node("tr", "Transpose", ["x"], ["t"], {"perm": [0, 3, 1, 2]}))
    c = add_qconstant(g, "c", _ints(rng, (1, 2, 4, 5)), 0.1, -3)
    k = add_qconstant(g, "k", _ints(rng, (3, 1, 1)), 0.02, 5)
    add_qtensor(g, "y_cat", (1, 5, 4, 5), 0.07, 0)
    add_qtensor(g, "y_lut", (1, 3, 4, 5), 0.01, -10)
    add_qtensor(g, "y_add", (1, 3, 4, 5), 0.06, 1)
    add_qtensor(g, "y_rq", (1, 3, 4, 5), 0.3, 128, "uint8")
    g.nodes += [build_qconcat(g, "cat", ["t", c], "y_cat", 1), build_qlut(g, "lut", "t", "y_lut", np.tanh),
                build_qadd(g, "add", "t", k, "y_add"), build_qrequantize(g, "rq", "t", "y_rq")]
    g.outputs = g.output_names = ["y_cat", "y_lut", "y_add", "y_rq"]
    x = {"x": _ints(rng, (1, 4, 5, 3))}
    before = tinyc.reference.run_graph(g.copy(), x)
    optimize_transposes(g)
    cat = next(n for n in g.nodes if n.op == "QConcat")
    assert cat.attrs["axis"] == 3 and cat.inputs[0] == "x"
    assert all(n.inputs[0] == "x" for n in g.nodes if n.op in ("QLut", "QAdd", "QRequantize"))
    after = tinyc.reference.run_graph(g, x)
    for k2 in before:
        np.testing.assert_array_equal(after[k2], before[k2], err_msg=k2)


# ---------------------------------------------------------------------------------------------
# 5. bad input
# ---------------------------------------------------------------------------------------------
def _edit(m: onnx.ModelProto, fn: Callable[[onnx.ModelProto], None]) -> onnx.ModelProto:
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    fn(m2)
    return m2


def test_ms_importer_errors() -> None:
    m, _ = ms_model("int8")

    def runtime_scale(mm: onnx.ModelProto) -> None:
        mm.graph.input.append(helper.make_tensor_value_info("rt_s", TensorProto.FLOAT, []))
        mm.graph.node[0].input[4] = "rt_s"
    with pytest.raises(UnsupportedError, match=r"'qadd'.*must be a constant"):
        tinyc.load(_edit(m, runtime_scale))

    def per_channel(mm: onnx.ModelProto) -> None:
        mm.graph.initializer.append(numpy_helper.from_array(np.full(5, 0.1, np.float32), "pc_s"))
        mm.graph.node[1].input[4] = "pc_s"
    with pytest.raises(UnsupportedError, match=r"'qmul'.*per-tensor"):
        tinyc.load(_edit(m, per_channel))

    def other_grid(mm: onnx.ModelProto) -> None:  # x read with two different scales
        mm.graph.initializer.append(numpy_helper.from_array(np.array(0.123, np.float32), "x_s2"))
        mm.graph.node[1].input[1] = "x_s2"
    with pytest.raises(UnsupportedError, match=r"'qmul'.*already quantized"):
        tinyc.load(_edit(m, other_grid))

    def bad_concat(mm: onnx.ModelProto) -> None:
        del mm.graph.node[4].input[-1]
    with pytest.raises(UnsupportedError, match=r"'qcat'.*triples"):
        tinyc.load(_edit(m, bad_concat))

    node = helper.make_node("QLinearSigmoid", ["x", "s", "z", "s", "z"], ["y"], domain="com.microsoft", name="qs")
    for xt, zt in ((TensorProto.INT16, np.int16), (TensorProto.FLOAT, np.int8)):
        g = helper.make_graph([node], "bad", [helper.make_tensor_value_info("x", xt, [2, 3])],
                              [helper.make_tensor_value_info("y", xt, [2, 3])],
                              initializer=[numpy_helper.from_array(np.array(0.1, np.float32), "s"),
                                           numpy_helper.from_array(np.array(0, zt), "z")])
        bad = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
        bad.ir_version = 8
        with pytest.raises(UnsupportedError, match=r"'qs'.*int8/uint8"):
            tinyc.load(bad)


def test_builder_errors() -> None:
    g = Graph("e")
    add_qtensor(g, "a", (2, 3), 0.1, 0)
    add_qtensor(g, "b", (4,), 0.1, 0)
    add_qtensor(g, "y", (2, 3), 0.1, 0)
    g.add_constant("f", np.zeros((2, 3), np.float32))
    add_qtensor(g, "u", (2, 3), 0.1, 0, "uint8")
    with pytest.raises(UnsupportedError, match=r"'add' \(QAdd\).*do not broadcast"):
        build_qadd(g, "add", "a", "b", "y")
    with pytest.raises(UnsupportedError, match=r"'mul' \(QMul\).*'f' is float32"):
        build_qmul(g, "mul", "a", "f", "y")
    with pytest.raises(UnsupportedError, match=r"'lut' \(QLut\).*'u' is uint8"):
        build_qlut(g, "lut", "a", "u", np.tanh)
    g.add_constant("nq", np.zeros((2, 3), np.int8))
    with pytest.raises(UnsupportedError, match=r"'rq' \(QRequantize\).*no per-tensor quantization"):
        build_qrequantize(g, "rq", "nq", "y")
    with pytest.raises(UnsupportedError, match=r"'cat' \(QConcat\).*do not agree"):
        build_qconcat(g, "cat", ["a", "b"], "y", 0)
    add_qtensor(g, "tiny", (2, 3), 1e-30, 0)
    with pytest.raises(UnsupportedError, match=r"'rq2' \(QRequantize\).*multiplier"):
        build_qrequantize(g, "rq2", "a", "tiny")
    with pytest.raises(UnsupportedError, match=r"'lut2' \(QLut\).*table function failed"):
        build_qlut(g, "lut2", "a", "y", lambda v: v[:3] * "x")
