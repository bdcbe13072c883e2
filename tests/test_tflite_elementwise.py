"""TFLite elementwise builtins against TFLite Micro: int8 bit for bit (golden model and host C), float32 close.

Unary int8 cases feed all 256 int8 values, so the compile-time table (tinyc/numerics/tflm_unary.py) is checked
entry for entry against TFLM's kernel, on several grids (including TFLM's fixed LOGISTIC/TANH output grids).
Binary int8 cases broadcast a (256, 1) column against a (1, 256) row: every pair of int8 values at once; smaller
broadcasting shapes and fused activations check the C loops (DIV's random inputs include zero divisors).
Builtins TFLM has no int8 kernel for are refused.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("tflite_micro")

from tests.tflite_check import check_model, random_int8
from tests.tflite_models import T, single_op
from tinyc.errors import UnsupportedError

ALL = np.arange(-128, 128, dtype=np.int64).astype(np.int8).reshape(1, 2, 128)
RNG = np.random.default_rng(16)


def _float_available() -> bool:
    try:
        from tinyc.frontend.tflite.ops_float import float_elementwise  # noqa: F401
    except ImportError:
        return False
    return True


needs_float = pytest.mark.skipif(not _float_available(), reason="tinyc.frontend.tflite.ops_float is not there yet")


def sub(tmp_path, name: object):
    """A fresh folder for one host-C build of a test that builds several."""
    d = tmp_path / str(name)
    d.mkdir()
    return d


def unary(code: str, gin: tuple[float, int], gout: tuple[float, int], options: dict | None = None) -> bytes:
    return single_op(
        code,
        [T("x", ALL.shape, "int8", scale=gin[0], zero_point=gin[1])],
        [T("y", ALL.shape, "int8", scale=gout[0], zero_point=gout[1])],
        options,
    )


# -- int8 unary: all 256 inputs ------------------------------------------------------------------------------------
G_A, G_B, G_C = (0.05, -3), (0.1173, 40), (0.0123, -128)
UNARY_CASES = [
    ("LOGISTIC", G_A, (1 / 256, -128), None),
    ("LOGISTIC", G_B, (1 / 256, -128), None),
    ("LOGISTIC", (0.3, 100), (1 / 256, -128), None),
    ("TANH", G_A, (1 / 128, 0), None),
    ("TANH", G_B, (1 / 128, 0), None),
    ("TANH", (0.004, -10), (1 / 128, 0), None),
    ("RELU", G_A, (0.03, -128), None),
    ("RELU", G_B, (0.07, 10), None),
    ("RELU6", G_A, G_A, None),
    ("RELU6", (0.02, -128), (0.02, -128), None),
    ("LEAKY_RELU", G_A, (0.04, 7), {"alpha": 0.2}),
    ("LEAKY_RELU", G_B, G_B, {"alpha": 0.01}),
    ("LEAKY_RELU", G_A, (0.06, -20), {"alpha": -0.3}),
    ("LEAKY_RELU", G_B, (0.2, 0), {"alpha": 1.7}),
    ("HARD_SWISH", G_A, (0.03, -50), None),
    ("HARD_SWISH", (0.047, 12), (0.025, -90), None),
    # output multiplier below 2^-16: TFLM's int16 rounding shift then truncates its mask to -1
    ("HARD_SWISH", (0.0011409073649823905, -101), (0.6162904763949208, -111), None),
    ("ELU", G_A, (0.04, 20), None),
    ("ELU", G_B, (0.1, -60), None),
    ("ABS", G_A, G_A, None),
    ("ABS", G_B, (0.06, -128), None),
    ("RSQRT", G_C, (0.05, -128), None),
    ("RSQRT", (0.5, -128), (0.004, -128), None),
    ("QUANTIZE", G_A, (0.031, 9), None),
    ("QUANTIZE", G_B, (0.5, -100), None),
]


@pytest.mark.parametrize("code, gin, gout, options", UNARY_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(UNARY_CASES)])
def test_int8_unary(code, gin, gout, options, tmp_path):
    first = next(i for i, c in enumerate(UNARY_CASES) if c[0] == code)
    c = UNARY_CASES[first] == (code, gin, gout, options)
    check_model(unary(code, gin, gout, options), [ALL], tmp_path, c=c)


# -- int8 binary -------------------------------------------------------------------------------------------------
COL = np.arange(-128, 128, dtype=np.int64).astype(np.int8).reshape(256, 1)
ROW = COL.reshape(1, 256).copy()


def binary(code: str, shapes, grids, options: dict | None = None, b_const: np.ndarray | None = None) -> bytes:
    (sa, sb, so), (ga, gb, go) = shapes, grids
    b = T("b", sb, "int8", data=b_const, scale=gb[0], zero_point=gb[1])
    return single_op(
        code,
        [T("a", sa, "int8", scale=ga[0], zero_point=ga[1]), b],
        [T("y", so, "int8", scale=go[0], zero_point=go[1])],
        options,
    )


PAIRS = [((0.05, -3), (0.05, -3), (0.1, 2)), ((0.02, 10), (0.07, -40), (0.03, -5))]
BINARY = ["SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM", "PRELU"]
OUT_GRID = {"SQUARED_DIFFERENCE": (0.4, -128), "MUL": (0.2, 3)}


@pytest.mark.parametrize("code", BINARY)
@pytest.mark.parametrize("k", range(len(PAIRS)))
def test_int8_binary_all_pairs(code, k):
    ga, gb, go = PAIRS[k]
    go = OUT_GRID.get(code, go)
    options = {"fused_activation_function": "NONE"} if code in ("SUB", "MUL", "DIV") else None
    check_model(binary(code, ((256, 1), (1, 256), (256, 256)), (ga, gb, go), options), [COL, ROW])


SMALL = [((2, 3, 4), (4,), (2, 3, 4)), ((2, 1, 4), (3, 1), (2, 3, 4)), ((1, 3, 1), (2, 1, 5), (2, 3, 5))]


@pytest.mark.parametrize("code", BINARY)
def test_int8_binary_broadcast_c(code, tmp_path):
    ga, gb, go = PAIRS[1]
    go = OUT_GRID.get(code, go)
    for j, shapes in enumerate(SMALL):
        if code == "PRELU" and j == 2:
            continue  # TFLM's PRELU broadcasts alpha to the input's shape only
        a, b = random_int8(shapes[0], RNG), random_int8(shapes[1], RNG)
        b.flat[0] = gb[1]  # a zero divisor for DIV
        check_model(binary(code, shapes, (ga, gb, go)), [a, b], sub(tmp_path, j), c=True)


@pytest.mark.parametrize("code", ["SUB", "MUL", "DIV"])
@pytest.mark.parametrize("act", ["RELU", "RELU6", "RELU_N1_TO_1"])
def test_int8_binary_fused_activation(code, act, tmp_path):
    grids = ((0.05, -3), (0.04, 5), (0.03, -20))
    model = binary(code, ((256, 1), (1, 256), (256, 256)), grids, {"fused_activation_function": act})
    check_model(model, [COL, ROW])
    small = binary(code, SMALL[1], grids, {"fused_activation_function": act})
    if act == "RELU6":
        check_model(small, [random_int8(SMALL[1][0], RNG), random_int8(SMALL[1][1], RNG)], tmp_path, c=True)


def test_int8_sub_near_tie():
    """A grid where float32 instead of float64 Sub multipliers round one near-tie the other way."""
    grids = ((0.5816014645499574, -4), (0.36485206292649985, -102), (0.005330430020439621, 99))
    check_model(binary("SUB", ((256, 1), (1, 256), (256, 256)), grids, {"fused_activation_function": "NONE"}), [COL, ROW])


def test_int8_prelu_constant_alpha(tmp_path):
    alpha = RNG.integers(-128, 128, size=(1, 1, 8)).astype(np.int8)
    model = binary("PRELU", ((1, 4, 5, 8), (1, 1, 8), (1, 4, 5, 8)), ((0.05, -3), (0.01, 0), (0.04, 1)), b_const=alpha)
    check_model(model, [random_int8((1, 4, 5, 8), RNG)], tmp_path, c=True)


# -- QUANTIZE float32 -> int8 / int16, DEQUANTIZE, CAST -----------------------------------------------------------------
def test_quantize_float_half_away(tmp_path):
    """float32 -> int8 rounds half away from zero (ONNX's QuantizeLinear: half to even)."""
    # scale 0.5: x / scale lands exactly on k + 1/2 for every other value: TFLM rounds those away from zero
    # out of range: TFLM converts NaN, inf and |x / scale| >= 2^31 to INT32_MIN and adds the zero point wrapping
    edges = [-1e9, 1e9, 3e9, -3e9, 1e-9, -0.0, np.nan, np.inf, -np.inf]
    x = np.concatenate([np.arange(-70, 70, 0.25), edges]).astype(np.float32).reshape(1, -1)
    for k, (s, zp) in enumerate([(0.5, 3), (0.0371, -128), (1.0, 0)]):
        model = single_op("QUANTIZE", [T("x", x.shape, "float32")], [T("y", x.shape, "int8", scale=s, zero_point=zp)])
        check_model(model, [x], sub(tmp_path, k), c=k == 0)


def test_dequantize(tmp_path):
    for k, (s, zp) in enumerate([(0.05, -3), (0.0123, 127)]):
        model = single_op("DEQUANTIZE", [T("x", ALL.shape, "int8", scale=s, zero_point=zp)], [T("y", ALL.shape, "float32")])
        check_model(model, [ALL], sub(tmp_path, k), c=k == 0, rtol=0, atol=0)


CAST_CASES = [
    ("int8", "int32", ALL),
    ("int8", "float32", ALL),
    ("int32", "float32", np.array([[-(2**24) - 1, -7, 0, 3, 2**24 + 1]], np.int32)),
    ("float32", "int32", np.array([[-2.7, -0.5, 0.0, 0.5, 2.7, 123456.9]], np.float32)),
    ("int32", "int8", np.array([[-130, -128, -1, 0, 127, 128, 200, 1000]], np.int32)),
    ("int32", "int32", np.array([[-(2**31), -1, 0, 2**31 - 1]], np.int32)),
]


@pytest.mark.parametrize("src, dst, x", CAST_CASES, ids=[f"{c[0]}-{c[1]}" for c in CAST_CASES])
def test_cast(src, dst, x, tmp_path):
    # an int8 tensor always carries quantization parameters in TFLite models (TFLM's cast ignores them)
    q = {"scale": 1.0, "zero_point": 0}
    model = single_op("CAST", [T("x", x.shape, src, **(q if src == "int8" else {}))], [T("y", x.shape, dst, **(q if dst == "int8" else {}))])
    check_model(model, [x], tmp_path, c=True, rtol=0, atol=0)


# -- refused ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", ["EXP", "LOG", "SQRT", "NEG", "RELU_N1_TO_1"])
def test_int8_without_tflm_kernel_is_refused(code):
    from tinyc.frontend.tflite import import_tflite

    with pytest.raises(UnsupportedError, match=code):
        import_tflite(unary(code, G_A, G_A))


@pytest.mark.parametrize("grids", [((0.1, 0), (0.01, 5), (0.5, -100)), ((0.3, 100), (0.002, -128), (0.9, 0))])
def test_int8_div_grids(grids):
    """Ties of the exact quotient and divisors equal to the zero point (TFLM divides by zero unchecked)."""
    check_model(binary("DIV", ((256, 1), (1, 256), (256, 256)), grids), [COL, ROW])


def test_logistic_needs_tflm_output_zero_point():
    from tinyc.frontend.tflite import import_tflite

    with pytest.raises(UnsupportedError, match="-128"):
        import_tflite(unary("LOGISTIC", G_A, (1 / 256, 0)))


# -- float32 (converted by ops_float) --------------------------------------------------------------------------------
FLOAT_UNARY = ["LOGISTIC", "TANH", "RELU", "RELU6", "LEAKY_RELU", "HARD_SWISH", "ELU", "EXP", "LOG", "SQRT", "RSQRT", "ABS", "NEG"]
FLOAT_BINARY = ["SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM", "PRELU"]


@needs_float
@pytest.mark.parametrize("code", FLOAT_UNARY)
def test_float_unary(code, tmp_path):
    x = RNG.uniform(-5, 5, size=(2, 3, 8)).astype(np.float32)
    if code in ("LOG", "SQRT", "RSQRT"):
        x = np.abs(x) + np.float32(0.1)
    options = {"alpha": 0.1} if code == "LEAKY_RELU" else None
    model = single_op(code, [T("x", x.shape, "float32")], [T("y", x.shape, "float32")], options)
    check_model(model, [x], tmp_path, c=code in ("LOGISTIC", "EXP"))


@needs_float
@pytest.mark.parametrize("code", FLOAT_BINARY)
def test_float_binary(code, tmp_path):
    a = RNG.uniform(-5, 5, size=(2, 3, 4)).astype(np.float32)
    b = RNG.uniform(0.5, 3, size=(3, 1)).astype(np.float32)
    if code == "PRELU":
        b = RNG.uniform(-1, 1, size=(4,)).astype(np.float32)
    model = single_op(code, [T("a", a.shape, "float32"), T("b", b.shape, "float32")], [T("y", a.shape, "float32")])
    check_model(model, [a, b], tmp_path, c=code == "SUB")
