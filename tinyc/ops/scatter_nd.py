"""ScatterND (reduction none/add/mul/max/min) and TensorScatter (a KV-cache write).

Both copy the data to the output, then write update slices in order, so with duplicate indices
and reduction 'none' the later update wins (onnx's reference order). ScatterND: an index tuple
(the last indices dim, q coordinates) picks the slice data[t_0, ..., t_{q-1}, ...]; indices are
read at run time, wrapped and clamped as in GatherND. TensorScatter: past_cache viewed as
[outer][S][inner] along `axis`; update row s of prefix o goes to row write_indices[batch] + s
(modulo S in 'circular' mode; rows past S are dropped in 'linear' mode, where ONNX calls them
an error). Integer add/mul wrap (computed in the unsigned type); float max/min propagate NaN.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, normalize_axis, register, strides_of
from tinyc.ops.gather_nd import check_index_tuples, clamp_tuples
from tinyc.ops.slice_gather import _where

ALL_DTYPES: tuple[str, ...] = tuple(CTYPES)
REDUCTIONS = ("none", "add", "mul", "max", "min")
WRAP = {"int32": "(uint32_t)", "int64": "(uint64_t)", "uint16": "(uint32_t)", "uint32": "(uint32_t)"}


def _combine(y: np.ndarray, u: np.ndarray, reduction: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        if reduction == "add":
            return y + u
        if reduction == "mul":
            return y * u
        if reduction == "max":
            return np.maximum(y, u)
        if reduction == "min":
            return np.minimum(y, u)
    return u


@register
class ScatterND(OpDef):
    """inputs: data, indices, updates. attrs: `reduction`."""

    op = "ScatterND"
    onnx_ops = ("ScatterND",)
    template = "scatter_nd.c.j2"
    dtypes = ALL_DTYPES

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        shape, ishape = ctx.shape(0), ctx.shape(1)
        red = str(ctx.attr("reduction", "none"))
        if red not in REDUCTIONS:
            ctx.unsupported(f"reduction '{red}' (supported: {', '.join(REDUCTIONS)})")
        if red != "none" and ctx.dtype(0) == "bool":
            ctx.unsupported(f"reduction '{red}' on bool")
        if not ishape or int(ishape[-1]) > len(shape):
            ctx.invalid(f"indices shape {ishape} does not index data of rank {len(shape)}")
        q = int(ishape[-1])
        want = tuple(ishape[:-1]) + tuple(shape[q:])
        if tuple(ctx.shape(2)) != want:
            ctx.invalid(f"updates shape {ctx.shape(2)} should be {want}")
        if ctx.dtype(2) != ctx.dtype(0):
            ctx.invalid(f"updates type {ctx.dtype(2)} differs from data type {ctx.dtype(0)}")
        check_index_tuples(ctx, tuple(shape[:q]))
        if any(d == 0 for d in shape):
            return ctx.set_constant(0, np.zeros(shape, ctx.dtype(0)))
        if any(d == 0 for d in ishape[:-1]):
            return ctx.make_node("Identity", inputs=ctx.inputs[:1], outputs=ctx.outputs[:1])
        return ctx.make_node("ScatterND", inputs=ctx.inputs[:3], outputs=ctx.outputs[:1], reduction=red)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, upd = inputs[0], inputs[2]
        q = inputs[1].shape[-1]
        ind = clamp_tuples(inputs[1], x.shape[:q]).reshape(-1, q)
        u = upd.reshape((ind.shape[0],) + x.shape[q:])
        y = np.array(x, copy=True)
        for k, t in enumerate(ind):
            pos = tuple(int(v) for v in t)
            y[pos] = _combine(y[pos], u[k], node.attrs["reduction"])
        return [y]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        x, ind = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        q = int(ind.shape[-1])
        return {
            "nt": int(np.prod(ind.shape[:-1], dtype=np.int64)),
            "q": q,
            "dims": [int(d) for d in x.shape[:q]],
            "strides": strides_of(x.shape)[:q],
            "inner": int(np.prod(x.shape[q:], dtype=np.int64)),
            "size": x.size,
            "itype": CTYPES[ind.dtype],
            "reduction": node.attrs["reduction"],
            "is_float": x.dtype in ("float32", "float64"),
            "wrap": WRAP.get(x.dtype, ""),
        }


@register
class TensorScatter(OpDef):
    """inputs: past_cache, update, write_indices (optional, [batch]). attrs: `axis`, `circular`."""

    op = "TensorScatter"
    onnx_ops = ("TensorScatter",)
    template = "tensor_scatter.c.j2"
    dtypes = ALL_DTYPES

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        shape, ushape = ctx.shape(0), ctx.shape(1)
        if len(shape) < 2 or len(ushape) != len(shape):
            ctx.invalid(f"past_cache {shape} and update {ushape} need one rank >= 2")
        axis = normalize_axis(int(ctx.attr("axis", -2)), len(shape), _where(ctx))
        if axis == 0:
            ctx.invalid("axis 0 is the batch axis")
        if any(a != b for k, (a, b) in enumerate(zip(shape, ushape)) if k != axis) or ushape[axis] > shape[axis]:
            ctx.invalid(f"update shape {ushape} does not fit past_cache {shape} along axis {axis}")
        mode = str(ctx.attr("mode", "linear"))
        if mode not in ("linear", "circular"):
            ctx.invalid(f"mode '{mode}' (linear or circular)")
        ins = ctx.inputs[:2]
        if ctx.has_input(2):
            if ctx.dtype(2) not in ("int32", "int64"):
                ctx.unsupported(f"write_indices of type {ctx.dtype(2)} (int32/int64 only)")
            ins = ctx.inputs[:3]
        if any(d == 0 for d in shape):
            return ctx.set_constant(0, np.zeros(shape, ctx.dtype(0)))
        return ctx.make_node(
            "TensorScatter", inputs=ins, outputs=ctx.outputs[:1], axis=axis, circular=mode == "circular"
        )

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        past, upd, ax = inputs[0], inputs[1], node.attrs["axis"]
        w = inputs[2] if len(inputs) > 2 else np.zeros(past.shape[0], np.int64)
        y = np.array(past, copy=True)
        big, s = past.shape[ax], upd.shape[ax]
        for prefix in np.ndindex(*past.shape[:ax]):
            for k in range(s):
                row = int(w[prefix[0]]) + k
                row = row % big if node.attrs["circular"] else row
                if 0 <= row < big:
                    y[prefix + (row,)] = upd[prefix + (k,)]
        return [y]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        past, upd = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        ax = node.attrs["axis"]
        has_w = len(node.inputs) > 2 and bool(node.inputs[2])
        return {
            "outer": int(np.prod(past.shape[:ax], dtype=np.int64)),
            "per_batch": int(np.prod(past.shape[1:ax], dtype=np.int64)),
            "big": int(past.shape[ax]),
            "s": int(upd.shape[ax]),
            "inner": int(np.prod(past.shape[ax + 1 :], dtype=np.int64)),
            "size": past.size,
            "has_w": has_w,
            "circular": node.attrs["circular"],
        }
