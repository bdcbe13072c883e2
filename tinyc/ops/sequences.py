"""ONNX sequence operators with a structure known at compile time.

An ahead-of-time compiler has no run-time lists, but most sequences in real graphs are built and
taken apart with constant positions: SequenceConstruct/Insert/Erase/At only shuffle tensor names.
So a sequence value is resolved at import into the list of its element tensors (the side table
`Graph.sequences`, import-time only) and nothing reaches the kernels except ordinary Identity,
Split, Reshape and Concat nodes. Positions must be constants (`ctx.require_const`, which lets a
caller bind them); sequence-typed graph inputs and outputs stay refused by the frontend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper

from tinyc.ir import Node
from tinyc.ops.base import OpDef, register

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext


# -- shared helpers ------------------------------------------------------------------------------
def sequence_input(ctx: ImportContext, i: int) -> list[str]:
    """The element names of sequence input i, or a clear refusal."""
    if not ctx.has_input(i):
        ctx.invalid(f"input {i} (a sequence) is missing")
    name = ctx.inputs[i]
    if name not in ctx.graph.sequences:
        ctx.unsupported(f"input '{name}' is not a sequence whose elements are known at compile time")
    return list(ctx.graph.sequences[name])


def define_sequence(ctx: ImportContext, output_index: int, elements: list[str]) -> list[Node]:
    """Bind a sequence-valued output to its element tensors (no node emitted)."""
    ctx.graph.sequences[ctx.outputs[output_index]] = list(elements)
    return []


def position(ctx: ImportContext, i: int, n: int, default: int, inserting: bool) -> int:
    """A constant position input in ONNX's range ([-n, n-1], or [-n, n] when inserting), normalised."""
    if not ctx.has_input(i):
        return default
    value = np.asarray(ctx.require_const(i, "position")).reshape(-1)
    if value.size != 1:
        ctx.invalid(f"position must be a scalar, got {value.size} values")
    p = int(value[0])
    hi = n if inserting else n - 1
    if not -n <= p <= hi:
        ctx.invalid(f"position {p} is out of range [{-n}, {hi}] for a sequence of {n} tensor(s)")
    return p + n if p < 0 else p


def fresh_names(ctx: ImportContext, count: int, tag: str) -> list[str]:
    """`count` tensor names no tensor of the graph uses yet."""
    base = ctx.outputs[0] or ctx.name
    return [ctx.graph.unique_name(f"{base}__{tag}{k}") for k in range(count)]


def emit(ctx: ImportContext, nodes: list[onnx.NodeProto], outputs: list[str]) -> list[Node]:
    """Import ordinary ONNX nodes (Split, Reshape, Concat) in place of this one, through their own
    import rules: the sequence op is only a rearrangement of them."""
    gp = helper.make_graph(nodes, f"{ctx.name}_expansion", [], [onnx.ValueInfoProto(name=o) for o in outputs])
    ctx.inline_subgraph(gp)
    return []


def const_input(ctx: ImportContext, tag: str, value: Any) -> str:
    return ctx.add_constant(tag, np.asarray(value, dtype=np.int64))


def reshape_node(ctx: ImportContext, src: str, dst: str, shape: tuple[int, ...], tag: str) -> onnx.NodeProto:
    return helper.make_node("Reshape", [src, const_input(ctx, tag, list(shape))], [dst], name=tag)


# -- the operators -------------------------------------------------------------------------------
class _SequenceOp(OpDef):
    """No kernel: the op is resolved at import into the sequence side table (see the module doc)."""

    template = None
    dtypes = ()


@register
class SequenceConstruct(_SequenceOp):
    op = "SequenceConstruct"
    onnx_ops = ("SequenceConstruct",)

    def import_onnx(self, ctx):
        if not ctx.inputs or any(not i for i in ctx.inputs):
            ctx.invalid("needs at least one tensor input")
        dtypes = {ctx.dtype(k) for k in range(len(ctx.inputs))}
        if len(dtypes) != 1:
            ctx.invalid(f"the tensors have different element types: {', '.join(sorted(dtypes))}")
        return define_sequence(ctx, 0, ctx.inputs)


@register
class SequenceEmpty(_SequenceOp):
    op = "SequenceEmpty"
    onnx_ops = ("SequenceEmpty",)

    def import_onnx(self, ctx):
        return define_sequence(ctx, 0, [])


@register
class SequenceInsert(_SequenceOp):
    """attrs none; inputs (sequence, tensor, position?): default position is the end."""

    op = "SequenceInsert"
    onnx_ops = ("SequenceInsert",)

    def import_onnx(self, ctx):
        seq = sequence_input(ctx, 0)
        if not ctx.has_input(1):
            ctx.invalid("input 1 (the tensor to insert) is missing")
        if seq and ctx.graph.tensor(seq[0]).dtype != ctx.dtype(1):
            ctx.invalid(f"inserting a {ctx.dtype(1)} tensor into a sequence of {ctx.graph.tensor(seq[0]).dtype}")
        p = position(ctx, 2, len(seq), len(seq), inserting=True)
        return define_sequence(ctx, 0, seq[:p] + [ctx.inputs[1]] + seq[p:])


