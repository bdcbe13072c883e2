"""NonZero and Unique: ops whose output shape depends on the input's values.

tinyc plans every tensor's size at compile time, so these compute only when their input is a
compile-time constant (the import folds them with the numpy model below, as onnx's reference
computes them); on a run-time input they are refused, saying why.
"""

from __future__ import annotations

import numpy as np

from tinyc.ops.base import OpDef, register

_WHY = "data: the output shape depends on its values"


def nonzero(x: np.ndarray) -> np.ndarray:
    """[rank, count] int64 coordinates of the non-zero elements, in row-major order."""
    x = np.asarray(x)
    if x.ndim == 0:
        return np.zeros((0, int(np.count_nonzero(x))), np.int64)
    return np.vstack(np.nonzero(x)).astype(np.int64)


def unique(x: np.ndarray, axis: int | None, sort: bool) -> list[np.ndarray]:
    """Y, indices (first occurrence), inverse indices, counts; `sort` False keeps the order of
    first occurrence."""
    x = np.asarray(x)
    flat = x.reshape(-1) if axis is None else x
    ax = 0 if axis is None else axis
    y, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True, axis=ax)
    inverse = np.asarray(inverse).reshape(-1)
    if not sort:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(flat, first, axis=ax)
    return [np.ascontiguousarray(y), *(np.asarray(v, np.int64) for v in (first, inverse, counts))]


@register
class NonZero(OpDef):
    op = "NonZero"
    onnx_ops = ("NonZero",)

    def import_onnx(self, ctx):
        return ctx.set_constant(0, nonzero(ctx.require_const(0, _WHY)))


@register
class Unique(OpDef):
    op = "Unique"
    onnx_ops = ("Unique",)

    def import_onnx(self, ctx):
        x = ctx.require_const(0, _WHY)
        axis = ctx.attr("axis")
        if axis is not None:
            axis = int(axis)
            if not -x.ndim <= axis < x.ndim:
                ctx.invalid(f"axis {axis} out of range for rank {x.ndim}")
            axis %= x.ndim
        values = unique(x, axis, bool(int(ctx.attr("sorted", 1))))
        for i, name in enumerate(ctx.outputs[:4]):
            if name:
                ctx.set_constant(i, values[i])
        return []
