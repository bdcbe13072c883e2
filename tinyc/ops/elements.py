"""GatherElements and ScatterElements: element-wise indexing along one axis.

Both walk the indices tensor in memory order (loops over its leading dims, a contiguous inner
loop over its last dim); the data position is the same multi-index with the `axis` coordinate
replaced by the index value. Constant indices are normalised to [0, n) at import; runtime ones
are wrapped (negative) and clamped in the kernel so a bad index cannot read out of bounds.
ScatterElements copies the data first, then applies the updates in index order (so with
reduction 'none' a later duplicate index wins, like onnx's reference). Data movement: every
dtype (reductions other than 'none' only on numeric types).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, normalize_axis, register, strides_of
from tinyc.ops.slice_gather import _where

ALL_DTYPES: tuple[str, ...] = tuple(CTYPES)
REDUCTIONS = ("none", "add", "mul", "max", "min")


def _indices(ctx: Any, axis: int, n: int) -> str:
    """Name of the indices input: constants normalised to [0, n) as int32/int64."""
    idx = ctx.const(1)
    if idx is None:
        if ctx.dtype(1) not in ("int32", "int64"):
            ctx.unsupported(f"indices of type {ctx.dtype(1)} (int32/int64 only)")
        return ctx.inputs[1]
    idx = np.asarray(idx).astype(np.int64).reshape(ctx.shape(1))
    if idx.size and (idx.min() < -n or idx.max() >= n):
        ctx.unsupported(f"indices out of range [-{n}, {n - 1}] on axis {axis}")
    idx = np.where(idx < 0, idx + n, idx)
    return ctx.add_constant("indices", idx.astype(np.int32 if n < 2**31 else np.int64))


def _norm_idx(ind: np.ndarray, n: int) -> np.ndarray:
    ind = np.asarray(ind).astype(np.int64)
    return np.clip(np.where(ind < 0, ind + n, ind), 0, max(n - 1, 0))


def _walk_context(data_shape: tuple[int, ...], ind_shape: tuple[int, ...], axis: int) -> dict[str, Any]:
    """Loop dims (the indices' shape), index row offset and data base offset as C expressions."""
    r = len(ind_shape)
    ds = strides_of(data_shape)
    lead = list(range(r - 1))
    row_parts, base_parts = [], []
    istr = strides_of(ind_shape)
    for k in lead:
        if ind_shape[k] == 1:
            continue
        row_parts.append(f"i{k}" + (f" * {istr[k]}" if istr[k] != 1 else ""))
        if k != axis:
            base_parts.append(f"i{k}" + (f" * {ds[k]}" if ds[k] != 1 else ""))
    last = r - 1
    return {
        "dims": [int(d) for d in ind_shape],
        "rank": r,
        "row": " + ".join(row_parts) or "0",
        "base": " + ".join(base_parts) or "0",
        "jstride": 0 if last == axis else ds[last],
        "astride": ds[axis],
        "n": int(data_shape[axis]),
        "data_size": int(np.prod(data_shape, dtype=np.int64)),
    }


class _Elements(OpDef):
    dtypes = ALL_DTYPES
    template = "elements.c.j2"

    def _common(self, ctx: Any) -> tuple[int, int]:
        if ctx.dtype(0) not in ALL_DTYPES:
            ctx.unsupported(f"element type {ctx.dtype(0)} is not supported")
        shape, ishape = ctx.shape(0), ctx.shape(1)
        rank = len(shape)
        if rank == 0:
            ctx.unsupported("a scalar input has no axis")
        if len(ishape) != rank:
            ctx.unsupported(f"indices rank {len(ishape)} differs from data rank {rank}")
        axis = normalize_axis(int(ctx.attr("axis", 0)), rank, _where(ctx))
        return axis, int(shape[axis])

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        x, ind = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        ctx = _walk_context(x.shape, ind.shape, node.attrs["axis"])
        ctx.update(
            runtime_indices=not ind.is_constant,
            itype=CTYPES[ind.dtype],
            scatter=self.op == "ScatterElements",
            reduction=node.attrs.get("reduction", "none"),
            count=ind.size,
            is_float=x.dtype in ("float32", "float64"),
            wrap={
                "int32": "(uint32_t)",
                "int64": "(uint64_t)",
                "uint16": "(uint32_t)",
                "uint32": "(uint32_t)",
                "uint64": "(uint64_t)",
            }.get(x.dtype, ""),
        )
        return ctx


@register
class GatherElements(_Elements):
    """inputs: data, indices. attrs: `axis`."""

    op = "GatherElements"
    onnx_ops = ("GatherElements",)
    qdq_shares_qparams = ("GatherElements",)

    def import_onnx(self, ctx):
        axis, n = self._common(ctx)
        shape, ishape = ctx.shape(0), ctx.shape(1)
        for k, (d, i) in enumerate(zip(shape, ishape)):
            if k != axis and i > d:
                ctx.unsupported(f"indices dim {k} ({i}) exceeds the data dim ({d})")
        if any(d == 0 for d in ishape):
            return ctx.set_constant(0, np.zeros(ishape, ctx.dtype(0)))
        if n == 0:
            ctx.unsupported(f"gathering from an empty axis {axis}")
        return ctx.make_node(
            self.op, inputs=[ctx.inputs[0], _indices(ctx, axis, n)], outputs=ctx.outputs[:1], axis=axis
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[1]).shape, graph.tensor(node.inputs[0]).dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, ax = inputs[0], node.attrs["axis"]
        ind = _norm_idx(inputs[1], x.shape[ax])
        # indices may be smaller than data on the other axes: take the leading block
        sub = x[tuple(slice(0, d) if k != ax else slice(None) for k, d in enumerate(ind.shape))]
        return [np.ascontiguousarray(np.take_along_axis(sub, ind, axis=ax))]


@register
class ScatterElements(_Elements):
    """inputs: data, indices, updates. attrs: `axis`, `reduction`."""

    op = "ScatterElements"
    onnx_ops = ("ScatterElements", "Scatter")

    def import_onnx(self, ctx):
        axis, n = self._common(ctx)
        red = str(ctx.attr("reduction", "none"))
        if red not in REDUCTIONS:
            ctx.unsupported(f"reduction '{red}' (supported: {', '.join(REDUCTIONS)})")
        if red != "none" and ctx.dtype(0) == "bool":
            ctx.unsupported(f"reduction '{red}' on bool")
        if tuple(ctx.shape(2)) != tuple(ctx.shape(1)):
            ctx.unsupported(f"updates shape {ctx.shape(2)} differs from indices shape {ctx.shape(1)}")
        if ctx.dtype(2) != ctx.dtype(0):
            ctx.unsupported(f"updates type {ctx.dtype(2)} differs from data type {ctx.dtype(0)}")
        for k, (d, i) in enumerate(zip(ctx.shape(0), ctx.shape(1))):
            if k != axis and i > d:
                ctx.unsupported(f"indices dim {k} ({i}) exceeds the data dim ({d})")
        if any(d == 0 for d in ctx.shape(0)):
            return ctx.set_constant(0, np.zeros(ctx.shape(0), ctx.dtype(0)))
        if any(d == 0 for d in ctx.shape(1)):
            return ctx.make_node("Identity", inputs=ctx.inputs[:1], outputs=ctx.outputs[:1])
        return ctx.make_node(
            self.op,
            inputs=[ctx.inputs[0], _indices(ctx, axis, n), ctx.inputs[2]],
            outputs=ctx.outputs[:1],
            axis=axis,
            reduction=red,
        )

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, upd, ax = inputs[0], inputs[2], node.attrs["axis"]
        ind = _norm_idx(inputs[1], x.shape[ax])
        y = np.array(x, copy=True)
        red = node.attrs["reduction"]
        for pos in np.ndindex(*ind.shape):
            tgt = list(pos)
            tgt[ax] = int(ind[pos])
            t, u = tuple(tgt), upd[pos]
            if red == "none":
                y[t] = u
            elif red == "add":
                y[t] = y[t] + u
            elif red == "mul":
                y[t] = y[t] * u
            elif red == "max":
                y[t] = np.maximum(y[t], u)  # a NaN in either propagates, as the C kernel
            else:
                y[t] = np.minimum(y[t], u)
        return [y]
