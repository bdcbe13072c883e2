"""Calibration for post-training int8 quantization: activation ranges from sample data.

`collect_ranges` runs the numpy reference executor (`tinyc.reference.run_graph`) over every
sample of a calibration set and returns, for every float32 activation tensor (graph inputs and
node outputs; constants are skipped), the real range [min, max] its int8 encoding should cover.

Methods
-------
- ``minmax``: the observed range over all samples.
- ``percentile``: clip each tail at the given percentile (asymmetric, the default), i.e. the
  range is [P(100 - p), P(p)] of the values; with ``symmetric=True`` it is [-a, a] with a the
  p-th percentile of |x| (onnxruntime's convention: |x| for symmetric, tails otherwise).
- ``mse``: the range minimising the expected squared error of int8 quantization (asymmetric
  uint8-style with zero point, or symmetric with ``symmetric=True``) over the histogram. The
  search tries 128 ranges shrinking the full range uniformly towards 0, then refines the low
  and the high end separately (another 129 candidates each). The error of a candidate is the
  exact integral of the quantization error over each histogram bin, taking the values as
  uniformly spread within their bin (reduces to the bin-centre error for narrow bins, and
  stays right when the quantization step is finer than a bin, where bin centres alone would
  land on grid points by chance).

Every range contains 0 (so that 0 is exactly representable: zero padding, ReLU) and is never
degenerate (an all-zero tensor gets [0, EPS]). Non-finite values (inf/nan, e.g. -inf masks) are
left out of the statistics and counted in ``TensorRange.nonfinite``.

Histograms: two passes
----------------------
``percentile`` and ``mse`` need a histogram per tensor, whose range is unknown before the data
has been seen. We run the executor twice: pass 1 gathers min/max, pass 2 fills a histogram of
``bins`` bins spanning exactly [min(lo, 0), max(hi, 0)] (or [0, max|x|] when symmetric). A
re-binning histogram (onnxruntime's HistogramCollector) needs one pass but its result depends on
the order of the samples and loses resolution each time the range grows (merged/interpolated
bins); the two-pass histogram is exact, order-independent and uses all ``bins`` over the final
range, for twice the executor time (calibration sets are small: 100s of samples). ``minmax``
needs pass 1 only.

Quantization convention (also used by `fake_quant`, `quant_params`):
  asymmetric: scale = (max - min) / 255, zero_point = round(-128 - min / scale) in [-128, 127],
              q = clip(round(x / scale) + zero_point, -128, 127), real = scale * (q - zero_point).
  symmetric:  scale = max|range| / 127, zero_point = 0, q in [-127, 127].
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Mapping

import numpy as np

from tinyc.errors import RunError, UsageError
from tinyc.ir import Graph

METHODS = ("minmax", "percentile", "mse")
EPS = 1e-6  # width given to degenerate ranges (a tensor that is constant 0 over the calibration set)
MSE_CANDIDATES = 128


@dataclass
class TensorRange:
    """The calibrated real range of one tensor and the statistics it was derived from."""

    name: str
    min: float
    max: float
    method: str
    observed_min: float  # over the finite values of all samples (before widening to 0)
    observed_max: float
    count: int  # finite values seen
    nonfinite: int = 0  # inf/nan values left out
    symmetric: bool = False
    percentile: float | None = None
    hist: np.ndarray | None = None  # counts (percentile/mse); of |x| when symmetric
    hist_range: tuple[float, float] | None = None
    expected_mse: float | None = None  # histogram estimate of the int8 error for [min, max]
    extra: dict[str, Any] = field(default_factory=dict)

    def quant_params(self) -> tuple[float, int]:
        """(scale, zero_point) of the int8 encoding of [min, max] (see module docstring)."""
        return quant_params(self.min, self.max, self.symmetric)


# -- quantizer -------------------------------------------------------------------------------


def quant_params(lo: float, hi: float, symmetric: bool = False) -> tuple[float, int]:
    lo, hi = _fix_range(float(lo), float(hi), symmetric)
    if symmetric:
        return max(-lo, hi) / 127.0, 0
    scale = (hi - lo) / 255.0
    zp = int(np.clip(np.round(-128.0 - lo / scale), -128, 127))
    return scale, zp


def fake_quant(x: np.ndarray, lo: float, hi: float, symmetric: bool = False) -> np.ndarray:
    """Quantize `x` to int8 with range [lo, hi] and back (float64)."""
    scale, zp = quant_params(lo, hi, symmetric)
    qmin = -127 if symmetric else -128
    q = np.clip(np.round(np.asarray(x, np.float64) / scale) + zp, qmin, 127)
    return (q - zp) * scale


def quantization_mse(x: np.ndarray, lo: float, hi: float, symmetric: bool = False) -> float:
    """Measured mean squared int8 quantization error of the finite values of `x` with range [lo, hi]."""
    x = np.asarray(x, np.float64).ravel()
    x = x[np.isfinite(x)]
    return float(np.mean((x - fake_quant(x, lo, hi, symmetric)) ** 2)) if x.size else 0.0


def _fix_range(lo: float, hi: float, symmetric: bool) -> tuple[float, float]:
    """Include 0, make symmetric if asked, and never degenerate."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if symmetric:
        a = max(-lo, hi)
        a = a if a >= EPS else EPS
        return -a, a
    if hi - lo < EPS:
        hi = lo + EPS
    return lo, hi


