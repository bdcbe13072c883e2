"""GatherND: slices of the data picked by index tuples (the last indices dim), with batch_dims.

data [B..., D_0..D_{q-1}, R...] and indices [B..., M..., q] give output [B..., M..., R...]: for
each batch b and index tuple t, the contiguous slice R at data[b, t_0, ..., t_{q-1}] is copied.
Indices are read at run time (a constant is range-checked at import); each coordinate is wrapped
(negative) and clamped to its dim, so a bad index cannot read out of bounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, register, strides_of

ALL_DTYPES: tuple[str, ...] = tuple(CTYPES)


def check_index_tuples(ctx: Any, dims: tuple[int, ...], what: str = "indices") -> None:
    """Refuse constant index tuples (last dim = len(dims)) out of [-d, d) for their dim, and
    runtime ones of a non-integer type."""
    if ctx.dtype(1) not in ("int32", "int64"):
        ctx.unsupported(f"{what} of type {ctx.dtype(1)} (int32/int64 only)")
    idx = ctx.const(1)
    if idx is None or not idx.size:
        return
    idx = np.asarray(idx).astype(np.int64).reshape(-1, len(dims))
    lim = np.asarray(dims, np.int64)
    if (idx < -lim).any() or (idx >= lim).any():
        ctx.unsupported(f"{what} out of range for dims {list(dims)}")


def clamp_tuples(ind: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """Index tuples wrapped (negative) and clamped to `dims`, as the kernels read them."""
    lim = np.asarray(dims, np.int64)
    ind = np.asarray(ind).astype(np.int64)
    ind = np.where(ind < 0, ind + lim, ind)
    return np.clip(ind, 0, np.maximum(lim - 1, 0))


@register
class GatherND(OpDef):
    """inputs: data, indices. attrs: `batch_dims`."""

    op = "GatherND"
    onnx_ops = ("GatherND",)
    template = "gather_nd.c.j2"
    dtypes = ALL_DTYPES
    int8_passthrough = True
    qdq_shares_qparams = ("GatherND",)

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        shape, ishape = ctx.shape(0), ctx.shape(1)
        b = int(ctx.attr("batch_dims", 0))
        if not ishape:
            ctx.invalid("indices must have rank >= 1")
        q = int(ishape[-1])
        if b < 0 or b >= min(len(shape), len(ishape)) or b + q > len(shape):
            ctx.invalid(f"batch_dims {b} and index length {q} do not fit data rank {len(shape)}")
        if tuple(shape[:b]) != tuple(ishape[:b]):
            ctx.invalid(f"batch dims of data {shape[:b]} and indices {ishape[:b]} differ")
        check_index_tuples(ctx, tuple(shape[b : b + q]))
        node = ctx.make_node("GatherND", inputs=ctx.inputs[:2], outputs=ctx.outputs[:1], batch_dims=b)
        out_shape = self._out_shape(shape, ishape, b)
        if any(d == 0 for d in out_shape):
            return ctx.set_constant(0, np.zeros(out_shape, ctx.dtype(0)))
        if any(d == 0 for d in shape[b : b + q]):
            ctx.unsupported("gathering from an empty dim")
        return node

    @staticmethod
    def _out_shape(shape: tuple[int, ...], ishape: tuple[int, ...], b: int) -> tuple[int, ...]:
        return tuple(ishape[:-1]) + tuple(shape[b + int(ishape[-1]) :])

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x, ind = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        return [(self._out_shape(x.shape, ind.shape, node.attrs["batch_dims"]), x.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, b = inputs[0], node.attrs["batch_dims"]
        q = inputs[1].shape[-1]
        ind = clamp_tuples(inputs[1], x.shape[b : b + q])
        nb = int(np.prod(x.shape[:b], dtype=np.int64))
        xb = x.reshape((nb,) + x.shape[b:])
        ib = ind.reshape(nb, -1, q)
        rows = [[xb[k][tuple(t)] for t in ib[k]] for k in range(nb)]
        out = np.asarray(rows, dtype=x.dtype)
        return [np.ascontiguousarray(out.reshape(self._out_shape(x.shape, inputs[1].shape, b)))]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        x, ind = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        b = node.attrs["batch_dims"]
        q = int(ind.shape[-1])
        nb = int(np.prod(x.shape[:b], dtype=np.int64))
        st = strides_of(x.shape)
        return {
            "nb": nb,
            "nt": int(np.prod(ind.shape[b:-1], dtype=np.int64)),
            "q": q,
            "dims": [int(d) for d in x.shape[b : b + q]],
            "strides": st[b : b + q],
            "inner": int(np.prod(x.shape[b + q :], dtype=np.int64)),
            "batch_stride": int(np.prod(x.shape[b:], dtype=np.int64)),
            "itype": CTYPES[ind.dtype],
        }
