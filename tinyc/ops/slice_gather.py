"""Data movement by index: Slice, Gather, Tile, Expand.

Slice, Tile and Expand are all strided views of their input (Slice: offset + step strides,
Expand: zero strides on broadcast dims, Tile: each axis split into (repeat, dim) with a zero
stride on the repeat), so they share one strided-copy kernel. Gather copies rows picked by an
index list. All of them move elements, so every dtype in base.CTYPES is accepted.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, broadcast_strides, normalize_axis, register, strides_of

ALL_DTYPES: tuple[str, ...] = tuple(CTYPES)


def _ints(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _where(ctx: Any) -> str:
    return f"node '{ctx.name}' ({ctx.op_type})"


def strided_copy_context(out_dims: Sequence[int], src_strides: Sequence[int], base: int) -> dict[str, Any]:
    """Template variables for out[i] = in[base + sum(i_k * stride_k)]: size-1 dims dropped and
    adjacent dims merged where the source walks them as one, so loops are few and long."""
    dims = [int(d) for d in out_dims]
    strides = [int(s) for s in src_strides]
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    keep = [k for k in range(len(dims)) if dims[k] != 1]
    dims = [dims[k] for k in keep]
    strides = [strides[k] for k in keep]
    i = len(dims) - 2
    while i >= 0:
        if strides[i] == strides[i + 1] * dims[i + 1]:
            dims[i] *= dims[i + 1]
            strides[i] = strides[i + 1]
            del dims[i + 1], strides[i + 1]
        i -= 1
    if not dims:
        dims, strides = [1], [0]
    return {"dims": dims, "src_strides": strides, "base": int(base), "count": count}


def _check_dtype(ctx: Any, i: int = 0) -> None:
    if ctx.dtype(i) not in ALL_DTYPES:
        ctx.unsupported(f"element type {ctx.dtype(i)} is not supported (supported: {', '.join(ALL_DTYPES)})")


def is_empty(shape: Sequence[int]) -> bool:
    return any(int(d) == 0 for d in shape)


def empty_output(ctx: Any, index: int, shape: Sequence[int]) -> list[Node]:
    """A zero-size result has no values to compute: define it as an empty constant."""
    return ctx.set_constant(index, np.zeros(tuple(int(d) for d in shape), dtype=ctx.dtype(0)))


def _remap(values: list[Any], perm: list[int]) -> list[Any]:
    """Per-axis values of the old (transposed) input, re-indexed for the untransposed one."""
    out = list(values)
    for a, p in enumerate(perm):
        out[p] = values[a]
    return out


# -- Slice ------------------------------------------------------------------------------------
def resolve_slice(
    shape: Sequence[int],
    starts: list[int],
    ends: list[int],
    axes: list[int] | None,
    steps: list[int] | None,
    where: str,
) -> tuple[list[int], list[int], list[int]]:
    """ONNX Slice (clamping, negative indices and steps) → per-axis first index, step and count."""
    from tinyc.errors import UnsupportedError

    rank = len(shape)
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not (len(starts) == len(ends) == len(axes) == len(steps)):
        raise UnsupportedError(f"{where}: starts/ends/axes/steps have different lengths")
    first = [0] * rank
    step = [1] * rank
    count = [int(d) for d in shape]
    seen: set[int] = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        ax = normalize_axis(int(a), rank, where)
        if ax in seen:
            raise UnsupportedError(f"{where}: axis {a} repeated in axes")
        seen.add(ax)
        if st == 0:
            raise UnsupportedError(f"{where}: step 0 is invalid")
        dim, stp = int(shape[ax]), int(st)
        lo = int(s) + dim if int(s) < 0 else int(s)
        hi = int(e) + dim if int(e) < 0 else int(e)
        # ONNX clamping (not Python's: a negative step clamps start to [0, dim-1], end to [-1, dim-1])
        if stp > 0:
            lo, hi = min(max(lo, 0), dim), min(max(hi, 0), dim)
        else:
            lo, hi = min(max(lo, 0), dim - 1), min(max(hi, -1), dim - 1)
        n = len(range(lo, hi, stp)) if dim else 0
        first[ax], step[ax], count[ax] = (lo if n else 0), stp, n
    return first, step, count


@register
class Slice(OpDef):
    """attrs: `starts`, `steps`, `counts` per axis (normalised: in range, full rank)."""

    op = "Slice"
    onnx_ops = ("Slice",)
    int8_passthrough = True
    qdq_shares_qparams = ("Slice",)
    template = "slice.c.j2"
    dtypes = ALL_DTYPES

    def import_onnx(self, ctx):
        _check_dtype(ctx)
        shape = ctx.shape(0)
        if ctx.opset < 10:
            starts, ends = ctx.attr("starts"), ctx.attr("ends")
            if starts is None or ends is None:
                ctx.unsupported("starts and ends attributes are required")
            axes = ctx.attr("axes")
            steps = None
        else:
            starts = ctx.require_const(1, "starts")
            ends = ctx.require_const(2, "ends")
            axes = ctx.require_const(3, "axes") if ctx.has_input(3) else None
            steps = ctx.require_const(4, "steps") if ctx.has_input(4) else None
        first, step, count = resolve_slice(
            shape,
            _ints(starts),
            _ints(ends),
            None if axes is None else _ints(axes),
            None if steps is None else _ints(steps),
            _where(ctx),
        )
        if is_empty(count):
            return empty_output(ctx, 0, count)
        return ctx.make_node(
            "Slice", inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], starts=first, steps=step, counts=count
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(tuple(node.attrs["counts"]), graph.tensor(node.inputs[0]).dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        for ax, (s, st, n) in enumerate(zip(node.attrs["starts"], node.attrs["steps"], node.attrs["counts"])):
            x = np.take(x, s + st * np.arange(n, dtype=np.int64), axis=ax)
        return [np.ascontiguousarray(x)]

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return len(perm) == len(node.attrs["counts"])

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        if not self.can_permute(node, graph, perm):
            return False
        for k in ("starts", "steps", "counts"):
            node.attrs[k] = _remap(node.attrs[k], perm)
        return True

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        st = strides_of(graph.tensor(node.inputs[0]).shape)
        a = node.attrs
        base = sum(s * k for s, k in zip(a["starts"], st))
        return strided_copy_context(a["counts"], [p * k for p, k in zip(a["steps"], st)], base)


# -- Tile / Expand ------------------------------------------------------------------------------
@register
class Tile(OpDef):
    """attrs: `repeats` per axis. Kernel: strided copy over (repeat, dim) pairs."""

    op = "Tile"
    onnx_ops = ("Tile",)
    int8_passthrough = True
    template = "slice.c.j2"
    dtypes = ALL_DTYPES

    def import_onnx(self, ctx):
        _check_dtype(ctx)
        rank = len(ctx.shape(0))
        if ctx.opset < 6:
            ctx.unsupported("Tile before opset 6 (tiles/axis inputs) is not supported")
        reps = _ints(ctx.require_const(1, "repeats"))
        if len(reps) != rank:
            ctx.unsupported(f"repeats has {len(reps)} entries for an input of rank {rank}")
        if any(r < 0 for r in reps):
            ctx.unsupported(f"negative repeats {reps}")
        if is_empty(ctx.shape(0)) or 0 in reps:
            return empty_output(ctx, 0, [d * r for d, r in zip(ctx.shape(0), reps)])
        return ctx.make_node("Tile", inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], repeats=reps)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        return [(tuple(d * r for d, r in zip(t.shape, node.attrs["repeats"])), t.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.ascontiguousarray(np.tile(inputs[0], node.attrs["repeats"]))]

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return len(perm) == len(node.attrs["repeats"])

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        if not self.can_permute(node, graph, perm):
            return False
        node.attrs["repeats"] = _remap(node.attrs["repeats"], perm)
        return True

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        shape = graph.tensor(node.inputs[0]).shape
        st = strides_of(shape)
        dims: list[int] = []
        strides: list[int] = []
        for d, r, s in zip(shape, node.attrs["repeats"], st):
            dims += [r, d]
            strides += [0, s]
        return strided_copy_context(dims, strides, 0)


@register
class Expand(OpDef):
    """attrs: `shape`, the full output shape (numpy broadcasting of input and target)."""

    op = "Expand"
    onnx_ops = ("Expand",)
    int8_passthrough = True
    template = "slice.c.j2"
    dtypes = ALL_DTYPES

    def import_onnx(self, ctx):
        _check_dtype(ctx)
        target = _ints(ctx.require_const(1, "shape"))
        try:
            out = tuple(int(d) for d in np.broadcast_shapes(ctx.shape(0), tuple(target)))
        except ValueError:
            ctx.unsupported(f"input shape {ctx.shape(0)} cannot be expanded to {target}")
        if is_empty(out):
            return empty_output(ctx, 0, out)
        return ctx.make_node("Expand", inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], shape=list(out))

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        return [(tuple(node.attrs["shape"]), t.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.ascontiguousarray(np.broadcast_to(inputs[0], node.attrs["shape"]))]

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return len(perm) == len(node.attrs["shape"]) == len(graph.tensor(node.inputs[0]).shape)

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        if not self.can_permute(node, graph, perm):
            return False
        node.attrs["shape"] = _remap(node.attrs["shape"], perm)
        return True

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        shape = graph.tensor(node.inputs[0]).shape
        out = node.attrs["shape"]
        return strided_copy_context(out, broadcast_strides(shape, out), 0)


# -- Gather -------------------------------------------------------------------------------------
@register
class Gather(OpDef):
    """inputs: data, indices (int32). Constant indices are normalised to [0, n) at import;
    runtime indices (an embedding lookup) are wrapped and clamped in the kernel."""

    op = "Gather"
    onnx_ops = ("Gather",)
    int8_passthrough = True
    qdq_shares_qparams = ("Gather",)
    template = "gather.c.j2"
    dtypes = ALL_DTYPES

    def import_onnx(self, ctx):
        _check_dtype(ctx)
        shape = ctx.shape(0)
        rank = len(shape)
        if rank == 0:
            ctx.unsupported("Gather on a scalar")
        axis = normalize_axis(int(ctx.attr("axis", 0)), rank, _where(ctx))
        n = shape[axis]
        out_shape = tuple(shape[:axis]) + tuple(ctx.shape(1)) + tuple(shape[axis + 1 :])
        if is_empty(out_shape):
            return empty_output(ctx, 0, out_shape)
        idx = ctx.const(1)
        if idx is not None:
            idx = np.asarray(idx).astype(np.int64)
            if idx.size and (idx.min() < -n or idx.max() >= n):
                ctx.unsupported(f"indices out of range [-{n}, {n - 1}] on axis {axis}")
            idx = np.where(idx < 0, idx + n, idx)
            dt = np.int32 if n < 2**31 else np.int64
            indices = ctx.add_constant("indices", idx.astype(dt))
        else:
            if ctx.dtype(1) not in ("int32", "int64"):
                ctx.unsupported(f"indices of type {ctx.dtype(1)} (int32/int64 only)")
            indices = ctx.inputs[1]
        # the tensor's shape is authoritative: folded 0-d constants may carry 1-d data
        return ctx.make_node(
            "Gather",
            inputs=[ctx.inputs[0], indices],
            outputs=ctx.outputs[:1],
            axis=axis,
            indices_shape=[int(d) for d in ctx.shape(1)],
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x = graph.tensor(node.inputs[0])
        ax = node.attrs["axis"]
        ind_shape = tuple(node.attrs.get("indices_shape", graph.tensor(node.inputs[1]).shape))
        return [(tuple(x.shape[:ax]) + ind_shape + tuple(x.shape[ax + 1 :]), x.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, ind = inputs[0], np.asarray(inputs[1]).astype(np.int64)
        if "indices_shape" in node.attrs:
            ind = ind.reshape(node.attrs["indices_shape"])
        n = x.shape[node.attrs["axis"]]
        ind = np.clip(np.where(ind < 0, ind + n, ind), 0, max(n - 1, 0))
        return [np.ascontiguousarray(np.take(x, ind, axis=node.attrs["axis"]))]

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        # rank-1 indices keep the rank and the axis order: the gathered axis just moves
        rank = len(node.attrs.get("indices_shape", graph.tensor(node.inputs[1]).shape))
        return rank == 1 and len(perm) == len(graph.tensor(node.outputs[0]).shape)

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        if not self.can_permute(node, graph, perm):
            return False
        node.attrs["axis"] = perm[node.attrs["axis"]]
        return True

    def check_supported(self, node: Node, graph: Graph) -> None:
        super().check_supported(node, graph)
        if graph.tensor(node.inputs[0]).size == 0 and graph.tensor(node.outputs[0]).size:
            from tinyc.errors import UnsupportedError

            raise UnsupportedError(f"node '{node.source or node.name}' (Gather): gathering from an empty axis")

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        x, ind = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        ax = node.attrs["axis"]
        return {
            "outer": int(np.prod(x.shape[:ax], dtype=np.int64)),
            "n": int(x.shape[ax]),
            "inner": int(np.prod(x.shape[ax + 1 :], dtype=np.int64)),
            "k": ind.size,
            "runtime_indices": not ind.is_constant,
            "itype": CTYPES[ind.dtype],
        }
