"""NaN and ±Inf through the float kernels: no silently wrong numbers.

Small models, one per op family, with NaN, +Inf and -Inf in the inputs and in the weights, compiled
for the host (real gcc, the default cflags), for OpenCL (PoCL) and, for two of them, an emulated
Cortex-M board; outputs compared with onnxruntime NaN-aware (a NaN where onnxruntime has one,
infinities of the same sign), and the numpy golden model with onnxruntime too.

What onnxruntime (1.2x/1.3x CPU provider) does, and so what tinyc does:
- Relu, LeakyRelu, Elu, Selu, Celu, HardSigmoid, HardSwish, Clip, Softplus, Softsign, Sign, Max, Min
  (binary and variadic): a NaN input gives NaN. HardSwish(-Inf) and Softsign(±Inf) are NaN too
  (Inf * 0, Inf / Inf). ThresholdedRelu(NaN) = 0 (`x > alpha` is false). A NaN Clip bound is no bound.
- Conv / Gemm: IEEE sums; a padded tap adds 0 * w, so an Inf weight gives NaN on the border.
- ReduceLogSumExp/Sum/Mean, Softmax, LogSoftmax: a NaN (Softmax also a +Inf) in a row makes it NaN.
- ArgMax/ArgMin: a running best from the first element, so NaNs are skipped unless first (ONNX's
  reference, np.argmax, returns the first NaN; tinyc follows onnxruntime). Hardmax: the same
  index, but a row starting with NaN is all zeros (onnxruntime).
- ReduceMax/ReduceMin, MaxPool, GlobalMaxPool: onnxruntime keeps a NaN or drops it depending on
  where it falls in its (vectorised) loop: a leading NaN of a short ReduceMax row propagates, one
  further on is dropped; MLAS pooling folds `m = maxps(m, x)`, keeping a NaN only in some taps, and
  pads with -FLT_MAX (an all -Inf padded window gives -FLT_MAX). No rule to follow there, so tinyc
  propagates a NaN from anywhere (np.max, ONNX's reference for ReduceMax; the golden model agrees)
  and pads with -Inf. The onnxruntime comparisons use inputs where its result does not depend on
  the order (±Inf anywhere, NaN first in a reduced row, NaN-only pooling windows from a Conv);
  NaN elsewhere is checked against numpy and the golden model.
- ScatterElements max/min: onnxruntime keeps a NaN update but lets an update replace a NaN in the
  data; tinyc propagates both (np.maximum), checked against numpy and the golden model.
"""
from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import tinyc
import tinyc.reference
from util import REPO, compile_ir, inferred_model, opencl_or_skip, ort_run

