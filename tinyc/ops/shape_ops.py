"""Ops that only change how bytes are viewed (Reshape family: no code, the output aliases the
input), plus Transpose, Shape, Constant and Identity/Dropout (Cast is tinyc/ops/cast.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import numpy_helper

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, OutputType, register, strides_of


def resolve_reshape(in_shape: tuple[int, ...], target: list[int], allowzero: bool, where: str) -> tuple[int, ...]:
    from tinyc.errors import ShapeError

    shape = list(target)
    if not allowzero:
        shape = [in_shape[i] if d == 0 and i < len(in_shape) else d for i, d in enumerate(shape)]
    total = int(np.prod(in_shape, dtype=np.int64))
    if shape.count(-1) > 1:
        raise ShapeError(f"{where}: more than one -1 in reshape target {target}")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        shape[shape.index(-1)] = total // known if known else 0
    if int(np.prod(shape, dtype=np.int64)) != total:
        raise ShapeError(f"{where}: cannot reshape {in_shape} to {target}")
    return tuple(int(d) for d in shape)


@register
class Reshape(OpDef):
    """Reshape/Flatten/Squeeze/Unsqueeze all become this: a new shape over the same bytes."""

    op = "Reshape"
    onnx_ops = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
    int8_passthrough = True
    grid_crosses_both_ways = True
    qdq_shares_qparams = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
    alias = True
    dtypes = ("float32", "int8", "uint8", "int16", "int32", "int64", "bool", "uint16", "uint32", "uint64", "float64")

    def import_onnx(self, ctx):
        shape = ctx.shape(0)
        rank = len(shape)
        where = f"node '{ctx.name}' ({ctx.op_type})"
        if ctx.op_type == "Reshape":
            target = ctx.attr("shape") if ctx.has_attr("shape") else ctx.require_const(1, "shape")
            new = resolve_reshape(
                shape, [int(d) for d in np.asarray(target).reshape(-1)], bool(ctx.attr("allowzero", 0)), where
            )
        elif ctx.op_type == "Flatten":
            axis = int(ctx.attr("axis", 1))
            axis = axis + rank if axis < 0 else axis
            new = (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64)))
        elif ctx.op_type == "Squeeze":
            axes = ctx.attr("axes") if ctx.has_attr("axes") else (ctx.const(1) if ctx.has_input(1) else None)
            if ctx.has_input(1) and ctx.const(1) is None:
                ctx.unsupported("axes must be a constant")
            if axes is None:
                new = tuple(d for d in shape if d != 1)
            else:
                ax = {int(a) % rank for a in np.asarray(axes).reshape(-1)}
                for a in ax:
                    if shape[a] != 1:
                        ctx.unsupported(f"cannot squeeze axis {a} of size {shape[a]}")
                new = tuple(d for i, d in enumerate(shape) if i not in ax)
        else:  # Unsqueeze
            axes = ctx.attr("axes") if ctx.has_attr("axes") else ctx.require_const(1, "axes")
            out_rank = rank + len(np.asarray(axes).reshape(-1))
            ax = sorted(int(a) % out_rank for a in np.asarray(axes).reshape(-1))
            it = iter(shape)
            new = tuple(1 if i in ax else next(it) for i in range(out_rank))
        return ctx.make_node("Reshape", inputs=ctx.inputs[:1], shape=list(new))

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        return [(tuple(node.attrs["shape"]), t.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [inputs[0].reshape(node.attrs["shape"])]

    def check_supported(self, node: Node, graph: Graph) -> None:
        return None


@register
class Identity(OpDef):
    """Identity and inference-mode Dropout; removed by the cleanup pass."""

    op = "Identity"
    onnx_ops = ("Identity", "Dropout")
    int8_passthrough = True
    alias = True

    def import_onnx(self, ctx):
        src = ctx.inputs[0] if ctx.inputs else ""
        if ctx.op_type == "Identity" and (src in ctx.graph.sequences or src in ctx.graph.optionals):
            # a compile-time sequence/optional (tinyc/ops/sequences.py): the output is the same value
            if src in ctx.graph.sequences:
                ctx.graph.sequences[ctx.outputs[0]] = list(ctx.graph.sequences[src])
            else:
                ctx.graph.optionals[ctx.outputs[0]] = ctx.graph.optionals[src]
            return []
        nodes = [ctx.make_node("Identity", inputs=ctx.inputs[:1], outputs=ctx.outputs[:1])]
        if ctx.op_type == "Dropout":
            if ctx.has_input(2) and ctx.const(2) is None:
                ctx.unsupported("training_mode must be a constant (inference only)")
            if ctx.has_input(2) and bool(np.asarray(ctx.const(2))):
                # training mode drops at random, except with ratio 0, where it is the identity
                ratio = ctx.const(1) if ctx.has_input(1) else np.asarray(0.5)
                if ratio is None:
                    ctx.unsupported("with training_mode=True the ratio must be a constant (only 0 is deterministic)")
                if float(np.asarray(ratio)) != 0.0:
                    ctx.unsupported(f"training_mode=True with ratio {float(np.asarray(ratio))} drops at random")
            if int(ctx.attr("is_test", 1)) == 0 and ctx.opset < 7:
                ctx.unsupported("is_test=0 (training) is not supported")
            if len(ctx.outputs) > 1 and ctx.outputs[1]:
                ctx.set_constant(1, np.ones(ctx.shape(0), dtype=bool))
        return nodes

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [inputs[0]]

    def check_supported(self, node: Node, graph: Graph) -> None:
        return None


@register
class Transpose(OpDef):
    op = "Transpose"
    onnx_ops = ("Transpose",)
    int8_passthrough = True
    grid_crosses_both_ways = True
    qdq_shares_qparams = ("Transpose",)
    template = "transpose.c.j2"
    dtypes = Reshape.dtypes

    def import_onnx(self, ctx):
        rank = len(ctx.shape(0))
        perm = ctx.attr("perm")
        perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
        if sorted(perm) != list(range(rank)):
            ctx.invalid(f"perm {perm} is not a permutation of the input's {rank} axes (0..{rank - 1})")
        return ctx.make_node("Transpose", inputs=ctx.inputs[:1], perm=perm)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        return [(tuple(t.shape[p] for p in node.attrs["perm"]), t.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.ascontiguousarray(np.transpose(inputs[0], node.attrs["perm"]))]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        shape = graph.tensor(node.inputs[0]).shape
        perm = list(node.attrs["perm"])
        # drop size-1 dims and merge input dims that stay adjacent and in order in the output
        keep = [p for p in perm if shape[p] != 1]
        groups: list[list[int]] = []
        for p in keep:
            if groups and groups[-1][-1] + 1 == p and all(shape[q] == 1 for q in range(groups[-1][-1] + 1, p)):
                groups[-1].append(p)
            else:
                groups.append([p])
        # merged input dims in input order
        order = sorted(range(len(groups)), key=lambda g: groups[g][0])
        in_dims = [int(np.prod([shape[q] for q in groups[g]])) for g in order]
        in_strides = strides_of(in_dims)
        out_dims = [int(np.prod([shape[q] for q in g])) for g in groups]
        src_stride = [in_strides[order.index(g)] for g in range(len(groups))]
        if not out_dims:
            out_dims, src_stride = [1], [0]
        return {"dims": out_dims, "src_strides": src_stride}


@register
class Shape(OpDef):
    """Shapes are static in tinyc, so Shape always folds to a constant at import."""

    op = "Shape"
    onnx_ops = ("Shape", "Size")

    def import_onnx(self, ctx):
        shape = np.asarray(ctx.shape(0), dtype=np.int64)
        if ctx.op_type == "Size":
            return ctx.set_constant(0, np.asarray(int(np.prod(shape)), dtype=np.int64))
        rank = len(shape)
        start = int(ctx.attr("start", 0))
        end = ctx.attr("end", None)
        start = max(0, min(rank, start + rank if start < 0 else start))
        end = rank if end is None else max(0, min(rank, int(end) + rank if int(end) < 0 else int(end)))
        return ctx.set_constant(0, shape[start:end])


@register
class Constant(OpDef):
    op = "Constant"
    onnx_ops = ("Constant",)

    def import_onnx(self, ctx):
        for a in ctx.onnx_node.attribute:
            if a.name == "value":
                return ctx.set_constant(0, numpy_helper.to_array(a.t))
            if a.name == "value_float":
                return ctx.set_constant(0, np.asarray(a.f, dtype=np.float32))
            if a.name == "value_floats":
                return ctx.set_constant(0, np.asarray(list(a.floats), dtype=np.float32))
            if a.name == "value_int":
                return ctx.set_constant(0, np.asarray(a.i, dtype=np.int64))
            if a.name == "value_ints":
                return ctx.set_constant(0, np.asarray(list(a.ints), dtype=np.int64))
        ctx.unsupported("only value/value_float(s)/value_int(s) constants are supported")


@register
class ConstantOfShape(OpDef):
    op = "ConstantOfShape"
    onnx_ops = ("ConstantOfShape",)

    def import_onnx(self, ctx):
        shape = [int(d) for d in ctx.require_const(0, "shape").reshape(-1)]
        value = ctx.attr("value")
        fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
        return ctx.set_constant(0, np.full(shape, fill[0], dtype=fill.dtype))
