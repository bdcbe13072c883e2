"""Offset assignment for the static tensor arena.

Every intermediate tensor of a compiled model lives at a fixed byte offset in
one static arena.  Given each tensor's size and live interval (in execution
steps) we pick offsets so that tensors that are live at the same time never
share bytes, while keeping the arena as small as possible.

This is the dynamic-storage-allocation problem (NP-hard), so we run several
cheap heuristics plus a bounded local search and keep the best result.  Ideas
follow TFLite Micro's GreedyMemoryPlanner (size-ordered first fit) and TVM's
USMP "greedy by conflicts" / "hill climb" planners; the code is our own.

In-place elementwise kernels are supported through ``Buffer.inplace_of``: when
the hint is legal (see :func:`legal_inplace_target`) the output may reuse the
input's start offset.  Legal hints are merged into chains ("groups") that are
placed as one unit sharing a single offset.

All work is done in units of ``alignment`` bytes: with aligned offsets,
``off + size <= other_off`` holds iff ``off + align_up(size) <= other_off``,
so rounding sizes up loses nothing and keeps the integers small.
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from itertools import accumulate
from dataclasses import dataclass
from collections.abc import Callable, Sequence

__all__ = [
    "Buffer",
    "MemoryPlan",
    "STRATEGY_NAMES",
    "legal_inplace_target",
    "lower_bound_bytes",
    "plan_memory",
    "validate_buffers",
]


@dataclass(frozen=True)
class Buffer:
    """One tensor that needs arena space.

    ``first`` is the step that writes it, ``last`` the last step that reads it
    (inclusive).  ``inplace_of`` names a buffer whose start offset this one may
    reuse (elementwise in-place op); it is only a hint, honoured when legal.
    """

    name: str
    size: int
    first: int
    last: int
    inplace_of: str | None = None


@dataclass
class MemoryPlan:
    """Result of :func:`plan_memory`.

    ``lower_bound_bytes`` is the in-place-aware bound of
    :func:`lower_bound_bytes`; ``arena_bytes`` is never below it.
    ``strategies`` maps every strategy tried to the arena size it reached.
    """

    offsets: dict[str, int]
    arena_bytes: int
    lower_bound_bytes: int
    strategy: str
    strategies: dict[str, int]


# ---------------------------------------------------------------------------
# validation and shared helpers
# ---------------------------------------------------------------------------


def _align_up(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _units(size: int, alignment: int) -> int:
    """Size in alignment units (ceil), the currency of the placer."""
    return -(-size // alignment)


def _check_alignment(alignment: int) -> None:
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1:
        raise ValueError(f"alignment must be a positive int, got {alignment!r}")


def validate_buffers(buffers: Sequence[Buffer]) -> dict[str, Buffer]:
    """Reject malformed input early so planner bugs are not blamed for it.

    Returns a name -> buffer map (names must be unique, since plans are keyed
    by name).
    """
    by_name: dict[str, Buffer] = {}
    for b in buffers:
        if not isinstance(b, Buffer):
            raise TypeError(f"expected Buffer, got {type(b).__name__}")
        if b.name in by_name:
            raise ValueError(f"duplicate buffer name {b.name!r}")
        for field_name in ("size", "first", "last"):
            v = getattr(b, field_name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"buffer {b.name!r}: {field_name} must be an int, got {v!r}")
        if b.size <= 0:
            raise ValueError(f"buffer {b.name!r}: size must be > 0, got {b.size}")
        if b.last < b.first:
            raise ValueError(f"buffer {b.name!r}: last ({b.last}) < first ({b.first})")
        by_name[b.name] = b
    return by_name


def legal_inplace_target(buf: Buffer, by_name: dict[str, Buffer]) -> Buffer | None:
    """Return the buffer whose start offset ``buf`` may legally share, else None.

    Legal means: the target exists and is not ``buf`` itself, its last read is
    exactly the step that writes ``buf`` (so an elementwise kernel reads each
    element before overwriting it), and ``buf`` fits inside it.
    """
    if buf.inplace_of is None or buf.inplace_of == buf.name:
        return None
    src = by_name.get(buf.inplace_of)
    if src is None or src.last != buf.first or buf.size > src.size:
        return None
    return src


def _intervals_intersect(a: Buffer, b: Buffer) -> bool:
    return a.first <= b.last and b.first <= a.last


# ---------------------------------------------------------------------------
# lower bound
# ---------------------------------------------------------------------------


def lower_bound_bytes(buffers: Sequence[Buffer], alignment: int = 16) -> int:
    """Max over steps of the aligned bytes that must coexist at that step.

    Rule (valid for any plan ``check_plan`` accepts): at step ``s`` sum the
    aligned sizes of all live buffers, then for every buffer ``A`` whose last
    step is ``s`` subtract the aligned size of its largest legal in-place
    partner ``B`` (``B.inplace_of == A.name``, ``B.first == s``,
    ``B.size <= A.size``).  So each legal pair counts once, as its larger
    member, and ``A`` absorbs at most one partner, since two outputs written
    at the same step cannot both sit at ``A``'s offset.  Without any legal
    hints this is the classic "max live bytes" bound.  It is a true lower
    bound: buffers sharing bytes at a step must share a start offset and form
    a legal pair, and offsets are aligned, so each occupies its aligned size.
    """
    _check_alignment(alignment)
    by_name = validate_buffers(buffers)
    if not by_name:
        return 0
    bufs = list(by_name.values())
    asize = {b.name: _align_up(b.size, alignment) for b in bufs}

    # Savings at step s: per target A ending at s, its largest legal partner.
    best_partner: dict[str, int] = {}
    for b in bufs:
        src = legal_inplace_target(b, by_name)
        if src is not None:
            best_partner[src.name] = max(best_partner.get(src.name, 0), asize[b.name])
    savings: dict[int, int] = {}
    for a_name, saved in best_partner.items():
        s = by_name[a_name].last
        savings[s] = savings.get(s, 0) + saved

    # Live bytes change only at `first` (up) and `last + 1` (down); savings
    # only apply at some `first`.  So the maximum is attained at a `first` or
    # the step right after one (where the saving is gone but nothing has
    # ended yet).  A sweep over sorted events evaluates exactly those steps.
    events: dict[int, int] = {}
    for b in bufs:
        events[b.first] = events.get(b.first, 0) + asize[b.name]
        events[b.last + 1] = events.get(b.last + 1, 0) - asize[b.name]
    candidates = sorted({b.first for b in bufs} | {b.first + 1 for b in bufs})
    event_steps = sorted(events)
    best = 0
    live = 0
    ei = 0
    for s in candidates:
        while ei < len(event_steps) and event_steps[ei] <= s:
            live += events[event_steps[ei]]
            ei += 1
        best = max(best, live - savings.get(s, 0))
    return best


# ---------------------------------------------------------------------------
# problem model: groups of in-place-merged buffers
# ---------------------------------------------------------------------------


@dataclass
class _Problem:
    """Placement problem over groups; all sizes in alignment units."""

    bufs: list[Buffer]  # sorted by name (permutation invariant)
    groups: list[list[int]]  # buffer indices per group, chain order
    size: list[int]  # group footprint: max member units
    first: list[int]  # group span start
    last: list[int]  # group span end
    # adj[g] = [(h, need_g, need_h)]: when both are placed, either
    # off[g] + need_g <= off[h] or off[h] + need_h <= off[g].
    adj: list[list[tuple[int, int, int]]]
    peak: list[int]  # max live units during the group's span
    conflict_units: list[int]  # own size + neighbours' sizes (crowding)


def _build_groups(bufs: list[Buffer], by_name: dict[str, Buffer]) -> list[list[int]]:
    """Merge legal in-place hints into chains that share one start offset.

    A chain A -> B -> C is only valid if no two non-adjacent members are live
    at the same step (that can happen with zero-length buffers, first == last),
    because only directly hinted pairs may share bytes.  Bigger partners are
    merged first since they save the most.
    """
    index = {b.name: i for i, b in enumerate(bufs)}
    pairs: list[tuple[int, int]] = []
    for i, buf in enumerate(bufs):
        src = legal_inplace_target(buf, by_name)
        if src is not None:
            pairs.append((index[src.name], i))
    pairs.sort(key=lambda p: (-bufs[p[1]].size, bufs[p[1]].first, bufs[p[1]].name))

    group_of = list(range(len(bufs)))
    chains: dict[int, list[int]] = {i: [i] for i in range(len(bufs))}
    for a, b in pairs:
        ga, gb = group_of[a], group_of[b]
        if ga == gb or chains[ga][-1] != a or chains[gb][0] != b:
            continue  # a already hosts another output, or would form a cycle
        if any(_intervals_intersect(bufs[x], bufs[y]) for x in chains[ga] for y in chains[gb] if (x, y) != (a, b)):
            continue
        chains[ga] = chains[ga] + chains[gb]
        for y in chains[gb]:
            group_of[y] = ga
        del chains[gb]
    return sorted(chains.values(), key=lambda c: c[0])


def _build_problem(buffers: Sequence[Buffer], alignment: int) -> _Problem:
    by_name = validate_buffers(buffers)
    bufs = sorted(by_name.values(), key=lambda b: b.name)
    groups = _build_groups(bufs, by_name)
    units = [_units(b.size, alignment) for b in bufs]
    group_of = [0] * len(bufs)
    for g, members in enumerate(groups):
        for i in members:
            group_of[i] = g

    # Conflicting buffer pairs via a sweep over start steps.
    need: dict[tuple[int, int], int] = {}
    order = sorted(range(len(bufs)), key=lambda i: (bufs[i].first, bufs[i].name))
    active: list[int] = []
    for i in order:
        bi = bufs[i]
        active = [j for j in active if bufs[j].last >= bi.first]
        gi = group_of[i]
        for j in active:
            gj = group_of[j]
            if gi == gj:
                continue  # same chain: validity was checked when merging
            need[(gi, gj)] = max(need.get((gi, gj), 0), units[i])
            need[(gj, gi)] = max(need.get((gj, gi), 0), units[j])
        active.append(i)

    n = len(groups)
    adj: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    for (g, h), ng in need.items():
        adj[g].append((h, ng, need[(h, g)]))
    for lst in adj:
        lst.sort()

    size = [max(units[i] for i in m) for m in groups]
    first = [min(bufs[i].first for i in m) for m in groups]
    last = [max(bufs[i].last for i in m) for m in groups]

    # Live units at each start step (groups counted once, at their
    # footprint) to find the peak pressure each group takes part in.
    steps = sorted({b.first for b in bufs})
    delta = [0] * (len(steps) + 1)
    for g in range(n):
        delta[bisect_left(steps, first[g])] += size[g]
        delta[bisect_right(steps, last[g])] -= size[g]
    live_at = list(accumulate(delta[:-1]))
    peak = [
        max(live_at[bisect_left(steps, first[g]) : bisect_right(steps, last[g])], default=size[g]) for g in range(n)
    ]
    conflict_units = [size[g] + sum(nh for _, _, nh in adj[g]) for g in range(n)]
    return _Problem(bufs, groups, size, first, last, adj, peak, conflict_units)


# ---------------------------------------------------------------------------
# placement
# ---------------------------------------------------------------------------


def _blocked(g: int, off: list[int], adj: list[list[tuple[int, int, int]]]) -> list[tuple[int, int]]:
    """Open intervals (lo, hi) of offsets that ``g`` may not take, sorted."""
    out = []
    for h, ng, nh in adj[g]:
        oh = off[h]
        if oh >= 0:
            out.append((oh - ng, oh + nh))
    out.sort()
    return out


def _first_fit(g: int, off: list[int], prob: _Problem) -> int:
    """Lowest offset that clears every placed conflicting group."""
    cand = 0
    for lo, hi in _blocked(g, off, prob.adj):
        if lo >= cand:
            break
        if hi > cand:
            cand = hi
    return cand


def _place(
    order: list[int], prob: _Problem, start: int = 0, off: list[int] | None = None, prefix_top: list[int] | None = None
) -> tuple[list[int], list[int]]:
    """Place groups in ``order``; returns offsets and running max top.

    With ``start > 0`` the placement of ``order[:start]`` (unchanged by the
    caller's move) is reused from ``off``/``prefix_top``; the local search
    relies on that to avoid redoing the untouched prefix.
    """
    n = len(order)
    if start == 0 or off is None or prefix_top is None:
        new_off = [-1] * len(prob.size)
        tops = [0] * (n + 1)
        start = 0
    else:
        new_off = list(off)
        for g in order[start:]:
            new_off[g] = -1
        tops = prefix_top[: start + 1] + [0] * (n - start)
    top = tops[start]
    for k in range(start, n):
        g = order[k]
        o = _first_fit(g, new_off, prob)
        new_off[g] = o
        top = max(top, o + prob.size[g])
        tops[k + 1] = top
    return new_off, tops


# ---------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------


def _order_by_size(p: _Problem) -> list[int]:
    """TFLite Micro order: biggest first, earliest first on ties."""
    return sorted(range(len(p.size)), key=lambda g: (-p.size[g], p.first[g], g))


def _order_by_conflict(p: _Problem) -> list[int]:
    """Groups live at the highest-pressure steps first, then most crowded.

    Packing the peak step's tensors first makes that step tight; this beats
    plain size order on graphs with skip connections, where a small long-lived
    tensor would otherwise land on top of a big short-lived one.
    """
    return sorted(range(len(p.size)), key=lambda g: (-p.peak[g], -p.conflict_units[g], -p.size[g], p.first[g], g))


def _order_by_start(p: _Problem) -> list[int]:
    """Linear-scan order: by first step, longest-lived and biggest first."""
    return sorted(range(len(p.size)), key=lambda g: (p.first[g], -p.last[g], -p.size[g], g))


def _order_by_area(p: _Problem) -> list[int]:
    """Size x lifetime: long, big tensors are the hardest to fit later."""
    return sorted(range(len(p.size)), key=lambda g: (-p.size[g] * (p.last[g] - p.first[g] + 1), -p.size[g], g))


# Each greedy strategy is a placement order; all place by first fit.
_GREEDY: dict[str, Callable[[_Problem], list[int]]] = {
    "greedy_by_size": _order_by_size,
    "greedy_by_conflict": _order_by_conflict,
    "greedy_by_area": _order_by_area,
    "first_fit_by_start": _order_by_start,
}

HILL_CLIMB = "hill_climb"
STRATEGY_NAMES: tuple[str, ...] = tuple(sorted([*_GREEDY, HILL_CLIMB]))

# Local-search budget: placements cost ~ (groups + conflict edges) each; the
# budget keeps 300-buffer graphs well under a second in CPython.  It depends
# only on the input, never on wall time, so results are reproducible.
_HILL_WORK_BUDGET = 1_000_000
_HILL_MAX_ITERS = 3000
_HILL_MIN_ITERS = 20
_HILL_SEED = 0x7C_0FFEE


def _hill_climb(p: _Problem, order: list[int], lower_units: int) -> tuple[list[int], int]:
    """Seeded local search over placement orders (TVM-style hill climb).

    Each step moves a group that touches the arena top, or a random group,
    earlier in the order, re-places only the changed suffix and keeps the new
    order if the arena did not grow (sideways moves let it escape plateaus).
    """
    n = len(order)
    off, tops = _place(order, p)
    best_top = tops[-1]
    best_off = off
    if n < 2 or best_top <= lower_units:
        return best_off, best_top
    cost = n + sum(len(a) for a in p.adj)
    iters = max(_HILL_MIN_ITERS, min(_HILL_MAX_ITERS, _HILL_WORK_BUDGET // cost))
    rng = random.Random(_HILL_SEED)
    cur_order, cur_off, cur_tops = list(order), off, tops
    pos = {g: k for k, g in enumerate(cur_order)}
    for _ in range(iters):
        top = cur_tops[-1]
        if rng.random() < 0.7:
            critical = [g for g in cur_order if cur_off[g] + p.size[g] == top]
            g = critical[rng.randrange(len(critical))]
        else:
            g = cur_order[rng.randrange(n)]
        i = pos[g]
        if i == 0:
            continue
        j = rng.randrange(i)
        new_order = cur_order[:j] + [g] + cur_order[j:i] + cur_order[i + 1 :]
        new_off, new_tops = _place(new_order, p, j, cur_off, cur_tops)
        if new_tops[-1] <= top:
            cur_order, cur_off, cur_tops = new_order, new_off, new_tops
            for k in range(j, i + 1):
                pos[cur_order[k]] = k
            if new_tops[-1] < best_top:
                best_top, best_off = new_tops[-1], new_off
                if best_top <= lower_units:
                    break
    return best_off, best_top


def plan_memory(buffers: Sequence[Buffer], alignment: int = 16) -> MemoryPlan:
    """Assign aligned arena offsets to ``buffers``, minimising the arena.

    Runs every strategy in :data:`STRATEGY_NAMES` and keeps the smallest
    arena; ties go to the alphabetically first strategy.  Output depends only
    on the set of buffers (not their order or the Python hash seed).
    """
    _check_alignment(alignment)
    buffers = list(buffers)
    prob = _build_problem(buffers, alignment)
    lb = lower_bound_bytes(buffers, alignment)
    lower_units = lb // alignment

    results: dict[str, tuple[int, list[int]]] = {}
    orders: dict[str, list[int]] = {}
    for name, make_order in _GREEDY.items():
        order = make_order(prob)
        off, tops = _place(order, prob)
        results[name] = (tops[-1], off)
        orders[name] = order

    # Hill climb starts from the best greedy order.
    seed_name = min(_GREEDY, key=lambda n: (results[n][0], n))
    hc_off, hc_top = _hill_climb(prob, orders[seed_name], lower_units)
    results[HILL_CLIMB] = (hc_top, hc_off)

    winner = min(sorted(results), key=lambda n: results[n][0])
    top, group_off = results[winner]
    offsets: dict[str, int] = {}
    for g, members in enumerate(prob.groups):
        for i in members:
            offsets[prob.bufs[i].name] = group_off[g] * alignment
    return MemoryPlan(
        offsets=offsets,
        arena_bytes=top * alignment,
        lower_bound_bytes=lb,
        strategy=winner,
        strategies={n: results[n][0] * alignment for n in sorted(results)},
    )
