"""Converters of TFLite's shape, data-movement and reduction builtins (int8 and float32).

Why these map onto tinyc's generic data-movement ops: TFLite Micro's kernels for SQUEEZE, TRANSPOSE,
CONCATENATION, PAD, STRIDED_SLICE, GATHER ... copy int8 bytes without looking at the grids, so the
exact result is the same copy on tinyc's own Reshape / Transpose / Concat / Split / Slice / Pad /
Gather nodes. Where the input and output grids differ TFLite Micro would still copy the raw bytes
(a silently rescaled result), so those models are refused instead. Index computations that TFLite
does in float (RESIZE_NEAREST_NEIGHBOR's source pixel) or with its own clamping rules
(STRIDED_SLICE's begin/end/masks, MIRROR_PAD's SYMMETRIC mode) are done here at import, in the
same arithmetic, and become constant-index Gathers or Slices. int8 MEAN and SUM requantize with
TFLite's integer steps (``tinyc/ops/tflm_reduce.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.frontend.tflite.context import TflContext, converts, tflite_round
from tinyc.frontend.tflite.reader import TflTensor
from tinyc.ops.tflm_reduce import tflm_reduce_params

#: element types the pure data-movement converters accept (quantized ones: int8 only)
MOVE_DTYPES = ("int8", "float32", "int32", "int64")


# -- helpers --------------------------------------------------------------------------------------
def _in(ctx: TflContext, i: int) -> str:
    """IR name of input i (present: callers check optional inputs themselves)."""
    name = ctx.input(i)
    if name is None:
        ctx.unsupported(f"input {i} is missing")
    assert name is not None
    return name


def _ints(ctx: TflContext, i: int, what: str) -> list[int]:
    """A constant integer input (axes, sizes, perm, ...) as Python ints."""
    v = ctx.require_const(i, what)
    if v.dtype.kind not in "iu":
        ctx.unsupported(f"{what} (input {i}) is {v.dtype} (an integer constant is needed)")
    return [int(a) for a in np.asarray(v).reshape(-1)]


def _grid(ctx: TflContext, t: TflTensor) -> tuple[float, int] | None:
    """(scale, zero point) of an int8 tensor, None for an unquantized one; refuses other integer grids."""
    if t.dtype not in MOVE_DTYPES:
        ctx.unsupported(f"tensor '{t.name}' is {t.dtype} (int8, float32, int32, int64 supported)")
    if t.dtype == "int8":
        return ctx.require_per_tensor(t, "tensor")
    return None


def _same_grid(ctx: TflContext, inputs: list[TflTensor], outputs: list[TflTensor]) -> None:
    """TFLite Micro copies the bytes of a data-movement op, so every tensor must hold the same grid and type."""
    ref = outputs[0]
    g_ref = _grid(ctx, ref)
    for t in [*inputs, *outputs]:
        if t.dtype != ref.dtype:
            ctx.unsupported(f"tensor '{t.name}' is {t.dtype}, output '{ref.name}' is {ref.dtype}")
        g = _grid(ctx, t)
        if g != g_ref:
            ctx.unsupported(
                f"tensor '{t.name}' is quantized as {g}, output '{ref.name}' as {g_ref}: TFLite Micro copies int8 "
                "values without rescaling, so differing grids are not supported"
            )


def _axis(ctx: TflContext, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        ctx.unsupported(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _tmp(ctx: TflContext, base: str, shape: tuple[int, ...], like: TflTensor) -> str:
    """An intermediate tensor on `like`'s type and grid."""
    g = _grid(ctx, like)
    if g is None:
        return ctx.intermediate(base, shape, like.dtype)
    return ctx.intermediate(base, shape, like.dtype, g[0], g[1])


def _reshape(ctx: TflContext, src: str, dst: str, shape: tuple[int, ...]) -> None:
    ctx.add(ctx.node("Reshape", [src], [dst], shape=[int(d) for d in shape]))


