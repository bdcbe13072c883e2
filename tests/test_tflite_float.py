"""float32 .tflite models through tinyc's TFLite frontend, against TFLite Micro's float kernels.

Each case builds a model with tests/tflite_models.py (no TensorFlow), runs it in TFLite Micro's interpreter and
compares tinyc's golden model (and, for at least one case per builtin, the generated host C) with it to float
tolerance. MAX_POOL_2D is also checked on int8, where it must be bit exact. The elementwise builtins' converters
live in ops_elementwise (written separately, calling ops_float.float_elementwise for float32): their cases skip
while that module is absent.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("tflite_micro")

from tests.tflite_check import check_model, random_int8  # noqa: E402
from tests.tflite_models import Op, T, build, single_op  # noqa: E402

F32 = "float32"


def _rand(rng: np.random.Generator, shape: tuple[int, ...], lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return rng.uniform(lo, hi, shape).astype(np.float32)


# -- CONV_2D / DEPTHWISE_CONV_2D ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("padding", "stride", "dilation", "act", "out_hw", "c"),
    [
        ("SAME", 1, 1, "RELU6", (7, 6), True),
        ("VALID", 2, 1, "NONE", (3, 2), False),
        ("SAME", 2, 1, "RELU", (4, 3), False),
        ("SAME", 1, 2, "NONE", (7, 6), False),
        ("VALID", 1, 2, "RELU_N1_TO_1", (3, 2), False),
    ],
)
def test_conv2d(
    padding: str, stride: int, dilation: int, act: str, out_hw: tuple[int, int], c: bool, tmp_path: Path
) -> None:
    rng = np.random.default_rng(0)
    ic, oc = 3, 4
    w = _rand(rng, (oc, 3, 3, ic), -1, 1)
    b = _rand(rng, (oc,))
    x, y = T("x", (1, 7, 6, ic), F32), T("y", (1, *out_hw, oc), F32)
    opts = {
        "padding": padding,
        "stride_h": stride,
        "stride_w": stride,
        "dilation_h_factor": dilation,
        "dilation_w_factor": dilation,
        "fused_activation_function": act,
    }
    model = single_op("CONV_2D", [x, T("w", w.shape, F32, w), T("b", (oc,), F32, b)], [y], opts)
    ref = check_model(model, [_rand(rng, x.shape, -3, 3)], tmp_path, c=c)
    if act == "RELU6":
        assert ref[0].max() == 6.0 and ref[0].min() == 0.0  # both ends of the clamp were exercised


def test_conv2d_without_bias(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    w = _rand(rng, (2, 1, 1, 3))
    x, y = T("x", (1, 4, 4, 3), F32), T("y", (1, 4, 4, 2), F32)
    opts = {"padding": "VALID", "stride_h": 1, "stride_w": 1, "fused_activation_function": "NONE"}
    check_model(single_op("CONV_2D", [x, T("w", w.shape, F32, w), None], [y], opts), [_rand(rng, x.shape)])


@pytest.mark.parametrize(
    ("padding", "stride", "act", "out_hw", "c"),
    [("SAME", 1, "RELU", (5, 5), True), ("VALID", 2, "NONE", (2, 2), False)],
)
def test_depthwise_conv2d_multiplier_2(
    padding: str, stride: int, act: str, out_hw: tuple[int, int], c: bool, tmp_path: Path
) -> None:
    rng = np.random.default_rng(2)
    ch, mult = 3, 2
    w = _rand(rng, (1, 3, 3, ch * mult), -1, 1)
    b = _rand(rng, (ch * mult,))
    x, y = T("x", (1, 5, 5, ch), F32), T("y", (1, *out_hw, ch * mult), F32)
    opts = {
        "padding": padding,
        "stride_h": stride,
        "stride_w": stride,
        "depth_multiplier": mult,
        "fused_activation_function": act,
    }
    model = single_op("DEPTHWISE_CONV_2D", [x, T("w", w.shape, F32, w), T("b", b.shape, F32, b)], [y], opts)
    check_model(model, [_rand(rng, x.shape)], tmp_path, c=c)


# -- FULLY_CONNECTED ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("in_shape", "out_shape", "bias", "keep", "act", "c"),
    [
        ((2, 5), (2, 3), True, False, "RELU", True),
        ((2, 5), (2, 3), False, False, "NONE", True),
        ((1, 2, 2, 5), (4, 3), True, False, "NONE", False),  # rows flattened from a 4-D input
        ((2, 4, 5), (2, 4, 3), True, True, "RELU6", True),  # keep_num_dims: leading dims kept
    ],
)
def test_fully_connected(
    in_shape: tuple[int, ...], out_shape: tuple[int, ...], bias: bool, keep: bool, act: str, c: bool, tmp_path: Path
) -> None:
    rng = np.random.default_rng(3)
    w = _rand(rng, (3, 5))
    x, y = T("x", in_shape, F32), T("y", out_shape, F32)
    b = T("b", (3,), F32, _rand(rng, (3,))) if bias else None
    opts = {"fused_activation_function": act, "keep_num_dims": keep}
    model = single_op("FULLY_CONNECTED", [x, T("w", (3, 5), F32, w), b], [y], opts)
    check_model(model, [_rand(rng, in_shape)], tmp_path, c=c)


# -- ADD, pooling, SOFTMAX, RESHAPE ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("b_shape", "c"), [((1, 1, 4), True), ((3, 1), False), ((2, 3, 4), False)])
def test_add_broadcast_relu(b_shape: tuple[int, ...], c: bool, tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    a, b, y = T("a", (2, 3, 4), F32), T("b", b_shape, F32), T("y", (2, 3, 4), F32)
    model = single_op("ADD", [a, b], [y], {"fused_activation_function": "RELU"})
    ref = check_model(model, [_rand(rng, a.shape), _rand(rng, b_shape)], tmp_path, c=c)
    assert (ref[0] == 0).any() and (ref[0] > 0).any()


def _pool_opts(padding: str, k: int, s: int, act: str = "NONE") -> dict[str, Any]:
    return {
        "padding": padding,
        "stride_h": s,
        "stride_w": s,
        "filter_height": k,
        "filter_width": k,
        "fused_activation_function": act,
    }


POOL_ARGS = ("padding", "k", "s", "out_hw", "act", "c")


@pytest.mark.parametrize(
    POOL_ARGS,
    [
        ("SAME", 3, 2, (3, 3), "NONE", True),
        ("SAME", 2, 1, (5, 5), "RELU", False),
        ("VALID", 2, 2, (2, 2), "NONE", False),
    ],
)
def test_average_pool(padding: str, k: int, s: int, out_hw: tuple[int, int], act: str, c: bool, tmp_path: Path) -> None:
    """SAME windows at the border cover fewer in-bounds taps: TFLite divides by those only."""
    rng = np.random.default_rng(5)
    x, y = T("x", (1, 5, 5, 2), F32), T("y", (1, *out_hw, 2), F32)
    model = single_op("AVERAGE_POOL_2D", [x], [y], _pool_opts(padding, k, s, act))
    check_model(model, [_rand(rng, x.shape)], tmp_path, c=c)


@pytest.mark.parametrize(POOL_ARGS, [("SAME", 3, 2, (3, 3), "NONE", True), ("VALID", 2, 2, (2, 2), "RELU6", False)])
def test_max_pool_float(
    padding: str, k: int, s: int, out_hw: tuple[int, int], act: str, c: bool, tmp_path: Path
) -> None:
    rng = np.random.default_rng(6)
    x, y = T("x", (1, 5, 5, 2), F32), T("y", (1, *out_hw, 2), F32)
    model = single_op("MAX_POOL_2D", [x], [y], _pool_opts(padding, k, s, act))
    check_model(model, [_rand(rng, x.shape, -8, 8)], tmp_path, c=c)


@pytest.mark.parametrize(
    POOL_ARGS,
    [
        ("SAME", 3, 2, (3, 3), "NONE", True),
        ("VALID", 2, 1, (4, 4), "RELU6", True),
        ("SAME", 2, 2, (3, 3), "RELU", False),
    ],
)
def test_max_pool_int8(
    padding: str, k: int, s: int, out_hw: tuple[int, int], act: str, c: bool, tmp_path: Path
) -> None:
    """int8 max pooling is bit exact; a fused activation is TFLite's act_range clamp on the output grid."""
    rng = np.random.default_rng(7)
    x = T("x", (1, 5, 5, 3), scale=0.05, zero_point=-10)
    y = T("y", (1, *out_hw, 3), scale=0.05, zero_point=-10)
    model = single_op("MAX_POOL_2D", [x], [y], _pool_opts(padding, k, s, act))
    ref = check_model(model, [random_int8(x.shape, rng)], tmp_path, c=c)
    if act == "RELU6":  # 6 / 0.05 - 10 = 110: the upper clamp bites, and RELU's lower one at the zero point
        assert ref[0].max() == 110 and ref[0].min() >= -10


