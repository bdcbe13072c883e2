"""Trilu: keep the upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes.

Each row is a zero run and a copy run (both contiguous); k must be a compile-time constant
and is clamped to the matrix so the kernel's bounds cannot overflow. Data movement: every dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, register

ALL_DTYPES: tuple[str, ...] = tuple(CTYPES)


@register
class Trilu(OpDef):
    """attrs: `upper` (bool), `k` (clamped diagonal offset)."""

    op = "Trilu"
    onnx_ops = ("Trilu",)
    template = "trilu.c.j2"
    dtypes = ALL_DTYPES

    def import_onnx(self, ctx):
        if ctx.dtype(0) not in ALL_DTYPES:
            ctx.unsupported(f"element type {ctx.dtype(0)} is not supported")
        shape = tuple(int(d) for d in ctx.shape(0))
        if len(shape) < 2:
            ctx.unsupported(f"input of rank {len(shape)} (needs at least 2)")
        k = 0
        if ctx.has_input(1):
            kv = np.asarray(ctx.require_const(1, "k")).reshape(-1)
            if kv.size != 1:
                ctx.unsupported(f"k must hold one value, got {kv.size}")
            k = int(kv[0])
        n, m = shape[-2:]
        k = max(-n - 1, min(m + 1, k))
        upper = bool(int(ctx.attr("upper", 1)))
        if any(d == 0 for d in shape):
            return ctx.set_constant(0, np.zeros(shape, ctx.dtype(0)))
        return ctx.make_node("Trilu", inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], upper=upper, k=k)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        fn = np.triu if node.attrs["upper"] else np.tril
        return [np.ascontiguousarray(fn(x, node.attrs["k"]))]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        shape = graph.tensor(node.inputs[0]).shape
        return {
            "batch": int(np.prod(shape[:-2], dtype=np.int64)),
            "rows": int(shape[-2]),
            "cols": int(shape[-1]),
            "upper": node.attrs["upper"],
            "k": node.attrs["k"],
        }
