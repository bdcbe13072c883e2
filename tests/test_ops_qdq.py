"""QuantizeLinear / DequantizeLinear: compiled C and the numpy reference against onnxruntime (graph
optimisations off) and bit for bit against ``tinyc.numerics.fixed_point``; exact .5 ties, saturation,
per-tensor and per-axis (also after the channels-last layout pass), a QDQ-wrapped Conv end to end,
one MLPerf Tiny QDQ model, and clear UnsupportedErrors. Several nodes share one model per build."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinyc
import tinyc.reference
from tinyc.errors import UnsupportedError
from tinyc.numerics import fixed_point as arith

from util import MLPERF, ort_run, sanitized_run

NP2ONNX = {np.dtype(k): v for k, v in [("float32", TensorProto.FLOAT), ("int8", TensorProto.INT8),
                                       ("uint8", TensorProto.UINT8), ("int16", TensorProto.INT16),
                                       ("uint16", TensorProto.UINT16), ("int32", TensorProto.INT32)]}
n = helper.make_node


def _c(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], outputs: list[str],
           inits: list[onnx.TensorProto] = (), opset: int = 13) -> onnx.ModelProto:
    from util import inferred_model
    return inferred_model(nodes, inputs, outputs, inits, opset=opset, ir_version=8, name="qdq")


def _ties(scale: np.float32, lo: int, hi: int) -> np.ndarray:
    """x with x / scale == k + 1/2 exactly in float32 (scale a power of two), k in [lo, hi)."""
    return ((np.arange(lo, hi, dtype=np.float32) + np.float32(0.5)) * scale).astype(np.float32)


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp: Path) -> dict[str, np.ndarray]:
    """C == numpy reference == onnxruntime, exactly (integer outputs and float32 dequantization)."""
    want = dict(zip([o.name for o in model.graph.output], ort_run(model, feeds)))
    tinyc.compile(model, tmp)
    got = tinyc.run(tmp, feeds)
    ref = tinyc.reference.run_graph(tinyc.load(model), feeds)
    for k, w in want.items():
        assert got[k].dtype == w.dtype, k
        np.testing.assert_array_equal(got[k].reshape(w.shape), w, err_msg=k)
        np.testing.assert_array_equal(ref[k].reshape(w.shape), w, err_msg=f"reference {k}")
    return got


def test_quantize_per_tensor_and_axis_vs_onnxruntime(tmp_path: Path) -> None:
    r = np.random.default_rng(0)
    x = np.concatenate([_ties(np.float32(0.25), -40, 40),          # exact ties, both parities
                        r.normal(0, 20, 400).astype(np.float32),    # saturates int8 at both ends
                        np.array([1e30, -1e30, np.inf, -np.inf, 0.0, -0.0], np.float32)])
    x = np.resize(x, (2, 4, 3, 20)).astype(np.float32)
    s4 = np.array([0.25, 0.1, 0.0625, 3.0], np.float32)
    z4u = np.array([0, 128, 7, 255], np.uint8)
    z20 = r.integers(-5, 5, 20).astype(np.int8)
    s20 = r.uniform(0.01, 0.5, 20).astype(np.float32)
    inits = [_c("s", np.float32(0.25)), _c("z8", np.int8(-3)), _c("zu8", np.uint8(128)),
             _c("s_odd", np.float32(0.1)), _c("z16", np.int16(-1000)), _c("s4", s4), _c("z4u", z4u),
             _c("s20", s20), _c("z20", z20), _c("zu16", np.uint16(30000)), _c("s1", np.array([0.5], np.float32))]
    nodes = [n("QuantizeLinear", ["x", "s", "z8"], ["q_i8"]),
             n("QuantizeLinear", ["x", "s_odd", "zu8"], ["q_u8"]),
             n("QuantizeLinear", ["x", "s"], ["q_default_u8"]),             # no zero point: uint8
             n("QuantizeLinear", ["x", "s_odd", "z16"], ["q_i16"]),
             n("QuantizeLinear", ["x", "s", "zu16"], ["q_u16"]),
             n("QuantizeLinear", ["x", "s1", "z8"], ["q_one_elem"]),         # 1-element scale: per-tensor
             n("QuantizeLinear", ["x", "s4", "z4u"], ["q_axis1"]),           # default axis 1
             n("QuantizeLinear", ["x", "s20", "z20"], ["q_axis_neg"], axis=-1)]
    got = _check(_model(nodes, {"x": x}, [nd.output[0] for nd in nodes], inits, opset=21), {"x": x}, tmp_path / "q")
    # the ties really are ties, and both saturation ends are hit
    assert {-128, 127} <= set(np.unique(got["q_i8"]).tolist())
    assert np.any(x.reshape(-1)[:80] / np.float32(0.25) % 1 == 0.5)


def test_dequantize_per_tensor_and_axis_vs_onnxruntime(tmp_path: Path) -> None:
    r = np.random.default_rng(1)
    xi8 = r.integers(-128, 128, (2, 3, 5, 4)).astype(np.int8)
    xu8 = r.integers(0, 256, (2, 3, 5, 4)).astype(np.uint8)
    xi16 = r.integers(-32768, 32768, (40,)).astype(np.int16)
    xu16 = r.integers(0, 65536, (40,)).astype(np.uint16)
    xi32 = r.integers(-2 ** 31, 2 ** 31 - 1, (40,), dtype=np.int64).astype(np.int32)
    inits = [_c("s", np.float32(0.0372)), _c("z8", np.int8(-128)), _c("zu8", np.uint8(200)),
             _c("z16", np.int16(-7)), _c("zu16", np.uint16(40000)), _c("z32", np.int32(0)),
             _c("s3", np.array([0.5, 0.013, 7.25], np.float32)), _c("z3", np.array([-128, 0, 127], np.int8)),
             _c("s4", np.array([0.1, 0.2, 0.3, 0.4], np.float32)), _c("z4", np.array([0, 1, 255, 128], np.uint8))]
    nodes = [n("DequantizeLinear", ["xi8", "s", "z8"], ["d_i8"]),
             n("DequantizeLinear", ["xi8", "s"], ["d_i8_nozp"]),
             n("DequantizeLinear", ["xu8", "s", "zu8"], ["d_u8"]),
             n("DequantizeLinear", ["xi16", "s", "z16"], ["d_i16"]),
             n("DequantizeLinear", ["xu16", "s", "zu16"], ["d_u16"]),
             n("DequantizeLinear", ["xi32", "s", "z32"], ["d_i32"]),
             n("DequantizeLinear", ["xi8", "s3", "z3"], ["d_axis1"]),
             n("DequantizeLinear", ["xu8", "s4", "z4"], ["d_axis_neg"], axis=-1)]
    feeds = {"xi8": xi8, "xu8": xu8, "xi16": xi16, "xu16": xu16, "xi32": xi32}
    _check(_model(nodes, feeds, [nd.output[0] for nd in nodes], inits, opset=21), feeds, tmp_path / "dq")


def test_quantize_c_matches_arith_bit_for_bit(tmp_path: Path) -> None:
    """x / scale in float32 and rint, exactly as arith.quantize: many values straddling .5 ties with a
    scale (0.1f) whose reciprocal-multiply would round differently, plus a NaN (-> qmin) and a
    sanitizer run (no out-of-range float -> int conversion on +-inf / 1e30)."""
    r = np.random.default_rng(2)
    scale, zp = np.float32(0.1), -3
    k = r.integers(-200, 200, 30000).astype(np.float32)
    near = (k + np.float32(0.5)) * scale
    x = np.concatenate([near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf)),
                        r.normal(0, 5, 10000).astype(np.float32)]).astype(np.float32)
    # the division matters: multiplying by the reciprocal gives a different rounding somewhere here
    assert np.any(np.rint(x / scale) != np.rint(x * (np.float32(1) / scale)))
    model = _model([n("QuantizeLinear", ["x", "s", "z"], ["q"])], {"x": x}, ["q"],
                   [_c("s", scale), _c("z", np.int8(zp))])
    tinyc.compile(model, tmp_path / "bits")
    got = tinyc.run(tmp_path / "bits", {"x": x})["q"]
    np.testing.assert_array_equal(got, arith.quantize(x, scale, zp))
    edge = np.array([np.inf, -np.inf, 1e30, -1e30, 12.75, -12.85, np.nan, 0.05], np.float32)
    m2 = _model([n("QuantizeLinear", ["x", "s", "z"], ["q"]), n("DequantizeLinear", ["q", "s", "z"], ["d"])],
                {"x": edge}, ["q", "d"], [_c("s", scale), _c("z", np.int8(zp))])
    san = sanitized_run(m2, {"x": edge}, tmp_path)
    assert np.float32(0.05) / scale == 0.5  # a tie: rounds to even (0), so q == zp
    np.testing.assert_array_equal(san["q"], [127, -128, 127, -128, 125, -128, -128, zp])
    finite = ~np.isnan(edge)
    np.testing.assert_array_equal(san["q"][finite], arith.quantize(edge[finite], scale, zp))
    np.testing.assert_array_equal(san["d"], arith.dequantize(san["q"], scale, zp))


def test_qdq_conv_end_to_end(tmp_path: Path) -> None:
    """x -> Q -> DQ -> Conv(DQ(int8 per-channel weights), DQ(int32 bias)) -> Relu -> Q per-axis -> DQ
    per-axis -> Conv -> Q -> DQ, against onnxruntime with graph optimisations off. Per-axis Q/DQ on
    activations are pushed through the channels-last transposes (their axis becomes 3)."""
    r = np.random.default_rng(3)
    x = r.normal(0, 1, (1, 3, 10, 9)).astype(np.float32)
    w1 = r.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    qw1, sw1 = arith.quantize_weights_per_channel(w1)
    s_x = np.float32(0.02)
    b1 = arith.quantize_bias(r.normal(0, 0.1, 8), s_x, sw1)
    sa = r.uniform(0.01, 0.03, 8).astype(np.float32)
    w2 = r.integers(-127, 128, (4, 8, 1, 1)).astype(np.int8)
    inits = [_c("sx", s_x), _c("zx", np.int8(3)), _c("qw1", qw1), _c("sw1", sw1), _c("zw1", np.zeros(8, np.int8)),
             _c("b1", b1), _c("sb1", (s_x * sw1).astype(np.float32)), _c("zb1", np.zeros(8, np.int32)),
             _c("sa", sa), _c("za", np.full(8, -128, np.int8)), _c("qw2", w2), _c("sw2", np.float32(0.01)),
             _c("zw2", np.int8(0)), _c("so", np.float32(0.05)), _c("zo", np.int8(-10))]
    nodes = [n("QuantizeLinear", ["x", "sx", "zx"], ["xq"]), n("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             n("DequantizeLinear", ["qw1", "sw1", "zw1"], ["w1"], axis=0),
             n("DequantizeLinear", ["b1", "sb1", "zb1"], ["bias1"], axis=0),
             n("Conv", ["xd", "w1", "bias1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("QuantizeLinear", ["r1", "sa", "za"], ["aq"], axis=1),
             n("DequantizeLinear", ["aq", "sa", "za"], ["ad"], axis=1),
             n("DequantizeLinear", ["qw2", "sw2", "zw2"], ["w2"]),
             n("Conv", ["ad", "w2"], ["c2"]),
             n("QuantizeLinear", ["c2", "so", "zo"], ["yq"]), n("DequantizeLinear", ["yq", "so", "zo"], ["y"])]
    model = _model(nodes, {"x": x}, ["y"], inits)
    g = tinyc.load(model)
    qdq_axes = {nd.attrs["axis"] for nd in g.nodes if nd.op in ("QuantizeLinear", "DequantizeLinear")}
    assert qdq_axes == {None, 3}, qdq_axes  # weights folded; per-axis activations now channels-last
    assert not any(nd.op in ("DequantizeLinear",) and g.tensor(nd.inputs[0]).is_constant for nd in g.nodes)
    want = dict(zip(["y"], ort_run(model, {"x": x})))
    tinyc.compile(model, tmp_path / "conv")
    got = tinyc.run(tmp_path / "conv", {"x": x})
    # float Conv accumulation order may move a value that lies within ~1e-6 of a .5 tie by one step
    for k, step in (("y", 0.05),):
        diff = np.abs(got[k].astype(np.float64) - want[k].astype(np.float64))
        assert diff.max() <= step * 1.0001 and np.count_nonzero(diff) <= max(1, diff.size // 500), k


def test_mlperf_qdq_model(tmp_path: Path) -> None:
    """The MLPerf Tiny KWS DS-CNN QDQ model vs onnxruntime (graph optimisations off), float path
    (`quantize="none"`: Quantize/Dequantize as float ops; the int8 path is tests/test_quant_models.py)."""
    d = MLPERF / "mlperf_kws_dscnn"
    if not (d / "model_int8_qdq.onnx").exists():
        pytest.skip("MLPerf Tiny models not available")
    tinyc.compile(d / "model_int8_qdq.onnx", tmp_path / "kws", quantize="none")
    x = np.load(d / "test.npz")["x"][:40]
    want = np.load(d / "ref_int8.npz")["y"][:40]
    got = next(iter(tinyc.run(tmp_path / "kws", {"input_1": x}).values())).reshape(want.shape)
    assert np.array_equal(got.argmax(-1), want.argmax(-1))
    assert np.abs(got - want).max() <= 1 / 256 + 1e-6  # at most one output step (softmax, scale 1/256)


@pytest.mark.parametrize("op,attrs,inputs,msg", [
    # blocked quantization and int4/float8 types are supported (tests/test_onnx_dtypes.py); a 2-D scale
    # without block_size is not
    ("QuantizeLinear", {"axis": 1}, ("s23", "z23"), "blocked \\(block_size\\) only"),
    # (a plain per-tensor run-time scale has a kernel: tinyc/ops/dynamic_quantize.py)
    ("QuantizeLinear", {"output_dtype": TensorProto.INT16}, ("sx",), "must be a constant"),
    ("DequantizeLinear", {}, ("sx",), "must be a constant"),
    ("QuantizeLinear", {"axis": 1}, ("s5",), "does not match"),
])
def test_unsupported(op: str, attrs: dict, inputs: tuple[str, ...], msg: str) -> None:
    x = np.zeros((2, 4), np.float32) if op == "QuantizeLinear" else np.zeros((2, 4), np.int8)
    inits = [_c("s", np.float32(0.5)), _c("s23", np.ones((2, 2), np.float32)), _c("z23", np.zeros((2, 2), np.int8)),
             _c("s5", np.ones(5, np.float32))]
    g = helper.make_graph([n(op, ["x", *inputs], ["y"], **attrs)], "u",
                          [helper.make_tensor_value_info("x", NP2ONNX[x.dtype], x.shape),
                           helper.make_tensor_value_info("sx", TensorProto.FLOAT, [])],
                          # the output's type is left to inference: it depends on output_dtype and the zero point
                          [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, [2, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    with pytest.raises(UnsupportedError, match=msg):
        tinyc.load(m)