def test_max_pool_int8_refuses_a_grid_change() -> None:
    from tinyc.errors import UnsupportedError
    from tinyc.frontend.tflite import import_tflite

    x, y = T("x", (1, 4, 4, 1), scale=0.05, zero_point=0), T("y", (1, 2, 2, 1), scale=0.1, zero_point=0)
    with pytest.raises(UnsupportedError, match="grid"):
        import_tflite(single_op("MAX_POOL_2D", [x], [y], _pool_opts("VALID", 2, 2)))


@pytest.mark.parametrize(("beta", "shape", "c"), [(0.5, (2, 7), True), (1.0, (2, 3, 5), False)])
def test_softmax(beta: float, shape: tuple[int, ...], c: bool, tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    x, y = T("x", shape, F32), T("y", shape, F32)
    check_model(single_op("SOFTMAX", [x], [y], {"beta": beta}), [_rand(rng, shape, -5, 5)], tmp_path, c=c)


def test_reshape(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    x, y = T("x", (2, 3, 4), F32), T("y", (4, 6), F32)
    shape = T("shape", (2,), "int32", data=np.array([4, 6]))
    check_model(single_op("RESHAPE", [x, shape], [y], {"new_shape": [4, 6]}), [_rand(rng, x.shape)], tmp_path, c=True)


# -- elementwise builtins (converters in ops_elementwise, float path in ops_float.float_elementwise) -------------------
_HAS_ELEMENTWISE = importlib.util.find_spec("tinyc.frontend.tflite.ops_elementwise") is not None
needs_elementwise = pytest.mark.skipif(
    not _HAS_ELEMENTWISE,
    reason="tinyc.frontend.tflite.ops_elementwise (the converters of these builtins, which delegate float32 to "
    "ops_float.float_elementwise) is not present",
)

#: binary builtins: (options, operand b's shape); operand a is [2, 3, 4]
BINARY_CASES: dict[str, tuple[dict[str, Any] | None, tuple[int, ...]]] = {
    "SUB": ({"fused_activation_function": "RELU"}, (1, 4)),
    "MUL": ({"fused_activation_function": "NONE"}, (3, 1)),
    "DIV": ({"fused_activation_function": "RELU6"}, (2, 3, 4)),
    "MAXIMUM": (None, (4,)),
    "MINIMUM": (None, (2, 1, 4)),
    "SQUARED_DIFFERENCE": ({}, (1, 3, 4)),
    "PRELU": (None, (4,)),
}
#: unary builtins: (options, input range)
UNARY_CASES: dict[str, tuple[dict[str, Any] | None, tuple[float, float]]] = {
    "LOGISTIC": (None, (-12.0, 12.0)),
    "TANH": (None, (-4.0, 4.0)),
    "RELU": (None, (-3.0, 3.0)),
    "RELU6": (None, (-3.0, 9.0)),
    "LEAKY_RELU": ({"alpha": 0.2}, (-3.0, 3.0)),
    "HARD_SWISH": (None, (-5.0, 5.0)),
    "ELU": (None, (-4.0, 4.0)),
    "EXP": (None, (-4.0, 4.0)),
    "LOG": (None, (0.01, 10.0)),
    "SQRT": (None, (0.0, 10.0)),
    "RSQRT": (None, (0.05, 10.0)),
    "ABS": (None, (-3.0, 3.0)),
    "NEG": (None, (-3.0, 3.0)),
}


@needs_elementwise
@pytest.mark.parametrize("code", sorted(BINARY_CASES))
def test_float_elementwise_binary(code: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    opts, b_shape = BINARY_CASES[code]
    a, y = T("a", (2, 3, 4), F32), T("y", (2, 3, 4), F32)
    xa = _rand(rng, a.shape, -3, 3)
    if code == "PRELU":  # the slope is a constant, broadcast over the channels
        model = single_op(code, [a, T("alpha", b_shape, F32, _rand(rng, b_shape, 0, 0.5))], [y], opts)
        check_model(model, [xa], tmp_path, c=True)
        return
    xb = _rand(rng, b_shape, 0.5, 2) * rng.choice(np.float32([-1, 1]), b_shape)  # no division by ~0
    model = single_op(code, [a, T("b", b_shape, F32)], [y], opts)
    check_model(model, [xa, xb], tmp_path, c=True)


@needs_elementwise
@pytest.mark.parametrize("code", sorted(UNARY_CASES))
def test_float_elementwise_unary(code: str) -> None:
    rng = np.random.default_rng(11)
    opts, (lo, hi) = UNARY_CASES[code]
    x, y = T("x", (3, 10), F32), T("y", (3, 10), F32)
    check_model(single_op(code, [x], [y], opts), [_rand(rng, x.shape, lo, hi)])


@needs_elementwise
def test_relu_n1_to_1_against_numpy(tmp_path: Path) -> None:
    """TFLite Micro has no RELU_N1_TO_1 kernel, so the oracle is its definition: clamp to [-1, 1]."""
    from tests.tflite_check import golden, host_c
    from tinyc.frontend.tflite import supported_builtins

    if "RELU_N1_TO_1" not in supported_builtins():
        pytest.skip("ops_elementwise does not convert RELU_N1_TO_1")
    x = _rand(np.random.default_rng(14), (3, 10), -3, 3)
    model = single_op("RELU_N1_TO_1", [T("x", x.shape, F32)], [T("y", x.shape, F32)])
    for got in (golden(model, [x]), host_c(model, [x], tmp_path)):
        np.testing.assert_array_equal(np.asarray(got[0]).reshape(x.shape), np.clip(x, -1, 1))


@needs_elementwise
def test_float_elementwise_unary_chain_host_c(tmp_path: Path) -> None:
    """Every unary builtin once in one model, so the host C of each is compiled and checked in one build."""
    rng = np.random.default_rng(12)
    shape = (3, 10)
    codes = sorted(UNARY_CASES)
    tensors = [T("x", shape, F32)] + [T(f"t{i}", shape, F32) for i in range(len(codes))]
    ops, prev = [], "x"
    for i, code in enumerate(codes):
        src = prev
        if code in ("LOG", "SQRT", "RSQRT"):  # keep the domain: act on |prev| + 0.1
            tensors += [T(f"abs{i}", shape, F32), T(f"pos{i}", shape, F32), T(f"eps{i}", (1,), F32, np.float32([0.1]))]
            add = Op("ADD", [f"abs{i}", f"eps{i}"], [f"pos{i}"], {"fused_activation_function": "NONE"})
            ops += [Op("ABS", [prev], [f"abs{i}"]), add]
            src = f"pos{i}"
        if code == "EXP":  # keep the values small
            tensors += [T(f"lim{i}", shape, F32)]
            ops.append(Op("TANH", [prev], [f"lim{i}"]))
            src = f"lim{i}"
        ops.append(Op(code, [src], [f"t{i}"], UNARY_CASES[code][0]))
        prev = f"t{i}"
    model = build(tensors, ops, ["x"], [prev])
    check_model(model, [_rand(rng, shape, -3, 3)], tmp_path, c=True)


# -- a small float MLP ---------------------------------------------------------------------------------------------
def test_float_mlp_host_c(tmp_path: Path) -> None:
    """FULLY_CONNECTED (RELU) -> FULLY_CONNECTED -> SOFTMAX compiles to host C and matches TFLite Micro."""
    rng = np.random.default_rng(13)
    w1, b1 = _rand(rng, (16, 8), -0.5, 0.5), _rand(rng, (16,), -0.5, 0.5)
    w2, b2 = _rand(rng, (4, 16), -0.5, 0.5), _rand(rng, (4,), -0.5, 0.5)
    tensors = [
        T("x", (1, 8), F32),
        T("w1", w1.shape, F32, w1),
        T("b1", b1.shape, F32, b1),
        T("h", (1, 16), F32),
        T("w2", w2.shape, F32, w2),
        T("b2", b2.shape, F32, b2),
        T("logits", (1, 4), F32),
        T("probs", (1, 4), F32),
    ]
    ops = [
        Op("FULLY_CONNECTED", ["x", "w1", "b1"], ["h"], {"fused_activation_function": "RELU"}),
        Op("FULLY_CONNECTED", ["h", "w2", "b2"], ["logits"], {"fused_activation_function": "NONE"}),
        Op("SOFTMAX", ["logits"], ["probs"], {"beta": 1.0}),
    ]
    ref = check_model(build(tensors, ops, ["x"], ["probs"]), [_rand(rng, (1, 8))], tmp_path, c=True)
    assert abs(float(ref[0].sum()) - 1.0) < 1e-5
