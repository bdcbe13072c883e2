"""Ops whose result is known at compile time: Range (constant start/limit/delta) and EyeLike
(depends only on the input's shape). Both become constants; no kernel is generated."""

from __future__ import annotations

import math
from typing import cast

import numpy as np
from onnx import helper

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, register

RANGE_DTYPES = ("float32", "float64", "int16", "int32", "int64")


def _range(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """ONNX Range: max(ceil((limit - start) / delta), 0) elements start + i * delta."""
    dtype = np.asarray(start).dtype
    s, l, d = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
    if dtype.kind == "f":
        n = max(int(math.ceil((float(l) - float(s)) / float(d))), 0)
        acc = np.empty(n, dtype=dtype)
        v = dtype.type(s)
        for i in range(n):  # repeated addition in the element type, like onnx's loop
            acc[i] = v
            v = dtype.type(v + dtype.type(d))
        return acc
    n = max(-((int(s) - int(l)) // int(d)), 0)
    return (int(s) + int(d) * np.arange(n, dtype=np.int64)).astype(dtype)


@register
class Range(OpDef):
    """inputs: start, limit, delta (all constant scalars). Folded at import."""

    op = "Range"
    onnx_ops = ("Range",)
    dtypes = RANGE_DTYPES

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        vals = [ctx.require_const(i, what) for i, what in enumerate(("start", "limit", "delta"))]
        if any(np.asarray(v).size != 1 for v in vals):
            ctx.unsupported("start, limit and delta must be scalars")
        if float(np.asarray(vals[2]).reshape(-1)[0]) == 0:
            ctx.unsupported("delta 0")
        return ctx.make_node("Range", inputs=ctx.inputs[:3], outputs=ctx.outputs[:1])

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        vals = [graph.constant(i) for i in node.inputs[:3]]
        if any(v is None for v in vals):
            from tinyc.errors import UnsupportedError

            raise UnsupportedError(f"node '{node.source or node.name}' (Range): inputs must be constants")
        return [((len(_range(*cast("list[np.ndarray]", vals))),), graph.tensor(node.inputs[0]).dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [_range(inputs[0], inputs[1], inputs[2])]


@register
class EyeLike(OpDef):
    """Ones on diagonal k of a 2-D tensor shaped like the input; dtype attr or the input's."""

    op = "EyeLike"
    onnx_ops = ("EyeLike",)
    dtypes = tuple(CTYPES)

    def import_onnx(self, ctx):
        shape = tuple(int(d) for d in ctx.shape(0))
        if len(shape) != 2:
            ctx.unsupported(f"input of rank {len(shape)} (EyeLike needs 2-D)")
        if ctx.has_attr("dtype") and int(ctx.attr("dtype")) != 0:
            try:
                dtype = np.dtype(helper.tensor_dtype_to_np_dtype(int(ctx.attr("dtype")))).name
            except Exception:
                ctx.unsupported(f"dtype {ctx.attr('dtype')}")
        else:
            dtype = ctx.dtype(0)
        if dtype not in CTYPES:
            ctx.unsupported(f"element type {dtype} (supported: {', '.join(CTYPES)})")
        k = int(ctx.attr("k", 0))
        return ctx.set_constant(0, np.eye(shape[0], shape[1], k=k, dtype=dtype))
