"""Spreading a model's measurement budget over its layers (Ansor's task scheduler, simplified).

A layer that takes 40% of the model's cycles deserves far more trials than one taking 1%: the
same relative speed-up saves forty times as much. So trials go to tasks in proportion to their
share of the total cycles, with a floor so every layer is tried at least once, and a cap at the
number of candidates a task still has unmeasured (what a small space cannot use goes to others).
"""

from __future__ import annotations

import math
from collections.abc import Mapping


def _water_fill(weights: dict[str, float], lo: dict[str, int], hi: dict[str, float], total: int) -> dict[str, float]:
    """Real shares a_k = clip(lam * w_k, lo_k, hi_k) summing to total (sum(lo) <= total < sum(hi))."""

    def filled(lam: float) -> float:
        return sum(min(max(lam * weights[k], lo[k]), hi[k]) for k in weights)

    low, high = 0.0, 1.0
    while filled(high) < total:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if filled(mid) < total:
            low = mid
        else:
            high = mid
    return {k: min(max(high * weights[k], lo[k]), hi[k]) for k in weights}


def allocate(
    weights: Mapping[str, float],
    total: int,
    minimum: int = 1,
    measured: Mapping[str, int] | None = None,
    space_sizes: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Trials per task key: proportional to weight, at least `minimum` each when `total` allows,
    never more than a key's unmeasured candidates (space size - measured), leftovers
    redistributed by weight. The counts sum to at most `total` (less only when every key is
    capped)."""
    keys = list(weights)
    measured = measured or {}
    cap: dict[str, float] = {}
    for k in keys:
        if space_sizes is not None and k in space_sizes:
            cap[k] = max(0, int(space_sizes[k]) - int(measured.get(k, 0)))
        else:
            cap[k] = math.inf
    result = {k: 0 for k in keys}
    total = int(total)
    if total <= 0 or not keys:
        return result
    w = {k: max(0.0, float(weights[k])) if math.isfinite(float(weights[k])) else 0.0 for k in keys}
    if sum(w.values()) <= 0:
        w = {k: 1.0 for k in keys}  # no information: share equally
    # a weightless task still takes what heavier, capped tasks cannot use
    w = {k: max(v, 1e-12 * max(w.values())) for k, v in w.items()}
    lo = {k: int(min(max(minimum, 0), cap[k])) for k in keys}
    by_weight = sorted(keys, key=lambda k: (-w[k], keys.index(k)))
    if total <= sum(lo.values()):
        # not enough for every floor: hand out one trial at a time, heaviest tasks first
        left = total
        while left > 0:
            for k in by_weight:
                if left and result[k] < lo[k]:
                    result[k] += 1
                    left -= 1
        return result
    if total >= sum(cap.values()):
        return {k: int(cap[k]) for k in keys}
    share = _water_fill(w, lo, cap, total)
    result = {k: math.floor(share[k]) for k in keys}
    left = total - sum(result.values())
    # largest fractional remainders first (heavier tasks on ties) get the trials rounding dropped
    order = sorted(keys, key=lambda k: (-(share[k] - result[k]), -w[k], keys.index(k)))
    while left > 0:
        progressed = False
        for k in order:
            if left and result[k] < cap[k]:
                result[k] += 1
                left -= 1
                progressed = True
        if not progressed:
            break
    return result


def next_task(weights: Mapping[str, float], done: Mapping[str, int], budget: Mapping[str, int]) -> str | None:
    """The key with the largest unfilled fraction of its budget (heavier tasks on ties), so
    tasks advance together batch by batch and a run cut short has touched every layer.
    None once every budget is used."""
    best: tuple[float, float, int] | None = None
    choice = None
    for index, key in enumerate(budget):
        planned = int(budget[key])
        left = planned - int(done.get(key, 0))
        if planned <= 0 or left <= 0:
            continue
        rank = (left / planned, float(weights.get(key, 0.0)), -index)
        if best is None or rank > best:
            best, choice = rank, key
    return choice
