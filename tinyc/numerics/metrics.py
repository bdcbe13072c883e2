"""Error metrics between a compiled model's outputs and a reference's (`tinyc validate`).

One small module so the definitions are written down once, for every target and every
comparison (target vs golden model, target vs onnxruntime or TFLite Micro):

- ``rmse``: sqrt(mean((a - b)^2))
- ``cosine``: a.b / (|a| |b|) over the flattened arrays; exactly 1.0 for equal arrays (all zeros
  included), 0.0 when only one is all zeros (no direction in common)
- ``max_abs_error`` and ``mean_abs_error``: max and mean of |a - b|
- ``top1_agreement``: the share of rows (last axis) whose argmax is the same

Everything is computed in float64, so int8 arrays neither wrap nor lose precision. A value that
is not defined (NaN or Inf in an output, an empty array) is None rather than NaN, so the result
is valid JSON (`--json`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def cosine_similarity(a: Any, b: Any) -> float | None:
    """Cosine of the angle between the flattened arrays (see the module docstring for zeros)."""
    x = np.asarray(a, np.float64).reshape(-1)
    y = np.asarray(b, np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"cosine of arrays of {x.size} and {y.size} elements")
    if x.size == 0 or not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return None
    nx, ny = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    if np.array_equal(x, y):
        return 1.0  # exactly, as a bit-exact output should read (the division is off by an ulp)
    if nx == 0.0 or ny == 0.0:
        return 0.0
    # the norms are scaled out first: x.y / (|x||y|) of large values would overflow
    c = float(np.dot(x / nx, y / ny))
    return max(-1.0, min(1.0, c))


def error_metrics(target: Any, reference: Any) -> dict[str, Any]:
    """RMSE, cosine similarity, max and mean absolute error of `target` against `reference`
    (same number of elements; shapes may differ by size-1 axes)."""
    x = np.asarray(target, np.float64).reshape(-1)
    y = np.asarray(reference, np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"comparing {x.size} output values with {y.size} reference values")
    if x.size == 0:
        return {"rmse": None, "cosine": None, "max_abs_error": None, "mean_abs_error": None, "count": 0}
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(x - y)
        return {
            "rmse": _finite_or_none(math.sqrt(float(np.mean(d * d)))),
            "cosine": cosine_similarity(x, y),
            "max_abs_error": _finite_or_none(float(np.max(d))),
            "mean_abs_error": _finite_or_none(float(np.mean(d))),
            "count": int(x.size),
        }


def top1_agreement(target: Any, reference: Any) -> float | None:
    """The share of rows (argmax over the last axis) on which both agree; None for outputs with
    one value per row (no classes to pick from)."""
    x, y = np.asarray(target), np.asarray(reference)
    if x.ndim < 1 or x.shape[-1] < 2 or x.size != y.size:
        return None
    rows = x.reshape(-1, x.shape[-1]).argmax(-1)
    ref = y.reshape(-1, x.shape[-1]).argmax(-1)
    return float(np.mean(rows == ref))


def accuracy(target: Any, labels: Any) -> float | None:
    """The share of rows whose argmax is the label; None when the counts do not match."""
    x = np.asarray(target)
    if x.ndim < 1 or x.shape[-1] < 2:
        return None
    pred = x.reshape(-1, x.shape[-1]).argmax(-1)
    lab = np.asarray(labels).reshape(-1)
    if lab.size != pred.size:
        return None
    return float(np.mean(pred == lab))
