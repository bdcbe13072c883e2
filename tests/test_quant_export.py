"""tinyc.quantize.export.export_qdq: float model + calibrated ranges -> QDQ ONNX model.

Checked against onnxruntime: the exported model passes onnx.checker and runs on onnxruntime close
to the float model, and its Q/DQ structure (quantized tensors, int8 weights, int32 biases, scales,
zero points) equals what onnxruntime.quantization.quantize_static(QDQ, QInt8, QInt8,
per_channel=True) writes for the same model and calibration samples, up to the documented
differences (module docstring of tinyc/quantize/export.py).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from util import MLPERF, make_model, ort_run, rng

from tinyc.quantize.export import export_qdq

# -- helpers ----------------------------------------------------------------------------------


def calib_ranges(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]]) -> dict[str, tuple[float, float]]:
    """min/max of every float graph input and node output over `samples` (onnxruntime, all
    intermediate values exposed as outputs)."""
    m = onnx.shape_inference.infer_shapes(model)
    have = {o.name for o in m.graph.output}
    floats = {v.name for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)
              if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    inits = {i.name for i in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in inits]
    for n in m.graph.node:
        for o in n.output:
            if o and o in floats and n.op_type != "Constant":
                names.append(o)
                if o not in have:
                    m.graph.output.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, None))
    out_names = [o.name for o in m.graph.output]
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for s in samples:
        env = dict(zip(out_names, ort_run(m, s)))
        env.update(s)
        for k in names:
            v = env[k]
            lo[k] = min(lo.get(k, np.inf), float(v.min()))
            hi[k] = max(hi.get(k, -np.inf), float(v.max()))
    return {k: (lo[k], hi[k]) for k in names}


def ort_quantize(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]], tmp_path) -> onnx.ModelProto:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / "ort_qdq.onnx"
    quantize_static(model, str(out), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, per_channel=True, calibrate_method=CalibrationMethod.MinMax)
    return onnx.load(str(out))


def _strip(name: str, suffix: str) -> str:
    return name.removesuffix(suffix)


def qdq_structure(m: onnx.ModelProto) -> tuple[dict, dict]:
    """(activations {tensor: (scale, zp)}, constants {name: (q, scale, zp, axis)}) of a QDQ model."""
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    acts, consts = {}, {}
    for n in m.graph.node:
        axis = next((helper.get_attribute_value(a) for a in n.attribute if a.name == "axis"), None)
        if n.op_type == "QuantizeLinear":
            t = _strip(n.input[0], "_QuantizeLinear_Input")
            acts[t] = (inits[n.input[1]], inits[n.input[2]])
        elif n.op_type == "DequantizeLinear" and n.input[0] in inits:
            consts[_strip(n.input[0], "_quantized")] = (inits[n.input[0]], inits[n.input[1]], inits[n.input[2]], axis)
    return acts, consts


def assert_scales_close(a: np.ndarray, b: np.ndarray, what: str) -> None:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    assert a.shape == b.shape and a.dtype == b.dtype, what
    ulp = np.spacing(np.maximum(np.abs(a), np.abs(b)))
    assert np.all(np.abs(a - b) <= ulp), f"{what}: {a} vs {b}"


def compare_with_ort(ours: onnx.ModelProto, ort: onnx.ModelProto, only_ours: set[str] = frozenset(),
                     only_ort: set[str] = frozenset()) -> None:
    a_ours, c_ours = qdq_structure(ours)
    a_ort, c_ort = qdq_structure(ort)
    assert set(a_ours) - set(a_ort) == set(only_ours)
    assert set(a_ort) - set(a_ours) == set(only_ort)
    for t in set(a_ours) & set(a_ort):
        (s1, z1), (s2, z2) = a_ours[t], a_ort[t]
        assert_scales_close(s1, s2, f"scale of {t}")
        assert z1.dtype == z2.dtype == np.int8
        # a 1-ulp scale difference may move the zero point by one (documented)
        assert abs(int(z1) - int(z2)) <= (0 if s1 == s2 else 1), f"zero point of {t}: {z1} vs {z2}"
    assert set(c_ours) == set(c_ort)
    for name in c_ours:
        (q1, s1, z1, ax1), (q2, s2, z2, ax2) = c_ours[name], c_ort[name]
        assert q1.dtype == q2.dtype and q1.shape == q2.shape, name
        assert ax1 == ax2, name
        assert_scales_close(s1, s2, f"scale of {name}")
        assert np.array_equal(z1, z2) and z1.dtype == z2.dtype, name
        if q1.dtype == np.int32:  # bias: float32 vs float64 division (documented): 1, or 2 float32 ulps
            tol = np.maximum(1, 2 * np.spacing(np.abs(q2).astype(np.float32)).astype(np.int64))
            assert np.all(np.abs(q1.astype(np.int64) - q2.astype(np.int64)) <= tol), name
        else:
            assert np.array_equal(q1, q2), name


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


def init(shape, scale=0.5, seed=0, positive=False):
    v = rng(seed).normal(0, scale, shape).astype(np.float32)
    return np.abs(v) + 0.1 if positive else v


# -- models -----------------------------------------------------------------------------------

def chain_model() -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> (Relu, Add) -> Mul(const) -> Add(const) -> MaxPool -> Flatten -> Gemm -> Relu."""
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], "conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], "relu1"),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], "conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], "relu2"),
        helper.make_node("Add", ["r2", "c2"], ["s"], "add1"),
        helper.make_node("Mul", ["s", "K"], ["mu"], "mul"),
        helper.make_node("Add", ["mu", "D"], ["a"], "add2"),
        helper.make_node("MaxPool", ["a"], ["p"], "pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], "flat"),
        helper.make_node("Gemm", ["f", "Wg", "Bg"], ["g"], "gemm", transB=1),
        helper.make_node("Relu", ["g"], ["y"], "relu_out"),
    ]
    inits = {"W1": init((8, 3, 3, 3), seed=1), "B1": init((8,), 0.1, seed=2),
             "W2": init((8, 8, 3, 3), 0.2, seed=3), "B2": init((8,), 0.1, seed=4),
             "K": init((1, 8, 1, 1), seed=5, positive=True), "D": init((1, 8, 1, 1), 0.3, seed=6),
             "Wg": init((10, 128), 0.1, seed=7), "Bg": init((10,), 0.2, seed=8)}
    return make_model(nodes, [("x", [1, 3, 8, 8])], [("y", [1, 10])], inits, opset=13, name="chain")


