"""Schedules: the knob values that say *how* each kernel runs (tiles, unroll, loop order, SIMD form).

Every layer gets its op's default heuristic for the target; a tuning log (tinyc.tune) or explicit
overrides replace it per layer. A target is a string: "host", or "mcu" followed by the ISA
extensions of the board's core ("mcu+dsp", "mcu+dsp+mve"), so that defaults and search spaces
only use instructions the core has.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from tinyc.errors import UsageError
from tinyc.ir import Graph
from tinyc.ir.isa import Isa
from tinyc.ops import get_op


def board_target(board: Mapping[str, Any]) -> str:
    """The schedule target of a board definition: "mcu" plus the extensions its core has."""
    return Isa.of_board(board).name


def knob_allowed(opdef: Any, knob: str, value: Any, target: str) -> bool:
    """Whether a knob value's needs (``OpDef.knob_isa``) are met by the target: an ISA extension
    the target's core has, or the target itself ("opencl": work-item grids, vector types, local
    memory; such values render as valid C too, but only that target's defaults and search spaces
    offer them)."""
    return Isa.parse(target).has(opdef.knob_isa(knob, value))


#: Knobs of the launch rather than the kernel code, per target: OpenCL work-items per work-group
#: (0: the driver chooses). The runner reads them; a kernel's code never depends on them for its
#: results (the "grid" variants with local memory read the local size they are launched with, and
#: only size their global size from the knob).
LAUNCH_KNOBS: dict[str, dict[str, list[Any]]] = {"opencl": {"local_size": [0, 16, 32, 64, 128, 256]}}


def target_knobs(opdef: Any, node: Any, graph: Graph, target: str) -> dict[str, list[Any]]:
    """The op's knobs plus the target's launch knobs (for ops that have generated code)."""
    knobs = dict(opdef.knobs(node, graph))
    if not opdef.alias and opdef.template is not None:
        knobs.update(LAUNCH_KNOBS.get(target, {}))
    return knobs


def default_schedules(graph: Graph, target: str = "host") -> dict[str, dict[str, Any]]:
    """The untuned schedule per node: a pure function of shapes and target (like CMSIS-NN's variant choice)."""
    result: dict[str, dict[str, Any]] = {}
    for node in graph.nodes:
        opdef = get_op(node.op)
        sched = opdef.default_schedule(node, graph, target)
        knobs = target_knobs(opdef, node, graph, target)
        for k, v in LAUNCH_KNOBS.get(target, {}).items():
            if k in knobs:  # the op's own choice (a "grid" default), else the first value
                sched = {**sched, k: sched.get(k, v[0])}
            else:
                sched = {kk: vv for kk, vv in sched.items() if kk != k}
        for k, v in sched.items():
            if k in knobs and v not in knobs[k]:
                raise ValueError(f"default schedule of {node.op} sets {k}={v}, not among {knobs[k]}")
            if k in knobs and not knob_allowed(opdef, k, v, target):
                raise ValueError(f"default schedule of {node.op} sets {k}={v}, which {target} cannot run")
        result[node.name] = sched
    return result


def apply_overrides(
    graph: Graph,
    schedules: dict[str, dict[str, Any]],
    overrides: Mapping[str, Mapping[str, Any]] | None,
    target: str = "host",
) -> dict[str, dict[str, Any]]:
    """Merge per-layer overrides (keyed by tinyc node name or ONNX node name) over `schedules`,
    checking each knob value against the op's legal values so a bad override is a clear error."""
    if not overrides:
        return schedules
    by_source = {n.source: n for n in graph.nodes if n.source}
    by_name = {n.name: n for n in graph.nodes}
    result = {k: dict(v) for k, v in schedules.items()}
    for key, knobs in overrides.items():
        node = by_name.get(key) or by_source.get(key)
        if node is None:
            raise UsageError(f"schedule for unknown layer '{key}'")
        legal = target_knobs(get_op(node.op), node, graph, target)
        for k, v in knobs.items():
            if k not in legal:
                raise UsageError(f"layer '{key}' ({node.op}) has no knob '{k}' (knobs: {', '.join(legal) or 'none'})")
            if v not in legal[k]:
                raise UsageError(f"layer '{key}' ({node.op}): {k}={v!r} is not among {legal[k]}")
        result[node.name] = {**result.get(node.name, {}), **dict(knobs)}
    return result
