"""Compress with a constant condition: the slices along `axis` (or the elements of the flattened
input) whose condition is true, i.e. a Gather with constant indices.

The condition fixes the output shape, so it must be known at compile time; the kernel is the
Gather kernel (templates/kernels/gather.c.j2) with the selected positions as its index table. A
condition shorter than the axis leaves the rest out (numpy's compress).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, normalize_axis, register
from tinyc.ops.slice_gather import _where

ALL_DTYPES: tuple[str, ...] = tuple(CTYPES)


@register
class Compress(OpDef):
    """inputs: x, the selected positions (int32 constant). attrs: `axis` (None: flattened)."""

    op = "Compress"
    onnx_ops = ("Compress",)
    template = "gather.c.j2"
    dtypes = ALL_DTYPES
    int8_passthrough = True
    qdq_shares_qparams = ("Compress",)

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        shape = ctx.shape(0)
        cond = np.asarray(ctx.require_const(1, "condition")).reshape(-1).astype(bool)
        axis = None
        n = int(np.prod(shape, dtype=np.int64))
        if ctx.attr("axis") is not None:
            if not shape:
                ctx.invalid("a scalar input has no axis")
            axis = normalize_axis(int(ctx.attr("axis")), len(shape), _where(ctx))
            n = int(shape[axis])
        if cond.size > n:
            ctx.invalid(f"condition has {cond.size} values for {n} positions")
        picked = np.flatnonzero(cond).astype(np.int32)
        out_shape = (picked.size,) if axis is None else tuple(shape[:axis]) + (picked.size,) + tuple(shape[axis + 1 :])
        if any(d == 0 for d in out_shape):
            return ctx.set_constant(0, np.zeros(out_shape, ctx.dtype(0)))
        idx = ctx.add_constant("picked", picked)
        return ctx.make_node("Compress", inputs=[ctx.inputs[0], idx], outputs=ctx.outputs[:1], axis=axis)

    def _split(self, node: Node, graph: Graph) -> tuple[int, int, int]:
        shape = graph.tensor(node.inputs[0]).shape
        ax = node.attrs["axis"]
        if ax is None:
            return 1, int(np.prod(shape, dtype=np.int64)), 1
        return (int(np.prod(shape[:ax], dtype=np.int64)), int(shape[ax]), int(np.prod(shape[ax + 1 :], dtype=np.int64)))

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x = graph.tensor(node.inputs[0])
        k = graph.tensor(node.inputs[1]).size
        ax = node.attrs["axis"]
        shape = (k,) if ax is None else tuple(x.shape[:ax]) + (k,) + tuple(x.shape[ax + 1 :])
        return [(shape, x.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, idx = inputs[0], np.asarray(inputs[1]).reshape(-1)
        ax = node.attrs["axis"]
        return [np.ascontiguousarray(np.take(x.reshape(-1) if ax is None else x, idx, axis=ax or 0))]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        outer, n, inner = self._split(node, graph)
        ind = graph.tensor(node.inputs[1])
        return {"outer": outer, "n": n, "inner": inner, "k": ind.size, "runtime_indices": False, "itype": "int32_t"}
