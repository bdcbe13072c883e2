"""Independent validation of a :class:`MemoryPlan`.

A wrong offset in the generated C silently corrupts activations, so every plan
is checked against the raw buffer list, re-deriving conflicts from scratch
rather than trusting the planner's internal group/conflict model.
"""

from __future__ import annotations

from collections.abc import Sequence

from tinyc.memory.planner import Buffer, MemoryPlan, legal_inplace_target, validate_buffers

__all__ = ["PlanError", "check_plan"]


class PlanError(Exception):
    """A memory plan is invalid; the message names the offending buffer(s)."""


def _describe(b: Buffer, off: int) -> str:
    return f"{b.name!r} (steps [{b.first}, {b.last}], bytes [{off}, {off + b.size}))"


def _is_legal_pair(a: Buffer, b: Buffer, by_name: dict[str, Buffer]) -> bool:
    """True if one of the two is a legal in-place output of the other."""
    return legal_inplace_target(a, by_name) is b or legal_inplace_target(b, by_name) is a


def check_plan(buffers: Sequence[Buffer], plan: MemoryPlan, alignment: int = 16) -> None:
    """Raise :class:`PlanError` unless ``plan`` is a valid layout of ``buffers``.

    Checks: every buffer (and nothing else) has an offset; offsets and the
    arena size are multiples of ``alignment``; each buffer fits in the arena;
    buffers live at a common step have disjoint byte ranges.  The one
    exception is a legal in-place pair (see ``legal_inplace_target``), which
    may overlap only when both start at the same offset: an elementwise kernel
    is safe only when output element i aliases input element i.
    """
    if not isinstance(alignment, int) or alignment < 1:
        raise ValueError(f"alignment must be a positive int, got {alignment!r}")
    by_name = validate_buffers(buffers)

    arena = plan.arena_bytes
    if not isinstance(arena, int) or arena < 0 or arena % alignment:
        raise PlanError(f"arena_bytes {arena!r} is not a non-negative multiple of {alignment}")
    extra = sorted(set(plan.offsets) - set(by_name))
    if extra:
        raise PlanError(f"plan has offsets for unknown buffers: {extra}")

    for b in by_name.values():
        if b.name not in plan.offsets:
            raise PlanError(f"buffer {b.name!r} (steps [{b.first}, {b.last}]) has no offset")
        off = plan.offsets[b.name]
        if not isinstance(off, int) or isinstance(off, bool):
            raise PlanError(f"buffer {b.name!r} has non-integer offset {off!r}")
        if off < 0:
            raise PlanError(f"buffer {_describe(b, off)} has a negative offset")
        if off % alignment:
            raise PlanError(f"buffer {_describe(b, off)} offset {off} is not {alignment}-byte aligned")
        if off + b.size > arena:
            raise PlanError(f"buffer {_describe(b, off)} ends past the arena ({arena} bytes)")

    # Sweep by start step so only buffers live together are compared.
    order = sorted(by_name.values(), key=lambda b: (b.first, b.name))
    active: list[Buffer] = []
    for b in order:
        active = [a for a in active if a.last >= b.first]
        ob = plan.offsets[b.name]
        for a in active:
            oa = plan.offsets[a.name]
            if oa >= ob + b.size or ob >= oa + a.size:
                continue
            if _is_legal_pair(a, b, by_name):
                if oa == ob:
                    continue
                raise PlanError(
                    f"in-place pair {_describe(a, oa)} and {_describe(b, ob)} overlap but do not share a start offset"
                )
            raise PlanError(
                f"buffers {_describe(a, oa)} and {_describe(b, ob)} are live at the same step and overlap in memory"
            )
        active.append(b)
