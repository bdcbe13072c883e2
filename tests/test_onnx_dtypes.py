"""Narrow element types: the C conversions (runtime_c/include/tinyc_fp.h) equal ml_dtypes / numpy (ONNX's
reference) bit for bit, through real gcc; a float16 model compiled by tinyc matches onnxruntime; int4 blocked
quantization and float8 casts through compiled C match ONNX's reference evaluator."""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tinyc.numerics import dtypes as nd
from util import REPO, ort_run, rng

INCLUDE = REPO / "runtime_c" / "include"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]

HARNESS = r"""
#include "tinyc_fp.h"
void h_dec(const uint32_t *x, float *y, int n, int E, int M, int bias, int kind)
{ int i; for (i = 0; i < n; ++i) y[i] = tinyc_mf_to_f32(x[i], E, M, bias, kind); }
void h_enc(const float *x, uint32_t *y, int n, int E, int M, int bias, int kind, int sat)
{ int i; for (i = 0; i < n; ++i) y[i] = tinyc_f32_to_mf(x[i], E, M, bias, kind, sat); }
void h_f16(const float *x, uint16_t *y, int n) { int i; for (i = 0; i < n; ++i) y[i] = tinyc_f32_to_f16(x[i]); }
void h_bf16(const float *x, uint16_t *y, int n) { int i; for (i = 0; i < n; ++i) y[i] = tinyc_f32_to_bf16(x[i]); }
void h_f64_f16(const double *x, uint16_t *y, int n)
{ int i; for (i = 0; i < n; ++i) y[i] = tinyc_f32_to_f16(tinyc_f64_to_f32_odd(x[i])); }
void h_e8m0(const float *x, uint8_t *y, int n, int mode, int sat)
{ int i; for (i = 0; i < n; ++i) y[i] = tinyc_f32_to_e8m0(x[i], mode, sat); }
void h_e8m0_dec(const uint32_t *x, float *y, int n) { int i; for (i = 0; i < n; ++i) y[i] = tinyc_e8m0_to_f32(x[i]); }
void h_intn(const float *x, uint8_t *y, int n, int lo, int hi, int bits)
{ int i; for (i = 0; i < n; ++i) y[i] = tinyc_f32_to_intn(x[i], lo, hi, bits); }
"""

FLOATS = [n for n in nd.MINIFLOATS if n not in ("float16", "bfloat16")]


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("fp")
    (d / "h.c").write_text(HARNESS)
    base = [cc, *STRICT, "-O1", "-fPIC", "-shared", f"-I{INCLUDE}", str(d / "h.c"), "-o", str(d / "libh.so")]
    subprocess.run(base, check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(d / "libh.so"))


def _p(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


def _probe_values(dtype: str) -> np.ndarray:
    """Every finite value of the type, the float32 midpoints between neighbours (ties) and one float32
    step either side of each, values past the largest, specials, subnormal float32s and random ones."""
    f = nd.MINIFLOATS[dtype]
    n = 1 + f.E + f.M
    vals = nd.from_storage(np.arange(1 << n, dtype=np.uint16 if n > 8 else np.uint8), dtype).astype(np.float32)
    v = np.unique(vals[np.isfinite(vals)])
    mids = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)
    up, down = np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))
    big = float(v.max())
    with np.errstate(over="ignore"):
        extra = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, big * 1.01, big * 2, 1e30, -1e30, 1e-45,
                          -1e-40, np.finfo(np.float32).max, -np.finfo(np.float32).max], np.float32)
    r = rng(1)
    rand = (r.standard_normal(4000) * np.exp2(r.integers(-30, 20, 4000))).astype(np.float32)
    return np.concatenate([v, mids, up, down, extra, rand, -mids])


