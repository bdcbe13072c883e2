"""tests/tflite_models.py builds .tflite flatbuffers that TFLite Micro's interpreter runs and the `tflite` package
parses back as given: an int8 per-channel CONV_2D equals a numpy model of TFLite's integer arithmetic bit for bit
(so scales, zero points and quantized_dimension are written right); a dozen more operators run with the right
shapes (and values where a numpy reference is cheap); CUSTOM ops and every model field round-trip; the int8
UNIDIRECTIONAL_SEQUENCE_LSTM and SVDF run in TFLM and match float references."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("tflite_micro")

import tflite
from tflite_models import Op, T, build, single_op, tflm_available, tflm_run

# ---------------------------------------------------------------------------------------------------------------
# numpy model of TFLite's integer requantization (reference_ops / quantization_util, double rounding)


def quantize_multiplier(m: float) -> tuple[int, int]:
    """TFLite QuantizeMultiplier: m = q * 2^shift with q a Q31 fixed-point value, rounded half away from zero."""
    if m == 0.0:
        return 0, 0
    frac, shift = math.frexp(m)
    q = math.floor(abs(frac) * (1 << 31) + 0.5) * (1 if frac >= 0 else -1)
    if q == 1 << 31:
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q, shift


def saturating_rounding_doubling_high_mul(a: np.ndarray, b: int) -> np.ndarray:
    ab = a.astype(np.int64) * np.int64(b)
    nudged = ab + np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    return np.where(nudged >= 0, nudged >> 31, -((-nudged) >> 31))  # C++ '/' truncates toward zero


def rounding_divide_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    mask = np.int64((1 << exponent) - 1)
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + ((x & mask) > threshold)


def multiply_by_quantized_multiplier(acc: np.ndarray, m: int, shift: int) -> np.ndarray:
    left, right = max(shift, 0), max(-shift, 0)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(acc * (1 << left), m), right)


def requantize(
    acc: np.ndarray,
    in_scale: float,
    w_scales: np.ndarray,
    out_scale: float,
    out_zp: int,
    act_min: int = -128,
    act_max: int = 127,
) -> np.ndarray:
    """int64 accumulators [..., C] -> int8 with one multiplier per channel, computed in double as TFLM does."""
    out = np.empty(acc.shape, np.int64)
    for c, ws in enumerate(np.broadcast_to(w_scales, acc.shape[-1:])):
        eff = float(np.float32(in_scale)) * float(np.float32(ws)) / float(np.float32(out_scale))
        out[..., c] = multiply_by_quantized_multiplier(acc[..., c], *quantize_multiplier(eff))
    return np.clip(out + out_zp, act_min, act_max).astype(np.int8)


def same_padding(size: int, k: int, stride: int) -> tuple[int, int]:
    """TFLite SAME: output ceil(size/stride); the smaller half of the total padding goes before."""
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    return out, total // 2


def conv_acc(
    x: np.ndarray, x_zp: int, w: np.ndarray, bias: np.ndarray, stride: int, depth_multiplier: int = 0
) -> np.ndarray:
    """int64 accumulators of an NHWC conv, SAME padding (padded taps contribute 0 = input zero point).

    w is [OC, KH, KW, IC] for a conv; for a depthwise conv (depth_multiplier > 0) it is [1, KH, KW, C*mult].
    """
    n, h, wd, c = x.shape
    kh, kw = w.shape[1:3]
    oh, ph = same_padding(h, kh, stride)
    ow, pw = same_padding(wd, kw, stride)
    xp = np.zeros((n, h + kh, wd + kw, c), np.int64)
    xp[:, ph : ph + h, pw : pw + wd] = x.astype(np.int64) - x_zp
    w64 = w.astype(np.int64)
    oc = w.shape[0] if not depth_multiplier else w.shape[3]
    acc = np.zeros((n, oh, ow, oc), np.int64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride : i * stride + kh, j * stride : j * stride + kw]  # [N, KH, KW, C]
            if depth_multiplier:
                acc[:, i, j] = (np.repeat(patch, depth_multiplier, axis=3) * w64[0]).sum(axis=(1, 2))
            else:
                acc[:, i, j] = np.einsum("nhwc,ohwc->no", patch, w64)
    return acc + bias.astype(np.int64)


def float_conv_same(x: np.ndarray, w: np.ndarray, bias: np.ndarray, stride: int) -> np.ndarray:
    n, h, wd, c = x.shape
    oc, kh, kw, _ = w.shape
    oh, ph = same_padding(h, kh, stride)
    ow, pw = same_padding(wd, kw, stride)
    xp = np.zeros((n, h + kh, wd + kw, c), np.float64)
    xp[:, ph : ph + h, pw : pw + wd] = x
    out = np.zeros((n, oh, ow, oc))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, i, j] = np.einsum("nhwc,ohwc->no", patch, w)
    return out + bias


def rand_int8(r: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return r.integers(-128, 128, shape).astype(np.int8)


def dequant(q: np.ndarray, scale: float, zp: int) -> np.ndarray:
    return (q.astype(np.float64) - zp) * scale


def quant(v: np.ndarray, scale: float, zp: int) -> np.ndarray:
    return np.clip(np.round(v / scale) + zp, -128, 127).astype(np.int8)


def values(t: T) -> np.ndarray:
    """A constant tensor's data as float64 (for the float references)."""
    assert t.data is not None
    return np.asarray(t.data, np.float64)


