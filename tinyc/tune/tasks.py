"""Tuning tasks: the unique tunable layers of a graph and the legal schedules of each.

A task is keyed by what decides a kernel's speed and code: op, operand shapes and dtypes, the
node's attributes (strides, pads, groups, quantization multipliers/shifts and zero points) and
the knob values the op offers for it (which depend on the weights: e.g. the int16 pair form is
only offered when exact). Identical layers share a task, so they are measured once.

The space is every combination of the op's knob values that the target's ISA can run
(``OpDef.knob_isa``), canonicalised (``OpDef.canonical_schedule`` drops knobs a variant ignores),
less what the op does not search on the target (``OpDef.searched``: forms measurements show never
win there) and without candidates whose scratch would push the arena over the RAM budget: those
are never built.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterator, Mapping

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops import get_op
from tinyc.schedule import knob_allowed


@dataclass
class Task:
    """One unique tunable layer."""

    key: str
    op: str
    nodes: list[str]  # tinyc node names sharing this key (first is measured)
    sources: list[str]  # their ONNX node names, for tables
    info: dict[str, Any]  # op, macs, dims, in/out/weight bytes: cost-model features
    space: list[dict[str, Any]]
    default: dict[str, Any]
    dropped_for_memory: int = 0
    scratch: dict[str, int] = field(default_factory=dict)  # knobs_id -> scratch bytes

    @property
    def count(self) -> int:
        return len(self.nodes)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _key_knobs(opdef: Any, node: Node, graph: Graph) -> dict[str, list[Any]]:
    """The knob values that enter a task's key: all but those only the OpenCL target offers
    (its work-item grids, vector widths, local memory), so that adding OpenCL schedules did not
    change the keys, and existing logs, of the C targets. The OpenCL target's records are keyed
    by device anyway."""
    knobs = {}
    for k, values in opdef.knobs(node, graph).items():
        kept = [v for v in values if opdef.knob_isa(k, v) != "opencl"]
        if len(kept) == len(values) or len(kept) > 1:  # else an OpenCL-only knob (vec, local_mem)
            knobs[k] = kept
    return knobs


def task_key(node: Node, graph: Graph) -> str:
    """Readable op + output shape, then a digest of everything that makes the kernel differ."""
    opdef = get_op(node.op)
    operands = [(graph.tensor(i).shape, graph.tensor(i).dtype) if i else None for i in node.inputs]
    results = [(graph.tensor(o).shape, graph.tensor(o).dtype) for o in node.outputs if o]
    body = {"op": node.op, "in": operands, "out": results, "attrs": node.attrs, "knobs": _key_knobs(opdef, node, graph)}
    digest = hashlib.sha256(json.dumps(_jsonable(body), sort_keys=True, default=str).encode()).hexdigest()[:16]
    out_shape = "x".join(str(d) for d in graph.tensor(node.outputs[0]).shape)
    in_shape = "x".join(str(d) for d in graph.tensor(node.inputs[0]).shape)
    return f"{node.op}[{in_shape}->{out_shape}]#{digest}"


def task_info(node: Node, graph: Graph) -> dict[str, Any]:
    """Shape facts the cost model learns from (tinyc.tune.features); the op names its dimensions
    (``OpDef.task_dims``)."""
    opdef = get_op(node.op)
    dims = opdef.task_dims(node, graph)
    consts = [graph.tensor(i) for i in node.inputs if i and graph.tensor(i).is_constant]
    acts = [graph.tensor(i) for i in node.inputs if i and not graph.tensor(i).is_constant]
    return {
        "op": node.op,
        "macs": int(opdef.macs(node, graph)),
        "dims": dims,
        "in_bytes": int(sum(t.nbytes for t in acts)),
        "out_bytes": int(sum(graph.tensor(o).nbytes for o in node.outputs if o)),
        "weight_bytes": int(sum(t.nbytes for t in consts)),
    }


def _same_value(a: Any, b: Any) -> bool:
    """Equal and of the same kind: in a schedule `True` is not 1 and 8.0 is not 8 (each renders
    as other C, or as C that does not compile)."""
    a, b = _jsonable(a), _jsonable(b)
    return type(a) is type(b) and a == b


def drop_unoffered_records(log: Any, board: str, key: str, node: Node, graph: Graph, target: str) -> None:
    """Forget (with a warning naming the line) the log's records of task `key` on `board` whose
    knobs `node`'s op does not offer: the one check `tinyc tune` and `compile --tuning-log` make."""
    opdef = get_op(node.op)
    legal = opdef.knobs(node, graph)
    log.drop_invalid_knobs(board, key, lambda knobs: knobs_problem(knobs, legal, opdef, target))