def _count(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


# -- reshapes, transposes ---------------------------------------------------------------------------
@converts("SQUEEZE", "EXPAND_DIMS")
def squeeze_expand(ctx: TflContext) -> None:
    """Both only relabel the shape: a Reshape to the shape the file declares (EXPAND_DIMS's axis must be a constant)."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _same_grid(ctx, [x], [y])
    if ctx.op.name == "EXPAND_DIMS":
        axis = _ints(ctx, 1, "axis")
        if len(axis) != 1:
            ctx.unsupported(f"axis {axis} (one value needed)")
        _axis(ctx, axis[0], len(x.shape) + 1)
    if _count(x.shape) != _count(y.shape):
        ctx.unsupported(f"cannot reshape {list(x.shape)} into {list(y.shape)}")
    _reshape(ctx, _in(ctx, 0), ctx.output(0), y.shape)


@converts("TRANSPOSE")
def transpose(ctx: TflContext) -> None:
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _same_grid(ctx, [x], [y])
    perm = [_axis(ctx, p, len(x.shape)) for p in _ints(ctx, 1, "perm")]
    if sorted(perm) != list(range(len(x.shape))):
        ctx.unsupported(f"perm {perm} is not a permutation of {len(x.shape)} axes")
    ctx.add(ctx.node("Transpose", [_in(ctx, 0)], [ctx.output(0)], perm=perm))


@converts("SPACE_TO_DEPTH", "DEPTH_TO_SPACE")
def space_depth(ctx: TflContext) -> None:
    """NHWC block moves as TFLite orders them (channel index (i * bs + j) * C + c): reshape to 6-D, swap the
    block axes with the spatial ones, reshape back."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _same_grid(ctx, [x], [y])
    if len(x.shape) != 4:
        ctx.unsupported(f"input {list(x.shape)} must be 4-D (NHWC)")
    bs = int(ctx.opt("block_size", 0))
    if bs < 1:
        ctx.unsupported(f"block_size {bs}")
    n, h, w, c = (int(d) for d in x.shape)
    if ctx.op.name == "DEPTH_TO_SPACE":
        if c % (bs * bs):
            ctx.unsupported(f"channels {c} are not a multiple of block_size^2 = {bs * bs}")
        six = (n, h, w, bs, bs, c // (bs * bs))
    else:
        if h % bs or w % bs:
            ctx.unsupported(f"spatial size {h}x{w} is not a multiple of block_size {bs}")
        six = (n, h // bs, bs, w // bs, bs, c)
    perm = [0, 1, 3, 2, 4, 5]
    moved = tuple(six[p] for p in perm)
    a = _tmp(ctx, "blocks", six, x)
    b = _tmp(ctx, "moved", moved, x)
    _reshape(ctx, _in(ctx, 0), a, six)
    ctx.add(ctx.node("Transpose", [a], [b], perm=perm))
    _reshape(ctx, b, ctx.output(0), y.shape)


# -- concatenation, stacking, splitting --------------------------------------------------------------
@converts("CONCATENATION")
def concatenation(ctx: TflContext) -> None:
    ins = [ctx.tensor(i) for i in range(ctx.n_inputs)]
    y = ctx.out_tensor(0)
    _same_grid(ctx, ins, [y])
    if ctx.activation() != "NONE":
        ctx.unsupported("a fused activation on CONCATENATION (TFLite Micro supports none)")
    axis = _axis(ctx, int(ctx.opt("axis", 0)), len(y.shape))
    ctx.add(ctx.node("Concat", [_in(ctx, i) for i in range(ctx.n_inputs)], [ctx.output(0)], axis=axis))


@converts("PACK")
def pack(ctx: TflContext) -> None:
    """Stack: each input gets a size-1 axis (Reshape), then one Concat along it."""
    ins = [ctx.tensor(i) for i in range(ctx.n_inputs)]
    y = ctx.out_tensor(0)
    _same_grid(ctx, ins, [y])
    axis = _axis(ctx, int(ctx.opt("axis", 0)), len(y.shape))
    parts = []
    for i, t in enumerate(ins):
        shape = (*t.shape[:axis], 1, *t.shape[axis:])
        part = _tmp(ctx, f"item{i}", shape, t)
        _reshape(ctx, _in(ctx, i), part, shape)
        parts.append(part)
    ctx.add(ctx.node("Concat", parts, [ctx.output(0)], axis=axis))


@converts("UNPACK")
def unpack(ctx: TflContext) -> None:
    """Unstack: a Split into pieces of 1 along the axis, each reshaped to drop it."""
    x = ctx.tensor(0)
    outs = [ctx.out_tensor(j) for j in range(len(ctx.op.outputs))]
    _same_grid(ctx, [x], outs)
    axis = _axis(ctx, int(ctx.opt("axis", 0)), len(x.shape))
    n = int(x.shape[axis])
    if n != len(outs):
        ctx.unsupported(f"axis {axis} of size {n} does not unpack into {len(outs)} outputs")
    piece = (*x.shape[:axis], 1, *x.shape[axis + 1 :])
    pieces = [_tmp(ctx, f"piece{j}", piece, x) for j in range(n)]
    ctx.add(ctx.node("Split", [_in(ctx, 0)], pieces, axis=axis, sizes=[1] * n))
    for j, p in enumerate(pieces):
        _reshape(ctx, p, ctx.output(j), outs[j].shape)


def _split(ctx: TflContext, data: int, axis: int, sizes: list[int]) -> None:
    x = ctx.tensor(data)
    outs = [ctx.out_tensor(j) for j in range(len(ctx.op.outputs))]
    _same_grid(ctx, [x], outs)
    ax = _axis(ctx, axis, len(x.shape))
    n = int(x.shape[ax])
    if sizes.count(-1) == 1:
        sizes[sizes.index(-1)] = n - sum(s for s in sizes if s != -1)
    if len(sizes) != len(outs) or sum(sizes) != n or min(sizes) < 0:
        ctx.unsupported(f"split sizes {sizes} do not cover axis {ax} of size {n} with {len(outs)} outputs")
    ctx.add(ctx.node("Split", [_in(ctx, data)], [ctx.output(j) for j in range(len(outs))], axis=ax, sizes=sizes))


@converts("SPLIT")
def split(ctx: TflContext) -> None:
    (axis,) = _ints(ctx, 0, "axis")
    n = int(ctx.tensor(1).shape[_axis(ctx, axis, len(ctx.tensor(1).shape))])
    k = len(ctx.op.outputs)
    if n % k:
        ctx.unsupported(f"axis {axis} of size {n} does not split into {k} equal parts")
    _split(ctx, 1, axis, [n // k] * k)


@converts("SPLIT_V")
def split_v(ctx: TflContext) -> None:
    (axis,) = _ints(ctx, 2, "axis")
    _split(ctx, 0, axis, _ints(ctx, 1, "size_splits"))


# -- slicing, gathering ---------------------------------------------------------------------------
def _slice_node(ctx: TflContext, starts: list[int], steps: list[int], counts: list[int]) -> None:
    """Slice (starts/steps/counts per axis) then, when the file's shape differs (shrunk axes), a Reshape."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    out = ctx.output(0)
    direct = tuple(counts) == tuple(y.shape)
    if _count(tuple(counts)) != _count(y.shape):
        ctx.unsupported(f"the slice has shape {counts}, the model declares {list(y.shape)}")
    target = out if direct else _tmp(ctx, "slice", tuple(counts), x)
    ctx.add(ctx.node("Slice", [_in(ctx, 0)], [target], starts=starts, steps=steps, counts=counts))
    if not direct:
        _reshape(ctx, target, out, y.shape)


@converts("SLICE")
def slice_(ctx: TflContext) -> None:
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _same_grid(ctx, [x], [y])
    begin, size = _ints(ctx, 1, "begin"), _ints(ctx, 2, "size")
    if len(begin) != len(x.shape) or len(size) != len(x.shape):
        ctx.unsupported(f"begin {begin} / size {size} do not match the input rank {len(x.shape)}")
    counts = []
    for b, s, d in zip(begin, size, x.shape):
        s = d - b if s == -1 else s
        if b < 0 or s < 0 or b + s > d:
            ctx.unsupported(f"slice begin {begin} size {size} is outside the input {list(x.shape)}")
        counts.append(s)
    _slice_node(ctx, begin, [1] * len(begin), counts)


@converts("STRIDED_SLICE")
def strided_slice(ctx: TflContext) -> None:
    """TFLite's StridedSliceStartForAxis / EndForAxis: negative indices wrap once, then clamp to [0, n]
    ([-1, n-1] for a negative stride); a masked begin/end takes the whole axis; a shrunk axis is [start, start+1)."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _same_grid(ctx, [x], [y])
    if int(ctx.opt("ellipsis_mask", 0)) or int(ctx.opt("new_axis_mask", 0)):
        ctx.unsupported("ellipsis_mask / new_axis_mask are not supported")
    begin, end, strides = _ints(ctx, 1, "begin"), _ints(ctx, 2, "end"), _ints(ctx, 3, "strides")
    rank = len(x.shape)
    if not len(begin) == len(end) == len(strides) == rank:
        ctx.unsupported(f"begin {begin}, end {end}, strides {strides} must each have {rank} entries (the input rank)")
    bm, em, sm = (int(ctx.opt(k, 0)) for k in ("begin_mask", "end_mask", "shrink_axis_mask"))
    offset = bool(ctx.opt("offset", False))
    starts, counts = [], []
    for ax, n in enumerate(int(d) for d in x.shape):
        st = strides[ax]
        if st == 0:
            ctx.unsupported("a stride of 0")
        lo_s, hi_s = (0, n) if st > 0 else (-1, n - 1)
        s = begin[ax] + n if begin[ax] < 0 else begin[ax]
        s = min(max(s, lo_s), hi_s)
        if bm >> ax & 1:
            s = 0 if st > 0 else n - 1
        if sm >> ax & 1:
            e = s if s >= n else s + 1
        else:
            e = end[ax] + (s if offset else 0)
            e = e + n if e < 0 else e
            e = min(max(e, lo_s), hi_s)
            if em >> ax & 1:
                e = n if st > 0 else -1
        k = max(0, -(-(e - s) // st)) if st > 0 else max(0, -(-(s - e) // -st))
        starts.append(s if k else 0)
        counts.append(k)
    if 0 in counts:
        ctx.unsupported(f"the slice of {list(x.shape)} is empty")
    _slice_node(ctx, starts, strides, counts)


def _gather(ctx: TflContext, src: str, dst: str, axis: int, idx: np.ndarray) -> None:
    """A Gather along `axis` with constant (in-range) indices."""
    ind = ctx.constant("indices", np.asarray(idx, np.int32).reshape(-1))
    ctx.add(ctx.node("Gather", [src, ind], [dst], axis=axis, indices_shape=[int(len(idx))]))


@converts("GATHER")
def gather(ctx: TflContext) -> None:
    x, ind, y = ctx.tensor(0), ctx.tensor(1), ctx.out_tensor(0)
    _same_grid(ctx, [x], [y])
    if int(ctx.opt("batch_dims", 0)) != 0:
        ctx.unsupported("batch_dims other than 0")
    axis = _axis(ctx, int(ctx.opt("axis", 0)), len(x.shape))
    n = int(x.shape[axis])
    idx = ctx.const(1)
    if idx is not None:
        v = np.asarray(idx).astype(np.int64)
        if v.size and (v.min() < 0 or v.max() >= n):
            ctx.unsupported(f"indices outside [0, {n - 1}] on axis {axis} (TFLite Micro fails on them)")
        indices = ctx.constant("indices", v.astype(np.int32))
    else:
        if ind.dtype not in ("int32", "int64"):
            ctx.unsupported(f"indices '{ind.name}' are {ind.dtype} (int32/int64 needed)")
        indices = _in(ctx, 1)
    ctx.add(
        ctx.node(
            "Gather", [_in(ctx, 0), indices], [ctx.output(0)], axis=axis, indices_shape=[int(d) for d in ind.shape]
        )
    )


def _nearest(out_size: int, in_size: int, align: bool, half: bool) -> np.ndarray:
    """TFLite's GetNearestNeighbor, in float32 as the kernel computes it."""
    f32 = np.float32
    scale = f32(in_size - 1) / f32(out_size - 1) if align and out_size > 1 else f32(in_size) / f32(out_size)
    pos = (np.arange(out_size, dtype=f32) + f32(0.5 if half else 0.0)) * scale
    src = (tflite_round(pos) if align else np.floor(pos)).astype(np.int64)
    src = np.minimum(src, in_size - 1)
    return np.maximum(src, 0) if half else src


@converts("RESIZE_NEAREST_NEIGHBOR")
def resize_nearest(ctx: TflContext) -> None:
    """Two constant-index Gathers (rows, then columns) with the source indices TFLite computes."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _same_grid(ctx, [x], [y])
    if len(x.shape) != 4:
        ctx.unsupported(f"input {list(x.shape)} must be 4-D (NHWC)")
    size = _ints(ctx, 1, "size")
    if len(size) != 2 or min(size) < 1:
        ctx.unsupported(f"size {size}")
    oh, ow = size
    align, half = bool(ctx.opt("align_corners", False)), bool(ctx.opt("half_pixel_centers", False))
    n, h, w, c = (int(d) for d in x.shape)
    rows = _tmp(ctx, "rows", (n, oh, w, c), x)
    _gather(ctx, _in(ctx, 0), rows, 1, _nearest(oh, h, align, half))
    _gather(ctx, rows, ctx.output(0), 2, _nearest(ow, w, align, half))


# -- padding ----------------------------------------------------------------------------------------
def _paddings(ctx: TflContext, rank: int) -> list[int]:
    p = ctx.require_const(1, "paddings")
    if p.dtype.kind not in "iu" or p.size != 2 * rank:
        ctx.unsupported(f"paddings of shape {list(p.shape)} ({p.dtype}) for an input of rank {rank}")
    pairs = np.asarray(p, np.int64).reshape(rank, 2)
    if pairs.min(initial=0) < 0:
        ctx.unsupported(f"negative paddings {pairs.tolist()}")
    return [int(v) for v in pairs[:, 0]] + [int(v) for v in pairs[:, 1]]


@converts("PAD", "PADV2")
def pad(ctx: TflContext) -> None:
    """The int8 fill is the constant's stored int8 value (PADV2) or the output zero point (PAD), as in TFLite Micro."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _same_grid(ctx, [x], [y])
    if ctx.tensor(1).dtype != "int32":
        ctx.unsupported(f"paddings of type {ctx.tensor(1).dtype} (TFLite Micro's PAD reads int32 paddings)")
    pads = _paddings(ctx, len(x.shape))
    value: float | int = 0
    if ctx.op.name == "PADV2" and ctx.has_input(2):
        cv = ctx.require_const(2, "constant_values")
        if cv.size != 1 or ctx.tensor(2).dtype != x.dtype:
            ctx.unsupported(f"constant_values must be one {x.dtype} value")
        value = cv.reshape(-1)[0].item()
    elif x.dtype == "int8":
        value = ctx.qparams(y)[1]
    ctx.add(ctx.node("Pad", [_in(ctx, 0)], [ctx.output(0)], mode="constant", pads=pads, value=value))


@converts("MIRROR_PAD")
def mirror_pad(ctx: TflContext) -> None:
    """REFLECT (edge not repeated) and SYMMETRIC (edge repeated): one constant-index Gather per padded axis."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _same_grid(ctx, [x], [y])
    rank = len(x.shape)
    pads = _paddings(ctx, rank)
    symmetric = int(ctx.opt("mode", 0)) == 1
    src = _in(ctx, 0)
    shape = [int(d) for d in x.shape]
    padded = [a for a in range(rank) if pads[a] or pads[rank + a]]
    if not padded:
        _reshape(ctx, src, ctx.output(0), y.shape)
        return
    for k, a in enumerate(padded):
        n, pb, pe = shape[a], pads[a], pads[rank + a]
        limit = n if symmetric else n - 1
        if pb > limit or pe > limit:
            mode = "SYMMETRIC" if symmetric else "REFLECT"
            ctx.unsupported(f"paddings {pb}, {pe} exceed what {mode} allows on axis {a} of size {n}")
        o = np.arange(-pb, n + pe)
        idx = np.where(o < 0, -o - (1 if symmetric else 0), o)
        idx = np.where(idx >= n, 2 * n - idx - (1 if symmetric else 2), idx)
        shape[a] = n + pb + pe
        dst = ctx.output(0) if k == len(padded) - 1 else _tmp(ctx, f"pad{a}", tuple(shape), x)
        _gather(ctx, src, dst, a, idx)
        src = dst


# -- arg min/max, reductions --------------------------------------------------------------------------
@converts("ARG_MAX", "ARG_MIN")
def arg_min_max(ctx: TflContext) -> None:
    """The first index of the extreme (TFLite compares strictly); int32 output only, as in TFLite Micro."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _grid(ctx, x)
    (axis,) = _ints(ctx, 1, "axis")
    axis = _axis(ctx, axis, len(x.shape))
    if y.dtype != "int32":
        ctx.unsupported(f"output type {y.dtype} (TFLite Micro's ARG_MAX/ARG_MIN give int32 only)")
    kind = "max" if ctx.op.name == "ARG_MAX" else "min"
    out = ctx.output(0)
    shape = tuple(d for a, d in enumerate(x.shape) if a != axis)
    index = ctx.intermediate("arg", shape, "int64")
    ctx.add(ctx.node("ArgMax", [_in(ctx, 0)], [index], kind=kind, axis=axis, keepdims=0, last=0))
    ctx.add(ctx.node("Cast", [index], [out], to="int32"))


def _reduce_axes(ctx: TflContext, rank: int) -> list[int]:
    """The constant reduction axes, normalised, deduplicated and sorted (TFLite's ResolveAxis)."""
    return sorted({_axis(ctx, a, rank) for a in _ints(ctx, 1, "axis")})


@converts("REDUCE_MAX")
def reduce_max(ctx: TflContext) -> None:
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _same_grid(ctx, [x], [y])  # TFLite Micro requires the same grid for int8 too
    axes = _reduce_axes(ctx, len(x.shape))
    keep = int(bool(ctx.opt("keep_dims", False)))
    ctx.add(ctx.node("ReduceMax", [_in(ctx, 0)], [ctx.output(0)], axes=axes, keepdims=keep))


@converts("MEAN", "SUM")
def mean_sum(ctx: TflContext) -> None:
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    axes = _reduce_axes(ctx, len(x.shape))
    keep = int(bool(ctx.opt("keep_dims", False)))
    op = "ReduceMean" if ctx.op.name == "MEAN" else "ReduceSum"
    if x.dtype == "float32":
        if y.dtype != "float32":
            ctx.unsupported(f"output type {y.dtype}")
        ctx.add(ctx.node(op, [_in(ctx, 0)], [ctx.output(0)], axes=axes, keepdims=keep))
        return
    if x.dtype != "int8" or y.dtype != "int8":
        ctx.unsupported(f"types {x.dtype} -> {y.dtype} (int8 or float32)")
    s_x, zp_x = ctx.require_per_tensor(x, "input")
    s_y, zp_y = ctx.require_per_tensor(y, "output")
    kept = [a for a in range(len(x.shape)) if a not in axes]
    n = _count(tuple(x.shape[a] for a in axes))
    if n == 0:
        ctx.unsupported("reducing an empty axis")
    src = _in(ctx, 0)
    perm = kept + axes
    if perm != sorted(perm) and _count(tuple(x.shape)) > 1:
        moved = _tmp(ctx, "moved", tuple(x.shape[p] for p in perm), x)
        ctx.add(ctx.node("Transpose", [src], [moved], perm=perm))
        src = moved
    try:
        attrs: dict[str, Any] = tflm_reduce_params(ctx.op.name == "SUM", n, s_x, zp_x, s_y, zp_y)
    except ValueError as exc:
        ctx.unsupported(str(exc))
    ctx.add(ctx.node("TflmReduce", [src], [ctx.output(0)], n=n, out_shape=[int(d) for d in y.shape], **attrs))


# -- batch matmul ---------------------------------------------------------------------------------------
def _swap_last(ctx: TflContext, src: str, t: TflTensor, base: str) -> str:
    """`src` with its last two axes swapped (adj_x / adj_y), as a Transpose node."""
    r = len(t.shape)
    perm = [*range(r - 2), r - 1, r - 2]
    dst = _tmp(ctx, base, tuple(t.shape[p] for p in perm), t)
    ctx.add(ctx.node("Transpose", [src], [dst], perm=perm))
    return dst


@converts("BATCH_MATMUL")
def batch_matmul(ctx: TflContext) -> None:
    """lhs @ rhs with broadcast batch dims. int8: TFLite Micro's acc = sum (lhs - zp_l)(rhs - zp_r) in int32,
    MultiplyByQuantizedMultiplier(s_l * s_r / s_y), + zp_y, full int8 clamp: tinyc's QMatMul (constant rhs)."""
    a, b, y = ctx.tensor(0), ctx.tensor(1), ctx.out_tensor(0)
    if len(a.shape) < 2 or len(b.shape) < 2:
        ctx.unsupported(f"operands {list(a.shape)} and {list(b.shape)} must have rank >= 2")
    adj_x, adj_y = bool(ctx.opt("adj_x", False)), bool(ctx.opt("adj_y", False))
    lhs = _in(ctx, 0)
    if adj_x:
        lhs = _swap_last(ctx, lhs, a, "lhs_t")
    if a.dtype == "float32":
        if b.dtype != "float32" or y.dtype != "float32":
            ctx.unsupported(f"types {a.dtype} x {b.dtype} -> {y.dtype} (float32 or int8 throughout)")
        rhs = _in(ctx, 1)
        if adj_y:
            rhs = _swap_last(ctx, rhs, b, "rhs_t")
        ctx.add(ctx.node("MatMul", [lhs, rhs], [ctx.output(0)]))
        return
    if a.dtype != "int8" or b.dtype != "int8" or y.dtype != "int8":
        ctx.unsupported(f"types {a.dtype} x {b.dtype} -> {y.dtype} (float32 or int8 throughout)")
    s_a, zp_a = ctx.require_per_tensor(a, "lhs")
    s_b, zp_b = ctx.require_per_tensor(b, "rhs")
    s_y, zp_y = ctx.require_per_tensor(y, "output")
    wd = ctx.const(1)
    if wd is None:
        ctx.unsupported("int8 BATCH_MATMUL with a non-constant rhs (input 1) is not supported")
    assert wd is not None
    wq = np.asarray(wd).astype(np.int8)
    if adj_y:
        wq = np.swapaxes(wq, -1, -2)
    k, n = int(wq.shape[-2]), int(wq.shape[-1])
    from tinyc.ops.qmatmul import MAX_K
    from tinyc.numerics import fixed_point as arith

    if k > MAX_K:
        ctx.unsupported(f"an accumulation over {k} values could overflow int32")
    try:
        mult, shift = (int(v) for v in arith.requant_params(np.float32(s_a), np.float32(s_b), np.float32(s_y)))
    except ValueError as exc:
        ctx.unsupported(f"requantization multiplier: {exc}")
    ctx.add(
        ctx.node(
            "QMatMul",
            [lhs, ctx.constant("rhs_q", np.ascontiguousarray(wq))],
            [ctx.output(0)],
            multiplier=[mult] * n,
            shift=[shift] * n,
            a_zp=zp_a,
            b_zp=[zp_b] * n,
            y_zp=zp_y,
            qmin=-128,
            qmax=127,
            ydtype="int8",
            act_min=-128,
            act_max=127,
            w_scale=[float(s_b)] * n,
        )
    )


# -- transpose convolution ---------------------------------------------------------------------------------
def _transpose_conv_pads(
    ctx: TflContext, out_hw: tuple[int, int], k_hw: tuple[int, int], s_hw: tuple[int, int]
) -> list[int]:
    """TFLite Micro's padding for TRANSPOSE_CONV: ComputePaddingHeightWidth run on the *output* size (the
    convolution this one transposes), keeping only the leading pad [top, left]."""
    pads = []
    for n, k, s in zip(out_hw, k_hw, s_hw):
        o = (n + s - 1) // s if ctx.padding() == "SAME" else (n - k + s) // s
        pads.append(max((o - 1) * s + k - n, 0) // 2)
    return pads


@converts("TRANSPOSE_CONV")
def transpose_conv(ctx: TflContext) -> None:
    """Inputs (output_shape, weights [OC, KH, KW, IC], x, bias?). int8: TflmTransposeConv (per-channel
    requantization as TFLite Micro's reference kernel); float32: tinyc's ConvTranspose on NHWC."""
    w, x, y = ctx.tensor(1), ctx.tensor(2), ctx.out_tensor(0)
    if len(x.shape) != 4 or len(w.shape) != 4:
        ctx.unsupported(f"input {list(x.shape)} and filter {list(w.shape)} must be 4-D")
    shape = _ints(ctx, 0, "output_shape")
    if tuple(shape) != tuple(y.shape):
        ctx.unsupported(f"output_shape {shape} differs from the output tensor's {list(y.shape)}")
    wd = ctx.require_const(1, "weights")
    n, h, wi, c = (int(d) for d in x.shape)
    oc, kh, kw, ic = (int(d) for d in w.shape)
    if ic != c or int(y.shape[3]) != oc or int(y.shape[0]) != n:
        ctx.unsupported(f"filter {list(w.shape)} does not fit input {list(x.shape)} and output {list(y.shape)}")
    strides = (int(ctx.opt("stride_h", 1)), int(ctx.opt("stride_w", 1)))
    oh, ow = int(y.shape[1]), int(y.shape[2])
    pt, pl = _transpose_conv_pads(ctx, (oh, ow), (kh, kw), strides)
    has_bias = ctx.has_input(3)
    if x.dtype == "float32":
        if ctx.float_act() is not None:
            ctx.unsupported("a fused activation on a float32 TRANSPOSE_CONV")
        fbias = ctx.require_const(3, "bias").astype(np.float32).reshape(-1) if has_bias else np.zeros(oc, np.float32)
        full = ((h - 1) * strides[0] + kh, (wi - 1) * strides[1] + kw)
        pads = [pt, pl, full[0] - pt - oh, full[1] - pl - ow]
        wk = np.ascontiguousarray(np.transpose(wd, (1, 2, 3, 0)), np.float32)  # [KH, KW, IC, OC]
        ins = [_in(ctx, 2), ctx.constant("w", wk), ctx.constant("bias", fbias)]
        ctx.add(
            ctx.node(
                "ConvTranspose",
                ins,
                [ctx.output(0)],
                kernel=[kh, kw],
                strides=list(strides),
                pads=pads,
                dilations=[1, 1],
                group=1,
                out_spatial=[oh, ow],
                layout="NHWC",
            )
        )
        return
    if x.dtype != "int8" or y.dtype != "int8" or w.dtype != "int8":
        ctx.unsupported(f"types {x.dtype} / filter {w.dtype} -> {y.dtype} (int8 or float32)")
    s_x, zp_x = ctx.require_per_tensor(x, "input")
    s_y, zp_y = ctx.require_per_tensor(y, "output")
    if not w.quantized or np.any(w.zero_point != 0):
        ctx.unsupported(f"weights '{w.name}' need symmetric int8 quantization")
    assert w.scale is not None
    s_w = np.asarray(w.scale, np.float32)
    if s_w.size not in (1, oc) or (s_w.size > 1 and w.quantized_dimension != 0):
        ctx.unsupported(f"weights '{w.name}': {s_w.size} scales on dimension {w.quantized_dimension}")
    s_w = np.broadcast_to(s_w, (oc,))
    bias = np.zeros(oc, np.int32)
    if has_bias:
        b = ctx.require_const(3, "bias")
        if b.dtype != np.int32 or b.size != oc:
            ctx.unsupported(f"bias of type {b.dtype} and {b.size} values (int32 [{oc}] needed)")
        bias = b.astype(np.int32).reshape(-1)
    wq = np.asarray(wd).astype(np.int8)
    xmax = max(abs(-128 - zp_x), abs(127 - zp_x))
    bound = np.abs(bias.astype(np.int64)) + xmax * np.abs(wq.astype(np.int64)).reshape(oc, -1).sum(axis=1)
    if int(bound.max()) > (1 << 31) - 1:
        ctx.unsupported("the int32 accumulator could overflow for this kernel size / weight range")
    from tinyc.numerics import fixed_point as arith

    try:
        mult, shift = arith.requant_params(np.float32(s_x), s_w, np.float32(s_y))
    except ValueError as exc:
        ctx.unsupported(f"requantization multiplier: {exc}")
    act_min, act_max = ctx.act_range(y)
    ins = [
        _in(ctx, 2),
        ctx.constant("wq", np.ascontiguousarray(wq)),
        ctx.constant("bias_q", bias),
        ctx.constant("multiplier", np.asarray(mult, np.int32).reshape(oc)),
        ctx.constant("shift", np.asarray(shift, np.int32).reshape(oc)),
    ]
    ctx.add(
        ctx.node(
            "TflmTransposeConv",
            ins,
            [ctx.output(0)],
            strides=list(strides),
            pads=[pt, pl],
            out_spatial=[oh, ow],
            x_zp=zp_x,
            y_zp=zp_y,
            act_min=act_min,
            act_max=act_max,
        )
    )


# -- bilinear resize ---------------------------------------------------------------------------------------
@converts("RESIZE_BILINEAR")
def resize_bilinear(ctx: TflContext) -> None:
    """TflmResizeBilinear with the per-row / per-column tables TFLite Micro's kernels compute (int8: the
    10-bit integer ResizeBilinearInteger; float32: ResizeBilinear)."""
    from tinyc.ops.tflm_resize_bilinear import resize_tables

    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _same_grid(ctx, [x], [y])
    if x.dtype not in ("int8", "float32") or len(x.shape) != 4:
        ctx.unsupported(f"input {list(x.shape)} of type {x.dtype} (4-D NHWC int8 or float32)")
    size = _ints(ctx, 1, "size")
    if len(size) != 2 or min(size) < 1:
        ctx.unsupported(f"size {size}")
    align, half = bool(ctx.opt("align_corners", False)), bool(ctx.opt("half_pixel_centers", False))
    if align and half:
        ctx.unsupported("align_corners and half_pixel_centers together (TFLite forbids it)")
    tabs = resize_tables(x.dtype, (int(x.shape[1]), int(x.shape[2])), (size[0], size[1]), align, half)
    names = [ctx.constant(b, t) for b, t in zip(("rows", "cols", "row_w", "col_w"), tabs)]
    ctx.add(ctx.node("TflmResizeBilinear", [_in(ctx, 0), *names], [ctx.output(0)]))


# -- L2 normalization -------------------------------------------------------------------------------------
@converts("L2_NORMALIZATION")
def l2_normalization(ctx: TflContext) -> None:
    """Over the last axis: TflmL2Norm (TFLite Micro's integer inverse square root for int8; its fixed output
    grid is (1/128, 0))."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    if ctx.activation() != "NONE":
        ctx.unsupported("a fused activation on L2_NORMALIZATION (TFLite Micro supports none)")
    if not x.shape:
        ctx.unsupported("a scalar input")
    if x.dtype == "float32" and y.dtype == "float32":
        ctx.add(ctx.node("TflmL2Norm", [_in(ctx, 0)], [ctx.output(0)]))
        return
    if x.dtype != "int8" or y.dtype != "int8":
        ctx.unsupported(f"types {x.dtype} -> {y.dtype} (int8 or float32)")
    _, zp_x = ctx.require_per_tensor(x, "input")
    s_y, zp_y = ctx.require_per_tensor(y, "output")
    if zp_y != 0 or np.float32(s_y) != np.float32(1.0 / 128.0):
        ctx.unsupported(f"int8 output grid ({s_y:g}, {zp_y}) (TFLite Micro requires scale 1/128, zero point 0)")
    if 255 * 255 * int(x.shape[-1]) > (1 << 31) - 1:
        ctx.unsupported(f"rows of {x.shape[-1]} values could overflow the int32 sum of squares")
    ctx.add(ctx.node("TflmL2Norm", [_in(ctx, 0)], [ctx.output(0)], x_zp=zp_x))


# -- log softmax --------------------------------------------------------------------------------------------
@converts("LOG_SOFTMAX")
def log_softmax(ctx: TflContext) -> None:
    """Over the last axis. float32: x - max - log(sum exp(x - max)), tinyc's Softmax node (kind logsoftmax).
    int8: TFLite Micro's integer kernel (gemmlowp exp and log per row), tinyc's TflmLogSoftmax; TFLM requires
    the output grid (16/256, 127) and an input scale its Prepare can turn into multipliers, refused otherwise."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    if not x.shape:
        ctx.unsupported("a scalar input")
    if x.dtype == "int8" and y.dtype == "int8":
        from tinyc.ops.tflm_log_softmax import build_tflm_log_softmax

        ctx.require_per_tensor(x, "input")
        ctx.require_per_tensor(y, "output")
        node = build_tflm_log_softmax(
            ctx.graph, ctx.graph.unique_name(ctx.name), _in(ctx, 0), ctx.output(0), source=ctx.name
        )
        ctx.add(node)
        return
    if x.dtype != "float32" or y.dtype != "float32":
        ctx.unsupported(f"{x.dtype} LOG_SOFTMAX is not supported (float32 and int8 only)")
    ctx.add(ctx.node("Softmax", [_in(ctx, 0)], [ctx.output(0)], kind="logsoftmax", axes=[len(x.shape) - 1]))