def test_tflm_is_available() -> None:
    assert tflm_available()


# ---------------------------------------------------------------------------------------------------------------
# 1. per-channel int8 conv, bit exact


def test_int8_conv2d_per_channel_bit_exact() -> None:
    r = np.random.default_rng(0)
    oc, k, ic = 4, 3, 3
    s_in, x_zp, s_out, y_zp = 0.05, -3, 0.12, 7
    s_w = r.uniform(0.002, 0.02, oc).astype(np.float32)
    w = r.integers(-127, 128, (oc, k, k, ic)).astype(np.int8)
    bias = r.integers(-2000, 2000, oc).astype(np.int32)
    x = T("x", (2, 9, 9, ic), scale=s_in, zero_point=x_zp)
    wt = T("w", w.shape, data=w, scale=s_w, zero_point=[0] * oc, quantized_dimension=0)
    bt = T("b", (oc,), "int32", data=bias, scale=s_in * s_w, zero_point=[0] * oc)
    y = T("y", (2, 5, 5, oc), scale=s_out, zero_point=y_zp)
    opts = {"padding": "SAME", "stride_w": 2, "stride_h": 2, "fused_activation_function": "RELU"}
    model = single_op("CONV_2D", [x, wt, bt], [y], opts)

    xin = rand_int8(r, x.shape)
    (got,) = tflm_run(model, [xin])
    ref = requantize(conv_acc(xin, x_zp, w, bias, 2), s_in, s_w, s_out, y_zp, act_min=y_zp)  # RELU: q >= zp
    assert got.shape == (2, 5, 5, oc) and got.dtype == np.int8
    np.testing.assert_array_equal(got, ref)
    assert (got > y_zp).any() and (got == y_zp).any()  # both sides of the RELU were exercised


# ---------------------------------------------------------------------------------------------------------------
# 2. more operators run in TFLM


