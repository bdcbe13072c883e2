"""One integer truth: the numpy golden model (tinyc/numerics/fixed_point.py) equals the C (runtime_c/include/tinyc_q.h)
bit for bit, both equal an independent pure-Python-int statement of the rules, and they stay within 1 LSB of
float64 arithmetic. See docs/quantization.md."""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinyc.numerics import fixed_point as qa
from util import REPO

INCLUDE = REPO / "runtime_c" / "include"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
I32_MIN, I32_MAX = qa.INT32_MIN, qa.INT32_MAX
EDGES = [I32_MIN, I32_MIN + 1, -(1 << 30), -2, -1, 0, 1, 2, (1 << 30) - 1, 1 << 30, I32_MAX - 1, I32_MAX]
HYP = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HARNESS = r"""
#include "tinyc_q.h"
void h_srdhm(const int32_t *a, const int32_t *b, int32_t *o, int n)
{ int i; for (i = 0; i < n; ++i) o[i] = tinyc_q_srdhm(a[i], b[i]); }
void h_rdbpot(const int32_t *x, const int32_t *e, int32_t *o, int n)
{ int i; for (i = 0; i < n; ++i) o[i] = tinyc_q_rdbpot(x[i], (int)e[i]); }
void h_mbqm(const int32_t *x, const int32_t *m, const int32_t *s, int32_t *o, int n)
{ int i; for (i = 0; i < n; ++i) o[i] = tinyc_q_mbqm(x[i], m[i], s[i]); }
void h_requant(const int32_t *x, const int32_t *m, const int32_t *s, int32_t zp, int32_t lo, int32_t hi, int8_t *o, int n)
{ int i; for (i = 0; i < n; ++i) o[i] = tinyc_q_requantize(x[i], m[i], s[i], zp, lo, hi); }
void h_add(const int8_t *a, const int8_t *b, const tinyc_q_add_params_t *p, int8_t *o, int n)
{ int i; for (i = 0; i < n; ++i) o[i] = tinyc_q_add(a[i], b[i], p); }
void h_mbqm_even(const int32_t *x, const int32_t *m, const int32_t *s, int32_t *o, int n)
{ int i; for (i = 0; i < n; ++i) o[i] = tinyc_q_mbqm_even(x[i], m[i], s[i]); }
void h_mbqm_r(const int32_t *x, const int32_t *m, const int32_t *s, int32_t even, int32_t *o, int n)
{ int i; for (i = 0; i < n; ++i) o[i] = even ? tinyc_q_mbqm_even_r(x[i], m[i], -s[i]) : tinyc_q_mbqm_r(x[i], m[i], -s[i]); }
void h_lut(const int8_t *lut, const int8_t *x, int8_t *o, int n)
{ int i; for (i = 0; i < n; ++i) o[i] = tinyc_q_lut(lut, x[i]); }
"""


