"""CumSum and CumProd along one (constant) axis, with `exclusive` and `reverse`.

x is viewed as [outer][n][inner]; each output row k is the previous output row plus (times) one
input row, so every loop runs along `inner` contiguous elements (vectorisable) and the running
sums (products) live in the output itself. Integer results wrap (computed in the unsigned type).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import AxisPermutable, CTYPES, OpDef, normalize_axis, register
from tinyc.ops.slice_gather import _where

DTYPES = ("float32", "float64", "int32", "int64", "uint32", "uint64")


@register
class CumSum(AxisPermutable, OpDef):
    """attrs: `axis`, `exclusive`, `reverse`."""

    op = "CumSum"
    onnx_ops = ("CumSum",)
    template = "cumsum.c.j2"
    dtypes = DTYPES
    #: the running operation: numpy's cumulative function and its identity (the exclusive first row)
    cum_fn: Any = staticmethod(np.cumsum)
    identity = 0

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        shape = ctx.shape(0)
        if not shape:
            ctx.unsupported("a scalar input has no axis")
        av = np.asarray(ctx.require_const(1, "axis")).reshape(-1)
        if av.size != 1:
            ctx.unsupported(f"axis must hold one value, got {av.size}")
        axis = normalize_axis(int(av[0]), len(shape), _where(ctx))
        if any(d == 0 for d in shape):
            return ctx.set_constant(0, np.zeros(shape, ctx.dtype(0)))
        return ctx.make_node(
            self.op,
            inputs=ctx.inputs[:1],
            outputs=ctx.outputs[:1],
            axis=axis,
            exclusive=bool(int(ctx.attr("exclusive", 0))),
            reverse=bool(int(ctx.attr("reverse", 0))),
        )

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, ax = inputs[0], node.attrs["axis"]
        if node.attrs["reverse"]:
            x = np.flip(x, axis=ax)
        with np.errstate(all="ignore"):
            y = self.cum_fn(x, axis=ax, dtype=x.dtype)
        if node.attrs["exclusive"]:
            first = np.full_like(np.take(y, [0], axis=ax), self.identity)
            y = np.concatenate([first, np.delete(y, -1, axis=ax)], axis=ax)
        if node.attrs["reverse"]:
            y = np.flip(y, axis=ax)
        return [np.ascontiguousarray(y)]

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.inputs[0]).size

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        ax = node.attrs["axis"]
        ct = CTYPES[t.dtype]
        wrap = {"int32": "uint32_t", "int64": "uint64_t"}.get(t.dtype)
        return {
            "outer": int(np.prod(t.shape[:ax], dtype=np.int64)),
            "n": int(t.shape[ax]),
            "inner": int(np.prod(t.shape[ax + 1 :], dtype=np.int64)),
            "T": ct,
            "wrap": wrap,
            "exclusive": node.attrs["exclusive"],
            "reverse": node.attrs["reverse"],
            "sign": "*" if self.identity else "+",
            "identity": self.identity,
        }


@register
class CumProd(CumSum):
    """CumSum's kernel with products: attrs `axis`, `exclusive` (first row 1), `reverse`."""

    op = "CumProd"
    onnx_ops = ("CumProd",)
    cum_fn = staticmethod(np.cumprod)
    identity = 1