NAN, INF = np.float32(np.nan), np.float32(np.inf)
M0176 = REPO.parent / "shared" / "reliability" / "m0176.onnx"


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _special(shape, seed: int = 0, k: int | None = None) -> np.ndarray:
    """Normal values with NaN, +Inf and -Inf at a few random places (k of each)."""
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    k = k or max(1, flat.size // 12)
    pos = r.permutation(flat.size)[:3 * k]
    flat[pos[:k]], flat[pos[k:2 * k]], flat[pos[2 * k:]] = NAN, INF, -INF
    return x


ROW = np.array([0.5, NAN, INF, -INF, -1.5, 0.0, 3.0, -7.0], np.float32)


# -- the models: name -> (model, feeds) -----------------------------------------------------
def m_activations():
    x = np.concatenate([ROW, np.linspace(-8, 8, 8, dtype=np.float32)])
    ops = [("Relu", {}), ("LeakyRelu", {"alpha": 0.1}), ("Elu", {}), ("Selu", {}), ("Celu", {}),
           ("HardSigmoid", {}), ("HardSwish", {}), ("ThresholdedRelu", {}), ("Softplus", {}), ("Softsign", {}),
           ("Sign", {}), ("Sigmoid", {}), ("Tanh", {}), ("Abs", {}), ("Neg", {})]
    nodes = [helper.make_node(op, ["x"], [f"y_{op}"], **a) for op, a in ops]
    inits = [_const("lo", np.float32(0)), _const("hi", np.float32(6)), _const("nan", NAN)]
    nodes += [helper.make_node("Clip", ["x", "lo", "hi"], ["y_relu6"]),
              helper.make_node("Clip", ["x", "nan", "hi"], ["y_clip_nanlo"]),
              helper.make_node("Clip", ["x", "lo", "nan"], ["y_clip_nanhi"])]
    outs = [n.output[0] for n in nodes]
    return inferred_model(nodes, {"x": x}, outs, inits), {"x": x}


def m_max_min():
    a = np.array([NAN, 1, NAN, INF, -INF, 1, 2, -3, NAN, 0], np.float32)
    b = np.array([1, NAN, NAN, 1, 1, INF, -INF, 5, -INF, INF], np.float32)
    w = np.array([0, 0, 1, NAN, INF, -INF, NAN, 0, 2, -1], np.float32)   # a weight with NaN and Inf
    nodes = [helper.make_node("Max", ["a", "b"], ["max2"]), helper.make_node("Min", ["a", "b"], ["min2"]),
             helper.make_node("Max", ["b", "a"], ["max2r"]), helper.make_node("Min", ["b", "a"], ["min2r"]),
             helper.make_node("Max", ["a", "b", "w"], ["max3"]), helper.make_node("Min", ["w", "a", "b"], ["min3"]),
             helper.make_node("Max", ["a", "w"], ["maxw"])]
    return inferred_model(nodes, {"a": a, "b": b}, [n.output[0] for n in nodes], [_const("w", w)]), {"a": a, "b": b}


def m_conv_nan_weight_relu_maxpool():
    """As m0176: one NaN weight makes its output channel NaN everywhere (padded taps add 0 * NaN);
    an Inf weight gives Inf inside and NaN on the border (0 * Inf); Relu and MaxPool keep both.
    The Inf weights sit on the bottom-right tap, so the NaN border is the bottom row and the right
    column: the last taps of the pooling windows there (see the module doc)."""
    r = np.random.default_rng(1)
    w = r.standard_normal((4, 2, 3, 3)).astype(np.float32)
    w[1, 0, 1, 2] = NAN
    w[2, 1, 2, 2] = INF
    w[3, 0, 2, 2] = -INF
    x = r.random((1, 2, 6, 6), dtype=np.float32) + 0.5   # positive: no 0 * Inf inside
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    return inferred_model(nodes, {"x": x}, ["y", "r"], [_const("w", w), _const("b", np.zeros(4, np.float32))]), {"x": x}


def m_depthwise_clip():
    """Depthwise Conv + Clip(0, 6) (fused as an activation) with NaN and Inf in weights and input."""
    r = np.random.default_rng(2)
    w = r.standard_normal((3, 1, 3, 3)).astype(np.float32)
    w[0, 0, 0, 1] = INF
    w[2, 0, 1, 1] = NAN
    x = r.random((1, 3, 5, 5), dtype=np.float32) + 0.5
    x[0, 1, 2, 2] = NAN
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], group=3),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    return inferred_model(nodes, {"x": x}, ["y"], [_const("w", w), _const("lo", np.float32(0)),
                                                    _const("hi", np.float32(6))]), {"x": x}


def m_gemm_relu():
    """Gemm + Relu (fused) with Inf/NaN in B and the bias, and in the input rows."""
    x = np.array([[1, 0, 2, 1], [0, 0, 0, 0], [1, 2, 3, 4], [NAN, 1, 1, 1], [INF, 1, 1, 1], [-INF, 0, 1, 1]],
                 np.float32)
    B = np.array([[INF, 1, 1, -1], [1, 1, 1, 1], [1, -INF, 1, 1], [1, 1, NAN, 1]], np.float32).T.copy()
    c = np.array([0, 1, -INF, 0], np.float32)
    nodes = [helper.make_node("Gemm", ["x", "B", "c"], ["g"], transB=1), helper.make_node("Relu", ["g"], ["y"]),
             helper.make_node("MatMul", ["x", "B"], ["mm"]), helper.make_node("LeakyRelu", ["mm"], ["y2"])]
    return inferred_model(nodes, {"x": x}, ["y", "y2"], [_const("B", B), _const("c", c)]), {"x": x}