class AddParamsC(ctypes.Structure):
    _fields_ = [(f, ctypes.c_int32) for f in qa.AddParams.__dataclass_fields__]


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("qarith")
    (d / "h.c").write_text(HARNESS)
    base = [cc, *STRICT, "-O2", "-fPIC", "-shared", f"-I{INCLUDE}", str(d / "h.c"), "-o", str(d / "libh.so")]
    # UBSan makes any shift/overflow UB in the header abort the test run; fall back if unavailable.
    r = subprocess.run(base[:1] + ["-fsanitize=undefined", "-fno-sanitize-recover=all"] + base[1:],
                       capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(base, check=True, capture_output=True, text=True)
    lib = ctypes.CDLL(str(d / "libh.so"))
    return lib


def _p(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


def c_srdhm(lib, a, b):
    a, b = np.ascontiguousarray(a, np.int32), np.ascontiguousarray(b, np.int32)
    o = np.empty_like(a)
    lib.h_srdhm(_p(a), _p(b), _p(o), ctypes.c_int(a.size))
    return o


def c_rdbpot(lib, x, e):
    x, e = np.ascontiguousarray(x, np.int32), np.ascontiguousarray(np.broadcast_to(e, np.shape(x)), np.int32)
    o = np.empty_like(x)
    lib.h_rdbpot(_p(x), _p(e), _p(o), ctypes.c_int(x.size))
    return o


def c_mbqm(lib, x, m, s):
    x = np.ascontiguousarray(x, np.int32)
    m = np.ascontiguousarray(np.broadcast_to(m, x.shape), np.int32)
    s = np.ascontiguousarray(np.broadcast_to(s, x.shape), np.int32)
    o = np.empty_like(x)
    lib.h_mbqm(_p(x), _p(m), _p(s), _p(o), ctypes.c_int(x.size))
    return o


def c_mbqm_even(lib, x, m, s):
    x = np.ascontiguousarray(x, np.int32)
    m = np.ascontiguousarray(np.broadcast_to(m, x.shape), np.int32)
    s = np.ascontiguousarray(np.broadcast_to(s, x.shape), np.int32)
    o = np.empty_like(x)
    lib.h_mbqm_even(_p(x), _p(m), _p(s), _p(o), ctypes.c_int(x.size))
    return o


def c_mbqm_r(lib, x, m, s, even):
    """The branch-free forms the tiled kernels use (shift <= 0 only)."""
    x = np.ascontiguousarray(x, np.int32)
    m = np.ascontiguousarray(np.broadcast_to(m, x.shape), np.int32)
    s = np.ascontiguousarray(np.broadcast_to(s, x.shape), np.int32)
    o = np.empty_like(x)
    lib.h_mbqm_r(_p(x), _p(m), _p(s), ctypes.c_int32(int(even)), _p(o), ctypes.c_int(x.size))
    return o


def c_requant(lib, x, m, s, zp, lo, hi):
    x = np.ascontiguousarray(x, np.int32)
    m = np.ascontiguousarray(np.broadcast_to(m, x.shape), np.int32)
    s = np.ascontiguousarray(np.broadcast_to(s, x.shape), np.int32)
    o = np.empty(x.shape, np.int8)
    lib.h_requant(_p(x), _p(m), _p(s), ctypes.c_int32(zp), ctypes.c_int32(lo), ctypes.c_int32(hi), _p(o),
                  ctypes.c_int(x.size))
    return o


def c_add(lib, a, b, p: qa.AddParams):
    a, b = np.ascontiguousarray(a, np.int8), np.ascontiguousarray(b, np.int8)
    o = np.empty_like(a)
    cp = AddParamsC(*(getattr(p, f) for f in qa.AddParams.__dataclass_fields__))
    lib.h_add(_p(a), _p(b), ctypes.byref(cp), _p(o), ctypes.c_int(a.size))
    return o


# --- an independent statement of the rules in Python ints (no gemmlowp step-by-step) -----------------------

def py_srdhm(a: int, b: int) -> int:
    if a == b == I32_MIN:
        return I32_MAX
    return (a * b + (1 << 30)) >> 31  # floor(ab / 2^31 + 1/2)


def py_rdbpot(x: int, e: int) -> int:
    if e == 0:
        return x
    mag = (abs(x) + (1 << (e - 1))) >> e  # half away from zero
    return mag if x >= 0 else -mag


def py_mbqm(x: int, m: int, s: int) -> int:
    x = min(max(x << max(s, 0), I32_MIN), I32_MAX)
    return py_rdbpot(py_srdhm(x, m), max(-s, 0))


def py_mbqm_even(x: int, m: int, s: int) -> int:
    """round(x' * m / 2^(31 - s)) half to even, x' = x << max(s, 0) saturated; saturated to int32."""
    from fractions import Fraction
    x = min(max(x << max(s, 0), I32_MIN), I32_MAX)
    r = round(Fraction(x * m, 1 << (31 + max(-s, 0))))  # Python rounds a Fraction half to even
    return min(max(r, I32_MIN), I32_MAX)


# --- strategies --------------------------------------------------------------------------------------------

i32 = st.one_of(st.sampled_from(EDGES), st.integers(I32_MIN, I32_MAX), st.integers(-300_000, 300_000))
multipliers = st.one_of(st.just(0), st.sampled_from([1 << 30, I32_MAX, (1 << 30) + 1]), st.integers(1 << 30, I32_MAX))
shifts = st.one_of(st.sampled_from([-31, -30, -1, 0, 1, 30, 31]), st.integers(-31, 31))


def i32_lists(n=64):
    return st.lists(i32, min_size=1, max_size=n)


# --- C == numpy == pure Python -----------------------------------------------------------------------------

@HYP
@given(st.lists(st.tuples(i32, i32), min_size=1, max_size=64))
def test_srdhm_c_numpy_python(clib, pairs):
    a = np.array([p[0] for p in pairs], np.int64)
    b = np.array([p[1] for p in pairs], np.int64)
    got = np.asarray(qa.srdhm(a, b))
    np.testing.assert_array_equal(got, c_srdhm(clib, a, b))
    assert got.tolist() == [py_srdhm(x, y) for x, y in pairs]


def test_srdhm_edges(clib):
    a, b = np.array(np.meshgrid(EDGES, EDGES)).reshape(2, -1)
    got = np.asarray(qa.srdhm(a, b))
    np.testing.assert_array_equal(got, c_srdhm(clib, a, b))
    assert got.tolist() == [py_srdhm(int(x), int(y)) for x, y in zip(a, b)]
    assert qa.srdhm(I32_MIN, I32_MIN) == I32_MAX
    assert qa.srdhm(I32_MIN, I32_MAX) == -I32_MAX


@HYP
@given(i32_lists(), st.integers(0, 31))
def test_rdbpot_c_numpy_python(clib, xs, e):
    x = np.array(xs, np.int64)
    got = np.asarray(qa.rounding_divide_by_pot(x, e))
    np.testing.assert_array_equal(got, c_rdbpot(clib, x, e))
    assert got.tolist() == [py_rdbpot(v, e) for v in xs]


def test_rdbpot_edges_all_exponents(clib):
    x = np.repeat(np.array(EDGES + [3, -3, 5, -5, 6, -6, 1 << 29, -(1 << 29)], np.int64), 32)
    e = np.tile(np.arange(32), x.size // 32)
    got = np.asarray(qa.rounding_divide_by_pot(x, e))
    np.testing.assert_array_equal(got, c_rdbpot(clib, x, e))
    assert got.tolist() == [py_rdbpot(int(v), int(k)) for v, k in zip(x, e)]
    # ties go away from zero
    assert qa.rounding_divide_by_pot(np.array([5, -5, 6, -6, 7, -7]), 1).tolist() == [3, -3, 3, -3, 4, -4]


@HYP
@given(st.lists(st.tuples(i32, multipliers, shifts), min_size=1, max_size=64))
def test_mbqm_half_even_c_numpy_python(clib, triples):
    x, m, s = (np.array(v, np.int64) for v in zip(*triples))
    want = np.array([py_mbqm_even(int(a), int(b), int(c)) for a, b, c in triples], np.int32)
    np.testing.assert_array_equal(np.asarray(qa.multiply_by_quantized_multiplier(x, m, s, "half_even")), want)
    np.testing.assert_array_equal(c_mbqm_even(clib, x, m, s), want)


def test_mbqm_half_even_ties_and_branch_free_forms(clib):
    """Ties go to even (0.5 -> 0, 1.5 -> 2, -2.5 -> -2), unlike TFLite's mode; the vectorisable
    tinyc_q_mbqm_r / tinyc_q_mbqm_even_r equal the scalar functions for shift <= 0."""
    x = np.array([1, 3, 5, -1, -3, -5, 2, 7], np.int64)
    np.testing.assert_array_equal(qa.multiply_by_quantized_multiplier(x, 1 << 30, 0, "half_even"),
                                  [0, 2, 2, 0, -2, -2, 1, 4])
    np.testing.assert_array_equal(qa.multiply_by_quantized_multiplier(x, 1 << 30, 0, "tflite"),
                                  [1, 2, 3, 0, -1, -2, 1, 4])
    rng = np.random.default_rng(5)
    xs = rng.integers(I32_MIN, I32_MAX, 100_000, endpoint=True)
    ms = rng.integers(0, I32_MAX, 100_000, endpoint=True)
    ss = rng.integers(-31, 0, 100_000, endpoint=True)
    ms[:50], ss[:50] = 1 << 30, -(np.arange(50) % 32)  # powers of two: many exact ties
    for even, mode in ((False, "tflite"), (True, "half_even")):
        np.testing.assert_array_equal(c_mbqm_r(clib, xs, ms, ss, even),
                                      qa.multiply_by_quantized_multiplier(xs, ms, ss, mode))


@HYP
@given(st.lists(st.tuples(i32, multipliers, shifts), min_size=1, max_size=64))
def test_mbqm_c_numpy_python(clib, triples):
    x, m, s = (np.array(c, np.int64) for c in zip(*triples))
    got = np.asarray(qa.multiply_by_quantized_multiplier(x, m, s))
    np.testing.assert_array_equal(got, c_mbqm(clib, x, m, s))
    assert got.tolist() == [py_mbqm(*t) for t in triples]


def test_mbqm_random_bulk(clib):
    """200k random (acc, multiplier, shift) triples, per-element parameters (the per-channel case)."""
    g = np.random.default_rng(1)
    n = 200_000
    x = g.integers(I32_MIN, I32_MAX, n, endpoint=True)
    x[: n // 2] >>= g.integers(0, 31, n // 2)  # many small accumulators too
    m = g.integers(1 << 30, I32_MAX, n, endpoint=True)
    s = g.integers(-31, 31, n, endpoint=True)
    got = np.asarray(qa.multiply_by_quantized_multiplier(x, m, s))
    np.testing.assert_array_equal(got, c_mbqm(clib, x, m, s))
    idx = g.choice(n, 5000, replace=False)
    assert got[idx].tolist() == [py_mbqm(int(x[i]), int(m[i]), int(s[i])) for i in idx]


@HYP
@given(i32_lists(), st.floats(2.0 ** -33, 2.0 ** 8), st.integers(-128, 127), st.integers(-128, 127),
       st.integers(-128, 127))
def test_requantize_c_numpy_float(clib, xs, real, zp, a, b):
    lo, hi = min(a, b), max(a, b)
    m, s = qa.quantize_multiplier(real)
    x = np.array(xs, np.int64)
    got = np.asarray(qa.requantize(x, m, s, zp, lo, hi))
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, c_requant(clib, x, m, s, zp, lo, hi))
    ref = np.clip(np.floor(x * real + 0.5) + zp, lo, hi)  # float64 reference (|x*real| < 2^40: no big loss)
    assert np.max(np.abs(got - ref)) <= 1


def test_requantize_float_reference_bulk(clib):
    """Typical multipliers (1e-5 .. 1) and accumulators. The scheme rounds twice (srdhm at 2^-right, then the
    shift), so it is within 1 LSB of float64 and exact wherever x*M is more than 2^-(right+1) from a tie."""
    g = np.random.default_rng(2)
    n = 100_000
    real = np.exp(g.uniform(np.log(1e-5), 0, n))
    m, s = qa.quantize_multiplier(real)
    x = np.round(g.normal(0, 1, n) * 128 / real).clip(I32_MIN, I32_MAX).astype(np.int64)
    zp = -5
    got = np.asarray(qa.requantize(x, m, s, zp))
    np.testing.assert_array_equal(got, c_requant(clib, x, m, s, zp, -128, 127))
    ref = np.clip(np.floor(x * real + 0.5) + zp, -128, 127)
    assert np.max(np.abs(got.astype(np.int64) - ref)) <= 1
    v = x * qa.dequantize_multiplier(m, s)  # x * the multiplier actually used
    far = np.abs(v - np.floor(v) - 0.5) > 0.5 * 2.0 ** s + 1e-6  # s <= 0 here: 2^s = 2^-right
    exact = np.clip(np.floor(v + 0.5) + zp, -128, 127)
    np.testing.assert_array_equal(got[far], exact[far])
    assert far.mean() > 0.8


# --- quantize_multiplier -----------------------------------------------------------------------------------

@settings(max_examples=2000, deadline=None)
@given(st.floats(2.0 ** -31, 2.0 ** 31 - 2.0 ** 8))
def test_quantize_multiplier_round_trip(real):
    m, s = qa.quantize_multiplier(real)
    assert (1 << 30) <= m <= I32_MAX and -31 <= s <= 31
    assert abs(qa.dequantize_multiplier(m, s) - real) / real < 1e-9


def test_quantize_multiplier_edges():
    assert qa.quantize_multiplier(0.0) == (0, 0)
    assert qa.quantize_multiplier(1.0) == (1 << 30, 1)
    assert qa.quantize_multiplier(0.5) == (1 << 30, 0)
    assert qa.quantize_multiplier(0.75) == (3 << 29, 0)
    assert qa.quantize_multiplier(2.0 ** -32) == (1 << 30, -31)  # smallest kept
    assert qa.quantize_multiplier(2.0 ** -33) == (0, 0)  # flushed to zero, as TFLite
    assert qa.quantize_multiplier(1.0 - 2.0 ** -40) == (1 << 30, 1)  # mantissa rounds to 2^31: carry
    m, s = qa.quantize_multiplier(np.array([0.25, 3.0, 1e-3]))
    assert m.dtype == np.int32 and m.tolist() == [1 << 30, 3 << 29, 1099511628] and s.tolist() == [-1, 2, -9]
    for bad in (-1.0, float("nan"), float("inf"), 2.0 ** 31):
        with pytest.raises(ValueError):
            qa.quantize_multiplier(bad)


def test_flushed_multiplier_gives_zero_point(clib):
    m, s = qa.quantize_multiplier(1e-12)
    x = np.array(EDGES, np.int64)
    assert np.asarray(qa.requantize(x, m, s, 7)).tolist() == [7] * len(EDGES)
    assert c_requant(clib, x, m, s, 7, -128, 127).tolist() == [7] * len(EDGES)


# --- Add ---------------------------------------------------------------------------------------------------

scales = st.floats(1e-4, 1.0)
zps = st.integers(-128, 127)


@settings(max_examples=300, deadline=None)
@given(scales, zps, scales, zps, st.floats(0.3, 3.0), zps)
def test_add_c_numpy_float(clib, s1, z1, s2, z2, ratio, zo):
    so = (s1 + s2) * ratio  # output scale in a realistic relation to the inputs
    p = qa.add_params(s1, z1, s2, z2, so, zo)
    a, b = (x.ravel().astype(np.int8) for x in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128)))
    got = qa.add_int8(a, b, p)
    np.testing.assert_array_equal(got, c_add(clib, a, b, p))
    f1, f2, fo = (float(np.float32(v)) for v in (s1, s2, so))
    real = (a.astype(np.float64) - z1) * f1 + (b.astype(np.float64) - z2) * f2
    ref = np.clip(np.floor(real / fo + 0.5) + zo, -128, 127)
    assert np.max(np.abs(got.astype(np.int64) - ref)) <= 1


def test_add_with_relu_clamp(clib):
    p = qa.add_params(0.05, -10, 0.02, 3, 0.08, -128, *qa.activation_range("relu", 0.08, -128))
    a = np.arange(-128, 128).astype(np.int8)
    got = qa.add_int8(a, a[::-1], p)
    np.testing.assert_array_equal(got, c_add(clib, a, a[::-1], p))
    assert got.min() >= -128


# --- LUT ---------------------------------------------------------------------------------------------------

FNS = {"sigmoid": lambda x: 1 / (1 + np.exp(-x)), "tanh": np.tanh, "identity": lambda x: x,
       "half": lambda x: 0.5 * x, "square": np.square}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(FNS)), st.floats(1e-3, 0.5), zps, st.floats(1e-3, 0.5), zps,
       st.sampled_from(["half_away", "half_even"]))
