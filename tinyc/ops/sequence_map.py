"""SequenceMap over sequences whose length is known at compile time.

A compile-time sequence is a list of tensor names (tinyc/ops/sequences.py), so mapping the body over
it is unrolling: the body is imported once per element, its inputs bound to element k of each sequence
input (a tensor input is passed to every iteration as it is) and its own names made unique per
iteration. Output j is the sequence of the iterations' j-th body outputs. Element shapes may differ
between iterations: each copy is shaped on its own. ONNX's function body for SequenceMap is a Loop
over run-time sequences, which tinyc cannot compile; this is the compile-time form of the same thing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx

from tinyc.ir import Node
from tinyc.ops.base import OpDef, register
from tinyc.ops.sequences import define_sequence

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext


def _defined_names(gp: onnx.GraphProto, out: set[str]) -> None:
    """Every name `gp` and the subgraphs nested in it define (inputs, initializers, node outputs)."""
    out.update(vi.name for vi in gp.input)
    out.update(t.name for t in gp.initializer)
    for nd in gp.node:
        out.update(o for o in nd.output if o)
        for a in nd.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                _defined_names(sub, out)


def _rename_graph(gp: onnx.GraphProto, mapping: dict[str, str], suffix: str) -> onnx.GraphProto:
    """A copy of `gp` (and of its nested subgraphs) with every name looked up in `mapping`."""

    def rn(name: str) -> str:
        return mapping.get(name, name) if name else name

    c = onnx.GraphProto()
    c.CopyFrom(gp)
    for vi in list(c.input) + list(c.output) + list(c.value_info):
        vi.name = rn(vi.name)
    for t in c.initializer:
        t.name = rn(t.name)
    for nd in c.node:
        nd.input[:] = [rn(i) for i in nd.input]
        nd.output[:] = [rn(o) for o in nd.output]
        nd.name = f"{nd.name or nd.op_type}{suffix}"
        for a in nd.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                a.g.CopyFrom(_rename_graph(a.g, mapping, suffix))
            elif a.type == onnx.AttributeProto.GRAPHS:
                renamed = [_rename_graph(sub, mapping, suffix) for sub in a.graphs]
                del a.graphs[:]
                a.graphs.extend(renamed)
    return c


def _renamed_body(body: onnx.GraphProto, bound: dict[str, str], suffix: str) -> tuple[onnx.GraphProto, list[str]]:
    """A copy of `body` whose inputs read the names in `bound` and every other name it (or a nested
    subgraph) defines is suffixed, so that several copies coexist in one graph (ONNX names are
    unique across nested scopes, so one flat mapping is enough); returns it, input-less, with its
    output names."""
    defined: set[str] = set()
    _defined_names(body, defined)
    mapping = {name: f"{name}{suffix}" for name in defined}
    mapping.update(bound)
    c = _rename_graph(body, mapping, suffix)
    del c.input[:]
    return c, [vi.name for vi in c.output]


@register
class SequenceMap(OpDef):
    """attr `body`; inputs (sequence, additional sequences or tensors...); outputs: sequences."""

    op = "SequenceMap"
    onnx_ops = ("SequenceMap",)
    template = None
    dtypes = ()

    def import_onnx(self, ctx):
        body = ctx.graph_attr("body")
        if len(body.input) != len(ctx.inputs):
            ctx.invalid(f"the body takes {len(body.input)} inputs, the node gives {len(ctx.inputs)}")
        if len(body.output) != len(ctx.outputs):
            ctx.invalid(f"the body gives {len(body.output)} outputs, the node has {len(ctx.outputs)}")
        seqs = self._sequences(ctx)
        length = len(next(iter(seqs.values())))
        results: list[list[str]] = [[] for _ in ctx.outputs]
        for k in range(length):
            bound = {vi.name: (seqs[i][k] if i in seqs else ctx.inputs[i]) for i, vi in enumerate(body.input)}
            gp, _ = _renamed_body(body, bound, f"__{ctx.name}_it{k}")
            for j, name in enumerate(ctx.inline_subgraph(gp)):
                results[j].append(name)
        for j in range(len(ctx.outputs)):
            define_sequence(ctx, j, results[j])
        return []

    @staticmethod
    def _sequences(ctx: ImportContext) -> dict[int, list[str]]:
        """The sequence inputs by position (input 0 must be one), all of one length."""
        if not ctx.has_input(0) or ctx.inputs[0] not in ctx.graph.sequences:
            ctx.unsupported("input 0 is not a sequence whose elements are known at compile time")
        seqs = {i: list(ctx.graph.sequences[name]) for i, name in enumerate(ctx.inputs) if name in ctx.graph.sequences}
        for i, name in enumerate(ctx.inputs):
            if not name:
                ctx.invalid(f"input {i} is missing")
            if i not in seqs and name not in ctx.graph.tensors:
                ctx.unsupported(f"input '{name}' is neither a tensor nor a compile-time sequence")
        lengths = {len(s) for s in seqs.values()}
        if len(lengths) != 1:
            ctx.invalid(f"the sequences have different lengths {sorted(lengths)}")
        return seqs


MAX_UNROLL = 256  # iterations a Loop carrying sequences may be unrolled into


def unroll_loop(ctx: ImportContext, trip: int | None, run: bool) -> list[Node]:
    """A Loop carrying compile-time sequences or optionals, unrolled at import: the body is imported
    once per iteration (its iteration number a constant, the carried values the previous iteration's),
    so SequenceInsert & co. in the body resolve like anywhere else. The condition must fold to a
    constant in every iteration; scan outputs are not supported on this path."""
    body = ctx.graph_attr("body")
    states = ctx.inputs[2:]
    if trip is None:
        ctx.unsupported("a Loop carrying sequences needs a constant trip count (M) to be unrolled")
    if len(body.output) != 1 + len(states):
        ctx.unsupported("scan outputs of a Loop carrying sequences are not supported")
    if len(body.input) != 2 + len(states):
        ctx.invalid(f"the body takes {len(body.input)} inputs, the node gives {2 + len(states)}")
    if trip > MAX_UNROLL:
        ctx.unsupported(f"a Loop carrying sequences is unrolled; {trip} iterations > {MAX_UNROLL}")
    current = list(states)
    cond = ctx.add_constant("cond0", np.asarray(run))
    for k in range(trip if run else 0):
        it = ctx.add_constant(f"iter{k}", np.asarray(k, dtype=np.int64))
        bound = {body.input[0].name: it, body.input[1].name: cond}
        bound.update({vi.name: s for vi, s in zip(body.input[2:], current)})
        gp, _ = _renamed_body(body, bound, f"__{ctx.name}_it{k}")
        outs = ctx.inline_subgraph(gp)
        cond, current = outs[0], outs[1:]
        value = ctx.graph.constant(cond)
        if value is None:
            ctx.unsupported("the loop condition is not a compile-time constant (needed to unroll sequences)")
        if not bool(np.asarray(value).reshape(-1)[0]):
            break
    nodes: list[Node] = []
    for j, (out, src) in enumerate(zip(ctx.outputs, current)):
        if not out:
            continue
        if src in ctx.graph.sequences:
            define_sequence(ctx, j, ctx.graph.sequences[src])
        elif src in ctx.graph.optionals:
            ctx.graph.optionals[out] = ctx.graph.optionals[src]
        else:
            nodes.append(ctx.make_node("Identity", inputs=[src], outputs=[out]))
    return nodes