def m_gemm_inf_alpha():
    """Gemm with alpha = inf and a constant B holding zeros: alpha * (A @ B) is ±inf (NaN only
    where A @ B is 0), never inf * 0 per weight (found by the fuzz campaign: alpha was folded
    into B, so every zero weight made a NaN)."""
    x = np.array([[1, 2, 3, 4], [0, 0, 0, 0], [-1, 0.5, 2, 1]], np.float32)
    B = np.array([[1, 0, 2], [0, 0, -1], [3, 0, 0], [0, 1, 0]], np.float32)
    nodes = [helper.make_node("Gemm", ["x", "B"], ["y"], alpha=float("inf"))]
    return inferred_model(nodes, {"x": x}, ["y"], [_const("B", B)]), {"x": x}


def m_pools():
    """Max pools with ±Inf (order does not matter for them; NaN: test_nan_anywhere_propagates),
    average pools with NaN and ±Inf."""
    x = np.random.default_rng(3).standard_normal((1, 3, 6, 6)).astype(np.float32)
    x[0, 0, 4, 2] = INF
    x[0, 1, 0, 0] = -INF
    x[0, 2, 2:4, 2:4] = -INF     # a window of -Inf only
    xa = _special((1, 3, 6, 6), seed=5, k=2)
    nodes = [helper.make_node("MaxPool", ["x"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxPool", ["x"], ["mp3"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalMaxPool", ["x"], ["gmp"]),
             helper.make_node("AveragePool", ["xa"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["xa"], ["gap"])]
    return inferred_model(nodes, {"x": x, "xa": xa}, [n.output[0] for n in nodes]), {"x": x, "xa": xa}


ROWS = np.array([[NAN, 1, 2, 3], [1, NAN, 3, 2], [1, 2, 3, NAN], [INF, 1, 2, 3], [-INF, 1, 2, 3],
                 [-INF, -INF, -INF, -INF], [INF, INF, 1, 2], [NAN, INF, -INF, 0], [1, 3, 3, 0],
                 [-INF, -INF, 0, -INF], [2, -INF, 2, NAN]], np.float32)


def m_reduce():
    """Rows reduced along axis 1 (contiguous) and, transposed, along axis 0 (the kernels' strided
    path). ReduceMax/Min see a NaN only first in its row (see the module doc)."""
    first = ~np.isnan(ROWS).any(axis=1) | np.isnan(ROWS[:, 0])
    feeds = {"x": ROWS, "xt": np.ascontiguousarray(ROWS.T), "f": ROWS[first], "ft": np.ascontiguousarray(ROWS[first].T)}
    ax1, ax0 = _const("ax1", np.array([1], np.int64)), _const("ax0", np.array([0], np.int64))
    nodes = []
    for op in ("ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceSum", "ReduceMean"):
        a, b = ("f", "ft") if op in ("ReduceMax", "ReduceMin") else ("x", "xt")
        nodes += [helper.make_node(op, [a, "ax1"], [f"{op}_1"], keepdims=0),
                  helper.make_node(op, [b, "ax0"], [f"{op}_0"], keepdims=0)]
    return inferred_model(nodes, feeds, [n.output[0] for n in nodes], [ax1, ax0]), feeds


def m_argmax():
    x, xt = ROWS, np.ascontiguousarray(ROWS.T)
    nodes = []
    for op in ("ArgMax", "ArgMin"):
        for last in (0, 1):
            nodes += [helper.make_node(op, ["x"], [f"{op}{last}_1"], axis=1, keepdims=0, select_last_index=last),
                      helper.make_node(op, ["xt"], [f"{op}{last}_0"], axis=0, keepdims=0, select_last_index=last)]
    return inferred_model(nodes, {"x": x, "xt": xt}, [n.output[0] for n in nodes]), {"x": x, "xt": xt}


def m_softmax():
    x, xt = ROWS, np.ascontiguousarray(ROWS.T)
    nodes = []
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        nodes += [helper.make_node(op, ["x"], [f"{op}_1"], axis=1), helper.make_node(op, ["xt"], [f"{op}_0"], axis=0)]
    return inferred_model(nodes, {"x": x, "xt": xt}, [n.output[0] for n in nodes]), {"x": x, "xt": xt}


def m_scatter_nan_update():
    d = np.array([1, 2, 3, 4, 5], np.float32)
    u = np.array([NAN, 1, 5, NAN, -INF], np.float32)
    idx = _const("i", np.array([0, 1, 2, 2, 4], np.int64))
    nodes = [helper.make_node("ScatterElements", ["d", "i", "u"], ["smax"], reduction="max"),
             helper.make_node("ScatterElements", ["d", "i", "u"], ["smin"], reduction="min")]
    return inferred_model(nodes, {"d": d, "u": u}, ["smax", "smin"], [idx]), {"d": d, "u": u}


MODELS = {f.__name__[2:]: f for f in (m_activations, m_max_min, m_conv_nan_weight_relu_maxpool, m_depthwise_clip,
                                       m_gemm_relu, m_gemm_inf_alpha, m_pools, m_reduce, m_argmax, m_softmax,
                                       m_scatter_nan_update)}


# -- comparison -----------------------------------------------------------------------------
def assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """NaN where `want` has NaN, infinities of the same sign, the rest within float tolerance."""
    got = np.asarray(got).reshape(np.shape(want))
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions\n{got}\n{want}")
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want), err_msg=f"{what}: +Inf positions")
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg=f"{what}: -Inf positions")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=what)


