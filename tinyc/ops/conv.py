"""Conv (1D/2D, grouped, depthwise, strided, padded, dilated); 3D as ConvND.

Imported in ONNX's NCHW form; the layout pass turns it into channels-last (NHWC / NWC) with
weights as [KH, KW, IC/groups, OC] — the form the C kernels (and Cortex-M int8 kernels) want.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ir.isa import Isa
from tinyc.ops.base import Int8Lowering, OpDef, OutputType, register
from tinyc.ops.impl import Implementation, applicable, by_name

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext


def check_window(
    ctx: Any, in_spatial: tuple[int, ...] | list[int], kernel: list[int], strides: list[int], dilations: list[int]
) -> None:
    """The shape rule ONNX (and onnxruntime) apply to a sliding window (Conv, ConvTranspose, pools):
    one kernel size, stride and dilation per spatial dim, each >= 1."""
    n = len(in_spatial)
    for what, v in (("kernel_shape", kernel), ("strides", strides), ("dilations", dilations)):
        if len(v) != n:
            ctx.invalid(f"{what} {list(v)} must have {n} values (one per spatial dim of the input)")
        if any(int(x) < 1 for x in v):
            ctx.invalid(f"{what} {list(v)} must be >= 1")


def resolve_pads(
    ctx: Any, in_spatial: tuple[int, ...], kernel: list[int], strides: list[int], dilations: list[int]
) -> list[int]:
    """Explicit pads [begin..., end...] from `pads` or `auto_pad` (SAME_UPPER/SAME_LOWER/VALID),
    after checking the window (``check_window``), the pads (2 per spatial dim, >= 0, never with
    auto_pad) and that the dilated kernel fits the padded input (else the output is empty)."""
    n = len(kernel)
    check_window(ctx, in_spatial, kernel, strides, dilations)
    pads = _resolve_pads(ctx, in_spatial, kernel, strides, dilations)
    for i in range(n):
        span = (int(kernel[i]) - 1) * int(dilations[i]) + 1
        padded = int(in_spatial[i]) + pads[i] + pads[i + n]
        if span > padded:
            ctx.invalid(
                f"the kernel spans {span} along spatial dim {i} (kernel {kernel[i]}, dilation "
                f"{dilations[i]}), more than the padded input ({in_spatial[i]} + pads {pads[i]}+{pads[i + n]} "
                f"= {padded}): the output would be empty"
            )
    return pads


def _resolve_pads(
    ctx: ImportContext, in_spatial: tuple[int, ...], kernel: list[int], strides: list[int], dilations: list[int]
) -> list[int]:
    n = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    explicit = ctx.attr("pads")
    if explicit is not None:
        explicit = [int(p) for p in explicit]
        if len(explicit) != 2 * n:
            ctx.invalid(f"pads {explicit} must have {2 * n} values (begin and end per spatial dim)")
        if min(explicit, default=0) < 0:
            ctx.invalid(f"pads {explicit} must not be negative")
    if auto in ("NOTSET", "", None):
        return [0] * (2 * n) if explicit is None else explicit
    if explicit is not None:
        ctx.invalid(f"auto_pad={auto} together with explicit pads {explicit} (ONNX allows one or the other)")
    if auto == "VALID":
        return [0] * (2 * n)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(n):
            out = -(-in_spatial[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_spatial[i])
            small = total // 2
            b = small if auto == "SAME_UPPER" else total - small
            begin.append(b)
            end.append(total - b)
        return begin + end
    ctx.unsupported(f"auto_pad={auto!r}")


def check_conv_weights(ctx: Any, xs: tuple[int, ...], ws: tuple[int, ...], wi: int = 1) -> None:
    """Conv's shape rule (as onnxruntime checks it): weights [M, C/group, *kernel] of the input's
    rank, group >= 1 dividing C and M, kernel_shape (when given) equal to the weights' kernel."""
    group = int(ctx.attr("group", 1))
    if len(ws) != len(xs):
        ctx.invalid(f"weights of shape {list(ws)} must have the input's rank {len(xs)}")
    if group < 1:
        ctx.invalid(f"group {group} must be >= 1")
    C, M = int(xs[1]), int(ws[0])
    if C % group or M % group:
        ctx.invalid(f"group {group} must divide the input channels ({C}) and the output channels ({M})")
    if int(ws[1]) * group != C:
        ctx.invalid(
            f"weights of shape {list(ws)} have {ws[1]} input channels per group, the input has "
            f"{C} / group {group} = {C // group}"
        )
    k = ctx.attr("kernel_shape")
    if k is not None and [int(v) for v in k] != [int(v) for v in ws[2:]]:
        ctx.invalid(f"kernel_shape {list(k)} differs from the weights' kernel {list(ws[2:])}")


