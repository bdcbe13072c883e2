"""From an ordered graph to planner buffers: who lives when, who may share, who needs scratch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tinyc.ir import Graph
from tinyc.memory.checker import check_plan
from tinyc.memory.planner import Buffer, MemoryPlan, plan_memory
from tinyc.ops import get_op

ALIGNMENT = 16


@dataclass
class MemoryLayout:
    """The planned arena: where every runtime tensor (and kernel scratch) lives."""

    plan: MemoryPlan
    buffers: list[Buffer]
    tensor_buffer: dict[str, str]  # tensor name -> buffer name (alias ops share one)
    scratch: dict[str, str] = field(default_factory=dict)  # node name -> scratch buffer name
    #: control-flow nodes (Loop, Scan): the plan of their body, placed inside the node's scratch
    subplans: dict[str, MemoryLayout] = field(default_factory=dict)
    #: (a body's plan) tensors stored outside it, by the enclosing graph: tensor -> the outer
    #: tensor it is (itself, or what an alias op renamed)
    external: dict[str, str] = field(default_factory=dict)

    @property
    def offsets(self) -> dict[str, int]:
        return self.plan.offsets

    @property
    def arena_bytes(self) -> int:
        return self.plan.arena_bytes

    @property
    def lower_bound_bytes(self) -> int:
        return self.plan.lower_bound_bytes

    def buffer_of(self, tensor: str) -> str:
        return self.tensor_buffer[tensor]

    def offset_of(self, tensor: str) -> int:
        return self.plan.offsets[self.tensor_buffer[tensor]]


def _aligned(n: int) -> int:
    return max(ALIGNMENT, (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT)


def build_buffers(
    graph: Graph, schedules: dict[str, dict[str, Any]], target: str
) -> tuple[list[Buffer], dict[str, str], dict[str, str]]:
    """Liveness over the node order. Step s is node s; graph inputs are live from step 0 and
    graph outputs until the last step (they are copied out after the run)."""
    buffers, tensor_buffer, scratch, _ = _build_buffers(graph, schedules, target)
    return buffers, tensor_buffer, scratch


def _build_buffers(
    graph: Graph,
    schedules: dict[str, dict[str, Any]],
    target: str,
    external: frozenset[str] = frozenset(),
    keep_inputs: bool = False,
    body_bytes: dict[str, int] | None = None,
) -> tuple[list[Buffer], dict[str, str], dict[str, str], dict[str, str]]:
    """build_buffers, also for a control-flow body: `external` tensors live outside the plan (the
    enclosing graph's), `keep_inputs` keeps the graph inputs live to the last step (a body's
    inputs are rewritten between iterations from its outputs, so the two must never share bytes),
    `body_bytes` adds each control-flow node's body arena to its scratch."""
    n_steps = max(1, len(graph.nodes))
    ext: dict[str, str] = {name: name for name in external}
    tensor_buffer: dict[str, str] = {}
    sizes: dict[str, int] = {}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    inplace: dict[str, str] = {}

    def touch(buf: str, step: int) -> None:
        first[buf] = min(first.get(buf, step), step)
        last[buf] = max(last.get(buf, step), step)

    for name in graph.inputs:
        tensor_buffer[name] = name
        sizes[name] = graph.tensor(name).nbytes
        touch(name, 0)

    scratch: dict[str, str] = {}
    for step, node in enumerate(graph.nodes):
        opdef = get_op(node.op)
        for i in node.inputs:
            if i and not graph.tensor(i).is_constant and i not in ext:
                touch(tensor_buffer[i], step)
        for j, out in enumerate(node.outputs):
            if not out:
                continue
            src = node.inputs[0] if node.inputs else ""
            if opdef.alias and j == 0 and src in ext:
                ext[out] = ext[src]  # renames an outer tensor: stored where that one is
                continue
            if opdef.alias and j == 0 and src and not graph.tensor(src).is_constant:
                tensor_buffer[out] = tensor_buffer[src]  # reshape-like: the same bytes, renamed
                sizes[tensor_buffer[out]] = max(sizes[tensor_buffer[out]], graph.tensor(out).nbytes)
            else:
                tensor_buffer[out] = out
                sizes[out] = graph.tensor(out).nbytes
                if (
                    opdef.inplace
                    and j == 0
                    and src
                    and not graph.tensor(src).is_constant
                    and graph.tensor(src).nbytes == graph.tensor(out).nbytes
                    and src not in graph.inputs
                    and src not in ext
                ):
                    inplace[out] = tensor_buffer[src]
            touch(tensor_buffer[out], step)
        extra = opdef.scratch_bytes(node, graph, schedules.get(node.name, {}), target)
        extra += (body_bytes or {}).get(node.name, 0)
        if extra > 0:
            sname = f"{node.name}::scratch"
            scratch[node.name] = sname
            sizes[sname] = extra
            touch(sname, step)
    # Outputs are read after the last node (copied out, or back into a body's inputs): live one
    # step past it, so no in-place kernel of the last step may overwrite one.
    for name in graph.outputs + (graph.inputs if keep_inputs else []):
        if name in tensor_buffer:
            touch(tensor_buffer[name], n_steps)
    buffers = []
    for buf in sizes:
        hint = inplace.get(buf)
        buffers.append(Buffer(buf, max(1, sizes[buf]), first[buf], last[buf], hint))
    return buffers, tensor_buffer, scratch, ext


def plan_graph_memory(graph: Graph, schedules: dict[str, dict[str, Any]], target: str) -> MemoryLayout:
    """The arena plan of `graph` under `schedules` for a schedule target (scratch sizes are the
    target's: a knob a schedule leaves out takes that target's default)."""
    return _plan(graph, schedules, target)


def _plan(
    graph: Graph,
    schedules: dict[str, dict[str, Any]],
    target: str,
    external: frozenset[str] = frozenset(),
    keep_inputs: bool = False,
) -> MemoryLayout:
    """Plan `graph`; a control-flow node's body is planned once (not per iteration), on its own,
    and its arena becomes part of the node's scratch. Body kernels run on their default
    schedules (the tuner sees only the top-level nodes)."""
    subplans: dict[str, MemoryLayout] = {}
    for node in graph.nodes:
        wiring = getattr(get_op(node.op), "body_wiring", None)
        if wiring is not None:
            outer = frozenset(name for _, name in wiring(node, graph).outer)
            sub = _plan(node.attrs["body"], {}, target, outer, keep_inputs=True)
            check_plan(sub.buffers, sub.plan)
            subplans[node.name] = sub
    body_bytes = {name: sub.arena_bytes for name, sub in subplans.items()}
    buffers, tensor_buffer, scratch, ext = _build_buffers(graph, schedules, target, external, keep_inputs, body_bytes)
    plan = plan_memory(buffers, alignment=ALIGNMENT)
    return MemoryLayout(plan, buffers, tensor_buffer, scratch, subplans, ext)
