"""From an optimised graph to files: schedules, memory plan (checked), C sources, manifest, report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tinyc.codegen.dialect import C99, OPENCL
from tinyc.codegen.emitter import Placement, generate_c
from tinyc.numerics.text import c_prefix
from tinyc.ir import Graph
from tinyc.ir.isa import Isa
from tinyc.memory import MemoryLayout, check_plan, plan_graph_memory
from tinyc.ops import get_op
from tinyc.quantize.io import io_quant
from tinyc.schedule import default_schedules


@dataclass
class GeneratedProject:
    files: dict[str, str]
    manifest: dict[str, Any]
    report: dict[str, Any]
    layout: MemoryLayout
    schedules: dict[str, dict[str, Any]]
    blobs: dict[str, bytes] = field(default_factory=dict)  # binary files (the OpenCL weights)


def generate(
    graph: Graph,
    prefix: str | None = None,
    target: str = "host",
    schedules: dict[str, dict[str, Any]] | None = None,
    placement: Placement | None = None,
) -> GeneratedProject:
    """Sources, manifest and report of `graph` for a schedule target (a Target's `schedule_target`):
    its `Isa` chooses the dialect (C99, or OpenCL C plus the host program for work-item targets).
    `placement`: the shared arena and the baked-in sections (tinyc.codegen.emitter.Placement)."""
    # names in the model (and --name) are untrusted text: the prefix is tinyc's own identifier
    prefix = c_prefix(prefix or graph.name)
    schedules = schedules if schedules is not None else default_schedules(graph, target)
    layout = plan_graph_memory(graph, schedules, target)
    check_plan(layout.buffers, layout.plan)  # a wrong plan must never reach the C code
    work_items = Isa.parse(target).work_items  # OpenCL: kernels over work-item grids, a host program
    gen = generate_c(graph, layout, schedules, prefix, OPENCL if work_items else C99, target, placement)
    render = _render_context(graph, gen, prefix)
    manifest: dict[str, Any] = {
        "prefix": prefix,
        "model": graph.name,
        "target": target,
        "inputs": [_io_spec(graph, n, n) for n in graph.inputs],
        "outputs": [_io_spec(graph, pub, n) for pub, n in graph.public_outputs()],
        "render": render,
    }
    if placement is not None and (placement.arena_section or placement.weights_section):
        manifest["sections"] = {"arena": placement.arena_section, "weights": placement.weights_section}
    if placement is not None and placement.shared_arena:
        manifest["shared_arena"] = True
    report = build_report(graph, layout, gen, schedules, prefix, target)
    if work_items:
        from tinyc.codegen.opencl_project import opencl_files

        files, blobs, extra = opencl_files(graph, gen, layout, schedules, prefix)
        manifest.update(extra)
        return GeneratedProject(files, manifest, report, layout, schedules, blobs)
    return GeneratedProject(gen.files, manifest, report, layout, schedules)


def _io_spec(graph: Graph, public: str, internal: str) -> dict[str, Any]:
    """One model input/output as the runners see it; an int8 one carries its grid (quantize.io)."""
    t = graph.tensor(internal)
    spec: dict[str, Any] = {
        "name": public,
        "shape": list(t.shape),
        "dtype": t.dtype,
        "layout": graph.io_layout.get(public, ""),
    }
    grid = io_quant(t)
    if grid is not None:
        spec["quant"] = grid
    return spec


def _render_context(graph: Graph, gen: Any, prefix: str) -> dict[str, Any]:
    keep = ("ident", "ctype", "count", "bytes", "const")
    return {
        "prefix": prefix,
        "model": graph.name,
        "inputs": [dict({k: v[k] for k in keep}, preserved=v["preserved"]) for v in gen.inputs],
        "outputs": [{k: v[k] for k in keep} for v in gen.outputs],
    }


def build_report(
    graph: Graph, layout: MemoryLayout, gen: Any, schedules: dict[str, dict[str, Any]], prefix: str, target: str
) -> dict[str, Any]:
    layers = []
    code_index = {layer.node.name: layer.index for layer in gen.layers}
    for node in graph.nodes:
        opdef = get_op(node.op)
        out = node.outputs[0]
        layers.append(
            {
                "name": node.source or node.name,
                "op": node.op,
                "kernel": code_index.get(node.name),
                "output_shape": list(graph.tensor(out).shape),
                "macs": opdef.macs(node, graph),
                "params": opdef.params(node, graph),
                "arena_offset": layout.offset_of(out),
                "arena_size": graph.tensor(out).nbytes,
                "alias": opdef.alias,
                "schedule": schedules.get(node.name, {}),
                # a Loop/Scan's scratch also holds its body's arena, planned once (memory.liveness)
                "scratch_bytes": opdef.scratch_bytes(node, graph, schedules.get(node.name, {}), target)
                + (layout.subplans[node.name].arena_bytes if node.name in layout.subplans else 0),
            }
        )
    return {
        "model": graph.name,
        "prefix": prefix,
        "macs": sum(layer["macs"] for layer in layers),
        "params": sum(t.size for t in graph.tensors.values() if t.is_constant),
        "weights_bytes": gen.weights_bytes,
        "arena_bytes": layout.arena_bytes,
        "arena_lower_bound_bytes": layout.lower_bound_bytes,
        "memory_strategy": layout.plan.strategy,
        "memory_strategies": layout.plan.strategies,
        "inputs": {n: list(graph.tensor(n).shape) for n in graph.inputs},
        "outputs": {pub: list(graph.tensor(n).shape) for pub, n in graph.public_outputs()},
        "layers": layers,
    }