def _same(ours_bits: np.ndarray, ref: np.ndarray, dtype: str) -> None:
    """Bit-equal, except that any NaN matches any NaN of the same type."""
    got = nd.from_storage(ours_bits.astype(np.uint8 if nd.STORAGE_BYTES[dtype] == 1 else np.uint16), dtype)
    g32, r32 = got.astype(np.float32), ref.astype(np.float32)
    nan = np.isnan(r32)
    assert np.array_equal(np.isnan(g32), nan), f"{dtype}: NaN at different places"
    bad = np.flatnonzero(nd.storage_view(got)[~nan] != nd.storage_view(ref)[~nan])
    assert bad.size == 0, f"{dtype}: {bad.size} differ, e.g. {g32[~nan][bad[:3]]} vs {r32[~nan][bad[:3]]}"


@pytest.mark.parametrize("dtype", FLOATS)
def test_small_float_decode_every_pattern(clib, dtype):
    f = nd.MINIFLOATS[dtype]
    codes = np.arange(1 << (1 + f.E + f.M), dtype=np.uint32)
    out = np.zeros(codes.size, np.float32)
    clib.h_dec(_p(codes), _p(out), codes.size, f.E, f.M, f.bias, f.kind)
    ref = nd.from_storage(codes.astype(np.uint8), dtype).astype(np.float32)
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    ok = ~np.isnan(ref)
    assert np.array_equal(out[ok].view(np.uint32), ref[ok].view(np.uint32))


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("dtype", FLOATS)
def test_small_float_encode_matches_ml_dtypes(clib, dtype, saturate):
    f = nd.MINIFLOATS[dtype]
    x = _probe_values(dtype)
    out = np.zeros(x.size, np.uint32)
    clib.h_enc(_p(x), _p(out), x.size, f.E, f.M, f.bias, f.kind, saturate and dtype in nd.FLOAT8)
    with np.errstate(all="ignore"):
        ref = onnx.numpy_helper.saturate_cast(x, np.dtype(dtype)) if saturate and dtype in nd.FLOAT8 \
            else x.astype(dtype)
    _same(out, ref, dtype)


def test_float16_and_bfloat16_encode(clib):
    x = np.concatenate([_probe_values("float16"), _probe_values("bfloat16")])
    h = np.zeros(x.size, np.uint16)
    clib.h_f16(_p(x), _p(h), x.size)
    with np.errstate(all="ignore"):
        ref16 = x.astype(np.float16)
    assert np.array_equal(h, ref16.view(np.uint16))  # NaNs too: numpy's payload rule
    b = np.zeros(x.size, np.uint16)
    clib.h_bf16(_p(x), _p(b), x.size)
    _same(b, x.astype(ml_dtypes.bfloat16), "bfloat16")