def test_int8_fully_connected_bit_exact() -> None:
    r = np.random.default_rng(1)
    s_in, x_zp, s_w, s_out, y_zp = 0.04, 5, 0.01, 0.15, -2
    w = r.integers(-127, 128, (3, 5)).astype(np.int8)
    bias = r.integers(-500, 500, 3).astype(np.int32)
    x = T("x", (2, 5), scale=s_in, zero_point=x_zp)
    y = T("y", (2, 3), scale=s_out, zero_point=y_zp)
    consts = [T("w", (3, 5), data=w, scale=s_w), T("b", (3,), "int32", data=bias, scale=s_in * s_w)]
    model = single_op("FULLY_CONNECTED", [x], [y], {"fused_activation_function": "NONE"}, consts=consts)
    xin = rand_int8(r, (2, 5))
    (got,) = tflm_run(model, [xin])
    acc = (xin.astype(np.int64) - x_zp) @ w.T.astype(np.int64) + bias
    np.testing.assert_array_equal(got, requantize(acc, s_in, np.float32(s_w), s_out, y_zp))


def test_int8_add_broadcast() -> None:
    r = np.random.default_rng(2)
    a = T("a", (1, 2, 3, 4), scale=0.05, zero_point=1)
    b = T("b", (1, 1, 1, 4), scale=0.03, zero_point=-4)
    y = T("y", (1, 2, 3, 4), scale=0.08, zero_point=0)
    model = single_op("ADD", [a, b], [y], {"fused_activation_function": "NONE"})
    xa, xb = rand_int8(r, a.shape), rand_int8(r, b.shape)
    (got,) = tflm_run(model, [xa, xb])
    ref = quant(dequant(xa, 0.05, 1) + dequant(xb, 0.03, -4), 0.08, 0)
    assert got.shape == y.shape
    assert np.abs(got.astype(int) - ref).max() <= 1


def test_float32_add() -> None:
    a, b, y = T("a", (2, 3), "float32"), T("b", (3,), "float32"), T("y", (2, 3), "float32")
    xa = np.arange(6, dtype=np.float32).reshape(2, 3)
    xb = np.array([0.5, -1.0, 2.0], np.float32)
    (got,) = tflm_run(single_op("ADD", [a, b], [y], {"fused_activation_function": "NONE"}), [xa, xb])
    np.testing.assert_array_equal(got, xa + xb)


def test_reshape_const_shape_input_and_new_shape_option() -> None:
    x, y = T("x", (2, 3, 4), scale=0.1), T("y", (4, 6), scale=0.1)
    xin = rand_int8(np.random.default_rng(3), x.shape)
    shape = T("shape", (2,), "int32", data=np.array([4, 6]))
    (got,) = tflm_run(single_op("RESHAPE", [x, shape], [y], {"new_shape": [4, 6]}), [xin])
    np.testing.assert_array_equal(got, xin.reshape(4, 6))
    (got,) = tflm_run(single_op("RESHAPE", [x], [y], {"new_shape": (4, 6)}), [xin])
    np.testing.assert_array_equal(got, xin.reshape(4, 6))


def test_int8_softmax() -> None:
    x = T("x", (2, 6), scale=0.1, zero_point=3)
    y = T("y", (2, 6), scale=1 / 256, zero_point=-128)
    xin = rand_int8(np.random.default_rng(4), x.shape)
    (got,) = tflm_run(single_op("SOFTMAX", [x], [y], {"beta": 1.0}), [xin])
    v = dequant(xin, 0.1, 3)
    e = np.exp(v - v.max(axis=1, keepdims=True))
    assert got.shape == (2, 6)
    assert np.abs(got.astype(int) - quant(e / e.sum(axis=1, keepdims=True), 1 / 256, -128)).max() <= 2


def test_int8_logistic() -> None:
    x = T("x", (1, 16), scale=0.06, zero_point=-1)
    y = T("y", (1, 16), scale=1 / 256, zero_point=-128)
    xin = np.linspace(-128, 127, 16).astype(np.int8)[None]
    (got,) = tflm_run(single_op("LOGISTIC", [x], [y]), [xin])
    ref = quant(1 / (1 + np.exp(-dequant(xin, 0.06, -1))), 1 / 256, -128)
    assert got.shape == (1, 16)
    assert np.abs(got.astype(int) - ref).max() <= 1