def test_build_lut_equals_direct(clib, name, s_in, zi, s_out, zo, rounding):
    fn = FNS[name]
    lut = qa.build_lut(fn, s_in, zi, s_out, zo, rounding=rounding)
    q = np.arange(-128, 128)
    direct = qa.quantize(fn(qa.dequantize(q, s_in, zi, np.float64)), np.float64(s_out), zo, rounding=rounding)
    np.testing.assert_array_equal(lut, direct)
    np.testing.assert_array_equal(qa.lut_lookup(lut, q), direct)
    x = q.astype(np.int8)
    o = np.empty_like(x)
    clib.h_lut(_p(np.ascontiguousarray(lut)), _p(x), _p(o), ctypes.c_int(256))
    np.testing.assert_array_equal(o, direct)


def test_lut_rounding_ties():
    lut_away = qa.build_lut(lambda x: x, 1.0, 0, 2.0, 0)  # q / 2: every odd q is a tie
    lut_even = qa.build_lut(lambda x: x, 1.0, 0, 2.0, 0, rounding="half_even")
    assert lut_away[128 + np.array([1, 3, -1, -3])].tolist() == [1, 2, -1, -2]
    assert lut_even[128 + np.array([1, 3, -1, -3])].tolist() == [0, 2, 0, -2]


