"""How a target's float outputs are compared with the golden model's, in one place.

Kernels may sum in another order than numpy, so finite values agree within 1e-4 of the output's
scale (relative 1e-4, absolute 1e-4 * max(1, max |golden|)). NaN and infinities are results too
(IEEE semantics, as onnxruntime): a NaN must meet a NaN and an infinity the same infinity, and the
scale is taken over the finite golden values only, so one NaN in an output does not make the whole
comparison NaN (and so "different")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RTOL = 1e-4


@dataclass(frozen=True)
class FloatComparison:
    ok: bool
    max_abs_diff: float  # over the positions where both are finite; inf where NaN/inf positions differ
    mismatches: int  # positions outside the tolerance, or with a NaN/inf the other side lacks


def compare_float(got: np.ndarray, want: np.ndarray) -> FloatComparison:
    g = np.asarray(got, np.float64).reshape(-1)
    w = np.asarray(want, np.float64).reshape(-1)
    if g.size != w.size:
        return FloatComparison(False, float("inf"), max(g.size, w.size))
    if not g.size:
        return FloatComparison(True, 0.0, 0)
    special = ~np.isfinite(g) | ~np.isfinite(w)
    same_special = (np.isnan(g) & np.isnan(w)) | (np.isinf(g) & (g == w))
    bad_special = special & ~same_special
    finite = ~special
    scale = float(np.max(np.abs(w[finite]))) if finite.any() else 0.0
    diff = np.abs(g[finite] - w[finite])
    bad_finite = diff > RTOL * max(1.0, scale) + RTOL * np.abs(w[finite])
    mismatches = int(bad_special.sum()) + int(bad_finite.sum())
    max_diff = float("inf") if bad_special.any() else (float(diff.max()) if diff.size else 0.0)
    return FloatComparison(mismatches == 0, max_diff, mismatches)