def test_int8_depthwise_conv2d_per_channel() -> None:
    r = np.random.default_rng(5)
    c, mult, k = 2, 2, 3
    oc = c * mult
    s_in, x_zp, s_out, y_zp = 0.05, 2, 0.1, -5
    s_w = r.uniform(0.005, 0.02, oc).astype(np.float32)
    w = r.integers(-127, 128, (1, k, k, oc)).astype(np.int8)
    bias = r.integers(-1000, 1000, oc).astype(np.int32)
    x = T("x", (1, 5, 5, c), scale=s_in, zero_point=x_zp)
    wt = T("w", w.shape, data=w, scale=s_w, quantized_dimension=3)
    bt = T("b", (oc,), "int32", data=bias, scale=s_in * s_w)
    y = T("y", (1, 5, 5, oc), scale=s_out, zero_point=y_zp)
    opts = {
        "padding": "SAME",
        "stride_w": 1,
        "stride_h": 1,
        "depth_multiplier": mult,
        "fused_activation_function": "NONE",
    }
    xin = rand_int8(r, x.shape)
    (got,) = tflm_run(single_op("DEPTHWISE_CONV_2D", [x, wt, bt], [y], opts), [xin])
    ref = requantize(conv_acc(xin, x_zp, w, bias, 1, depth_multiplier=mult), s_in, s_w, s_out, y_zp)
    np.testing.assert_array_equal(got, ref)


