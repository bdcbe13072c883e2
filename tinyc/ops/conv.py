"""Conv (1D/2D, grouped, depthwise, strided, padded, dilated).

Imported in ONNX's NCHW form; the layout pass turns it into channels-last (NHWC / NWC) with
weights as [KH, KW, IC/groups, OC] — the form the C kernels (and Cortex-M int8 kernels) want.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, OutputType, register


def resolve_pads(ctx: Any, in_spatial: tuple[int, ...], kernel: list[int], strides: list[int],
                 dilations: list[int]) -> list[int]:
    """Explicit pads [begin..., end...] from `pads` or `auto_pad` (SAME_UPPER/SAME_LOWER/VALID)."""
    n = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", "", None):
        pads = ctx.attr("pads")
        return [0] * (2 * n) if pads is None else [int(p) for p in pads]
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


def conv_out_size(size: int, k: int, s: int, d: int, pb: int, pe: int, ceil_mode: bool = False) -> int:
    span = size + pb + pe - ((k - 1) * d + 1)
    return (-(-span // s) if ceil_mode else span // s) + 1


def conv_nchw_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: list[int],
                        pads: list[int], dilations: list[int], group: int) -> np.ndarray:
    """Direct float64 convolution in NCHW/NCW (weights [OC, IC/g, *K])."""
    n_sp = x.ndim - 2
    pad_width = [(0, 0), (0, 0)] + [(pads[i], pads[i + n_sp]) for i in range(n_sp)]
    xp = np.pad(x.astype(np.float64), pad_width)
    N, C = x.shape[:2]
    OC = w.shape[0]
    icg = C // group
    ocg = OC // group
    k = w.shape[2:]
    out_sp = [conv_out_size(x.shape[2 + i], k[i], strides[i], dilations[i], pads[i], pads[i + n_sp])
              for i in range(n_sp)]
    y = np.zeros((N, OC, *out_sp), np.float64)
    wd = w.astype(np.float64)
    for kidx in np.ndindex(*k):
        sl = [slice(None), slice(None)]
        for i in range(n_sp):
            start = kidx[i] * dilations[i]
            sl.append(slice(start, start + (out_sp[i] - 1) * strides[i] + 1, strides[i]))
        patch = xp[tuple(sl)]  # N, C, *out
        for g in range(group):
            pg = patch[:, g * icg:(g + 1) * icg]
            wg = wd[(slice(g * ocg, (g + 1) * ocg), slice(None), *kidx)]  # ocg, icg
            y[:, g * ocg:(g + 1) * ocg] += np.einsum("nc...,oc->no...", pg, wg)
    if b is not None:
        y += b.astype(np.float64).reshape(1, OC, *([1] * n_sp))
    return y.astype(x.dtype)


def weights_to_channels_last(node: Node, graph: Graph, tail: list[int]) -> bool:
    """Shared by Conv and ConvTranspose: move the kernel dims first (the leading two weight
    axes go last, in `tail` order), mark the node NHWC. The layout pass adds the transposes."""
    if node.attrs["layout"] != "NCHW":
        return False
    w_name = node.inputs[1]
    w = graph.tensor(w_name).data
    w_last = np.ascontiguousarray(np.transpose(w, list(range(2, w.ndim)) + tail))
    node.inputs[1] = graph.add_constant(graph.unique_name(node.inputs[1] + "_hwio"), w_last)
    # a QDQ weight's int8 grid (axis counted in the ONNX layout) stays with the moved weights
    graph.tensor(node.inputs[1]).quant = graph.tensor(w_name).quant
    node.attrs["layout"] = "NHWC"
    return True


def apply_activation(node: Node, y: np.ndarray) -> np.ndarray:
    act = node.attrs.get("activation")
    if not act:
        return y
    from tinyc.ops.base import get_op
    return get_op(act["op"]).apply(act.get("attrs", {}), y)  # type: ignore[attr-defined]


@register
class Conv(OpDef):
    op = "Conv"
    onnx_ops = ("Conv",)
    template = "conv.c.j2"
    channels_last_capable = True

    def import_onnx(self, ctx):  # type: ignore[override]
        xs = ctx.shape(0)
        if len(xs) not in (3, 4):
            ctx.unsupported(f"only 1D and 2D convolutions are supported (input rank {len(xs)})")
        w = ctx.const(1)
        if w is None:
            ctx.unsupported("weights must be constant")
        if ctx.dtype(0) != "float32":
            ctx.unsupported(f"element type {ctx.dtype(0)} (float32 only here; int8 comes through quantization)")
        n = len(xs) - 2
        kernel = [int(k) for k in (ctx.attr("kernel_shape") or w.shape[2:])]
        strides = [int(s) for s in (ctx.attr("strides") or [1] * n)]
        dil = [int(d) for d in (ctx.attr("dilations") or [1] * n)]
        group = int(ctx.attr("group", 1))
        pads = resolve_pads(ctx, xs[2:], kernel, strides, dil)
        if xs[1] != w.shape[1] * group:
            ctx.unsupported(f"input channels {xs[1]} != weight channels {w.shape[1]} x groups {group}")
        ins = list(ctx.inputs[:2])
        if ctx.has_input(2):
            ins.append(ctx.inputs[2])
            if ctx.const(2) is None:
                ctx.unsupported("bias must be constant")
        else:
            ins.append(ctx.add_constant("bias", np.zeros(w.shape[0], np.float32)))
        return ctx.make_node("Conv", inputs=ins, kernel=kernel, strides=strides, pads=pads, dilations=dil,
                             group=group, layout="NCHW")

    # -- shapes ---------------------------------------------------------------------------
    def _dims(self, node: Node, graph: Graph) -> dict[str, int]:
        """Normalised 2D view: 1D convs are 2D with H=1."""
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
        return dict(N=N, C=C, H=sp[0], W=sp[1], OC=OC, KH=k[0], KW=k[1], SH=s[0], SW=s[1], DH=d[0], DW=d[1],
                    PT=pb[0], PL=pb[1], PB=pe[0], PR=pe[1], OH=out[0], OW=out[1], G=g, ICG=C // g, OCG=OC // g)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        m = self._dims(node, graph)
        n = len(node.attrs["kernel"])
        sp = [m["OH"], m["OW"]][2 - n:]
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
            w = np.moveaxis(w, -1, 0)                    # [OC, *K, ICg]
            w = np.moveaxis(w, -1, 1)                    # [OC, ICg, *K]
        y = conv_nchw_reference(x, w, b, a["strides"], a["pads"], a["dilations"], a["group"])
        if a["layout"] != "NCHW":
            y = np.moveaxis(y, 1, -1)
        return [apply_activation(node, np.ascontiguousarray(y))]

    # -- layout ---------------------------------------------------------------------------
    def to_channels_last(self, node: Node, graph: Graph) -> bool:
        """Switch to NHWC: weights [OC, ICg, *K] -> [*K, ICg, OC]."""
        return weights_to_channels_last(node, graph, [1, 0])

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
        return {"variant": ["depthwise" if depthwise else "direct"], "oc_tile": oc_tiles, "ow_tile": ow_tiles,
                "loop_order": ["pixels_outer", "channels_outer"]}

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        # The largest register tile (pixels x channels) of at most 160 accumulators, ties to more
        # channels (longer vectors). Measured on x86 (AVX2/AVX-512) against 1-pixel tiles: 2-3x
        # faster on every conv shape tried; the tuner may refine this per board.
        ks = self.knobs(node, graph)
        if target == "opencl":  # one output row per work-item (parallel_for over oh), no scratch
            return {"variant": ks["variant"][0], "oc_tile": ks["oc_tile"][0], "ow_tile": 1,
                    "loop_order": "pixels_outer"}
        m = self._dims(node, graph)
        # a width that leaves a tail tile counts 3/4: tail tiles are narrower, so slower
        pairs = [(j * t * (1.0 if m["OW"] % j == 0 else 0.75), t, j)
                 for t in ks["oc_tile"] for j in ks["ow_tile"] if j * t <= 160]
        _, oc_tile, ow_tile = max(pairs) if pairs else (1, ks["oc_tile"][-1], 1)
        # Weights beyond ~256 KB (a typical L2 share) are re-read from memory for every pixel
        # tile in pixel-major order; channel-major keeps one channel tile's weights cached
        # (measured: the 512->1000 1x1 conv of SqueezeNet runs ~2x faster).
        weight_bytes = graph.tensor(node.inputs[1]).nbytes
        order = "channels_outer" if weight_bytes > 256 * 1024 else "pixels_outer"
        return {"variant": ks["variant"][0], "oc_tile": oc_tile, "ow_tile": ow_tile, "loop_order": order}

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> int:
        """A zero row stands in for padded pixels when several output pixels share a tile."""
        m = self._dims(node, graph)
        sched = schedule or self.default_schedule(node, graph, "host")
        if min(sched.get("ow_tile", 1), m["OW"]) > 1 and (m["PL"] or m["PR"]):
            return 4 * (m["C"] if sched.get("variant") == "depthwise" else m["ICG"])
        return 0

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> dict[str, Any]:
        m = self._dims(node, graph)
        if node.attrs["layout"] != "NHWC":
            from tinyc.errors import UnsupportedError
            raise UnsupportedError(f"node '{node.source}': Conv kernels run channels-last only")
        sched = schedule or self.default_schedule(node, graph, "host")
        padded = any(m[k] for k in ("PT", "PL", "PB", "PR"))
        return dict(m=m, padded=padded, variant=sched["variant"], oc_tile=sched.get("oc_tile", 1),
                    ow_tile=sched.get("ow_tile", 1), mult=m["OCG"],
                    loop_order=sched.get("loop_order", "pixels_outer"))
