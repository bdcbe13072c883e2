"""Schedules: the knob values that say *how* each kernel runs (tiles, unroll, loop order).

Today every layer gets its op's default heuristic; a tuning log will override them later.
"""
from __future__ import annotations

from typing import Any

from tinyc.ir import Graph
from tinyc.ops import get_op


def default_schedules(graph: Graph, target: str = "host") -> dict[str, dict[str, Any]]:
    """The untuned schedule per node: a pure function of shapes (like CMSIS-NN's variant choice)."""
    result: dict[str, dict[str, Any]] = {}
    for node in graph.nodes:
        opdef = get_op(node.op)
        sched = opdef.default_schedule(node, graph, target)
        knobs = opdef.knobs(node, graph)
        for k, v in sched.items():
            if k in knobs and v not in knobs[k]:
                raise ValueError(f"default schedule of {node.op} sets {k}={v}, not among {knobs[k]}")
        result[node.name] = sched
    return result
