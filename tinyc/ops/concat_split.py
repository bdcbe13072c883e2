"""Concat and Split: copies of contiguous row chunks. Viewed as [outer][axis...], each input
(output) owns a fixed column range of every output (input) row, so both are `outer` loops of
contiguous copies. Any dtype (they only move elements)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import AxisPermutable, Int8Lowering, OpDef, OutputType, normalize_axis, register
from tinyc.ops.slice_gather import ALL_DTYPES, _check_dtype, _ints, _where, empty_output, is_empty


def _prod(dims: Any) -> int:
    return int(np.prod([int(d) for d in dims], dtype=np.int64))


@register
class Concat(OpDef):
    """attrs: `axis` (normalised). Inputs may mix runtime tensors and constants."""

    op = "Concat"
    onnx_ops: tuple[str, ...] = ("Concat",)  # QConcat imports none
    int8_kernel = True
    quantizes_constant_operands = True
    template = "concat.c.j2"
    dtypes = ALL_DTYPES

    def import_onnx(self, ctx):
        ins = [i for i in ctx.inputs if i]
        if not ins:
            ctx.unsupported("no inputs")
        _check_dtype(ctx)
        shapes = [ctx.graph.tensor(i).shape for i in ins]
        rank = len(shapes[0])
        if rank == 0:
            ctx.unsupported("scalar inputs cannot be concatenated")
        if ctx.opset < 4 and not ctx.has_attr("axis"):
            axis = 1
        else:
            axis = normalize_axis(int(ctx.attr("axis", 0)), rank, _where(ctx))
        for i, s in zip(ins, shapes):
            if ctx.graph.tensor(i).dtype != ctx.dtype(0):
                ctx.unsupported(f"mixed element types {ctx.dtype(0)} and {ctx.graph.tensor(i).dtype}")
            if len(s) != rank or any(a != b for k, (a, b) in enumerate(zip(s, shapes[0])) if k != axis):
                ctx.unsupported(f"input shapes {shapes} do not agree off axis {axis}")
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        if is_empty(out):
            return empty_output(ctx, 0, out)
        return ctx.make_node("Concat", inputs=ins, outputs=ctx.outputs[:1], axis=axis)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        ts = [graph.tensor(i) for i in node.inputs]
        ax = node.attrs["axis"]
        shape = list(ts[0].shape)
        shape[ax] = sum(t.shape[ax] for t in ts)
        return [(tuple(shape), ts[0].dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.ascontiguousarray(np.concatenate(inputs, axis=node.attrs["axis"]))]

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return len(perm) == len(graph.tensor(node.outputs[0]).shape)

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Data inputs now arrive untransposed; constants are transposed here to match."""
        if not self.can_permute(node, graph, perm):
            return False
        inv = [0] * len(perm)
        for i, p in enumerate(perm):
            inv[p] = i
        for k, name in enumerate(node.inputs):
            t = graph.tensor(name)
            if t.data is not None:  # a constant
                node.inputs[k] = graph.add_constant(
                    graph.unique_name(f"{name}_perm"), np.ascontiguousarray(np.transpose(t.data, inv))
                )
        node.attrs["axis"] = perm[node.attrs["axis"]]
        return True

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """QConcat: each input rescaled onto the output grid (copied where the grids agree)."""
        from tinyc.ops.qconcat import build_qconcat

        if not all(low.quantizable(i) for i in node.inputs if i):
            return "operand without int8 grid"
        why = low.needs_output(node)
        if why:
            return why
        ins = [low.as_int8(i) for i in node.inputs if i]
        out = node.outputs[0]
        y_q = low.int8_output(out)
        low.emit(build_qconcat(low.g, node.name, ins, y_q, node.attrs["axis"], source=node.source), out, y_q)
        return None

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        ax = node.attrs["axis"]
        out = graph.tensor(node.outputs[0]).shape
        parts = []
        off = 0
        for k, name in enumerate(node.inputs):
            chunk = _prod(graph.tensor(name).shape[ax:])
            if chunk:
                parts.append({"index": k, "chunk": chunk, "offset": off})
            off += chunk
        return {"outer": _prod(out[:ax]), "row": _prod(out[ax:]), "parts": parts}


@register
class Split(AxisPermutable, OpDef):
    """attrs: `axis`, `sizes` (one per output)."""

    op = "Split"
    onnx_ops = ("Split",)
    int8_passthrough = True
    qdq_shares_qparams = ("Split",)
    template = "split.c.j2"
    dtypes = ALL_DTYPES

    def import_onnx(self, ctx):
        _check_dtype(ctx)
        shape = ctx.shape(0)
        rank = len(shape)
        if rank == 0:
            ctx.unsupported("cannot split a scalar")
        axis = normalize_axis(int(ctx.attr("axis", 0)), rank, _where(ctx))
        n = shape[axis]
        nout = len(ctx.outputs)
        if ctx.has_input(1):
            sizes = _ints(ctx.require_const(1, "split"))
        elif ctx.has_attr("split"):
            sizes = _ints(ctx.attr("split"))
        elif ctx.has_attr("num_outputs"):
            num = int(ctx.attr("num_outputs"))
            if num != nout or num <= 0:
                ctx.unsupported(f"num_outputs={num} but the node has {nout} outputs")
            size = -(-n // num)
            sizes = [min(size, max(0, n - k * size)) for k in range(num)]
        else:
            if n % nout:
                ctx.unsupported(f"axis {axis} of size {n} does not split into {nout} equal parts")
            sizes = [n // nout] * nout
        if len(sizes) != nout or sum(sizes) != n or any(s < 0 for s in sizes):
            ctx.unsupported(f"split sizes {sizes} do not cover axis {axis} of size {n} with {nout} outputs")
        outputs = list(ctx.outputs)
        for k, s in enumerate(sizes):
            out = list(shape)
            out[axis] = s
            if is_empty(out) and outputs[k]:
                empty_output(ctx, k, out)
                outputs[k] = ""
        if not any(outputs):
            return []
        return ctx.make_node("Split", inputs=ctx.inputs[:1], outputs=outputs, axis=axis, sizes=sizes)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        ax = node.attrs["axis"]
        res = []
        for s in node.attrs["sizes"]:
            shape = list(t.shape)
            shape[ax] = s
            res.append((tuple(shape), t.dtype))
        return res

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        cuts = np.cumsum(node.attrs["sizes"])[:-1]
        return [np.ascontiguousarray(p) for p in np.split(inputs[0], cuts, axis=node.attrs["axis"])]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        ax = node.attrs["axis"]
        shape = graph.tensor(node.inputs[0]).shape
        inner = _prod(shape[ax + 1 :])
        parts = []
        off = 0
        for k, (name, s) in enumerate(zip(node.outputs, node.attrs["sizes"])):
            chunk = s * inner
            if chunk and name:
                parts.append({"index": k, "chunk": chunk, "offset": off})
            off += chunk
        return {"outer": _prod(shape[:ax]), "row": _prod(shape[ax:]), "parts": parts}
