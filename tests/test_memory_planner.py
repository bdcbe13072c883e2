"""Tests for arena offset assignment (tinyc.memory.planner / checker)."""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinyc.memory.checker import PlanError, check_plan
from tinyc.memory.planner import (
    STRATEGY_NAMES,
    Buffer,
    MemoryPlan,
    lower_bound_bytes,
    plan_memory,
)


def _plan_ok(buffers: list[Buffer], alignment: int = 16) -> MemoryPlan:
    """Plan, validate, and check the invariants every plan must satisfy."""
    plan = plan_memory(buffers, alignment)
    check_plan(buffers, plan, alignment)
    assert plan.arena_bytes >= plan.lower_bound_bytes
    assert plan.lower_bound_bytes == lower_bound_bytes(buffers, alignment)
    assert set(plan.strategies) == set(STRATEGY_NAMES)
    assert plan.arena_bytes == plan.strategies[plan.strategy] == min(plan.strategies.values())
    # ties go to the alphabetically first strategy
    assert plan.strategy == min(n for n, a in plan.strategies.items() if a == plan.arena_bytes)
    assert all(o % alignment == 0 for o in plan.offsets.values())
    assert plan.arena_bytes % alignment == 0
    return plan


def _classic_bound(buffers: list[Buffer], alignment: int = 16) -> int:
    """Max live aligned bytes, ignoring in-place hints (brute force)."""
    if not buffers:
        return 0
    al = lambda n: -(-n // alignment) * alignment  # noqa: E731
    lo = min(b.first for b in buffers)
    hi = max(b.last for b in buffers)
    return max(
        sum(al(b.size) for b in buffers if b.first <= s <= b.last) for s in range(lo, hi + 1)
    )


# ---------------------------------------------------------------------------
# hand-made cases
# ---------------------------------------------------------------------------


def test_empty_input():
    plan = _plan_ok([])
    assert plan.offsets == {}
    assert plan.arena_bytes == 0
    assert plan.lower_bound_bytes == 0


def test_single_buffer_is_aligned_up():
    plan = _plan_ok([Buffer("x", 10, 0, 0)])
    assert plan.offsets == {"x": 0}
    assert plan.arena_bytes == 16
    assert plan.lower_bound_bytes == 16


def test_alignment_one_uses_exact_sizes():
    bufs = [Buffer("a", 3, 0, 1), Buffer("b", 5, 1, 2), Buffer("c", 7, 2, 3)]
    plan = _plan_ok(bufs, alignment=1)
    assert plan.arena_bytes == plan.lower_bound_bytes == 12


def test_linear_chain_reaches_bound():
    sizes = [4096, 1000, 20000, 20000, 300, 7000, 7000, 16, 50000, 64]
    bufs = [Buffer(f"t{i}", s, i, i + 1) for i, s in enumerate(sizes)]
    plan = _plan_ok(bufs)
    assert plan.lower_bound_bytes == 50000 + 64
    assert plan.arena_bytes == plan.lower_bound_bytes


def test_diamond_skip_connection():
    # x -> conv a -> conv b -> add(x, b) -> y ; x stays live across the branch
    bufs = [
        Buffer("x", 8000, 0, 3),
        Buffer("a", 16000, 1, 2),
        Buffer("b", 8000, 2, 3),
        Buffer("y", 8000, 3, 4),
        Buffer("z", 4000, 4, 5),
    ]
    plan = _plan_ok(bufs)
    # step 2: x + a + b = 32000 live; step 3: x + b + y = 24000
    assert plan.lower_bound_bytes == 32000
    assert plan.arena_bytes == 32000


def test_long_lived_skip_tensor_reaches_bound():
    # A small tensor live across many big short-lived ones.
    bufs = [Buffer("skip", 100, 0, 6)]
    bufs += [Buffer(f"t{i}", 10_000 if i % 2 else 9_000, i, i + 1) for i in range(6)]
    plan = _plan_ok(bufs)
    assert plan.arena_bytes == plan.lower_bound_bytes == 112 + 9008 + 10_000


def test_size_order_strands_small_tensor_but_winner_does_not():
    # Size order puts t3 at 0 beside t0, so t2 (live with t1 and t3) has to
    # go on top of t1; ordering by pressure/conflicts places t2 first.
    bufs = [
        Buffer("t0", 6000, 0, 1),
        Buffer("t1", 6000, 1, 2),
        Buffer("t2", 2000, 2, 3),
        Buffer("t3", 6000, 3, 3),
    ]
    plan = _plan_ok(bufs)
    assert plan.strategies["greedy_by_size"] == 14_000
    assert plan.strategies["greedy_by_conflict"] == 12_000
    assert plan.arena_bytes == plan.lower_bound_bytes == 12_000


def test_inplace_chain_shares_offset_and_shrinks_arena():
    bufs = [
        Buffer("x", 1000, 0, 1),
        Buffer("relu", 1000, 1, 2, inplace_of="x"),
        Buffer("sig", 1000, 2, 3, inplace_of="relu"),
        Buffer("neg", 800, 3, 4, inplace_of="sig"),
    ]
    plan = _plan_ok(bufs)
    assert len(set(plan.offsets.values())) == 1
    assert plan.arena_bytes == 1008 == plan.lower_bound_bytes

    no_hints = [replace(b, inplace_of=None) for b in bufs]
    baseline = _plan_ok(no_hints)
    assert baseline.arena_bytes == 2016
    assert plan.arena_bytes < baseline.arena_bytes
    # The bound below the classic one is what lets arena < classic bound.
    assert plan.lower_bound_bytes < _classic_bound(bufs)


def test_inplace_in_middle_of_network():
    bufs = [
        Buffer("in", 3000, 0, 1),
        Buffer("conv", 6000, 1, 2),
        Buffer("relu", 6000, 2, 3, inplace_of="conv"),
        Buffer("pool", 1500, 3, 4),
    ]
    plan = _plan_ok(bufs)
    assert plan.offsets["conv"] == plan.offsets["relu"]
    # step 1 holds in + conv; relu then reuses conv's bytes at step 2
    assert plan.arena_bytes == plan.lower_bound_bytes == 3008 + 6000


@pytest.mark.parametrize(
    "bad",
    [
        Buffer("y", 2000, 1, 2, inplace_of="x"),  # bigger than its source
        Buffer("y", 1000, 0, 2, inplace_of="x"),  # written before x's last read
        Buffer("y", 1000, 2, 3, inplace_of="x"),  # x already dead: no overlap anyway
        Buffer("y", 1000, 1, 2, inplace_of="nope"),  # unknown buffer
        Buffer("y", 1000, 1, 2, inplace_of="y"),  # self reference
    ],
)
def test_illegal_inplace_hint_is_ignored(bad):
    x = Buffer("x", 1000, 0, 1)
    bufs = [x, bad]
    plan = _plan_ok(bufs)
    expected = _plan_ok([x, replace(bad, inplace_of=None)])
    assert plan.arena_bytes == expected.arena_bytes
    assert plan.lower_bound_bytes == _classic_bound(bufs)
    if bad.first <= x.last:
        assert plan.offsets["x"] != plan.offsets["y"]


def test_two_outputs_cannot_both_reuse_one_input():
    # y1 and y2 are both written at step 1 and are live together, so at most
    # one may take x's offset.
    bufs = [
        Buffer("x", 1000, 0, 1),
        Buffer("y1", 1000, 1, 2, inplace_of="x"),
        Buffer("y2", 600, 1, 2, inplace_of="x"),
    ]
    plan = _plan_ok(bufs)
    assert plan.offsets["y1"] == plan.offsets["x"]  # bigger partner wins
    assert plan.arena_bytes == 1008 + 608 == plan.lower_bound_bytes


def test_zero_length_inplace_chain_keeps_ends_apart():
    # b is written and read at step 1, so a and c are both live at step 1:
    # they may not share bytes even though a->b and b->c are legal pairs.
    bufs = [
        Buffer("a", 512, 0, 1),
        Buffer("b", 512, 1, 1, inplace_of="a"),
        Buffer("c", 512, 1, 2, inplace_of="b"),
    ]
    plan = _plan_ok(bufs)
    assert plan.offsets["a"] != plan.offsets["c"]


def test_result_ignores_input_order():
    rng = random.Random(7)
    bufs = _layer_graph(rng, 40)
    plan = plan_memory(bufs)
    for _ in range(3):
        shuffled = list(bufs)
        rng.shuffle(shuffled)
        again = plan_memory(shuffled)
        assert again.offsets == plan.offsets
        assert again.strategies == plan.strategies
        assert again.strategy == plan.strategy


def test_rejects_malformed_buffers():
    with pytest.raises(ValueError):
        plan_memory([Buffer("a", 0, 0, 1)])
    with pytest.raises(ValueError):
        plan_memory([Buffer("a", 4, 2, 1)])
    with pytest.raises(ValueError):
        plan_memory([Buffer("a", 4, 0, 1), Buffer("a", 4, 0, 1)])
    with pytest.raises(ValueError):
        plan_memory([Buffer("a", 4, 0, 1)], alignment=0)


def test_300_buffers_plan_quickly():
    rng = random.Random(3)
    bufs = []
    for i in range(300):
        f = rng.randint(0, 100)
        hint = f"b{rng.randrange(300)}" if rng.random() < 0.3 else None
        bufs.append(Buffer(f"b{i}", rng.randint(1, 100_000), f, f + rng.randint(0, 40), hint))
    t0 = time.perf_counter()
    plan = plan_memory(bufs)
    elapsed = time.perf_counter() - t0
    check_plan(bufs, plan)
    assert elapsed < 1.0, f"planning 300 dense buffers took {elapsed:.2f}s"


# ---------------------------------------------------------------------------
# checker
# ---------------------------------------------------------------------------


def _simple_case() -> tuple[list[Buffer], MemoryPlan]:
    bufs = [Buffer("a", 100, 0, 2), Buffer("b", 50, 1, 3), Buffer("c", 100, 3, 4)]
    return bufs, _plan_ok(bufs)


def _corrupt(plan: MemoryPlan, **offsets: int) -> MemoryPlan:
    return replace(plan, offsets={**plan.offsets, **offsets})


def test_checker_catches_overlap_and_names_both():
    bufs, plan = _simple_case()
    bad = _corrupt(plan, b=plan.offsets["a"])
    with pytest.raises(PlanError) as err:
        check_plan(bufs, bad)
    msg = str(err.value)
    assert "'a'" in msg and "'b'" in msg
    assert "[0, 2]" in msg and "[1, 3]" in msg  # step intervals
    assert "bytes [" in msg


def test_checker_allows_reuse_across_time():
    bufs, plan = _simple_case()
    check_plan(bufs, _corrupt(plan, a=0, c=0, b=112))


def test_checker_catches_misaligned_offset():
    bufs, plan = _simple_case()
    with pytest.raises(PlanError, match="'c'.*aligned"):
        check_plan(bufs, _corrupt(plan, c=plan.offsets["c"] + 4))


def test_checker_catches_out_of_arena():
    bufs, plan = _simple_case()
    with pytest.raises(PlanError, match="'a'.*arena"):
        check_plan(bufs, _corrupt(plan, a=plan.arena_bytes))
    with pytest.raises(PlanError, match="arena_bytes"):
        check_plan(bufs, replace(plan, arena_bytes=plan.arena_bytes + 1))


def test_checker_catches_missing_extra_and_negative():
    bufs, plan = _simple_case()
    with pytest.raises(PlanError, match="'b'.*no offset"):
        check_plan(bufs, replace(plan, offsets={"a": 0, "c": 0}))
    with pytest.raises(PlanError, match="unknown"):
        check_plan(bufs, _corrupt(plan, ghost=0))
    with pytest.raises(PlanError, match="negative"):
        check_plan(bufs, _corrupt(plan, a=-16))


def test_checker_inplace_pair_must_share_start():
    bufs = [Buffer("x", 64, 0, 1), Buffer("y", 64, 1, 2, inplace_of="x")]
    good = MemoryPlan({"x": 0, "y": 0}, 64, 64, "manual", {})
    check_plan(bufs, good)
    shifted = MemoryPlan({"x": 0, "y": 16}, 80, 64, "manual", {})
    with pytest.raises(PlanError, match="in-place pair.*'x'.*'y'"):
        check_plan(bufs, shifted)
    # an illegal hint gives no permission to share at all
    illegal = [Buffer("x", 64, 0, 2), Buffer("y", 64, 1, 2, inplace_of="x")]
    with pytest.raises(PlanError, match="'x'.*'y'"):
        check_plan(illegal, good)


# ---------------------------------------------------------------------------
# property tests
# ---------------------------------------------------------------------------


@st.composite
def buffer_sets(draw, max_n: int = 30) -> list[Buffer]:
    """Random intervals and sizes with a mix of legal and illegal hints."""
    n = draw(st.integers(0, max_n))
    bufs: list[Buffer] = []
    for i in range(n):
        first = draw(st.integers(0, 25))
        length = draw(st.integers(0, 8))
        size = draw(st.integers(1, 100_000))
        hint = None
        if i and draw(st.integers(0, 2)) == 0:
            src = bufs[draw(st.integers(0, i - 1))]
            if draw(st.booleans()):  # make the hint legal
                first = src.last
                size = draw(st.integers(1, src.size))
            hint = src.name
        bufs.append(Buffer(f"b{i}", size, first, first + length, hint))
    return bufs


def _bound_by_definition(buffers: list[Buffer], alignment: int) -> int:
    """The documented lower-bound rule, evaluated step by step."""
    if not buffers:
        return 0
    al = lambda n: -(-n // alignment) * alignment  # noqa: E731
    by_name = {b.name: b for b in buffers}
    best = 0
    for s in range(min(b.first for b in buffers), max(b.last for b in buffers) + 1):
        live = sum(al(b.size) for b in buffers if b.first <= s <= b.last)
        partner: dict[str, int] = {}
        for b in buffers:
            src = by_name.get(b.inplace_of) if b.inplace_of not in (None, b.name) else None
            if src is not None and src.last == s == b.first and b.size <= src.size:
                partner[src.name] = max(partner.get(src.name, 0), al(b.size))
        best = max(best, live - sum(partner.values()))
    return best


_alignments = st.sampled_from([1, 4, 16, 64])
_fast = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_fast
@given(buffer_sets(), _alignments)
def test_random_plans_are_valid_and_deterministic(bufs, alignment):
    plan = _plan_ok(bufs, alignment)
    again = plan_memory(list(reversed(bufs)), alignment)
    assert again == plan


@_fast
@given(buffer_sets(), _alignments)
def test_lower_bound_matches_definition(bufs, alignment):
    lb = lower_bound_bytes(bufs, alignment)
    assert lb == _bound_by_definition(bufs, alignment)
    assert lb <= _classic_bound(bufs, alignment)
    if bufs:
        assert lb >= max(-(-b.size // alignment) * alignment for b in bufs)


@_fast
@given(buffer_sets(max_n=20))
def test_every_strategy_result_is_at_least_the_bound(bufs):
    plan = plan_memory(bufs)
    assert all(a >= plan.lower_bound_bytes for a in plan.strategies.values())


@_fast
@given(buffer_sets(max_n=20))
def test_without_hints_bound_is_classic(bufs):
    plain = [replace(b, inplace_of=None) for b in bufs]
    plan = _plan_ok(plain)
    assert plan.lower_bound_bytes == _classic_bound(plain)


# ---------------------------------------------------------------------------
# quality on layer-graph-like inputs
# ---------------------------------------------------------------------------


def _layer_graph(rng: random.Random, n_ops: int | None = None) -> list[Buffer]:
    """A random CNN-ish op sequence: op i writes t{i} at step i and reads t{i-1},
    sometimes also a recent earlier tensor (skip/residual); ~30% of ops are
    elementwise with an in-place hint on their input (legal only when the input
    has no later reader)."""
    n = n_ops or rng.randint(3, 60)
    sizes: list[int] = []
    readers: list[list[int]] = [[] for _ in range(n)]
    hints: list[str | None] = [None] * n
    size = rng.randint(1, 100_000)
    for i in range(n):
        if i > 0 and rng.random() < 0.3:
            size = sizes[i - 1]
            hints[i] = f"t{i - 1}"
        elif rng.random() < 0.5:
            size = max(1, min(100_000, int(size * rng.choice([0.25, 0.5, 1, 2, 4]))))
        else:
            size = rng.randint(1, 100_000)
        sizes.append(size)
        if i > 0:
            readers[i - 1].append(i)
            if i > 1 and rng.random() < 0.25:
                readers[rng.randint(max(0, i - 8), i - 2)].append(i)
    return [
        Buffer(f"t{i}", sizes[i], i, max(readers[i], default=i), hints[i]) for i in range(n)
    ]


def test_layer_graph_quality_vs_lower_bound():
    # Measured mean arena/bound over 500 graphs: best and hill_climb ~1.0002
    # (worst graph ~1.05), greedy_by_conflict ~1.03, greedy_by_size ~1.04,
    # greedy_by_area ~1.07, first_fit_by_start ~1.17.  The thresholds leave
    # margin for heuristic tweaks.
    rng = random.Random(2024)
    ratios: dict[str, list[float]] = {n: [] for n in STRATEGY_NAMES}
    best: list[float] = []
    for _ in range(200):
        bufs = _layer_graph(rng)
        plan = _plan_ok(bufs)
        for name, arena in plan.strategies.items():
            ratios[name].append(arena / plan.lower_bound_bytes)
        best.append(plan.arena_bytes / plan.lower_bound_bytes)
    means = {n: statistics.mean(r) for n, r in ratios.items()}
    assert statistics.mean(best) <= 1.02, means
    assert max(best) <= 1.25, means
    assert all(m <= 1.25 for m in means.values()), means
    # conflict ordering helps on branchy graphs compared to plain size order
    assert means["greedy_by_conflict"] <= means["greedy_by_size"], means