def depthwise_model() -> onnx.ModelProto:
    """Depthwise Conv -> Clip(0, 6) -> pointwise Conv (no bias) as the graph output."""
    nodes = [
        helper.make_node("Conv", ["x", "Wd", "Bd"], ["d"], "dw", group=4, pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["d", "lo", "hi"], ["d6"], "relu6"),
        helper.make_node("Conv", ["d6", "Wp"], ["y"], "pw"),
    ]
    inits = {"Wd": init((4, 1, 3, 3), seed=11), "Bd": init((4,), 0.2, seed=12),
             "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32), "Wp": init((6, 4, 1, 1), seed=13)}
    return make_model(nodes, [("x", [1, 4, 10, 10])], [("y", [1, 6, 10, 10])], inits, opset=13, name="dw")


def matmul_model() -> onnx.ModelProto:
    """MatMul with constant B -> Add(constant bias) -> Softmax."""
    nodes = [helper.make_node("MatMul", ["x", "B"], ["mm"], "mm"),
             helper.make_node("Add", ["mm", "bias"], ["z"], "add"),
             helper.make_node("Softmax", ["z"], ["y"], "softmax", axis=-1)]
    inits = {"B": init((16, 12), 0.3, seed=21), "bias": init((12,), 0.2, seed=22)}
    return make_model(nodes, [("x", [2, 16])], [("y", [2, 12])], inits, opset=17, name="mm")


def concat_model() -> onnx.ModelProto:
    """Two Conv+Relu branches of one input concatenated with a constant, then a 1x1 Conv."""
    nodes = [
        helper.make_node("Conv", ["x", "Wa", "Ba"], ["ca"], "conva", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["ca"], ["ra"], "relua"),
        helper.make_node("Conv", ["x", "Wb", "Bb"], ["cb"], "convb"),
        helper.make_node("Relu", ["cb"], ["rb"], "relub"),
        helper.make_node("Concat", ["ra", "rb", "C"], ["cat"], "cat", axis=1),
        helper.make_node("Conv", ["cat", "Wo", "Bo"], ["y"], "convo"),
    ]
    inits = {"Wa": init((4, 2, 3, 3), seed=31), "Ba": init((4,), 0.1, seed=32),
             "Wb": init((4, 2, 1, 1), seed=33), "Bb": init((4,), 0.1, seed=34),
             "C": init((1, 2, 6, 6), 0.7, seed=35), "Wo": init((5, 10, 1, 1), 0.3, seed=36), "Bo": init((5,), 0.1, seed=37)}
    return make_model(nodes, [("x", [1, 2, 6, 6])], [("y", [1, 5, 6, 6])], inits, opset=13, name="cat")


def convtranspose_model(group: int = 1) -> onnx.ModelProto:
    nodes = [helper.make_node("ConvTranspose", ["x", "W", "B"], ["y"], "deconv", strides=[2, 2], group=group)]
    inits = {"W": init((4, 6 // group, 3, 3), 0.3, seed=41), "B": init((6,), 0.2, seed=42)}
    return make_model(nodes, [("x", [1, 4, 5, 5])], [("y", [1, 6, 11, 11])], inits, opset=13, name="deconv")


def dead_channel_model() -> onnx.ModelProto:
    """A Conv channel with ~0 weights but a real bias (BatchNorm folding leaves such channels): the
    int32 bias b / (s_x * s_w) would overflow unless the weight scale is enlarged."""
    w = init((3, 2, 3, 3), 0.3, seed=81)
    w[1] *= 1e-30
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y"], "conv", pads=[1, 1, 1, 1])]
    return make_model(nodes, [("x", [1, 2, 5, 5])], [("y", [1, 3, 5, 5])],
                      {"W": w, "B": np.array([0.1, 0.5, -0.2], np.float32)}, opset=13, name="dead")


MODELS = {"chain": chain_model, "dead_channel": dead_channel_model, "depthwise": depthwise_model, "matmul": matmul_model, "concat": concat_model,
          "convtranspose": convtranspose_model}


def samples_for(model: onnx.ModelProto, n: int, seed: int) -> list[dict[str, np.ndarray]]:
    r = rng(seed)
    out = []
    for _ in range(n):
        feeds = {}
        for i in model.graph.input:
            shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
            feeds[i.name] = r.normal(0, 1, shape).astype(np.float32)
        out.append(feeds)
    return out


# -- tests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MODELS))
def test_export_runs_close_to_float(name: str) -> None:
    model = MODELS[name]()
    calib = samples_for(model, 16, seed=1)
    q = export_qdq(model, calib_ranges(model, calib))
    onnx.checker.check_model(q, full_check=True)
    assert max(o.version for o in q.opset_import if o.domain in ("", "ai.onnx")) >= 13
    assert [o.name for o in q.graph.output] == [o.name for o in model.graph.output]
    assert all(o.type.tensor_type.elem_type == TensorProto.FLOAT for o in q.graph.output)
    for feeds in samples_for(model, 4, seed=2):
        y = ort_run(model, feeds)
        yq = ort_run(q, feeds)
        for a, b in zip(yq, y):
            assert a.dtype == np.float32 and a.shape == b.shape
            assert rel_err(a, b) < 0.05, (name, rel_err(a, b))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_structure_matches_onnxruntime_quantizer(name: str, tmp_path) -> None:
    model = MODELS[name]()
    calib = samples_for(model, 16, seed=1)
    ours = export_qdq(model, calib_ranges(model, calib))
    ort = ort_quantize(model, calib, tmp_path)
    compare_with_ort(ours, ort)


def test_chain_graph_shape() -> None:
    model = chain_model()
    q = export_qdq(model, calib_ranges(model, samples_for(model, 8, seed=3)))
    acts, consts = qdq_structure(q)
    # activations: the input, after each activation, c2 (two consumers), and every op output
    assert set(acts) == {"x", "r1", "c2", "r2", "s", "mu", "a", "p", "f", "y"}
    # Relu/Clip are kept; nothing between conv1 and relu1 nor between the Gemm and the output Relu
    assert ops(q).count("Relu") == 3
    prod = {o: n for n in q.graph.node for o in n.output}
    relu1 = next(n for n in q.graph.node if n.name == "relu1")
    assert prod[relu1.input[0]].op_type == "Conv"
    relu_out = next(n for n in q.graph.node if n.name == "relu_out")
    assert prod[relu_out.input[0]].op_type == "Gemm"
    assert relu_out.output[0] == "y_QuantizeLinear_Input"           # graph output renamed as onnxruntime does
    assert prod["y"].op_type == "DequantizeLinear"
    # data-movement outputs share their input's initializers
    q_nodes = {n.input[0]: n for n in q.graph.node if n.op_type == "QuantizeLinear"}
    assert q_nodes["p"].input[1:] == q_nodes["a"].input[1:] == q_nodes["f"].input[1:] == ["a_scale", "a_zero_point"]
    # weights: int8 symmetric per channel in [-127, 127]; biases int32 with scale s_x * s_w
    for w, axis, c in (("W1", 0, 8), ("W2", 0, 8), ("Wg", 0, 10)):
        qw, s, z, ax = consts[w]
        assert qw.dtype == np.int8 and qw.min() >= -127 and ax == axis and s.shape == (c,) and not z.any()
        assert np.max(np.abs(qw)) == 127
    for b, w, x in (("B1", "W1", "x"), ("B2", "W2", "r1"), ("Bg", "Wg", "f")):
        qb, s, z, ax = consts[b]
        assert qb.dtype == np.int32 and ax == 0 and z.dtype == np.int32 and not z.any()
        np.testing.assert_array_equal(s, acts[x][0] * consts[w][1])
    # Mul's scale and Add's constant: int8 per tensor, asymmetric
    for c in ("K", "D"):
        qc, s, z, ax = consts[c]
        assert qc.dtype == np.int8 and s.shape == () and z.dtype == np.int8 and ax is None
    assert not {i.name for i in q.graph.initializer} & {"W1", "B1", "W2", "B2", "K", "D", "Wg", "Bg"}


def test_keep_float_and_missing_ranges() -> None:
    model = chain_model()
    ranges = calib_ranges(model, samples_for(model, 8, seed=3))
    del ranges["s"]
    q = export_qdq(model, ranges, keep_float={"r1", "W2", "K"})
    onnx.checker.check_model(q)
    acts, consts = qdq_structure(q)
    assert "r1" not in acts and "s" not in acts and "mu" in acts
    assert {"W2", "B2", "K"}.isdisjoint(consts) and {"W1", "B1", "D", "Wg", "Bg"} <= set(consts)
    conv2 = next(n for n in q.graph.node if n.name == "conv2")
    assert list(conv2.input) == ["r1", "W2", "B2"]                # all float
    feeds = samples_for(model, 1, seed=4)[0]
    assert rel_err(ort_run(q, feeds)[0], ort_run(model, feeds)[0]) < 0.05


def test_per_tensor_weights() -> None:
    model = chain_model()
    q = export_qdq(model, calib_ranges(model, samples_for(model, 8, seed=3)), per_channel=False)
    onnx.checker.check_model(q)
    _, consts = qdq_structure(q)
    for w in ("W1", "W2", "Wg", "B1", "B2", "Bg"):
        assert consts[w][1].shape == () and consts[w][3] is None
    feeds = samples_for(model, 1, seed=4)[0]
    assert rel_err(ort_run(q, feeds)[0], ort_run(model, feeds)[0]) < 0.1     # one scale per tensor: coarser


def test_grouped_convtranspose_and_gemm_beta() -> None:
    model = convtranspose_model(group=2)
    calib = samples_for(model, 8, seed=5)
    q = export_qdq(model, calib_ranges(model, calib))
    onnx.checker.check_model(q)
    _, consts = qdq_structure(q)
    assert consts["W"][1].shape == (3,) and consts["W"][3] == 1 and consts["B"][1].shape == (6,)
    for feeds in calib[:2]:
        assert rel_err(ort_run(q, feeds)[0], ort_run(model, feeds)[0]) < 0.05

    nodes = [helper.make_node("Gemm", ["x", "W", "C"], ["y"], alpha=1.0, beta=0.5)]
    gemm = make_model(nodes, [("x", [3, 8])], [("y", [3, 5])],
                      {"W": init((8, 5), seed=51), "C": init((1, 5), seed=52)}, opset=13)
    calib = samples_for(gemm, 8, seed=6)
    q = export_qdq(gemm, calib_ranges(gemm, calib))
    onnx.checker.check_model(q)
    _, consts = qdq_structure(q)
    assert consts["W"][3] == 1 and consts["C"][0].shape == (5,)
    g = next(n for n in q.graph.node if n.op_type == "Gemm")
    assert helper.get_attribute_value(next(a for a in g.attribute if a.name == "beta")) == 1.0
    for feeds in calib[:2]:
        assert rel_err(ort_run(q, feeds)[0], ort_run(gemm, feeds)[0]) < 0.05


def test_old_opset_is_converted() -> None:
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, [("x", [1, 2, 5, 5])], [("y", [1, 3, 5, 5])],
                       {"W": init((3, 2, 3, 3), seed=61), "B": init((3,), seed=62)}, opset=11)
    calib = samples_for(model, 4, seed=7)
    q = export_qdq(model, calib_ranges(model, calib))
    onnx.checker.check_model(q)
    assert next(o.version for o in q.opset_import if o.domain in ("", "ai.onnx")) == 13
    assert model.opset_import[0].version == 11                      # the input is not modified
    assert rel_err(ort_run(q, calib[0])[0], ort_run(model, calib[0])[0]) < 0.05


def test_bad_range_is_a_usage_error() -> None:
    from tinyc.errors import UsageError
    model = matmul_model()
    with pytest.raises(UsageError, match="'x'"):
        export_qdq(model, {"x": (1.0, -1.0)})
    with pytest.raises(UsageError, match="'x'"):
        export_qdq(model, {"x": (0.0, float("nan"))})


KWS = MLPERF / "mlperf_kws_dscnn"


@pytest.mark.skipif(not (KWS / "model.onnx").exists(), reason="MLPerf Tiny models not available")
def test_kws_dscnn(tmp_path) -> None:
    model = onnx.load(str(KWS / "model.onnx"))
    name = model.graph.input[0].name
    with np.load(KWS / "inputs.npz") as z:
        calib = [{name: x[None]} for x in z["x"].astype(np.float32)]
    with np.load(KWS / "test.npz") as z:
        test_x = z["x"].astype(np.float32)
    with np.load(KWS / "ref.npz") as z:
        ref = z["y"]
    ours = export_qdq(model, calib_ranges(model, calib))
    onnx.checker.check_model(ours)
    top1 = np.array([np.argmax(ort_run(ours, {name: x[None]})[0]) for x in test_x])
    agree = float(np.mean(top1 == np.argmax(ref, axis=1)))
    assert agree >= 0.97, agree
    # onnxruntime leaves input_1 float: its only consumer is a Reshape (documented difference)
    ort = ort_quantize(model, calib, tmp_path)
    compare_with_ort(ours, ort, only_ours={name})
    # the extra pair on input_1 uses the Reshape output's grid, so the two models compute the same
    for x in test_x[:20]:
        np.testing.assert_allclose(ort_run(ours, {name: x[None]})[0], ort_run(ort, {name: x[None]})[0], atol=1e-6)


def test_constant_nodes_shared_weights_and_consumed_graph_output() -> None:
    """Weights from Constant nodes, one weight and one bias shared by two Convs with different
    input scales, a graph output that other nodes also read, and Add(t, t)."""
    w = init((4, 4, 3, 3), 0.3, seed=71)
    nodes = [
        helper.make_node("Constant", [], ["Wc"], value=numpy_helper.from_array(w, "Wc")),
        helper.make_node("Constant", [], ["Kc"], value=numpy_helper.from_array(init((1, 4, 1, 1), seed=72), "Kc")),
        helper.make_node("Conv", ["x", "Wc", "B"], ["c1"], "conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["h"], "relu1"),                 # h: graph output and read below
        helper.make_node("Add", ["h", "h"], ["hh"], "twice"),
        helper.make_node("Conv", ["hh", "Wc", "B"], ["c2"], "conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c2", "Kc"], ["y"], "scale"),
    ]
    model = make_model(nodes, [("x", [1, 4, 6, 6])], [("h", [1, 4, 6, 6]), ("y", [1, 4, 6, 6])],
                       {"B": init((4,), 0.2, seed=73)}, opset=13)
    calib = samples_for(model, 8, seed=8)
    q = export_qdq(model, calib_ranges(model, calib))
    onnx.checker.check_model(q, full_check=True)
    acts, _ = qdq_structure(q)
    assert {"x", "h", "hh", "c2", "y"} == set(acts)
    assert "Constant" not in ops(q)
    dq_w = [n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == "Wc_quantized"]
    assert len(dq_w) == 1                                              # one DQ feeds both convs
    biases = [n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.input[0].startswith("B_quantized")]
    assert len(biases) == 2 and biases[0].input[1] != biases[1].input[1]   # one int32 copy per input scale
    twice = next(n for n in q.graph.node if n.name == "twice")
    assert list(twice.input) == ["h", "h"]                             # the DQ of the graph output is named h
    for feeds in calib[:2]:
        for a, b in zip(ort_run(q, feeds), ort_run(model, feeds)):
            assert rel_err(a, b) < 0.05