def test_double_to_float16_rounds_once(clib):
    """Doubles just off float16 ties: a plain double -> float -> half conversion would round twice."""
    r = rng(2)
    halves = r.standard_normal(3000).astype(np.float16).astype(np.float64)
    ulp = np.spacing(halves.astype(np.float16)).astype(np.float64)
    x = np.concatenate([halves + ulp / 2 + 1e-12 * np.abs(halves), halves + ulp / 2 - 1e-12 * np.abs(halves),
                        r.standard_normal(3000) * 1e3])
    out = np.zeros(x.size, np.uint16)
    clib.h_f64_f16(_p(x), _p(out), x.size)
    assert np.array_equal(out, x.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("mode", list(nd.E8M0_ROUND))
def test_e8m0_matches_onnx_reference(clib, mode):
    codes = np.arange(256, dtype=np.uint32)
    dec = np.zeros(256, np.float32)
    clib.h_e8m0_dec(_p(codes), _p(dec), 256)
    ref = nd.from_storage(codes.astype(np.uint8), nd.E8M0).astype(np.float32)
    assert np.array_equal(np.isnan(dec), np.isnan(ref)) and np.array_equal(dec[:255], ref[:255])
    x = np.concatenate([_probe_values("bfloat16"), dec[:255], -dec[:255] * 1.5])
    for sat in (0, 1):
        out = np.zeros(x.size, np.uint8)
        clib.h_e8m0(_p(x), _p(out), x.size, nd.E8M0_ROUND[mode], sat)
        assert np.array_equal(out, nd.storage_view(onnx.numpy_helper.to_float8e8m0(x, bool(sat), mode)))


@pytest.mark.parametrize("dtype", list(nd.INTN))
def test_float_to_narrow_int_matches_ml_dtypes(clib, dtype):
    bits, _ = nd.INTN[dtype]
    lo, hi = nd.intn_range(dtype)
    x = np.concatenate([np.arange(-40, 40, 0.25, dtype=np.float32), np.array([np.nan, np.inf, -np.inf, 1e9], np.float32)])
    out = np.zeros(x.size, np.uint8)
    clib.h_intn(_p(x), _p(out), x.size, lo, hi, bits)
    with np.errstate(all="ignore"):
        ref = x.astype(dtype)
    assert np.array_equal(out, nd.storage_view(ref))


def _model(nodes, inputs, outputs, inits=(), opset=21):
    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def test_float16_model_matches_onnxruntime(tmp_path):
    """float16 in, float16 out: widened to float32 per op (Mul, Add, Sigmoid, Softmax's body), narrowed after."""
    import tinyc

    r = rng(3)
    x = r.standard_normal((4, 16)).astype(np.float16)
    w = (r.standard_normal((16,)) * 0.5).astype(np.float16)
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "x"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("Tanh", ["s"], ["y"])]
    f16 = TensorProto.FLOAT16
    m = _model(nodes, [helper.make_tensor_value_info("x", f16, [4, 16])],
               [helper.make_tensor_value_info("y", f16, [4, 16])], [numpy_helper.from_array(w, "w")])
    tinyc.compile(m, tmp_path / "p")
    got = tinyc.run(tmp_path / "p", {"x": x})["y"]
    exp = ort_run(m, {"x": x})[0]
    assert got.dtype == np.float16
    # one float16 rounding per op: exactly each op computed in float64 and rounded to float16 ...
    h = lambda v: np.asarray(v).astype(np.float16).astype(np.float64)  # noqa: E731
    a = h(h(x.astype(np.float64) * w.astype(np.float64)) + x.astype(np.float64))
    assert np.array_equal(got.astype(np.float64), h(np.tanh(h(1 / (1 + np.exp(-a))))))
    # ... and onnxruntime's Sigmoid/Tanh are approximations, so a rounding may flip (and carry into
    # the next op): at most 2 float16 ulp apart (max rel err 1.4e-3 on this data)
    ulps = np.abs(got.astype(np.float32) - exp.astype(np.float32)) / np.spacing(exp).astype(np.float32)
    assert ulps.max() <= 2, ulps.max()


def test_int4_blocked_quantize_and_float8_cast_match_reference(tmp_path):
    """QuantizeLinear to int4 with block_size 2, DequantizeLinear back and a saturating float8 cast,
    compiled to C and run, equal ONNX's reference evaluator bit for bit."""
    import tinyc

    r = rng(4)
    x = (r.standard_normal((3, 6)) * 4).astype(np.float32)
    scale = np.abs(r.standard_normal((3, 3))).astype(np.float32) + 0.2
    zp = np.array([[1, -2, 0], [3, 0, -1], [0, 2, -3]], ml_dtypes.int4)
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1, block_size=2),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=1, block_size=2),
             helper.make_node("Cast", ["x"], ["f8"], to=TensorProto.FLOAT8E4M3FN, saturate=1)]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6])],
               [helper.make_tensor_value_info("q", TensorProto.INT4, [3, 6]),
                helper.make_tensor_value_info("d", TensorProto.FLOAT, [3, 6]),
                helper.make_tensor_value_info("f8", TensorProto.FLOAT8E4M3FN, [3, 6])], inits)
    x[0, 0] = 1000.0  # saturates in float8, clamps in int4
    tinyc.compile(m, tmp_path / "p")
    got = tinyc.run(tmp_path / "p", {"x": x})
    q, d, f8 = ReferenceEvaluator(m).run(None, {"x": x})
    assert np.array_equal(nd.storage_view(got["q"]), nd.storage_view(q))
    assert np.array_equal(got["d"].view(np.uint32), d.view(np.uint32))
    assert np.array_equal(nd.storage_view(got["f8"]), nd.storage_view(f8))