@register
class SequenceErase(_SequenceOp):
    """inputs (sequence, position?): default position is the last tensor."""

    op = "SequenceErase"
    onnx_ops = ("SequenceErase",)

    def import_onnx(self, ctx):
        seq = sequence_input(ctx, 0)
        if not seq:
            ctx.invalid("cannot erase from an empty sequence")
        p = position(ctx, 1, len(seq), len(seq) - 1, inserting=False)
        return define_sequence(ctx, 0, seq[:p] + seq[p + 1 :])


@register
class SequenceAt(_SequenceOp):
    """inputs (sequence, position): the tensor at a constant position, as an Identity."""

    op = "SequenceAt"
    onnx_ops = ("SequenceAt",)

    def import_onnx(self, ctx):
        seq = sequence_input(ctx, 0)
        if not ctx.has_input(1):
            ctx.invalid("input 1 (position) is missing")
        if not seq:
            ctx.invalid("cannot read from an empty sequence")
        p = position(ctx, 1, len(seq), 0, inserting=False)
        return ctx.make_node("Identity", inputs=[seq[p]], outputs=ctx.outputs[:1])


@register
class SequenceLength(_SequenceOp):
    """The number of tensors: always a compile-time constant here."""

    op = "SequenceLength"
    onnx_ops = ("SequenceLength",)

    def import_onnx(self, ctx):
        return ctx.set_constant(0, np.asarray(len(sequence_input(ctx, 0)), dtype=np.int64))


@register
class SplitToSequence(_SequenceOp):
    """attrs `axis`, `keepdims`; input split (constant) absent: pieces of 1, squeezed unless keepdims;
    a scalar: pieces of that size (the last may be shorter); a 1-D list: those sizes."""

    op = "SplitToSequence"
    onnx_ops = ("SplitToSequence",)

    def import_onnx(self, ctx):
        shape = ctx.shape(0)
        if not shape:
            ctx.invalid("cannot split a scalar")
        axis = int(ctx.attr("axis", 0))
        if not -len(shape) <= axis < len(shape):
            ctx.invalid(f"axis {axis} is out of range for rank {len(shape)}")
        axis %= len(shape)
        n = shape[axis]
        squeeze = False
        if ctx.has_input(1):
            split = np.asarray(ctx.require_const(1, "split"))
            if split.ndim == 0:
                step = int(split)
                if step <= 0:
                    ctx.invalid(f"split size {step} must be positive")
                sizes = [min(step, n - s) for s in range(0, n, step)]
            else:
                sizes = [int(v) for v in split.reshape(-1)]
                if any(v < 0 for v in sizes) or sum(sizes) != n:
                    ctx.invalid(f"split sizes {sizes} do not add up to dimension {n} of axis {axis}")
        else:
            sizes = [1] * n
            squeeze = not int(ctx.attr("keepdims", 1))
        if not sizes:
            return define_sequence(ctx, 0, [])
        parts = fresh_names(ctx, len(sizes), "part")
        nodes = [self._split(ctx, axis, sizes, parts)]
        elements = parts
        if squeeze:
            elements = fresh_names(ctx, len(sizes), "elem")
            out_shape = shape[:axis] + shape[axis + 1 :]
            nodes += [
                reshape_node(ctx, p, e, out_shape, f"squeeze{k}") for k, (p, e) in enumerate(zip(parts, elements))
            ]
        emit(ctx, nodes, elements)
        return define_sequence(ctx, 0, elements)

    @staticmethod
    def _split(ctx: ImportContext, axis: int, sizes: list[int], parts: list[str]) -> onnx.NodeProto:
        """A Split node in the form the model's opset uses (split sizes an input from opset 13)."""
        if ctx.opset >= 13:
            return helper.make_node("Split", [ctx.inputs[0], const_input(ctx, "split", sizes)], parts, axis=axis)
        return helper.make_node("Split", [ctx.inputs[0]], parts, axis=axis, split=sizes)


@register
class ConcatFromSequence(_SequenceOp):
    """attrs `axis`, `new_axis`: Concat of the elements (each first reshaped to hold a new axis of 1)."""

    op = "ConcatFromSequence"
    onnx_ops = ("ConcatFromSequence",)

    def import_onnx(self, ctx):
        seq = sequence_input(ctx, 0)
        if not seq:
            ctx.unsupported("the sequence is empty (the result's type is unknown)")
        shape = ctx.graph.tensor(seq[0]).shape
        new_axis = bool(int(ctx.attr("new_axis", 0)))
        if "axis" not in [a.name for a in ctx.onnx_node.attribute]:
            ctx.invalid("attribute 'axis' is required")
        axis = int(ctx.attr("axis"))
        rank = len(shape) + (1 if new_axis else 0)
        if not -rank <= axis < rank:
            ctx.invalid(f"axis {axis} is out of range for rank {rank}")
        axis %= rank
        nodes: list[onnx.NodeProto] = []
        parts = seq
        if new_axis:
            parts = fresh_names(ctx, len(seq), "unsq")
            for k, (src, dst) in enumerate(zip(seq, parts)):
                s = ctx.graph.tensor(src).shape
                nodes.append(reshape_node(ctx, src, dst, s[:axis] + (1,) + s[axis:], f"unsqueeze{k}"))
        nodes.append(helper.make_node("Concat", parts, ctx.outputs[:1], axis=axis, name="concat"))
        return emit(ctx, nodes, ctx.outputs[:1])