# --- scales, zero points, tensors --------------------------------------------------------------------------

@settings(max_examples=500, deadline=None)
@given(st.floats(-1e3, 1e3), st.floats(-1e3, 1e3))
def test_choose_qparams(a, b):
    lo, hi = np.float32(min(a, b)), np.float32(max(a, b))
    scale, zp = qa.choose_qparams(lo, hi)
    assert scale.dtype == np.float32 and -128 <= zp <= 127
    assert qa.quantize(np.float32(0), scale, zp) == zp  # 0.0 exactly representable
    if hi - lo > 1e-3:  # the range is covered to within one step
        assert qa.dequantize(-128, scale, zp) <= min(lo, 0) + scale
        assert qa.dequantize(127, scale, zp) >= max(hi, 0) - scale
    s2, z2 = qa.choose_qparams(lo, hi, symmetric=True, qmin=-127, qmax=127)
    assert z2 == 0
    a = max(abs(lo), abs(hi))
    if a / np.float32(127) >= np.finfo(np.float32).tiny:
        assert np.isclose(s2 * 127, a, rtol=1e-6)
    else:
        assert s2 == 1  # degenerate range (scale below float32 tiny), as onnxruntime


def test_quantize_half_even_and_saturation():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1000.0, -1000.0], np.float32)
    assert qa.quantize(x, np.float32(1), 0).tolist() == [0, 2, 2, 0, -2, 127, -128]
    assert qa.quantize(x, np.float32(1), 0, rounding="half_away").tolist() == [1, 2, 3, -1, -2, 127, -128]