@pytest.mark.parametrize("half,elem", [(np.float16, TensorProto.FLOAT16), (ml_dtypes.bfloat16, TensorProto.BFLOAT16)])
def test_half_quantize_linear_divides_like_onnx(tmp_path, half, elem):
    """float16 (bfloat16) x over a scale of its type: ONNX rounds the quotient to that type before rounding
    to an integer (quotients near .5 tell the difference). Compiled C == ONNX's reference evaluator."""
    import tinyc

    r = rng(5)
    scale = np.asarray(0.3, half)
    q = np.arange(-60, 60) + 0.5 + r.uniform(-2e-3, 2e-3, 120)
    x = (q * np.float64(scale)).astype(half).reshape(8, 15)
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(np.int8(3), "z")]
    m = _model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
               [helper.make_tensor_value_info("x", elem, [8, 15])],
               [helper.make_tensor_value_info("y", TensorProto.INT8, [8, 15])], inits)
    tinyc.compile(m, tmp_path / "p")
    got = tinyc.run(tmp_path / "p", {"x": x})["y"]
    exp = ReferenceEvaluator(m).run(None, {"x": x})[0]
    assert np.array_equal(got, exp)
    # the float16 rounding of the quotient matters for these inputs (else the test would prove nothing)
    plain = np.clip(np.rint(x.astype(np.float32) / np.float32(scale)) + 3, -128, 127)
    assert not np.array_equal(plain, exp)


def test_bfloat16_reduce_sum_rounds_every_add(tmp_path):
    """bfloat16 ReduceSum over the last axis equals ONNX's reference, which adds in bfloat16 in order;
    a float32 accumulator rounded once differs on these rows (so the test tells the two apart)."""
    import tinyc

    x = (rng(6).standard_normal((6, 40)) * 3).astype(ml_dtypes.bfloat16)
    bf16 = TensorProto.BFLOAT16
    m = _model([helper.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=1)],
               [helper.make_tensor_value_info("x", bf16, [6, 40])], [helper.make_tensor_value_info("y", bf16, [6, 1])],
               [numpy_helper.from_array(np.array([-1], np.int64), "ax")])
    tinyc.compile(m, tmp_path / "p")
    got = tinyc.run(tmp_path / "p", {"x": x})["y"]
    exp = ReferenceEvaluator(m).run(None, {"x": x})[0]
    assert np.array_equal(nd.storage_view(got), nd.storage_view(exp))
    once = x.astype(np.float32).sum(axis=-1, keepdims=True).astype(ml_dtypes.bfloat16)
    assert not np.array_equal(nd.storage_view(once), nd.storage_view(exp))


def test_float64_constants_keep_every_bit(tmp_path):
    """A float64 constant operand and a float64 scalar are emitted as double literals: the C result
    equals numpy's float64 arithmetic exactly (float32 literals would be off by ~1e-8 relative)."""
    from util import sanitized_run

    x = np.random.default_rng(7).standard_normal((3, 5))
    c = onnx.numpy_helper.from_array(np.full((3, 5), 1.0 / 3.0) + np.arange(15).reshape(3, 5) * 1e-12, "c")
    s = onnx.numpy_helper.from_array(np.array(np.pi / 7), "s")
    nodes = [onnx.helper.make_node("Mul", ["x", "c"], ["t"]), onnx.helper.make_node("Add", ["t", "s"], ["y"])]
    g = onnx.helper.make_graph(nodes, "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, [3, 5])],
                               [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, [3, 5])], [c, s])
    model = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 18)])
    got = sanitized_run(model, {"x": x}, tmp_path)["y"]
    want = x * onnx.numpy_helper.to_array(c) + np.pi / 7
    np.testing.assert_array_equal(got, want)
