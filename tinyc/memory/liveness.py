"""From an ordered graph to planner buffers: who lives when, who may share, who needs scratch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tinyc.ir import Graph
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
    n_steps = max(1, len(graph.nodes))
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
            if i and not graph.tensor(i).is_constant:
                touch(tensor_buffer[i], step)
        for j, out in enumerate(node.outputs):
            if not out:
                continue
            src = node.inputs[0] if node.inputs else ""
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
                ):
                    inplace[out] = tensor_buffer[src]
            touch(tensor_buffer[out], step)
        extra = opdef.scratch_bytes(node, graph, schedules.get(node.name, {}), target)
        if extra > 0:
            sname = f"{node.name}::scratch"
            scratch[node.name] = sname
            sizes[sname] = extra
            touch(sname, step)
    for name in graph.outputs:
        if name in tensor_buffer:
            touch(tensor_buffer[name], n_steps - 1)
    buffers = []
    for buf in sizes:
        hint = inplace.get(buf)
        buffers.append(Buffer(buf, max(1, sizes[buf]), first[buf], last[buf], hint))
    return buffers, tensor_buffer, scratch


def plan_graph_memory(graph: Graph, schedules: dict[str, dict[str, Any]], target: str) -> MemoryLayout:
    """The arena plan of `graph` under `schedules` for a schedule target (scratch sizes are the
    target's: a knob a schedule leaves out takes that target's default)."""
    buffers, tensor_buffer, scratch = build_buffers(graph, schedules, target)
    plan = plan_memory(buffers, alignment=ALIGNMENT)
    return MemoryLayout(plan, buffers, tensor_buffer, scratch)