def check_bias(ctx: Any, i: int, channels: int) -> None:
    """A per-output-channel bias (input i) must be 1-D of exactly `channels` values."""
    bs = ctx.shape(i)
    if len(bs) != 1 or int(bs[0]) != channels:
        ctx.invalid(f"bias of shape {list(bs)} must be 1-D with one value per output channel ({channels})")


def conv_out_size(size: int, k: int, s: int, d: int, pb: int, pe: int, ceil_mode: bool = False) -> int:
    span = size + pb + pe - ((k - 1) * d + 1)
    return (-(-span // s) if ceil_mode else span // s) + 1


def conv_nchw_reference(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    strides: list[int],
    pads: list[int],
    dilations: list[int],
    group: int,
) -> np.ndarray:
    """Direct float64 convolution in NCHW/NCW (weights [OC, IC/g, *K])."""
    n_sp = x.ndim - 2
    pad_width = [(0, 0), (0, 0)] + [(pads[i], pads[i + n_sp]) for i in range(n_sp)]
    xp = np.pad(x.astype(np.float64), pad_width)
    N, C = x.shape[:2]
    OC = w.shape[0]
    icg = C // group
    ocg = OC // group
    k = w.shape[2:]
    out_sp = [
        conv_out_size(x.shape[2 + i], k[i], strides[i], dilations[i], pads[i], pads[i + n_sp]) for i in range(n_sp)
    ]
    y = np.zeros((N, OC, *out_sp), np.float64)
    wd = w.astype(np.float64)
    for kidx in np.ndindex(*k):
        sl = [slice(None), slice(None)]
        for i in range(n_sp):
            start = kidx[i] * dilations[i]
            sl.append(slice(start, start + (out_sp[i] - 1) * strides[i] + 1, strides[i]))
        patch = xp[tuple(sl)]  # N, C, *out
        for g in range(group):
            pg = patch[:, g * icg : (g + 1) * icg]
            wg = wd[(slice(g * ocg, (g + 1) * ocg), slice(None)) + tuple(kidx)]  # ocg, icg
            y[:, g * ocg : (g + 1) * ocg] += np.einsum("nc...,oc->no...", pg, wg)
    if b is not None:
        y += b.astype(np.float64).reshape(1, OC, *([1] * n_sp))
    return y.astype(x.dtype)


def weights_to_channels_last(node: Node, graph: Graph, tail: list[int]) -> bool:
    """Shared by Conv and ConvTranspose: move the kernel dims first (the leading two weight
    axes go last, in `tail` order), mark the node NHWC. The layout pass adds the transposes."""
    if node.attrs["layout"] != "NCHW":
        return False
    w_name = node.inputs[1]
    w = np.asarray(graph.tensor(w_name).data)  # (a constant: import proved it)
    w_last = np.ascontiguousarray(np.transpose(w, list(range(2, w.ndim)) + tail))
    node.inputs[1] = graph.add_constant(graph.unique_name(node.inputs[1] + "_hwio"), w_last)
    # a QDQ weight's int8 grid (axis counted in the ONNX layout) stays with the moved weights
    graph.tensor(node.inputs[1]).quant = graph.tensor(w_name).quant
    node.attrs["layout"] = "NHWC"
    return True


#: Vector widths of the "grid" variants' knob `vec`: OpenCL vector types of that many lanes (lane
#: loops in C), along the output channels.
GRID_VECS = (1, 2, 4, 8, 16)
#: Bytes of weight rows a "grid" work-group stages per chunk with `local_mem`: small enough that
#: several work-groups fit in a GPU compute unit's 32-64 KiB of local memory.
GRID_LOCAL_BUDGET = 4096


#: The knobs a convolution's "grid" variant reads (``grid_canonical``).
GRID_KNOBS = ("variant", "oc_tile", "px_tile", "vec", "local_mem", "loop_order")


def grid_knobs() -> dict[str, list[Any]]:
    """The knobs every "grid" variant adds: `vec` (lanes per vector) and `local_mem` (stage the
    weight rows a work-group shares in local memory)."""
    return {"vec": list(GRID_VECS), "local_mem": [0, 1]}


def grid_knob_target(knob: str, value: Any, grid_only: tuple[tuple[str, Any], ...] = ()) -> str | None:
    """ "opencl" for the knob values besides the variant only the OpenCL target runs
    (``OpDef.knob_isa``; the "grid" variant declares it, ``Implementation.needs``): vectors and local memory. They render as valid C too (serial loops, lane loops, no
    staging), but the C targets' own variants are faster there, so defaults and tuning spaces
    of other targets never offer them. `grid_only`: (knob, value) pairs of an op that only its
    grid variant reads beyond a first, neutral value (the matmuls' "columns_outer")."""
    if (knob == "vec" and value != 1) or (knob == "local_mem" and value) or (knob, value) in grid_only:
        return "opencl"
    return None


def grid_row_tiles(rows: int) -> list[int]:
    """Float Conv's px_tile values (pixels per "grid" work-item)."""
    return [t for t in (8, 4, 2, 1) if t <= rows]


def grid_vec(vec: int, tile: int) -> int:
    """The vector width a tile of `tile` channels runs: the widest of GRID_VECS <= `vec` that
    divides it (a vector never straddles two tiles)."""
    return max(v for v in GRID_VECS if v <= max(1, int(vec)) and tile % v == 0)


#: The most accumulators (rows x channels) a "grid" work-item keeps (a 16-channel x 8-pixel
#: register tile): beyond it the tile spills on every GPU and no CPU driver gains either.
GRID_MAX_ACC = 128


#: loop_order of the "grid" variants, per op family: the first value keeps the channel
#: (column) tiles fastest across work-items, the second the pixel (row) tiles.
GRID_ORDERS = {"conv": ("pixels_outer", "channels_outer"), "matmul": ("rows_outer", "columns_outer")}


def grid_canonical(
    sched: dict[str, Any],
    keys: tuple[str, str],
    ch: int,
    row_tiles: list[int],
    vector_ok: bool = True,
    family: str = "conv",
) -> dict[str, Any]:
    """A "grid" schedule as the kernel runs it, so equal kernels have one name: only the knobs it
    reads (`keys`: the channel and row tile knobs, vec, local_mem, and loop_order without local
    memory, whose work-groups always share a channel tile); the row tile cut to the largest of
    `row_tiles` that keeps GRID_MAX_ACC accumulators with the channel tile (at most `ch`); `vec`
    the width that runs (``grid_vec``; 1 where the lanes would not be contiguous)."""
    ck, rk = keys
    t = max(1, min(int(sched.get(ck, 1)), ch))
    j = max(1, int(sched.get(rk, 1)))
    if t * j > GRID_MAX_ACC:
        j = max([r for r in row_tiles if r * t <= GRID_MAX_ACC] or [min(row_tiles)])
    out = {
        "variant": "grid",
        ck: int(sched.get(ck, 1)),
        rk: j,
        "vec": grid_vec(sched.get("vec", 1), t) if vector_ok else 1,
        "local_mem": int(sched.get("local_mem", 0)),
    }
    if not out["local_mem"]:
        orders = GRID_ORDERS[family]
        out["loop_order"] = sched["loop_order"] if sched.get("loop_order") in orders else orders[0]
    return out


def grid_chunk(unit_rows: int, units: int, row_bytes: int) -> tuple[int, int]:
    """How a "grid" work-group stages a reduction of `units` units (kernel taps) of `unit_rows`
    weight rows (input channels) of `row_bytes` each: (units per chunk, rows of a unit per chunk)
    within GRID_LOCAL_BUDGET — whole units when one fits (several, up to all), else part of one.
    Each chunk is a contiguous run of rows in the weights."""
    if unit_rows * row_bytes <= GRID_LOCAL_BUDGET:
        return max(1, min(units, GRID_LOCAL_BUDGET // (unit_rows * row_bytes))), unit_rows
    return 1, max(1, min(unit_rows, GRID_LOCAL_BUDGET // row_bytes))


def grid_conv_context(m: dict[str, int], sched: dict[str, Any], wbytes: int, row_tiles: list[int]) -> dict[str, Any]:
    """Template variables of a convolution's "grid" kernel (Conv, QConv): the tile (T channels, J
    pixels — the op's px_tile values `row_tiles` —, V lanes: ``grid_canonical``), the
    local-memory chunking of the weight rows (QC taps x ICC input channels, ``grid_chunk``;
    `wbytes` per weight) and its bytes."""
    dw = m["ICG"] == 1 and m["G"] > 1
    ch = m["OC"] if dw else m["OCG"]
    canon = grid_canonical(sched, ("oc_tile", "px_tile"), ch, row_tiles, vector_ok=not dw or m["OCG"] == 1)
    T = max(1, min(canon["oc_tile"], ch))
    J = max(1, min(canon["px_tile"], m["N"] * m["OH"] * m["OW"]))
    local = bool(canon["local_mem"])
    qc, icc = (
        grid_chunk(1 if dw else m["ICG"], m["KH"] * m["KW"], T * wbytes)
        if local
        else (m["KH"] * m["KW"], 1 if dw else m["ICG"])
    )
    rows = qc if dw else (qc * icc if icc == m["ICG"] else icc)
    return dict(
        CH=ch,
        T=T,
        J=J,
        V=canon["vec"],
        local=local,
        QC=qc,
        ICC=icc,
        local_bytes=rows * T * wbytes if local else 0,
        local_size=int(sched.get("local_size", 0)),
        pixels_fast=canon.get("loop_order") == GRID_ORDERS["conv"][1],
    )


#: Work-items the OpenCL defaults aim for at least, where a layer has them: a few per SIMD lane
#: of a small GPU, and enough groups of 64 for every core of a CPU driver.
GRID_MIN_ITEMS = 256


def grid_default_tiles(ch: int, rows: int, groups: int, tiles: list[int], row_tiles: list[int]) -> tuple[int, int, int]:
    """(channels, rows, lanes) per work-item of an OpenCL "grid" default. 16 channels (all of
    them when fewer) as one 16-lane vector — a GPU work-item's 64-byte contiguous, coalesced
    share of a weight row, and a CPU driver's AVX-512 register —, 4 rows (pixels) sharing each
    weight vector (a 4 x 16 register tile, as GPU GEMM micro-tiles are), fewer rows and then
    narrower vectors (down to 4) while the layer would have fewer than GRID_MIN_ITEMS
    work-items. A tile that does not divide the channels overlaps its neighbour (grid.j2)."""

    def items(t: int, j: int) -> int:
        return groups * -(-ch // t) * -(-rows // j)

    t = ch if ch <= 16 and ch in tiles else max([v for v in tiles if v <= 16] or [1])
    j = next((r for r in (4, 2) if r in row_tiles and items(t, r) >= GRID_MIN_ITEMS), 1)
    while j == 1 and t > 4 and items(t, 1) < GRID_MIN_ITEMS and any(v < t and v >= 4 for v in tiles):
        t = max(v for v in tiles if v < t)
    return t, j, grid_vec(16, t)


def grid_conv_default(m: dict[str, int], ks: dict[str, list[Any]]) -> dict[str, Any]:
    """The OpenCL default of a convolution (Conv, QConv): "grid" with ``grid_default_tiles``
    over the output channels x pixels (lanes 1 for a depthwise channel multiplier > 1, whose
    input channels are not contiguous), channel tiles fastest (coalesced), no local memory —
    the weight vectors a group shares are read by all its work-items at once, which GPU caches
    serve as well, and a CPU driver pays for every barrier —, 64 work-items per group."""
    dw = m["ICG"] == 1 and m["G"] > 1
    ch = m["OC"] if dw else m["OCG"]
    t, j, vec = grid_default_tiles(ch, m["N"] * m["OH"] * m["OW"], 1 if dw else m["G"], ks["oc_tile"], ks["px_tile"])
    return {
        "variant": "grid",
        "oc_tile": t,
        "px_tile": j,
        "vec": vec if not dw or m["OCG"] == 1 else 1,
        "local_mem": 0,
        "loop_order": "pixels_outer",
        "local_size": 64,
    }


def apply_activation(node: Node, y: np.ndarray) -> np.ndarray:
    act = node.attrs.get("activation")
    if not act:
        return y
    from tinyc.ops.base import get_op

    return get_op(act["op"]).apply(act.get("attrs", {}), y)


def conv_dims(node: Node, graph: Graph) -> dict[str, int]:
    """A convolution's sizes as one 2D view (N, C, H, W, OC, KH, KW, SH, SW, DH, DW, PT, PL, PB,
    PR, OH, OW, G, ICG, OCG): 1D convs are 2D with H=1. Shared by Conv and QConv."""
    a = node.attrs
    x = graph.tensor(node.inputs[0]).shape
    w = graph.tensor(node.inputs[1]).shape
    n = len(a["kernel"])
    if a["layout"] == "NCHW":
        N, C, sp = x[0], x[1], list(x[2:])
        OC = w[0]
    else:
        N, C, sp = x[0], x[-1], list(x[1:-1])
        OC = w[-1]
    k, s, d = list(a["kernel"]), list(a["strides"]), list(a["dilations"])
    pb, pe = list(a["pads"][:n]), list(a["pads"][n:])
    if n == 1:
        sp, k, s, d, pb, pe = [1] + sp, [1] + k, [1] + s, [1] + d, [0] + pb, [0] + pe
    out = [conv_out_size(sp[i], k[i], s[i], d[i], pb[i], pe[i]) for i in range(2)]
    g = a["group"]
    return dict(
        N=N,
        C=C,
        H=sp[0],
        W=sp[1],
        OC=OC,
        KH=k[0],
        KW=k[1],
        SH=s[0],
        SW=s[1],
        DH=d[0],
        DW=d[1],
        PT=pb[0],
        PL=pb[1],
        PB=pe[0],
        PR=pe[1],
        OH=out[0],
        OW=out[1],
        G=g,
        ICG=C // g,
        OCG=OC // g,
    )


@register
class Conv(OpDef):
    op = "Conv"
    onnx_ops = ("Conv",)
    absorbs_activation = True
    int8_kernel = True
    template = "conv.c.j2"
    channels_last_capable = True

    def import_onnx(self, ctx):
        xs = ctx.shape(0)
        if len(xs) not in (3, 4, 5):
            ctx.unsupported(f"only 1D, 2D and 3D convolutions are supported (input rank {len(xs)})")
        w = ctx.const(1)
        if w is None:
            ctx.unsupported("weights must be constant")
        if ctx.dtype(0) != "float32":
            ctx.unsupported(f"element type {ctx.dtype(0)} (float32 only here; int8 comes through quantization)")
        n = len(xs) - 2
        check_conv_weights(ctx, xs, w.shape)
        kernel = [int(k) for k in (ctx.attr("kernel_shape") or w.shape[2:])]
        strides = [int(s) for s in (ctx.attr("strides") or [1] * n)]
        dil = [int(d) for d in (ctx.attr("dilations") or [1] * n)]
        group = int(ctx.attr("group", 1))
        pads = resolve_pads(ctx, xs[2:], kernel, strides, dil)
        ins = list(ctx.inputs[:2])
        if ctx.has_input(2):
            check_bias(ctx, 2, int(w.shape[0]))
            ins.append(ctx.inputs[2])
            if ctx.const(2) is None:
                ctx.unsupported("bias must be constant")
        else:
            ins.append(ctx.add_constant("bias", np.zeros(w.shape[0], np.float32)))
        return ctx.make_node(
            "Conv" if n < 3 else "ConvND",
            inputs=ins,
            kernel=kernel,
            strides=strides,
            pads=pads,
            dilations=dil,
            group=group,
            layout="NCHW",
        )

    # -- shapes ---------------------------------------------------------------------------
    def _dims(self, node: Node, graph: Graph) -> dict[str, int]:
        """Normalised 2D view: 1D convs are 2D with H=1 (``conv_dims``)."""
        return conv_dims(node, graph)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        m = self._dims(node, graph)
        n = len(node.attrs["kernel"])
        sp = [m["OH"], m["OW"]][2 - n :]
        if node.attrs["layout"] == "NCHW":
            return [((m["N"], m["OC"], *sp), "float32")]
        return [((m["N"], *sp, m["OC"]), "float32")]

    def macs(self, node: Node, graph: Graph) -> int:
        m = self._dims(node, graph)
        return m["N"] * m["OH"] * m["OW"] * m["OC"] * m["ICG"] * m["KH"] * m["KW"]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        x, w, b = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
        if a["layout"] != "NCHW":
            x = np.moveaxis(x, -1, 1)
            w = np.moveaxis(w, -1, 0)  # [OC, *K, ICg]
            w = np.moveaxis(w, -1, 1)  # [OC, ICg, *K]
        y = conv_nchw_reference(x, w, b, a["strides"], a["pads"], a["dilations"], a["group"])
        if a["layout"] != "NCHW":
            y = np.moveaxis(y, 1, -1)
        return [apply_activation(node, np.ascontiguousarray(y))]

    # -- layout ---------------------------------------------------------------------------
    def to_channels_last(self, node: Node, graph: Graph) -> bool:
        """Switch to NHWC: weights [OC, ICg, *K] -> [*K, ICg, OC]."""
        return weights_to_channels_last(node, graph, [1, 0])

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """QConv (channels-last only): weights per output channel, a fused clamp in the output clamp."""
        from tinyc.ops.qconv import build_qconv

        if node.attrs.get("layout") != "NHWC":
            return "convolution not channels-last"
        return low.lower_weighted(node, build_qconv, lambda w, b: None, node.attrs)

    def onnx_weight_axis(self, op_type: str, attr: Any) -> int | None:
        return 0  # W [OC, IC/g, *K]

    # -- schedule -------------------------------------------------------------------------
    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        """Tile sizes need not divide the output: the kernel adds a tail tile for the rest."""
        m = self._dims(node, graph)
        depthwise = m["ICG"] == 1 and m["G"] > 1
        ch = m["OC"] if depthwise else m["OCG"]
        oc_tiles = [t for t in (32, 16, 8, 4, 2, 1) if t <= ch]
        if ch < 32 and ch not in oc_tiles:
            oc_tiles.insert(0, ch)
        ow_tiles = [t for t in (8, 6, 5, 4, 3, 2, 1) if t <= m["OW"]]
        return {
            "variant": [i.name for i in applicable(self.implementations, node, graph)],
            "oc_tile": oc_tiles,
            "ow_tile": ow_tiles,
            "loop_order": ["pixels_outer", "channels_outer"],
            "px_tile": grid_row_tiles(m["N"] * m["OH"] * m["OW"]),
            **grid_knobs(),
        }

    def knob_isa(self, knob: str, value: Any) -> str | None:
        return super().knob_isa(knob, value) or grid_knob_target(knob, value)

    def canonical_schedule(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> dict[str, Any]:
        """ "grid" reads oc_tile, px_tile, vec, local_mem, loop_order; the C variants oc_tile,
        ow_tile, loop_order."""
        if schedule.get("variant") == "grid":
            m = self._dims(node, graph)
            dw = m["ICG"] == 1 and m["G"] > 1
            ch = m["OC"] if dw else m["OCG"]
            return grid_canonical(
                schedule,
                ("oc_tile", "px_tile"),
                ch,
                self.knobs(node, graph)["px_tile"],
                vector_ok=not dw or m["OCG"] == 1,
            )
        return {k: v for k, v in schedule.items() if k not in ("px_tile", "vec", "local_mem")}

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        # The largest register tile (pixels x channels) of at most 160 accumulators, ties to more
        # channels (longer vectors). Measured on x86 (AVX2/AVX-512) against 1-pixel tiles: 2-3x
        # faster on every conv shape tried; the tuner may refine this per board.
        ks = self.knobs(node, graph)
        m = self._dims(node, graph)
        if Isa.parse(target).work_items:
            return grid_conv_default(m, ks)
        # a width that leaves a tail tile counts 3/4: tail tiles are narrower, so slower
        pairs = [
            (j * t * (1.0 if m["OW"] % j == 0 else 0.75), t, j)
            for t in ks["oc_tile"]
            for j in ks["ow_tile"]
            if j * t <= 160
        ]
        _, oc_tile, ow_tile = max(pairs) if pairs else (1, ks["oc_tile"][-1], 1)
        # Weights beyond ~256 KB (a typical L2 share) are re-read from memory for every pixel
        # tile in pixel-major order; channel-major keeps one channel tile's weights cached
        # (measured: the 512->1000 1x1 conv of SqueezeNet runs ~2x faster).
        weight_bytes = graph.tensor(node.inputs[1]).nbytes
        order = "channels_outer" if weight_bytes > 256 * 1024 else "pixels_outer"
        return {"variant": ks["variant"][0], "oc_tile": oc_tile, "ow_tile": ow_tile, "loop_order": order}

    def implementation(
        self, node: Node, graph: Graph, schedule: dict[str, Any] | None, target: str
    ) -> tuple[Implementation, dict[str, Any]]:
        """The registered implementation a schedule runs and the schedule itself (the target's
        default when it is empty): what scratch_bytes and kernel_context use."""
        sched = schedule or self.default_schedule(node, graph, target)
        return by_name(self.implementations, sched["variant"], f"node '{node.source or node.name}' (Conv)"), sched

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        impl, sched = self.implementation(node, graph, schedule, target)
        return impl.scratch(node, graph, sched)

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        m = self._dims(node, graph)
        if node.attrs["layout"] != "NHWC":
            from tinyc.errors import UnsupportedError

            raise UnsupportedError(f"node '{node.source}': Conv kernels run channels-last only")
        impl, sched = self.implementation(node, graph, schedule, target)
        padded = any(m[k] for k in ("PT", "PL", "PB", "PR"))
        ctx = dict(
            m=m,
            padded=padded,
            variant=sched["variant"],
            oc_tile=sched.get("oc_tile", 1),
            ow_tile=sched.get("ow_tile", 1),
            mult=m["OCG"],
            loop_order=sched.get("loop_order", "pixels_outer"),
            grid_dw=m["ICG"] == 1 and m["G"] > 1,
            impl_template=impl.template,
        )
        if sched["variant"] == "grid":
            ctx.update(grid_conv_context(m, sched, 4, self.knobs(node, graph)["px_tile"]))
        return ctx


# -- the registered implementations -------------------------------------------------------
def _is_depthwise(node: Node, graph: Graph) -> bool:
    m = conv_dims(node, graph)
    return m["ICG"] == 1 and m["G"] > 1


def _is_dense(node: Node, graph: Graph) -> bool:
    return not _is_depthwise(node, graph)


def _zero_row(node: Node, graph: Graph, sched: dict[str, Any]) -> int:
    """A zero row stands in for padded pixels when several output pixels share a tile."""
    m = conv_dims(node, graph)
    if min(sched.get("ow_tile", 1), m["OW"]) > 1 and (m["PL"] or m["PR"]):
        return 4 * (m["C"] if sched.get("variant") == "depthwise" else m["ICG"])
    return 0


_TILED_KNOBS = ("variant", "oc_tile", "ow_tile", "loop_order")

Conv.implementations = (
    Implementation("direct", "conv/tiled.c.j2", _is_dense, None, _TILED_KNOBS, _zero_row, 10),
    Implementation("depthwise", "conv/tiled.c.j2", _is_depthwise, None, _TILED_KNOBS, _zero_row, 10),
    # padded taps are masked, not read from a zero row: no scratch
    Implementation("grid", "conv/grid.c.j2", needs="opencl", knobs=GRID_KNOBS, priority=-10),
)


# -- 3D convolution ----------------------------------------------------------------------------
def nd_dims(v: list[int], fill: int) -> list[int]:
    """A per-spatial-dim list of a 1D/2D/3D window as 3 values (leading dims of `fill`)."""
    return [fill] * (3 - len(v)) + list(v)


@register
class ConvND(OpDef):
    """3D Conv in NCHW (N, C, D, H, W), weights [OC, IC/group, KD, KH, KW] as ONNX has them:
    the plain loop nest, float32. The 1D/2D Conv keeps its channels-last tiled kernels, their
    tuning and int8 forms; this op never changes layout and stays float in an int8 graph."""

    op = "ConvND"
    absorbs_activation = True
    template = "conv_nd.c.j2"

    def geometry(self, node: Node, graph: Graph) -> dict[str, Any]:
        a = node.attrs
        x = graph.tensor(node.inputs[0]).shape
        w = graph.tensor(node.inputs[1]).shape
        n = len(a["kernel"])
        size = [int(v) for v in x[2:]]
        k, s, d = list(a["kernel"]), list(a["strides"]), list(a["dilations"])
        pb, pe = list(a["pads"][:n]), list(a["pads"][n:])
        out = [conv_out_size(size[i], k[i], s[i], d[i], pb[i], pe[i]) for i in range(n)]
        g = int(a["group"])
        return dict(N=int(x[0]), C=int(x[1]), OC=int(w[0]), G=g, size=size, k=k, s=s, d=d, pb=pb, out=out)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        m = self.geometry(node, graph)
        return [((m["N"], m["OC"], *m["out"]), "float32")]

    def macs(self, node: Node, graph: Graph) -> int:
        m = self.geometry(node, graph)
        return m["N"] * m["OC"] * (m["C"] // m["G"]) * int(np.prod(m["out"])) * int(np.prod(m["k"]))

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        y = conv_nchw_reference(inputs[0], inputs[1], inputs[2], a["strides"], a["pads"], a["dilations"], a["group"])
        return [apply_activation(node, np.ascontiguousarray(y))]

    def onnx_weight_axis(self, op_type: str, attr: Any) -> int | None:
        return 0

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        m = self.geometry(node, graph)
        return dict(
            NOC=m["N"] * m["OC"],
            OC=m["OC"],
            C=m["C"],
            ICG=m["C"] // m["G"],
            OCG=m["OC"] // m["G"],
            S=nd_dims(m["size"], 1),
            O=nd_dims(m["out"], 1),
            K=nd_dims(m["k"], 1),
            ST=nd_dims(m["s"], 1),
            DL=nd_dims(m["d"], 1),
            PB=nd_dims(m["pb"], 0),
            padded=any(a for a in node.attrs["pads"]),
        )
