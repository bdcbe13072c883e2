"""int8 pooling and softmax: the C kernels equal the integer golden models bit for bit (QAvgPool,
QSoftmax, int8/uint8 MaxPool on "Pool"), and onnxruntime's QDQ graphs (DQ -> float op -> Q) and
com.microsoft QLinear* ops within 1 LSB (MaxPool: exactly)."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import tinyc
import tinyc.reference
from tinyc.errors import ModelLoadError, UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.ops import get_op
from tinyc.ops.qpool import build_qavgpool, build_qmaxpool
from tinyc.ops.qsoftmax import build_qsoftmax, softmax_params
from tinyc.passes import run_passes
from tinyc.numerics.qparams import add_qtensor
from util import ort_run, sanitized_run

STRICT = "-O1 -std=c99 -Wall -Wextra -Werror -pedantic"
HYP = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# onnxruntime warns (harmlessly) that its own ceil_mode output shapes disagree with its shape inference
onnxruntime.set_default_logger_severity(3)
#: (outputs 1 LSB off onnxruntime, outputs compared) per op, printed at the end of each test
STATS: dict[str, list[int]] = {}


def _record(op: str, ours: np.ndarray, ref: np.ndarray) -> None:
    assert ours.shape == ref.shape and ours.dtype == ref.dtype, (op, ours.shape, ref.shape)
    d = np.abs(ours.astype(np.int64) - ref.astype(np.int64))
    assert d.max(initial=0) <= 1, (op, int(d.max()))
    s = STATS.setdefault(op, [0, 0])
    s[0] += int((d == 1).sum())
    s[1] += d.size


def _et(dt: Any) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dt))


def _dims(x: np.ndarray) -> list[str]:
    """Symbolic output dims (the onnx checker wants a shape; contrib ops have no shape inference)."""
    return [f"d{i}" for i in range(x.ndim)]


def _rand(rng: np.random.Generator, shape: tuple[int, ...], dt: Any = np.int8) -> np.ndarray:
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, shape).astype(dt)


def _graph(x_shape: tuple[int, ...], si: float, zi: int, dtype: str = "int8") -> Graph:
    g = Graph("g")
    add_qtensor(g, "x", x_shape, si, zi, dtype)
    g.inputs = ["x"]
    return g


def _add(g: Graph, node_fn: Any, out: str, so: float, zo: int, dtype: str = "int8") -> Node:
    """Declare `out`, build the node (the builders do not read the output's shape), give `out` the
    op's inferred shape, append the node and make `out` a graph output."""
    add_qtensor(g, out, (1,), so, zo, dtype)
    node = node_fn()
    (shape, _), = get_op(node.op).infer(node, g)
    g.tensor(out).shape = tuple(shape)
    g.nodes.append(node)
    g.outputs.append(out)
    g.output_names.append(out)
    return node


def _c_vs_golden(g: Graph, feeds: dict[str, np.ndarray], golden_graph: Graph | None = None) -> dict[str, np.ndarray]:
    """Build `g` strictly (-Werror -pedantic), run it, assert == the golden model of `golden_graph`
    (default `g`) output by output; return the outputs."""
    gold = tinyc.reference.run_graph(golden_graph or g, feeds)
    with tempfile.TemporaryDirectory() as d:
        tinyc.compile(g, d, build=True, cflags=STRICT)
        ys = tinyc.run(d, feeds)
    for name, want in gold.items():
        assert ys[name].dtype == want.dtype and ys[name].shape == want.shape, name
        np.testing.assert_array_equal(ys[name], want, err_msg=name)
    return ys


def _qdq_model(x: np.ndarray, si: float, zi: int, so: float, zo: int, op: str, opset: int = 19,
               **attrs: Any) -> onnx.ModelProto:
    """x (int) -> DequantizeLinear -> float `op` -> QuantizeLinear -> y, as onnxruntime would run a QDQ graph."""
    dt = x.dtype
    inits = [numpy_helper.from_array(np.array(si, np.float32), "si"), numpy_helper.from_array(np.array(zi, dt), "zi"),
             numpy_helper.from_array(np.array(so, np.float32), "so"), numpy_helper.from_array(np.array(zo, dt), "zo")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "si", "zi"], ["xf"]),
             helper.make_node(op, ["xf"], ["yf"], **attrs),
             helper.make_node("QuantizeLinear", ["yf", "so", "zo"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", _et(dt), list(x.shape))],
                          [helper.make_tensor_value_info("y", _et(dt), _dims(x))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def _int_model(x: np.ndarray, op: str, opset: int = 19, **attrs: Any) -> onnx.ModelProto:
    """One node on an integer tensor (MaxPool runs int8/uint8 natively)."""
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "int",
                          [helper.make_tensor_value_info("x", _et(x.dtype), list(x.shape))],
                          [helper.make_tensor_value_info("y", _et(x.dtype), _dims(x))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def _ms_model(x: np.ndarray, op: str, si: float, zi: int, so: float, zo: int, **attrs: Any) -> onnx.ModelProto:
    dt = x.dtype
    inits = [numpy_helper.from_array(np.array(si, np.float32), "si"), numpy_helper.from_array(np.array(zi, dt), "zi"),
             numpy_helper.from_array(np.array(so, np.float32), "so"), numpy_helper.from_array(np.array(zo, dt), "zo")]
    node = helper.make_node(op, ["x", "si", "zi", "so", "zo"], ["y"], name=f"my_{op}", domain="com.microsoft", **attrs)
    g = helper.make_graph([node], "ms", [helper.make_tensor_value_info("x", _et(dt), list(x.shape))],
                          [helper.make_tensor_value_info("y", _et(dt), _dims(x))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def _nhwc_to_nchw(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, -1, 1))


# -- pooling ---------------------------------------------------------------------------------
@st.composite
def pool_cases(draw: Any) -> dict[str, Any]:
    n_sp = draw(st.sampled_from([1, 2]))
    is_global = draw(st.booleans()) and draw(st.booleans())  # ~1 in 4
    size, k, s, dl, pb, pe = [], [], [], [], [], []
    for _ in range(n_sp):
        size.append(draw(st.integers(1, 9)))
        if is_global:
            k.append(size[-1]), s.append(1), dl.append(1), pb.append(0), pe.append(0)
            continue
        k.append(draw(st.integers(1, 4)))
        s.append(draw(st.integers(1, 3)))
        dl.append(draw(st.sampled_from([1, 1, 2])))
        pb.append(draw(st.integers(0, k[-1] - 1)))
        pe.append(draw(st.integers(0, k[-1] - 1)))
        assume((k[-1] - 1) * dl[-1] + 1 <= size[-1] + pb[-1] + pe[-1])
    attrs = dict(kernel=k, strides=s, pads=pb + pe, dilations=dl, layout="NHWC", is_global=is_global,
                 ceil_mode=int(not is_global and draw(st.booleans())),
                 count_include_pad=int(not is_global and draw(st.booleans())))
    shape = (draw(st.integers(1, 2)), *size, draw(st.integers(1, 40)))
    si = draw(st.floats(0.005, 0.2))
    ratio = draw(st.sampled_from([1.0, 0.5, 0.9, 1.7, 4.0]))
    return dict(attrs=attrs, shape=shape, si=si, zi=draw(st.integers(-128, 127)), so=si * ratio,
                zo=draw(st.integers(-20, 20)), seed=draw(st.integers(0, 2**31)))


@settings(max_examples=14, **HYP)
@given(case=pool_cases())
def test_avg_and_max_pool_bit_exact_and_vs_ort(case: dict[str, Any]) -> None:
    """One graph per example: QAvgPool and int8 MaxPool ("Pool") on the same input and windows."""
    a, shape = case["attrs"], case["shape"]
    g = _graph(shape, case["si"], case["zi"])
    si, zi, so, zo = case["si"], case["zi"], case["so"], case["zo"]
    _add(g, lambda: build_qavgpool(g, "avg", "x", "ya", dict(a, kind="avg"), source="avg"), "ya", so, zo)
    _add(g, lambda: build_qmaxpool(g, "max", "x", "ym", dict(a, kind="max"), source="max"), "ym", si, zi)
    x = _rand(np.random.default_rng(case["seed"]), shape)
    ys = _c_vs_golden(g, {"x": x})

    xc = _nhwc_to_nchw(x)
    if a["is_global"]:
        kw: dict[str, Any] = {}
        avg_op, max_op = "GlobalAveragePool", "GlobalMaxPool"
    else:
        kw = dict(kernel_shape=a["kernel"], strides=a["strides"], pads=a["pads"], dilations=a["dilations"],
                  ceil_mode=a["ceil_mode"])
        avg_op, max_op = "AveragePool", "MaxPool"
    ref_a = ort_run(_qdq_model(xc, case["si"], case["zi"], case["so"], case["zo"], avg_op,
                               **(dict(kw, count_include_pad=a["count_include_pad"]) if kw else {})), {"x": xc})[0]
    _record("AveragePool (QDQ)", _nhwc_to_nchw(ys["ya"]), ref_a)
    if not a["is_global"]:  # onnxruntime runs MaxPool on int8 directly: must be exact
        np.testing.assert_array_equal(_nhwc_to_nchw(ys["ym"]), ort_run(_int_model(xc, max_op, **kw), {"x": xc})[0])


def test_maxpool_uint8_onnx_import_and_global() -> None:
    """ONNX MaxPool on uint8/int8 imports as "Pool" (opset 12+); GlobalMaxPool too (via the builder)."""
    rng = np.random.default_rng(1)
    x = _rand(rng, (1, 3, 7, 6), np.uint8)
    m = _int_model(x, "MaxPool", opset=13, kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1])
    graph = tinyc.load(m)
    assert [n.op for n in graph.nodes if n.op == "Pool"] == ["Pool"]
    with tempfile.TemporaryDirectory() as d:
        tinyc.compile(graph, d, build=True, cflags=STRICT)
        y = tinyc.run(d, {"x": x})["y"]
    np.testing.assert_array_equal(y, ort_run(m, {"x": x})[0])

    gq = _graph((2, 3, 4, 5), 0.1, 4)
    _add(gq, lambda: build_qmaxpool(gq, "gmax", "x", "y", dict(kind="max", kernel=[3, 4], strides=[1, 1],
                                                                 pads=[0] * 4, dilations=[1, 1], ceil_mode=0,
                                                                 count_include_pad=0, layout="NHWC",
                                                                 is_global=True)), "y", 0.1, 4)
    x8 = _rand(rng, (2, 3, 4, 5))
    y8 = _c_vs_golden(gq, {"x": x8})["y"]
    np.testing.assert_array_equal(y8.reshape(2, 5), x8.reshape(2, 12, 5).max(axis=1))


# -- softmax ---------------------------------------------------------------------------------
@st.composite
def softmax_cases(draw: Any) -> dict[str, Any]:
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    axis = draw(st.integers(-rank, rank - 1))
    if draw(st.booleans()):  # long rows now and then (int32 / int64 sums, tiles with a tail)
        shape = shape[:axis % rank] + (draw(st.sampled_from([37, 300, 700])),) + shape[axis % rank + 1:]
        assume(int(np.prod(shape)) <= 6000)
    so, zo = draw(st.sampled_from([(1 / 256, -128), (1 / 256, -128), (1 / 255, -128), (0.004, -100), (0.01, 0)]))
    return dict(shape=shape, axis=axis, si=draw(st.floats(0.01, 0.3)), zi=draw(st.integers(-128, 127)),
                so=so, zo=zo, seed=draw(st.integers(0, 2**31)), spread=draw(st.sampled_from([2, 10, 40, 128])))


@settings(max_examples=14, **HYP)
@given(case=softmax_cases())
def test_softmax_bit_exact_and_vs_ort(case: dict[str, Any]) -> None:
    shape, axis = case["shape"], case["axis"]
    g = _graph(shape, case["si"], case["zi"])
    _add(g, lambda: build_qsoftmax(g, "sm", "x", "y", axis, source="sm"), "y", case["so"], case["zo"])
    rng = np.random.default_rng(case["seed"])  # narrow spreads give flat, non-trivial distributions
    x = np.clip(rng.integers(-case["spread"], case["spread"], shape) + rng.integers(-100, 100), -128, 127)
    x = x.astype(np.int8)
    y = _c_vs_golden(g, {"x": x})["y"]
    ref = ort_run(_qdq_model(x, case["si"], case["zi"], case["so"], case["zo"], "Softmax", opset=13, axis=axis),
                  {"x": x})[0]
    _record("Softmax (QDQ)", y, ref)


def test_softmax_params_ranges() -> None:
    """Table and constants stay in the ranges the overflow argument needs; tiny output scales are refused."""
    for n in (1, 10, 512, 513, 5000, 10**6):
        for so in (1 / 256, 1e-4, 1.0, 1e3):
            p = softmax_params(0.1, so, n)
            B, S, K = p["B"], p["S"], p["K"]
            assert p["table"][0] == 1 << B and p["table"].dtype == np.int32
            assert p["wide"] == (n * (1 << B) > 2**31 - 1)
            assert K < 2**62 and S >= B + 6
            assert n * (1 << B) < 2**61 and K + (1 << (B - 1)) + (1 << (S - 1)) < 2**63
    with pytest.raises(ValueError, match="too small"):
        softmax_params(0.1, 1e-12, 10)


# -- layout: NCHW attrs + the layout pass, permute -------------------------------------------
def test_nchw_pool_then_softmax_through_layout_pass() -> None:
    """NCHW QAvgPool/MaxPool become NHWC in the layout pass; the transpose after them is pushed
    through QSoftmax (permute remaps its axis); the result still equals the untouched golden graph."""
    g = _graph((1, 6, 7, 5), 0.07, -9)
    attrs = dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1], ceil_mode=1,
                 count_include_pad=0, layout="NCHW", is_global=False)
    _add(g, lambda: build_qavgpool(g, "avg", "x", "a", dict(attrs, kind="avg")), "a", 0.05, 3)
    _add(g, lambda: build_qsoftmax(g, "sm", "a", "s", 1), "s", 1 / 256, -128)
    _add(g, lambda: build_qmaxpool(g, "max", "x", "m", dict(attrs, kind="max")), "m", 0.07, -9)
    g.outputs.remove("a"), g.output_names.remove("a")
    golden = g.copy()
    run_passes(g)
    assert {n.op: n.attrs.get("layout") for n in g.nodes if n.op in ("QAvgPool", "Pool")} == \
        {"QAvgPool": "NHWC", "Pool": "NHWC"}
    assert next(n for n in g.nodes if n.op == "QSoftmax").attrs["axes"] == [3]
    x = _rand(np.random.default_rng(3), (1, 6, 7, 5))
    _c_vs_golden(g, {"x": x}, golden_graph=golden)


# -- com.microsoft QLinear* --------------------------------------------------------------------
MS_CASES = [
    ("QLinearAveragePool", (1, 5, 9, 8), np.int8, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("QLinearAveragePool", (2, 3, 7, 6), np.uint8, dict(kernel_shape=[2, 3], pads=[1, 0, 1, 2], count_include_pad=1,
                                                        channels_last=0)),
    ("QLinearAveragePool", (1, 6, 5, 33), np.int8, dict(kernel_shape=[3, 2], strides=[1, 2], auto_pad="SAME_UPPER",
                                                        channels_last=1)),
    ("QLinearAveragePool", (2, 4, 11), np.int8, dict(kernel_shape=[4], strides=[3], ceil_mode=1)),
    ("QLinearGlobalAveragePool", (2, 40, 5, 4), np.int8, dict(channels_last=0)),
    ("QLinearGlobalAveragePool", (1, 3, 4, 70), np.uint8, dict(channels_last=1)),
    ("QLinearSoftmax", (3, 10), np.int8, dict(axis=-1, opset=13)),
    ("QLinearSoftmax", (2, 4, 3, 5), np.int8, dict(axis=1, opset=13)),
    ("QLinearSoftmax", (2, 4, 3, 5), np.int8, dict(axis=2, opset=12)),
    ("QLinearSoftmax", (4, 1000), np.uint8, dict(axis=-1, opset=13)),
]


def test_ms_qlinear_ops_vs_ort() -> None:
    """com.microsoft QLinear* (int8, and uint8 through exact QRequantize shifts) == golden, ~ onnxruntime."""
    rng = np.random.default_rng(7)
    for k, (op, shape, dt, attrs) in enumerate(MS_CASES):
        u8 = dt == np.uint8
        so, zo = ((1 / 256, 0 if u8 else -128) if op == "QLinearSoftmax" else (0.03, 124 if u8 else -4))
        m = _ms_model(_rand(rng, shape, dt), op, 0.06, 133 if u8 else 5, so, zo, **attrs)
        graph = tinyc.load(m)
        assert any(n.op in ("QAvgPool", "QSoftmax") for n in graph.nodes)
        assert u8 == any(n.op == "QRequantize" for n in graph.nodes)
        x = _rand(rng, shape, dt)
        golden = tinyc.reference.run_graph(graph, {"x": x})
        with tempfile.TemporaryDirectory() as d:
            tinyc.compile(graph, d, build=True, cflags=STRICT)
            y = tinyc.run(d, {"x": x})["y"]
        np.testing.assert_array_equal(y, next(iter(golden.values())), err_msg=f"case {k}")
        _record(f"{op} (com.microsoft)", y, ort_run(m, {"x": x})[0])


def test_sanitized(tmp_path: Path) -> None:
    """ASan + UBSan, strict C99: windowed QAvgPool (count table), global QAvgPool, int8 MaxPool,
    QSoftmax with contiguous rows and with column tiles (int32 and int64 sums)."""
    g = _graph((2, 7, 6, 35), 0.04, 11)
    win = dict(kernel=[3, 2], strides=[2, 2], pads=[1, 1, 2, 1], dilations=[2, 1], ceil_mode=1,
               count_include_pad=0, layout="NHWC", is_global=False)
    _add(g, lambda: build_qavgpool(g, "avg", "x", "a", dict(win, kind="avg")), "a", 0.03, -7)
    _add(g, lambda: build_qavgpool(g, "gap", "x", "ga", dict(win, kind="avg", kernel=[7, 6], strides=[1, 1],
                                                               pads=[0] * 4, dilations=[1, 1], ceil_mode=0,
                                                               is_global=True)), "ga", 0.01, 2)
    _add(g, lambda: build_qmaxpool(g, "max", "x", "m", dict(win, kind="max")), "m", 0.04, 11)
    _add(g, lambda: build_qsoftmax(g, "sm_rows", "x", "s1", -1), "s1", 1 / 256, -128)
    _add(g, lambda: build_qsoftmax(g, "sm_cols", "x", "s2", 1), "s2", 1 / 256, -128)
    add_qtensor(g, "x2", (1, 600, 3), 0.1, 0)
    g.inputs.append("x2")
    _add(g, lambda: build_qsoftmax(g, "sm_wide", "x2", "s3", 1), "s3", 0.004, -100)
    assert g.nodes[-1].attrs["wide"]
    rng = np.random.default_rng(5)
    feeds = {"x": _rand(rng, (2, 7, 6, 35)), "x2": _rand(rng, (1, 600, 3))}
    gold = tinyc.reference.run_graph(g, feeds)
    got = sanitized_run(g, feeds, tmp_path)
    for name in g.outputs:
        np.testing.assert_array_equal(got[name], gold[name], err_msg=name)


# -- errors ----------------------------------------------------------------------------------
def test_bad_inputs() -> None:
    rng = np.random.default_rng(0)
    x = _rand(rng, (1, 2, 4, 4))
    # a runtime (non-constant) scale
    m = _ms_model(x, "QLinearAveragePool", 0.1, 0, 0.1, 0, kernel_shape=[2, 2])
    m.graph.input.append(helper.make_tensor_value_info("so_rt", TensorProto.FLOAT, []))
    m.graph.node[0].input[3] = "so_rt"
    with pytest.raises(UnsupportedError, match="my_QLinearAveragePool.*must be a constant"):
        tinyc.load(m)
    # a bad axis, a 3D pool, a float input, a missing opset
    with pytest.raises(UnsupportedError, match="my_QLinearSoftmax.*axis 4 out of range"):
        tinyc.load(_ms_model(x, "QLinearSoftmax", 0.1, 0, 1 / 256, -128, axis=4, opset=13))
    with pytest.raises(UnsupportedError, match="my_QLinearGlobalAveragePool.*1D and 2D"):
        tinyc.load(_ms_model(_rand(rng, (1, 2, 2, 2, 2)), "QLinearGlobalAveragePool", 0.1, 0, 0.1, 0))
    mf = _ms_model(x, "QLinearSoftmax", 0.1, 0, 1 / 256, -128, axis=-1, opset=13)
    mf.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT
    with pytest.raises(UnsupportedError, match="my_QLinearSoftmax.*float32 \\(int8/uint8 only\\)"):
        tinyc.load(mf)
    mo = _ms_model(x, "QLinearSoftmax", 0.1, 0, 1 / 256, -128, axis=-1)
    with pytest.raises(UnsupportedError, match="my_QLinearSoftmax.*'opset'"):
        tinyc.load(mo)
    # ONNX AveragePool on int8 breaks the op's type constraint (onnxruntime refuses it too)
    node = helper.make_node("AveragePool", ["x"], ["y"], name="ap", kernel_shape=[2, 2])
    ga = helper.make_graph([node], "ap", [helper.make_tensor_value_info("x", TensorProto.INT8, x.shape)],
                           [helper.make_tensor_value_info("y", TensorProto.INT8, _dims(x))])
    with pytest.raises(ModelLoadError, match="'ap'.*int8.*type T does not allow"):
        tinyc.load(helper.make_model(ga, opset_imports=[helper.make_opsetid("", 17)]))
    # builders: MaxPool with differing quantization, a softmax whose output scale is far too small
    g = _graph((1, 4, 4, 2), 0.1, 0)
    add_qtensor(g, "y", (1, 2, 2, 2), 0.2, 0)
    mp = dict(kind="max", kernel=[2, 2], strides=[2, 2], pads=[0] * 4, dilations=[1, 1], ceil_mode=0,
              count_include_pad=0, layout="NHWC", is_global=False)
    with pytest.raises(UnsupportedError, match="'mp_src'.*differ"):
        build_qmaxpool(g, "mp", "x", "y", mp, source="mp_src")
    add_qtensor(g, "s", (1, 4, 4, 2), 1e-13, 0)
    with pytest.raises(UnsupportedError, match="'sm'.*too small"):
        build_qsoftmax(g, "sm", "x", "s", -1)
    with pytest.raises(UnsupportedError, match="'sm'.*out of range"):
        build_qsoftmax(g, "sm", "x", "s", 4)


def test_zz_report_agreement() -> None:
    """Prints how often onnxruntime is 1 LSB off (run with -s); the tests above assert <= 1."""
    for op, (off, total) in sorted(STATS.items()):
        print(f"{op}: {off} of {total} outputs 1 LSB off onnxruntime")