def test_quantize_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    g = np.random.default_rng(3)
    scale, zp = np.float32(0.037), np.int8(-7)
    x = np.concatenate([g.normal(0, 3, 5000), (np.arange(-300, 300) + 0.5) * 0.037]).astype(np.float32)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, [x.size])],
                              initializer=[helper.make_tensor("s", TensorProto.FLOAT, [], [float(scale)]),
                                           helper.make_tensor("z", TensorProto.INT8, [], [int(zp)])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(qa.quantize(x, scale, zp), y)


def test_weights_and_bias():
    g = np.random.default_rng(4)
    w = g.normal(0, 0.1, (8, 3, 3, 3)).astype(np.float32)
    w[5] = 0  # all-zero channel
    q, sw = qa.quantize_weights_per_channel(w)
    assert q.dtype == np.int8 and q.min() >= -127 and sw.shape == (8,) and sw[5] == 1
    assert np.all(np.abs(q.reshape(8, -1)).max(axis=1)[np.arange(8) != 5] == 127)
    assert np.max(np.abs(qa.dequantize(q, sw[:, None, None, None], 0) - w)) <= sw.max() / 2 + 1e-7
    s_in = np.float32(0.02)
    b = g.normal(0, 1, 8).astype(np.float32)
    qb = qa.quantize_bias(b, s_in, sw)
    assert qb.dtype == np.int32
    assert np.all(np.abs(qb * (s_in * sw) - b) <= s_in * sw / 2 * 1.0001)
    m, s = qa.requant_params(s_in, sw, np.float32(0.1))
    assert np.asarray(m).shape == (8,)


def test_activation_range():
    assert qa.activation_range(None, 0.1, 3) == (-128, 127)
    assert qa.activation_range("relu", 0.1, -20) == (-20, 127)
    assert qa.activation_range("relu6", 0.05, -128) == (-128, -8)
    assert qa.activation_range("clip", 0.1, 0, -1.0, 1.0) == (-10, 10)


# --- the header on targets ---------------------------------------------------------------------------------

ALL_FNS = r"""
#include "tinyc_q.h"
int32_t t_mbqm(int32_t x, int32_t m, int32_t s) { return tinyc_q_mbqm(x, m, s); }
int8_t t_req(int32_t x, int32_t m, int32_t s) { return tinyc_q_requantize(x, m, s, -3, -128, 127); }
int8_t t_add(int8_t a, int8_t b, const tinyc_q_add_params_t *p) { return tinyc_q_add(a, b, p); }
int8_t t_lut(const int8_t *l, int8_t x) { return tinyc_q_lut(l, x); }
int8_t t_req_even(int32_t x, int32_t m, int32_t s)
{ return tinyc_q_requantize_rnd(x, m, s, -3, -128, 127, TINYC_Q_ROUND_HALF_EVEN); }
int32_t t_even_r(int32_t x, int32_t m, int32_t r) { return tinyc_q_mbqm_even_r(x, m, r); }
"""


@pytest.mark.parametrize("cc,flags,allowed", [
    ("gcc", ["-O0"], set()),
    ("gcc", ["-O2"], set()),
    ("arm-none-eabi-gcc", ["-O2", "-mcpu=cortex-m4", "-mthumb"], set()),
    # libgcc (always linked, not libc): no SMULL or 64-bit shifts on M0+
    ("arm-none-eabi-gcc", ["-Os", "-mcpu=cortex-m0plus", "-mthumb"], {"__aeabi_lmul", "__aeabi_lasr", "__aeabi_llsl"}),
])
def test_header_compiles_strict_and_needs_no_libc(tmp_path, cc, flags, allowed):
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} not installed")
    src = tmp_path / "t.c"
    src.write_text(ALL_FNS)
    obj = tmp_path / "t.o"
    r = subprocess.run([cc, *STRICT, *flags, f"-I{INCLUDE}", "-c", str(src), "-o", str(obj)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    nm = shutil.which(cc.replace("gcc", "nm")) or shutil.which("nm")
    und = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, check=True).stdout.split()
    assert set(u for u in und if u != "U") <= allowed


def test_worked_example_in_docs():
    """The numbers in docs/quantization.md's worked example are the golden model's."""
    doc = (REPO / "docs" / "quantization.md").read_text()
    m, s = qa.requant_params(0.05, 0.004, 0.1)
    assert (m, s) == (1099511680, -8) and f"multiplier = {m}" in doc
    lo, hi = qa.activation_range("relu", 0.1, 5)
    assert (qa.srdhm(12345, m), qa.rounding_divide_by_pot(6321, 8), qa.requantize(12345, m, s, 5, lo, hi)) == (6321, 25, 30)
    assert (qa.srdhm(-2000, m), qa.rounding_divide_by_pot(-1024, 8), qa.requantize(-2000, m, s, 5, lo, hi)) == (-1024, -4, 5)
    p = qa.add_params(0.05, -3, 0.02, 10, 0.06, 1)
    assert (p.in1_multiplier, p.in1_shift, p.in2_multiplier, p.in2_shift, p.out_multiplier, p.out_shift) == \
        (1 << 30, 0, 1717986854, -2, 1789569773, -19)
    assert "(1717986854, -2)" in doc and "(1789569773, -19)" in doc
    assert qa.add_int8(20, -50, p) == 0
    lut = qa.build_lut(lambda x: 1 / (1 + np.exp(-x)), 0.1, 0, 1 / 256, -128)
    assert (lut[129], lut[255]) == (6, 127)