def _grid(lo: np.ndarray, hi: np.ndarray, symmetric: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised quant_params: (scale, lowest, highest representable value) per candidate."""
    if symmetric:
        a = np.maximum(np.maximum(-lo, hi), EPS)
        s = a / 127.0
        return s, -127.0 * s, 127.0 * s
    s = np.maximum(hi - lo, EPS) / 255.0
    zp = np.clip(np.round(-128.0 - lo / s), -128, 127)
    return s, (-128.0 - zp) * s, (127.0 - zp) * s


def _expected_sq_error(
    counts: np.ndarray, edges: np.ndarray, lo: np.ndarray, hi: np.ndarray, symmetric: bool
) -> np.ndarray:
    """Mean squared quantization error per candidate range (lo[k], hi[k]) for a histogram whose
    values are uniformly spread within each bin. Shapes: counts (B,), edges (B+1,), lo/hi (K,)."""
    nz = counts > 0
    n = counts[nz].astype(np.float64)
    a = edges[:-1][nz][None, :]
    b = edges[1:][nz][None, :]
    w = np.maximum(b - a, 1e-300)
    s, rlo, rhi = (v[:, None] for v in _grid(np.asarray(lo, np.float64), np.asarray(hi, np.float64), symmetric))
    # below the grid: clipped to rlo
    b1 = np.minimum(b, rlo)
    below = np.where(a < rlo, ((b1 - rlo) ** 3 - (a - rlo) ** 3) / 3.0, 0.0)
    # above the grid: clipped to rhi
    a3 = np.maximum(a, rhi)
    above = np.where(b > rhi, ((b - rhi) ** 3 - (a3 - rhi) ** 3) / 3.0, 0.0)
    # inside: rounding to multiples of s; integral of (u - round(u))^2 is G(u) below
    a2 = np.clip(a, rlo, rhi)
    b2 = np.clip(b, rlo, rhi)

    def g(u: np.ndarray) -> np.ndarray:
        k = np.floor(u + 0.5)
        v = u - k
        return k / 12.0 + (v**3 + 0.125) / 3.0

    inside = s**3 * (g(b2 / s) - g(a2 / s))
    per_bin = (below + above + np.maximum(inside, 0.0)) / w
    return (per_bin * n[None, :]).sum(axis=1) / max(n.sum(), 1.0)


# -- range selection from statistics ------------------------------------------------------------


def _percentile_range(counts: np.ndarray, edges: np.ndarray, p: float, symmetric: bool) -> tuple[float, float]:
    cum = np.concatenate([[0.0], np.cumsum(counts, dtype=np.float64)])
    total = cum[-1]

    def quantile(frac: float) -> float:
        target = min(max(frac * total, 0.0), total)
        i = int(np.searchsorted(cum, target, side="left"))
        if i == 0:
            return float(edges[0])
        c = counts[i - 1]
        t = (target - cum[i - 1]) / c if c > 0 else 1.0
        return float(edges[i - 1] + t * (edges[i] - edges[i - 1]))

    if symmetric:  # histogram of |x|
        a = quantile(p / 100.0)
        return -a, a
    return quantile(1.0 - p / 100.0), quantile(p / 100.0)


def _mse_range(counts: np.ndarray, edges: np.ndarray, symmetric: bool) -> tuple[float, float, float]:
    """Search for the range with the least expected quantization error. Returns (lo, hi, mse)."""
    if symmetric:
        full_lo, full_hi = -float(edges[-1]), float(edges[-1])
    else:
        full_lo, full_hi = float(edges[0]), float(edges[-1])
    t = np.arange(1, MSE_CANDIDATES + 1) / MSE_CANDIDATES
    los, his = full_lo * t, full_hi * t
    err = _expected_sq_error(counts, edges, los, his, symmetric)
    k = int(np.argmin(err))
    lo, hi, best = float(los[k]), float(his[k]), float(err[k])
    if not symmetric:  # refine each end with the other fixed
        u = np.arange(0, MSE_CANDIDATES + 1) / MSE_CANDIDATES
        for end in ("lo", "hi"):
            if end == "lo":
                cl, ch = full_lo * u, np.full_like(u, hi)
            else:
                cl, ch = np.full_like(u, lo), full_hi * u
            ok = ch - cl >= EPS
            if not ok.any():
                continue
            cl, ch = cl[ok], ch[ok]
            e = _expected_sq_error(counts, edges, cl, ch, symmetric)
            j = int(np.argmin(e))
            if e[j] < best:
                lo, hi, best = float(cl[j]), float(ch[j]), float(e[j])
    return lo, hi, best


# -- data -------------------------------------------------------------------------------------


def _load_calib(calib: Any) -> Mapping[str, np.ndarray]:
    """Calibration arrays from an .npz/.npy path or a mapping (read by tinyc.quantize.feeds)."""
    from tinyc.quantize.feeds import load_arrays

    if isinstance(calib, (str, os.PathLike)):
        return load_arrays(calib, "calibration file", UsageError)
    if not isinstance(calib, Mapping):
        raise UsageError("calibration data must be a mapping {input name: array} or a path to an .npz file")
    return calib


def calibration_samples(graph: Graph, calib: Any) -> tuple[int, Callable[[int], dict[str, np.ndarray]]]:
    """Validate `calib` against the graph inputs (the checks of `tinyc run`: tinyc.quantize.feeds)
    and return (N, feeds) where feeds(k) gives the inputs of sample k. Float data keeps its NaN/Inf
    (they are left out of the statistics, see the module docstring)."""
    from tinyc.quantize.feeds import prepare_feeds

    manifest = {
        "inputs": [
            {"name": n, "shape": list(graph.tensor(n).shape), "dtype": graph.tensor(n).dtype} for n in graph.inputs
        ]
    }
    try:
        data = prepare_feeds(manifest, _load_calib(calib))
    except RunError as e:
        raise RunError(f"calibration data: {e}") from None

    def feeds(k: int) -> dict[str, np.ndarray]:
        return data.model(k)

    return data.n, feeds


def activation_names(graph: Graph) -> list[str]:
    """Float32, non-constant tensors: graph inputs, then node outputs in execution order."""
    names: list[str] = []
    seen: set[str] = set()
    for name in list(graph.inputs) + [o for node in graph.nodes for o in node.outputs]:
        if not name or name in seen:
            continue
        seen.add(name)
        t = graph.tensor(name)
        if t.dtype == "float32" and not t.is_constant:
            names.append(name)
    return names


def _finite(x: np.ndarray) -> tuple[np.ndarray, int]:
    x = np.asarray(x).ravel()
    if x.size == 0:
        return x, 0
    if np.isfinite(x.min()) and np.isfinite(x.max()):  # min/max propagate nan
        return x, 0
    mask = np.isfinite(x)
    return x[mask], int(x.size - mask.sum())


def collect_ranges(
    graph: Graph,
    calib: Mapping[str, np.ndarray] | str | os.PathLike,
    method: str = "minmax",
    percentile: float = 99.99,
    bins: int = 2048,
    progress: bool = True,
    symmetric: bool = False,
) -> dict[str, TensorRange]:
    """Calibrated range of every float32 activation tensor of `graph` over the samples of `calib`
    ({input name: array with a leading sample dim N}, or an .npz path). See the module docstring."""
    from tinyc.progress import track
    from tinyc.reference import run_graph

    if method not in METHODS:
        raise UsageError(f"unknown calibration method '{method}' (available: {', '.join(METHODS)})")
    if method == "percentile" and not (0.0 < percentile <= 100.0):
        raise UsageError(f"percentile must be in (0, 100], got {percentile}")
    if int(bins) < 16:
        raise UsageError(f"bins must be at least 16, got {bins}")
    bins = int(bins)
    n, feeds = calibration_samples(graph, calib)
    names = activation_names(graph)
    two_pass = method != "minmax"

    lo = dict.fromkeys(names, np.inf)
    hi = dict.fromkeys(names, -np.inf)
    count = dict.fromkeys(names, 0)
    bad = dict.fromkeys(names, 0)
    desc = "calibrating (pass 1/2: min/max)" if two_pass else "calibrating"
    for k in track(range(n), desc, unit="sample", show=progress):
        env = run_graph(graph, feeds(k), keep_all=True)
        for name in names:
            x, nonfinite = _finite(env[name])
            bad[name] += nonfinite
            if x.size:
                count[name] += x.size
                lo[name] = min(lo[name], float(x.min()))
                hi[name] = max(hi[name], float(x.max()))

    hists: dict[str, np.ndarray] = {}
    hrange: dict[str, tuple[float, float]] = {}
    if two_pass:
        for name in names:
            if count[name] == 0:
                continue
            if symmetric:
                r = (0.0, max(-lo[name], hi[name], 0.0))
            else:
                r = (min(lo[name], 0.0), max(hi[name], 0.0))
            if r[1] - r[0] > 0:
                hrange[name] = r
                hists[name] = np.zeros(bins, np.int64)
        for k in track(range(n), "calibrating (pass 2/2: histograms)", unit="sample", show=progress):
            env = run_graph(graph, feeds(k), keep_all=True)
            for name, counts in hists.items():
                x, _ = _finite(env[name])
                if not x.size:
                    continue
                x = np.abs(x) if symmetric else x
                r0, r1 = hrange[name]
                idx = ((x.astype(np.float64) - r0) * (bins / (r1 - r0))).astype(np.int64)
                np.clip(idx, 0, bins - 1, out=idx)
                counts += np.bincount(idx, minlength=bins)  # in place: hists[name]

    result: dict[str, TensorRange] = {}
    for name in names:
        seen = count[name] > 0
        obs_lo, obs_hi = (lo[name], hi[name]) if seen else (0.0, 0.0)
        rng_lo, rng_hi, est = obs_lo, obs_hi, None
        h = hists.get(name)
        edges = None
        if h is not None:
            edges = np.linspace(hrange[name][0], hrange[name][1], bins + 1)
            if method == "percentile":
                rng_lo, rng_hi = _percentile_range(h, edges, percentile, symmetric)
            else:
                rng_lo, rng_hi, est = _mse_range(h, edges, symmetric)
        rng_lo, rng_hi = _fix_range(rng_lo, rng_hi, symmetric)
        if h is not None and edges is not None and est is None:  # edges: set with h
            est = float(_expected_sq_error(h, edges, np.array([rng_lo]), np.array([rng_hi]), symmetric)[0])
        result[name] = TensorRange(
            name=name,
            min=rng_lo,
            max=rng_hi,
            method=method,
            observed_min=obs_lo,
            observed_max=obs_hi,
            count=count[name],
            nonfinite=bad[name],
            symmetric=symmetric,
            percentile=percentile if method == "percentile" else None,
            hist=h,
            hist_range=hrange.get(name),
            expected_mse=est,
            extra={"samples": n},
        )
    return result


def ranges_table(ranges: Mapping[str, TensorRange]) -> str:
    """Markdown table of calibrated ranges (tensor, min, max, method) for reports."""
    lines = ["| tensor | min | max | method |", "|---|---:|---:|---|"]
    for name, r in ranges.items():
        method = r.method
        if r.method == "percentile" and r.percentile is not None:
            method = f"percentile {r.percentile:g}"
        if r.symmetric:
            method += " (symmetric)"
        cell = name.replace("|", "\\|")
        lines.append(f"| `{cell}` | {r.min:.6g} | {r.max:.6g} | {method} |")
    return "\n".join(lines) + "\n"