def knobs_problem(
    knobs: Mapping[str, Any], legal: Mapping[str, list[Any]], opdef: Any = None, target: str | None = None
) -> str | None:
    """Why `knobs` (from a tuning log: outside input) is not a schedule the op offers, or None.
    `legal` is ``OpDef.knobs(node, graph)``; with `opdef` and `target`, a value the target's ISA
    cannot run (``knob_allowed``) is refused too. Keys starting with "_" are derived numbers, not
    knobs, and are ignored; a knob left out keeps its default."""
    for name, value in knobs.items():
        if str(name).startswith("_"):
            continue
        if name not in legal:
            return f"unknown knob {name!r} (this op has {', '.join(sorted(legal)) or 'none'})"
        if not any(_same_value(value, v) for v in legal[name]):
            shown = ", ".join(json.dumps(_jsonable(v)) for v in legal[name])
            return f"knob {name} = {json.dumps(_jsonable(value))} is not one of the values offered ({shown})"
        if opdef is not None and target is not None and not knob_allowed(opdef, name, value, target):
            return f"knob {name} = {json.dumps(_jsonable(value))} needs an ISA extension target {target} lacks"
    return None


def schedule_space(node: Node, graph: Graph, target: str) -> list[dict[str, Any]]:
    """Every distinct legal knob combination the target can run, canonical, in a stable order,
    less what the op does not search there (``OpDef.searched``)."""
    opdef = get_op(node.op)
    knobs = opdef.knobs(node, graph)
    names = sorted(knobs)
    allowed = {k: [v for v in knobs[k] if knob_allowed(opdef, k, v, target)] for k in names}
    seen: set[str] = set()
    space = []
    for values in itertools.product(*(allowed[k] for k in names)):
        cand = opdef.canonical_schedule(node, graph, dict(zip(names, values)))
        ident = json.dumps(cand, sort_keys=True)
        if ident not in seen:
            seen.add(ident)
            space.append(cand)
    return opdef.searched(node, graph, space, target)


@contextmanager
def _defaults_remembered(opdef: Any) -> Iterator[None]:
    """While the scratch of a whole space is computed: the op's default schedule computed once
    per (node, target), not once per candidate (an op completes every schedule it is given with
    its default, a pure function of node, graph and target; it dominated extracting the tasks of
    a model). Each caller still gets its own copy."""
    if "default_schedule" in vars(opdef):  # already wrapped (nested), or an instance override
        yield
        return
    original = opdef.default_schedule
    memo: dict[tuple[int, int, str], tuple[Any, Any, dict[str, Any]]] = {}

    def default_schedule(node: Node, graph: Graph, target: str) -> dict[str, Any]:
        key = (id(node), id(graph), target)
        hit = memo.get(key)
        if hit is None or hit[0] is not node or hit[1] is not graph:
            hit = memo[key] = (node, graph, original(node, graph, target))
        return copy.deepcopy(hit[2])

    opdef.default_schedule = default_schedule
    try:
        yield
    finally:
        del opdef.default_schedule


def extract_tasks(
    graph: Graph,
    target: str,
    defaults: Mapping[str, Mapping[str, Any]],
    arena_bytes: int | None = None,
    ram_budget: int | None = None,
) -> list[Task]:
    """The graph's tasks in execution order of their first layer. With a RAM budget, a candidate
    whose scratch exceeds the default's by more than the budget leaves (budget - planned arena)
    is dropped: the arena can grow by at most that much (a bound: the planner may fit it in less)."""
    from tinyc.tune.log import knobs_id

    tasks: dict[str, Task] = {}
    for node in graph.nodes:
        opdef = get_op(node.op)
        if opdef.alias or not opdef.knobs(node, graph):
            continue
        key = task_key(node, graph)
        if key in tasks:
            tasks[key].nodes.append(node.name)
            tasks[key].sources.append(node.source or node.name)
            continue
        default = opdef.canonical_schedule(node, graph, dict(defaults.get(node.name, {})))
        space = schedule_space(node, graph, target)
        if default not in space:
            space.insert(0, default)
        with _defaults_remembered(opdef):
            scratch = {knobs_id(c): int(opdef.scratch_bytes(node, graph, c, target)) for c in space}
        dropped = 0
        if ram_budget is not None and arena_bytes is not None:
            room = ram_budget - arena_bytes + scratch[knobs_id(default)]
            kept = [c for c in space if scratch[knobs_id(c)] <= room or c == default]
            dropped = len(space) - len(kept)
            space = kept
        tasks[key] = Task(
            key,
            node.op,
            [node.name],
            [node.source or node.name],
            task_info(node, graph),
            space,
            default,
            dropped,
            scratch,
        )
    return list(tasks.values())