def _golden(graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    ref = tinyc.reference.run_graph(graph, feeds)
    if not isinstance(ref, dict):
        ref = dict(zip([p for p, _ in graph.public_outputs()], ref))
    return {pub: ref[pub] if pub in ref else ref[internal] for pub, internal in graph.public_outputs()}


def _ort(model: onnx.ModelProto, feeds) -> dict[str, np.ndarray]:
    return dict(zip([o.name for o in model.graph.output], ort_run(model, feeds)))


@pytest.fixture(scope="module")
def host_builds(tmp_path_factory):
    """Each model compiled once for the host (lazily), shared by the tests below."""
    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            model, feeds = MODELS[name]()
            out = tmp_path_factory.mktemp(name) / "p"
            res = tinyc.compile(model, out, build=True)
            cache[name] = (model, feeds, out, res.graph)
        return cache[name]
    return get


@pytest.mark.parametrize("name", sorted(MODELS))
def test_host_matches_onnxruntime(host_builds, name):
    model, feeds, out, _ = host_builds(name)
    want = _ort(model, feeds)
    got = tinyc.run(out, feeds)
    for k, v in want.items():
        assert_same(got[k], v, f"{name}/{k}")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_golden_model_matches_onnxruntime(host_builds, name):
    model, feeds, _, graph = host_builds(name)
    want, ref = _ort(model, feeds), _golden(graph, feeds)
    for k, v in want.items():
        assert_same(ref[k], v, f"golden {name}/{k}")


def test_nan_anywhere_propagates(tmp_path):
    """Where onnxruntime's NaN handling depends on the NaN's position (see the module doc): any NaN
    a max/min reduction, a max pool window or a scatter max/min meets gives NaN, in the C and in
    the golden model; a padded max pool window of -Inf gives -Inf (onnxruntime: -FLT_MAX)."""
    x = np.random.default_rng(4).standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 0, 0, 0] = NAN             # first tap of window (0, 0), in four windows of the 3x3/1 pool
    x[0, 1, 2, 3] = NAN
    x[0, 1, 5, :] = -INF
    x[0, 1, 4, :2] = -INF
    rows = _special((5, 40), seed=6, k=3)
    d = np.array([NAN, 2, NAN, 4, 1], np.float32)
    u = np.array([1, NAN, -INF, 0, NAN], np.float32)
    nodes = [helper.make_node("MaxPool", ["x"], ["mp2"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxPool", ["x"], ["mp3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalMaxPool", ["x"], ["gmp"]),
             helper.make_node("ReduceMax", ["rows", "ax1"], ["rmax1"], keepdims=0),
             helper.make_node("ReduceMin", ["rows", "ax0"], ["rmin0"], keepdims=0),
             helper.make_node("ScatterElements", ["d", "i", "u"], ["smax"], reduction="max"),
             helper.make_node("ScatterElements", ["d", "i", "u"], ["smin"], reduction="min")]
    inits = [_const("ax1", np.array([1], np.int64)), _const("ax0", np.array([0], np.int64)),
             _const("i", np.array([0, 1, 2, 3, 3], np.int64))]
    feeds = {"x": x, "rows": rows, "d": d, "u": u}
    model = inferred_model(nodes, feeds, [n.output[0] for n in nodes], inits)
    res = tinyc.compile(model, tmp_path / "p", build=True)
    got, ref = tinyc.run(tmp_path / "p", feeds), _golden(res.graph, feeds)
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
    want = {"mp2": x.reshape(1, 2, 3, 2, 3, 2).max(axis=(3, 5)),
            "mp3": np.stack([np.stack([xp[:, :, i:i + 3, j:j + 3].max(axis=(2, 3)) for j in range(6)], -1)
                             for i in range(6)], -2),
            "gmp": x.max(axis=(2, 3), keepdims=True),
            "rmax1": rows.max(axis=1), "rmin0": rows.min(axis=0),
            "smax": np.array([NAN, NAN, NAN, NAN, 1], np.float32), "smin": np.array([NAN, NAN, NAN, NAN, 1], np.float32)}
    assert np.isnan(want["mp3"][0, 0, :2, :2]).all() and np.isnan(want["gmp"]).all()
    assert np.isneginf(want["mp3"][0, 1, 5, 0]) and np.isnan(want["rmax1"]).sum() >= 2
    for k, v in want.items():
        assert_same(got[k], v, k)
        assert_same(ref[k], v, f"golden {k}")


def test_reproducer_m0176(tmp_path):
    """The campaign's reproducer: one NaN in a conv weight; onnxruntime's logits are NaN."""
    if not M0176.is_file():
        pytest.skip("shared/reliability/ is not beside the checkout")
    x = np.random.default_rng(0).random((3, 1, 8, 8), dtype=np.float32)
    tinyc.compile(M0176, tmp_path / "p", build=True)
    got = tinyc.run(tmp_path / "p", {"input": x})
    (name,) = got
    want = np.concatenate([ort_run(str(M0176), {"input": xi[None]})[0] for xi in x])
    assert np.isnan(want).any()
    assert_same(got[name], want, "m0176")


# -- OpenCL ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MODELS))
def test_opencl_matches_onnxruntime(tmp_path, name):
    opencl_or_skip()
    model, feeds = MODELS[name]()
    tinyc.compile(model, tmp_path / "cl", target="opencl")
    got = tinyc.run(tmp_path / "cl", feeds)
    for k, v in _ort(model, feeds).items():
        assert_same(got[k], v, f"opencl {name}/{k}")


# -- an emulated board ----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None,
                    reason="needs qemu-system-arm and arm-none-eabi-gcc")
def test_board_matches_onnxruntime(tmp_path):
    """Cortex-M4F (hardware FPU) under QEMU: the activations and the Conv + Relu + MaxPool model."""
    for name in ("activations", "conv_nan_weight_relu_maxpool"):
        model, feeds = MODELS[name]()
        out = tmp_path / name
        tinyc.compile(model, out, board="mps2-an386", build=True)
        got = tinyc.run(out, feeds)
        for k, v in _ort(model, feeds).items():
            assert_same(got[k], v, f"mps2-an386 {name}/{k}")
        # validate compares NaN-aware: NaN outputs equal to the golden model's are agreement
        report = tinyc.validate(out, feeds)
        assert all(o["golden_ok"] for o in report["outputs"].values()), report


@pytest.mark.parametrize("name", ["conv_nan_weight_relu_maxpool", "depthwise_clip"])
def test_conv_schedules_keep_nan_and_inf(tmp_path, name):
    """Single-pixel tiles skip padded taps one by one (not through the zero row): with non-finite
    weights they still add 0 * w, as onnxruntime, in every loop order."""
    from tinyc.ops import get_op
    knobs = {"ow_tile": 1, "oc_tile": 1, "loop_order": "channels_outer"}
    model, feeds = MODELS[name]()
    graph = tinyc.load(model)
    convs = [n for n in graph.nodes if n.op == "Conv"]
    assert convs
    for n in convs:
        assert set(knobs) <= set(get_op("Conv").knobs(n, graph)), get_op("Conv").knobs(n, graph)
    compile_ir(graph, tmp_path / "p", {n.name: knobs for n in convs})
    got = tinyc.run(tmp_path / "p", feeds)
    for k, v in _ort(model, feeds).items():
        assert_same(got[k], v, f"{name} {knobs}/{k}")
