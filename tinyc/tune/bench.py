"""Candidate firmware: many schedules of one or more layers in one image, so one flash serves a batch.

The batch is itself a tinyc model: a graph holding one copy of the layer per candidate, each copy
reading the layer's real inputs (graph inputs, shared by the copies of one task) and writing its
own output (a graph output). Compiled through the normal pipeline with each copy's schedule, the
generated code has one kernel per candidate, one weights array per task (copies share the constant
tensors) and every output at its own arena offset. The harness's RUN_LAYER runs copy j alone and
READ_OUTPUT reads its slice of the outputs, which the host checks against the golden model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops import get_op


@dataclass
class Candidate:
    """One schedule of one task, as placed in a batch."""

    task_key: str
    node: str  # the measured layer (first node of the task) in the source graph
    knobs: dict[str, Any]
    index: int = -1  # its layer index in the batch firmware


@dataclass
class Batch:
    """A compiled batch: where each candidate's output lives and what it must equal."""

    graph: Graph
    candidates: list[Candidate]
    inputs: dict[str, np.ndarray]  # batch graph input -> value
    expected: list[list[np.ndarray]]  # per candidate, per output: the golden value
    output_slices: list[list[tuple[int, int, str, tuple[int, ...]]]]  # per candidate: (offset, bytes, dtype, shape)
    schedules: dict[str, dict[str, Any]]


def build_batch_graph(graph: Graph, candidates: Sequence[Candidate], env: Mapping[str, np.ndarray]) -> Batch:
    """The batch graph for `candidates` (layers of `graph`); `env` holds every tensor value of one
    golden inference (``run_graph(..., keep_all=True)``): the layers' inputs and expected outputs."""
    nodes = {n.name: n for n in graph.nodes}
    bg = Graph(f"tune_batch_{len(candidates)}")
    inputs: dict[str, np.ndarray] = {}
    schedules: dict[str, dict[str, Any]] = {}
    expected: list[list[np.ndarray]] = []
    out_specs: list[list[tuple[str, str, tuple[int, ...]]]] = []
    for j, cand in enumerate(candidates):
        node = nodes[cand.node]
        renamed: list[str] = []
        for name in node.inputs:
            if not name:
                renamed.append(name)
                continue
            t = graph.tensor(name)
            if t.is_constant:
                if name not in bg.tensors:
                    bg.add_tensor(dataclasses.replace(t))
                renamed.append(name)
                continue
            local = f"{cand.node}__{name}"  # one copy of an activation per layer, shared by its candidates
            if local not in bg.tensors:
                bg.add_tensor(dataclasses.replace(t, name=local, data=None))
                bg.inputs.append(local)
                inputs[local] = np.asarray(env[name]).reshape(t.shape)
            renamed.append(local)
        outs: list[str] = []
        for o in node.outputs:
            if not o:
                outs.append(o)
                continue
            t = graph.tensor(o)
            local = f"cand{j}__{o}"
            bg.add_tensor(dataclasses.replace(t, name=local, data=None))
            bg.outputs.append(local)
            outs.append(local)
        copy = Node(f"cand{j}", node.op, renamed, outs, dict(node.attrs), source=f"cand{j}:{node.source or node.name}")
        bg.nodes.append(copy)
        schedules[copy.name] = dict(cand.knobs)
        cand.index = j
        expected.append([np.asarray(env[o]).reshape(graph.tensor(o).shape) for o in node.outputs if o])
        out_specs.append(
            [(local, graph.tensor(o).dtype, graph.tensor(o).shape) for local, o in zip(outs, node.outputs) if o]
        )
    bg.output_names = list(bg.outputs)
    # byte offset of each output in the harness's concatenated output range
    slices: list[list[tuple[int, int, str, tuple[int, ...]]]] = []
    pos = 0
    for specs in out_specs:
        row = []
        for _local, dtype, shape in specs:
            n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            row.append((pos, n, dtype, shape))
            pos += n
        slices.append(row)
    return Batch(bg, list(candidates), inputs, expected, slices, schedules)


def candidate_is_buildable(graph: Graph, node_name: str, knobs: Mapping[str, Any], target: str) -> str | None:
    """None when the op can render this schedule, else the reason (recorded as build_error)."""
    node = next(n for n in graph.nodes if n.name == node_name)
    try:
        get_op(node.op).kernel_context(node, graph, dict(knobs), target)
    except Exception as exc:  # noqa: BLE001  (any refusal of the op is this candidate's failure)
        return f"{type(exc).__name__}: {exc}"
    return None


def generate_batch(batch: Batch, target: str) -> Any:
    """Sources of the batch model (prefix "tune"), its schedules as given."""
    from tinyc.codegen import generate
    from tinyc.schedule import default_schedules

    sched = default_schedules(batch.graph, target)
    sched.update(batch.schedules)
    return generate(batch.graph, prefix="tune", target=target, schedules=sched)


def write_board_batch(batch: Batch, out_dir: Path, board: Mapping[str, Any], target: str) -> Any:
    """A firmware project for the batch (the serial harness as main)."""
    from tinyc.targets.board import write_board_project

    gen = generate_batch(batch, target)
    write_board_project(Path(out_dir), gen.files, gen.manifest, dict(board))
    return gen


def write_host_batch(batch: Batch, out_dir: Path, cflags: str | None = None) -> Any:
    """A host shared-library project for the batch."""
    from tinyc.targets import host

    gen = generate_batch(batch, "host")
    host.write_project(Path(out_dir), gen.files, gen.manifest, cflags if cflags is not None else host.default_cflags())
    return gen


def write_opencl_batch(batch: Batch, out_dir: Path) -> Any:
    """An OpenCL folder for the batch (one kernel per candidate, named "cand<j>:...")."""
    from tinyc.targets import opencl

    gen = generate_batch(batch, "opencl")
    opencl.write_project(Path(out_dir), gen.files, gen.blobs, gen.manifest)
    return gen