def test_int8_average_pool() -> None:
    x, y = T("x", (1, 4, 4, 2), scale=0.1, zero_point=-1), T("y", (1, 2, 2, 2), scale=0.1, zero_point=-1)
    opts = {
        "padding": "VALID",
        "stride_w": 2,
        "stride_h": 2,
        "filter_width": 2,
        "filter_height": 2,
        "fused_activation_function": "NONE",
    }
    xin = rand_int8(np.random.default_rng(6), x.shape)
    (got,) = tflm_run(single_op("AVERAGE_POOL_2D", [x], [y], opts), [xin])
    s = xin.astype(np.int64).reshape(1, 2, 2, 2, 2, 2).sum(axis=(2, 4))  # [N, OH, OW, C]
    ref = np.where(s > 0, (s + 2) // 4, -((-s + 2) // 4))  # TFLite: round half away from zero
    np.testing.assert_array_equal(got, ref.astype(np.int8))


def test_int8_mean_keep_dims() -> None:
    x, y = T("x", (1, 4, 4, 3), scale=0.1, zero_point=2), T("y", (1, 1, 1, 3), scale=0.1, zero_point=2)
    axis = T("axis", (2,), "int32", data=np.array([1, 2]))
    xin = rand_int8(np.random.default_rng(7), x.shape)
    (got,) = tflm_run(single_op("MEAN", [x, axis], [y], {"keep_dims": True}), [xin])
    ref = np.round(xin.astype(np.float64).mean(axis=(1, 2), keepdims=True))
    assert got.shape == (1, 1, 1, 3)
    assert np.abs(got - ref).max() <= 1


def test_int8_concatenation() -> None:
    a, b = T("a", (1, 2, 3), scale=0.1), T("b", (1, 2, 2), scale=0.1)
    y = T("y", (1, 2, 5), scale=0.1)
    r = np.random.default_rng(8)
    xa, xb = rand_int8(r, a.shape), rand_int8(r, b.shape)
    model = single_op("CONCATENATION", [a, b], [y], {"axis": 2, "fused_activation_function": "NONE"})
    (got,) = tflm_run(model, [xa, xb])
    np.testing.assert_array_equal(got, np.concatenate([xa, xb], axis=2))


def test_int8_strided_slice() -> None:
    x, y = T("x", (1, 6, 5), scale=0.1), T("y", (1, 2, 3), scale=0.1)
    consts = [
        T(n, (3,), "int32", data=np.array(v))
        for n, v in (("begin", [0, 1, 0]), ("end", [1, 5, 5]), ("strides", [1, 2, 2]))
    ]
    xin = rand_int8(np.random.default_rng(9), x.shape)
    opts = {"begin_mask": 0, "end_mask": 0, "shrink_axis_mask": 0}
    (got,) = tflm_run(single_op("STRIDED_SLICE", [x], [y], opts, consts=consts), [xin])
    np.testing.assert_array_equal(got, xin[0:1, 1:5:2, 0:5:2])


def test_float32_conv2d() -> None:
    r = np.random.default_rng(10)
    w = r.standard_normal((3, 3, 3, 2)).astype(np.float32)
    bias = r.standard_normal(3).astype(np.float32)
    x, y = T("x", (1, 5, 6, 2), "float32"), T("y", (1, 3, 3, 3), "float32")
    consts = [T("w", w.shape, "float32", data=w), T("b", (3,), "float32", data=bias)]
    opts = {"padding": "SAME", "stride_w": 2, "stride_h": 2, "fused_activation_function": "NONE"}
    xin = r.standard_normal(x.shape).astype(np.float32)
    (got,) = tflm_run(single_op("CONV_2D", [x], [y], opts, consts=consts), [xin])
    np.testing.assert_allclose(got, float_conv_same(xin, w, bias, 2), rtol=1e-5, atol=1e-5)


def test_vector_option_enum_string_and_code_above_127() -> None:
    """SqueezeOptions.squeeze_dims (a vector), ArgMaxOptions.output_type (a TensorType name), BROADCAST_TO (130)."""
    x, y = T("x", (1, 3, 1, 2), "float32"), T("y", (3, 2), "float32")
    xin = np.arange(6, dtype=np.float32).reshape(x.shape)
    (got,) = tflm_run(single_op("SQUEEZE", [x], [y], {"squeeze_dims": [0, 2]}), [xin])
    np.testing.assert_array_equal(got, xin.reshape(3, 2))

    axis = T("axis", (1,), "int32", data=np.array([1]))
    idx = T("idx", (1, 1, 2), "int32")
    (got,) = tflm_run(single_op("ARG_MAX", [x, axis], [idx], {"output_type": "INT32"}), [xin])
    np.testing.assert_array_equal(got, xin.argmax(axis=1))

    shape = T("shape", (2,), "int32", data=np.array([4, 3]))
    v, out = T("v", (3,), "float32"), T("out", (4, 3), "float32")
    (got,) = tflm_run(single_op("BROADCAST_TO", [v, shape], [out]), [np.array([1, 2, 3], np.float32)])
    np.testing.assert_array_equal(got, np.broadcast_to([1, 2, 3], (4, 3)))
    code = tflite.Model.GetRootAs(single_op("BROADCAST_TO", [v, shape], [out]), 0).OperatorCodes(0)
    assert (code.BuiltinCode(), code.DeprecatedBuiltinCode()) == (130, 127)


def test_clear_errors() -> None:
    x, y = T("x", (1, 4), "float32"), T("y", (1, 4), "float32")
    with pytest.raises(ValueError, match=r"'stride'.*Conv2DOptions"):
        single_op("CONV_2D", [x], [y], {"stride": 2})
    with pytest.raises(ValueError, match=r"RELU7.*ActivationFunctionType"):
        single_op("ADD", [x, x], [y], {"fused_activation_function": "RELU7"})
    with pytest.raises(ValueError, match="LOGISTIC has no builtin options"):
        single_op("LOGISTIC", [x], [y], {"beta": 1.0})
    with pytest.raises(ValueError, match="unknown tensor 'z'"):
        build([x, y], [Op("RELU", ["z"], ["y"])], ["x"], ["y"])
    with pytest.raises(ValueError, match="duplicate tensor name"):
        build([x, T("x", (2,))], [], ["x"], ["x"])
    with pytest.raises(ValueError, match="unknown TFLite builtin operator"):
        single_op("NOT_AN_OP", [x], [y])
    with pytest.raises(ValueError, match="3 scales"):
        build([T("w", (2, 2), data=np.zeros((2, 2)), scale=[1.0, 2.0, 3.0])], [], [], [])


# ---------------------------------------------------------------------------------------------------------------
# 3. CUSTOM op, 4. round trip


def test_custom_op_parses_back() -> None:
    x, y = T("x", (1, 4), "float32"), T("y", (1, 4), "float32")
    model = single_op("CUSTOM", [x], [y], custom_code="TinycTestOp", custom_options=b"\x01\x02\x03", version=2)
    m = tflite.Model.GetRootAs(model, 0)
    code = m.OperatorCodes(0)
    assert code.CustomCode() == b"TinycTestOp"
    assert code.BuiltinCode() == tflite.BuiltinOperator.CUSTOM and code.Version() == 2
    op = m.Subgraphs(0).Operators(0)
    assert op.CustomOptionsAsNumpy().tobytes() == b"\x01\x02\x03"
    assert op.BuiltinOptionsType() == tflite.BuiltinOptions.NONE
    with pytest.raises(RuntimeError):  # TFLM has no kernel for it
        tflm_run(model, [np.zeros((1, 4), np.float32)])


def test_round_trip() -> None:
    w = np.arange(-12, 12).reshape(2, 3, 2, 2).astype(np.int8)
    tensors = [
        T("input", (1, 4, 4, 2), scale=0.5, zero_point=-3, shape_signature=(-1, 4, 4, 2)),
        T("weights", (2, 3, 2, 2), data=w, scale=[0.25, 0.125], zero_point=[0, 0], quantized_dimension=0),
        T("bias", (2,), "int32", data=np.array([100, -7])),
        T("half", (3,), "float16", data=np.array([1.5, -2.0, 0.25])),
        T("state", (1, 8), "int16", scale=2.0**-11, variable=True),
        T("output", (1, 2, 2, 2), scale=0.75, zero_point=4),
        T("plain", (2,), "float32"),
    ]
    ops = [
        Op(
            "CONV_2D",
            ["input", "weights", "bias"],
            ["output"],
            {"padding": "VALID", "stride_w": 2, "stride_h": 1, "fused_activation_function": "RELU6"},
        ),
        Op("LOGISTIC", ["plain", None], ["plain"], version=3),
    ]
    model = build(tensors, ops, ["input"], ["output"], description="round trip")
    assert model[4:8] == b"TFL3" and tflite.Model.ModelBufferHasIdentifier(model, 0)
    m = tflite.Model.GetRootAs(model, 0)
    assert m.Version() == 3 and m.Description() == b"round trip" and m.SubgraphsLength() == 1
    assert m.Buffers(0).DataLength() == 0
    sg = m.Subgraphs(0)
    assert list(sg.InputsAsNumpy()) == [0] and list(sg.OutputsAsNumpy()) == [5]

    types = {
        "int8": tflite.TensorType.INT8,
        "int16": tflite.TensorType.INT16,
        "int32": tflite.TensorType.INT32,
        "float16": tflite.TensorType.FLOAT16,
        "float32": tflite.TensorType.FLOAT32,
    }
    assert sg.TensorsLength() == len(tensors)
    buffers_seen = set()
    for i, t in enumerate(tensors):
        ft = sg.Tensors(i)
        assert ft.Name().decode() == t.name
        assert tuple(ft.ShapeAsNumpy()) == t.shape
        assert ft.Type() == types[t.dtype]
        assert ft.IsVariable() == t.variable
        if t.shape_signature is not None:
            assert tuple(ft.ShapeSignatureAsNumpy()) == t.shape_signature
        q = ft.Quantization()
        if t.scale is None:
            assert q is None
        else:
            np.testing.assert_array_equal(q.ScaleAsNumpy(), np.atleast_1d(np.asarray(t.scale, np.float32)))
            assert q.ScaleAsNumpy().dtype == np.float32 and q.ZeroPointAsNumpy().dtype == np.int64
            np.testing.assert_array_equal(
                q.ZeroPointAsNumpy(), np.atleast_1d(0 if t.zero_point is None else t.zero_point)
            )
            assert q.QuantizedDimension() == t.quantized_dimension
        buf = m.Buffers(ft.Buffer())
        if t.data is None:
            assert ft.Buffer() == 0
        else:
            assert ft.Buffer() not in buffers_seen and ft.Buffer() != 0
            buffers_seen.add(ft.Buffer())
            expected = np.asarray(t.data).astype(np.dtype(t.dtype).newbyteorder("<")).tobytes()
            assert buf.DataAsNumpy().tobytes() == expected
    assert m.Buffers(sg.Tensors(3).Buffer()).DataAsNumpy().tobytes() == np.array([1.5, -2, 0.25], "<f2").tobytes()

    assert m.OperatorCodesLength() == 2
    conv, logistic = sg.Operators(0), sg.Operators(1)
    c0, c1 = m.OperatorCodes(conv.OpcodeIndex()), m.OperatorCodes(logistic.OpcodeIndex())
    assert (c0.BuiltinCode(), c0.DeprecatedBuiltinCode(), c0.Version()) == (tflite.BuiltinOperator.CONV_2D,) * 2 + (1,)
    assert (c1.BuiltinCode(), c1.Version()) == (tflite.BuiltinOperator.LOGISTIC, 3)
    assert list(conv.InputsAsNumpy()) == [0, 1, 2] and list(conv.OutputsAsNumpy()) == [5]
    assert list(logistic.InputsAsNumpy()) == [6, -1]
    assert conv.BuiltinOptionsType() == tflite.BuiltinOptions.Conv2DOptions
    assert logistic.BuiltinOptionsType() == tflite.BuiltinOptions.NONE
    opts = tflite.Conv2DOptions()
    opts.Init(conv.BuiltinOptions().Bytes, conv.BuiltinOptions().Pos)
    assert (opts.Padding(), opts.StrideW(), opts.StrideH(), opts.FusedActivationFunction()) == (
        tflite.Padding.VALID,
        2,
        1,
        tflite.ActivationFunctionType.RELU6,
    )


def test_round_trip_vector_option_and_empty_table() -> None:
    x, y = T("x", (2, 3), "float32"), T("y", (3, 2), "float32")
    m = tflite.Model.GetRootAs(single_op("RESHAPE", [x], [y], {"new_shape": np.array([3, 2])}), 0)
    op = m.Subgraphs(0).Operators(0)
    assert op.BuiltinOptionsType() == tflite.BuiltinOptions.ReshapeOptions
    opts = tflite.ReshapeOptions()
    opts.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    assert list(opts.NewShapeAsNumpy()) == [3, 2]

    m = tflite.Model.GetRootAs(single_op("MAX_POOL_2D", [x], [y], {}), 0)
    op = m.Subgraphs(0).Operators(0)
    assert op.BuiltinOptionsType() == tflite.BuiltinOptions.Pool2DOptions and op.BuiltinOptions() is not None


# ---------------------------------------------------------------------------------------------------------------
# 5. stateful int8 operators: LSTM and SVDF (state tensors are variables, not graph inputs)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def test_int8_unidirectional_sequence_lstm() -> None:
    """TFLM's 8x8->16 LSTM: no intermediates needed (it fixes the gate scale at Q3.12), int16 cell state with a
    power-of-two scale, biases at input_scale * weight_scale; the 24-input layout with omitted peephole,
    projection and layer-norm inputs."""
    r = np.random.default_rng(11)
    batch, steps, n_in, n_cell = 2, 3, 4, 5
    s_in, s_w, s_h, s_c = 0.05, 0.01, 1 / 128, 2.0**-11
    x = T("x", (batch, steps, n_in), scale=s_in, zero_point=0)

    def weights(name: str, cols: int) -> T:
        return T(name, (n_cell, cols), data=r.integers(-100, 100, (n_cell, cols)), scale=s_w, zero_point=0)

    w_in = [weights(f"input_to_{g}", n_in) for g in ("input", "forget", "cell", "output")]
    w_rec = [weights(f"recurrent_to_{g}", n_cell) for g in ("input", "forget", "cell", "output")]
    biases = [
        T(f"{g}_bias", (n_cell,), "int32", data=r.integers(-500, 500, n_cell), scale=s_in * s_w)
        for g in ("input", "forget", "cell", "output")
    ]
    h_state = T("output_state", (batch, n_cell), scale=s_h, zero_point=0, variable=True)
    c_state = T("cell_state", (batch, n_cell), "int16", scale=s_c, zero_point=0, variable=True)
    y = T("y", (batch, steps, n_cell), scale=s_h, zero_point=0)
    inputs = [x, *w_in, *w_rec, None, None, None, *biases, None, None, h_state, c_state, None, None, None, None]
    assert len(inputs) == 24
    opts = {"fused_activation_function": "TANH", "cell_clip": 0.0, "proj_clip": 0.0, "time_major": False}
    model = single_op("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [y], opts)
    assert tflite.Model.GetRootAs(model, 0).Subgraphs(0).InputsLength() == 1

    xin = rand_int8(r, x.shape)
    (got,) = tflm_run(model, [xin])
    assert got.shape == y.shape and got.dtype == np.int8

    xf = dequant(xin, s_in, 0)
    wi = [values(t) * s_w for t in w_in]
    wr = [values(t) * s_w for t in w_rec]
    bf = [values(t) * s_in * s_w for t in biases]
    h, c, hs = np.zeros((batch, n_cell)), np.zeros((batch, n_cell)), []
    for t in range(steps):
        i, f, g, o = (xf[:, t] @ wi[k].T + h @ wr[k].T + bf[k] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        hs.append(h)
    ref = quant(np.stack(hs, axis=1), s_h, 0)
    assert np.abs(got.astype(int) - ref).max() <= 2


def test_int8_svdf() -> None:
    """One SVDF step from the zeroed int16 state: the newest state column is the int16 feature activation, the
    output sums rank products with the newest weights_time column plus bias (scale state_scale * time_scale)."""
    r = np.random.default_rng(12)
    batch, n_in, units, rank, memory = 2, 6, 4, 2, 5
    filters = units * rank
    s_in, s_wf, s_wt, s_st, s_out = 0.05, 0.01, 2.0**-10, 2.0**-8, 0.05
    x = T("x", (batch, n_in), scale=s_in, zero_point=0)
    wf = T("weights_feature", (filters, n_in), data=r.integers(-100, 100, (filters, n_in)), scale=s_wf)
    wt = T("weights_time", (filters, memory), "int16", data=r.integers(-1000, 1000, (filters, memory)), scale=s_wt)
    bias = T("bias", (units,), "int32", data=r.integers(-100, 100, units), scale=s_st * s_wt)
    state = T("activation_state", (batch, memory * filters), "int16", scale=s_st, zero_point=0, variable=True)
    y = T("y", (batch, units), scale=s_out, zero_point=0)
    model = single_op("SVDF", [x, wf, wt, bias, state], [y], {"rank": rank, "fused_activation_function": "NONE"})

    xin = rand_int8(r, x.shape)
    (got,) = tflm_run(model, [xin])
    assert got.shape == (batch, units) and got.dtype == np.int8
    feature = np.clip(np.round(dequant(xin, s_in, 0) @ (values(wf) * s_wf).T / s_st), -32768, 32767) * s_st
    out = (feature * values(wt)[:, -1] * s_wt).reshape(batch, units, rank).sum(axis=-1) + values(bias) * s_st * s_wt
    assert np.abs(got.astype(int) - quant(out, s_out, 0)).max() <= 1
