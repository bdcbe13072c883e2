"""ConvTranspose (1D/2D, grouped, strided, padded, dilated, output_padding/output_shape/auto_pad);
3D as ConvTransposeND.

Imported in ONNX's NCHW form with weights [IC, OC/groups, *K]; the layout pass turns it into
channels-last with weights [*K, IC, OC/groups]. The C kernel *gathers*: each output pixel sums
the kernel taps that land on it, so no two iterations write the same output (no scatter races).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, OutputType, register
from tinyc.ops.conv import apply_activation, check_bias, nd_dims, weights_to_channels_last


def convtranspose_geometry(
    in_sp: list[int],
    kernel: list[int],
    strides: list[int],
    dilations: list[int],
    out_pad: list[int],
    pads: list[int] | None,
    output_shape: list[int] | None,
    auto_pad: str,
) -> tuple[list[int], list[int]]:
    """(pads [begin..., end...], output spatial sizes) per the ONNX spec.

    With `output_shape` (or SAME_* auto_pad) the pads are derived from the total padding:
    SAME_UPPER puts the odd element at the end, everything else at the beginning (as the spec
    and onnx.reference say; onnxruntime splits odd totals the other way). An explicit
    output_shape larger than the full result extends the output at the end with bias-only
    values, as onnx.reference and onnxruntime both do."""
    n = len(kernel)
    full = [strides[i] * (in_sp[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(n)]
    if output_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # input * stride, but never beyond the full result: onnx shape inference and onnxruntime
        # clamp the total padding at 0 (onnx.reference alone would pad the output with bias)
        output_shape = [min(in_sp[i] * strides[i], full[i]) for i in range(n)]
    if output_shape is not None:
        begin, end = [], []
        for i in range(n):
            total = full[i] - output_shape[i]
            t = max(0, total)
            if auto_pad == "SAME_UPPER":
                b = t // 2
            else:
                b = t - t // 2
            begin.append(b)
            end.append(full[i] - b - output_shape[i])
        return begin + end, list(output_shape)
    p = [0] * (2 * n) if (pads is None or auto_pad == "VALID") else list(pads)
    out = [full[i] - p[i] - p[i + n] for i in range(n)]
    return p, out


def convtranspose_nchw_reference(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    strides: list[int],
    pads: list[int],
    dilations: list[int],
    group: int,
    out_sp: list[int],
) -> np.ndarray:
    """Scatter formulation in float64 (independent of the C kernel's gather), weights [IC, OCg, *K]."""
    n = x.ndim - 2
    N, C = x.shape[:2]
    ocg = w.shape[1]
    icg = C // group
    OC = ocg * group
    k = w.shape[2:]
    in_sp = x.shape[2:]
    full = [strides[i] * (in_sp[i] - 1) + (k[i] - 1) * dilations[i] + 1 for i in range(n)]
    lo = [min(0, pads[i]) for i in range(n)]
    hi = [max(full[i], pads[i] + out_sp[i]) for i in range(n)]
    buf = np.zeros((N, OC, *[hi[i] - lo[i] for i in range(n)]), np.float64)
    xd = x.astype(np.float64)
    wd = w.astype(np.float64)
    for kidx in np.ndindex(*k):
        sl: list[Any] = [slice(None), slice(None)]
        for i in range(n):
            start = kidx[i] * dilations[i] - lo[i]
            sl.append(slice(start, start + (in_sp[i] - 1) * strides[i] + 1, strides[i]))
        for g in range(group):
            xg = xd[:, g * icg : (g + 1) * icg]
            wg = wd[(slice(g * icg, (g + 1) * icg), slice(None)) + tuple(kidx)]  # icg, ocg
            contrib = np.einsum("nc...,co->no...", xg, wg)
            buf[(sl[0], slice(g * ocg, (g + 1) * ocg)) + tuple(sl[2:])] += contrib
    crop = [slice(None), slice(None)] + [slice(pads[i] - lo[i], pads[i] - lo[i] + out_sp[i]) for i in range(n)]
    y = buf[tuple(crop)]
    if b is not None:
        y = y + b.astype(np.float64).reshape(1, OC, *([1] * n))
    return y.astype(x.dtype)


@register
class ConvTranspose(OpDef):
    op = "ConvTranspose"
    onnx_ops = ("ConvTranspose",)
    absorbs_activation = True
    template = "conv_transpose.c.j2"
    channels_last_capable = True

    def import_onnx(self, ctx):
        xs = ctx.shape(0)
        if len(xs) not in (3, 4, 5):
            ctx.unsupported(f"only 1D, 2D and 3D transposed convolutions are supported (input rank {len(xs)})")
        if ctx.dtype(0) != "float32":
            ctx.unsupported(f"element type {ctx.dtype(0)} (float32 only)")
        w = ctx.const(1)
        if w is None:
            ctx.unsupported("weights must be constant")
        n = len(xs) - 2
        if w.ndim != n + 2:
            ctx.unsupported(f"weight rank {w.ndim} does not match input rank {len(xs)}")
        group = int(ctx.attr("group", 1))
        if group < 1 or xs[1] != w.shape[0] or xs[1] % group:
            ctx.unsupported(f"input channels {xs[1]} do not match weights {list(w.shape)} with group {group}")
        kernel = [int(k) for k in (ctx.attr("kernel_shape") or w.shape[2:])]
        if kernel != [int(k) for k in w.shape[2:]]:
            ctx.unsupported(f"kernel_shape {kernel} does not match the weights {list(w.shape[2:])}")
        strides = [int(s) for s in (ctx.attr("strides") or [1] * n)]
        dil = [int(d) for d in (ctx.attr("dilations") or [1] * n)]
        out_pad = [int(p) for p in (ctx.attr("output_padding") or [0] * n)]
        if any(len(v) != n for v in (strides, dil, out_pad)) or min(strides + dil) < 1:
            ctx.unsupported("strides/dilations/output_padding do not match the spatial rank")
        auto = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
        if auto not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
            ctx.unsupported(f"auto_pad={auto!r}")
        pads = ctx.attr("pads")
        if pads is not None:
            pads = [int(p) for p in pads]
            if len(pads) != 2 * n:
                ctx.unsupported(f"pads {pads} do not match the spatial rank")
            if min(pads) < 0:
                ctx.invalid(f"pads {pads} must not be negative")
            if auto != "NOTSET":
                ctx.invalid(f"auto_pad={auto} together with explicit pads {pads} (ONNX allows one or the other)")
        if min(kernel) < 1:
            ctx.invalid(f"kernel_shape {kernel} must be >= 1")
        if min(out_pad) < 0:
            ctx.invalid(f"output_padding {out_pad} must not be negative")
        oshape = ctx.attr("output_shape")
        if oshape is not None:
            oshape = [int(s) for s in oshape]
            if len(oshape) == n + 2:
                oshape = oshape[2:]
            if len(oshape) != n:
                ctx.unsupported(f"output_shape {oshape} does not match the spatial rank")
        pads, out_sp = convtranspose_geometry(list(xs[2:]), kernel, strides, dil, out_pad, pads, oshape, auto)
        if min(out_sp) < 1:
            ctx.unsupported(f"output spatial size {out_sp} is empty")
        ins = list(ctx.inputs[:2])
        oc = int(w.shape[1]) * group
        if ctx.has_input(2):
            check_bias(ctx, 2, oc)
            if ctx.const(2) is None:
                ctx.unsupported("bias must be constant")
            ins.append(ctx.inputs[2])
        else:
            ins.append(ctx.add_constant("bias", np.zeros(oc, np.float32)))
        return ctx.make_node(
            "ConvTranspose" if n < 3 else "ConvTransposeND",
            inputs=ins,
            outputs=ctx.outputs[:1],
            kernel=kernel,
            strides=strides,
            pads=pads,
            dilations=dil,
            group=group,
            out_spatial=out_sp,
            layout="NCHW",
        )

    # -- shapes ---------------------------------------------------------------------------
    def _dims(self, node: Node, graph: Graph) -> dict[str, int]:
        """Normalised 2D view: 1D arrives with H = KH = OH = 1."""
        a = node.attrs
        x = graph.tensor(node.inputs[0]).shape
        w = graph.tensor(node.inputs[1]).shape
        n = len(a["kernel"])
        g = a["group"]
        if a["layout"] == "NCHW":
            N, C, sp = x[0], x[1], list(x[2:])
            OCG = w[1]
        else:
            N, C, sp = x[0], x[-1], list(x[1:-1])
            OCG = w[-1]
        k, s, d = list(a["kernel"]), list(a["strides"]), list(a["dilations"])
        pb, pe, osp = list(a["pads"][:n]), list(a["pads"][n:]), list(a["out_spatial"])
        if n == 1:
            sp, k, s, d, pb, pe, osp = [1] + sp, [1] + k, [1] + s, [1] + d, [0] + pb, [0] + pe, [1] + osp
        return dict(
            N=N,
            C=C,
            H=sp[0],
            W=sp[1],
            OC=OCG * g,
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
            OH=osp[0],
            OW=osp[1],
            G=g,
            ICG=C // g,
            OCG=OCG,
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        m = self._dims(node, graph)
        sp = list(node.attrs["out_spatial"])
        if node.attrs["layout"] == "NCHW":
            return [((m["N"], m["OC"], *sp), "float32")]
        return [((m["N"], *sp, m["OC"]), "float32")]

    def macs(self, node: Node, graph: Graph) -> int:
        m = self._dims(node, graph)
        return m["N"] * m["H"] * m["W"] * m["C"] * m["OCG"] * m["KH"] * m["KW"]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        x, w, b = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
        if a["layout"] != "NCHW":
            nd = w.ndim
            x = np.moveaxis(x, -1, 1)
            w = np.transpose(w, [nd - 2, nd - 1] + list(range(nd - 2)))  # [*K, IC, OCg] -> [IC, OCg, *K]
        y = convtranspose_nchw_reference(x, w, b, a["strides"], a["pads"], a["dilations"], a["group"], a["out_spatial"])
        if a["layout"] != "NCHW":
            y = np.moveaxis(y, 1, -1)
        return [apply_activation(node, np.ascontiguousarray(y))]

    # -- layout ---------------------------------------------------------------------------
    def to_channels_last(self, node: Node, graph: Graph) -> bool:
        """Switch to NHWC: weights [IC, OCg, *K] -> [*K, IC, OCg]."""
        return weights_to_channels_last(node, graph, [0, 1])

    # -- schedule -------------------------------------------------------------------------
    def onnx_weight_axis(self, op_type: str, attr: Any) -> int | None:
        return 1  # W [IC, OC/g, *K]

    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        m = self._dims(node, graph)
        tiles = [t for t in (32, 16, 8, 4, 2, 1) if m["OCG"] % t == 0]
        if m["OCG"] <= 32 and m["OCG"] not in tiles:
            tiles.insert(0, m["OCG"])  # a few channels (an RGB decoder head): one tile for them all
        return {"oc_tile": tiles, "ow_tile": [1, 2, 4]}

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        ks = self.knobs(node, graph)
        m = self._dims(node, graph)
        oc = ks["oc_tile"][0]
        # reuse each weight load across adjacent input columns (accumulators: ow_tile x oc_tile)
        columns = -(-m["OW"] // m["SW"])
        ow = 1 if columns < 2 or m["ICG"] < 4 else 4 if oc <= 16 else 2
        return {"oc_tile": oc, "ow_tile": min(ow, 1 << (columns.bit_length() - 1))}

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        """A zero row stands in for out-of-range input columns of a multi-column tile."""
        sched = schedule or self.default_schedule(node, graph, "host")
        return 4 * self._dims(node, graph)["ICG"] if sched.get("ow_tile", 1) > 1 else 0

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        if node.attrs["layout"] != "NHWC":
            raise UnsupportedError(f"node '{node.source or node.name}': ConvTranspose kernels run channels-last only")
        m = self._dims(node, graph)
        sched = schedule or self.default_schedule(node, graph, "host")
        return dict(m=m, oc_tile=sched.get("oc_tile", 1), ow_tile=sched.get("ow_tile", 1))


@register
class ConvTransposeND(OpDef):
    """3D ConvTranspose in NCHW, weights [IC, OC/group, KD, KH, KW] as ONNX has them: the gather
    loop nest (each output sums the taps landing on it), float32. The 1D/2D op keeps its
    channels-last kernel; this one never changes layout."""

    op = "ConvTransposeND"
    absorbs_activation = True
    template = "conv_transpose_nd.c.j2"

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x = graph.tensor(node.inputs[0]).shape
        w = graph.tensor(node.inputs[1]).shape
        return [((x[0], int(w[1]) * node.attrs["group"], *node.attrs["out_spatial"]), "float32")]

    def macs(self, node: Node, graph: Graph) -> int:
        x = graph.tensor(node.inputs[0]).shape
        w = graph.tensor(node.inputs[1]).shape
        return int(np.prod(x)) * int(np.prod(w[1:]))

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        x, w, b = inputs[0], inputs[1], inputs[2]
        y = convtranspose_nchw_reference(x, w, b, a["strides"], a["pads"], a["dilations"], a["group"], a["out_spatial"])
        return [apply_activation(node, np.ascontiguousarray(y))]

    def onnx_weight_axis(self, op_type: str, attr: Any) -> int | None:
        return 1

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a = node.attrs
        x = graph.tensor(node.inputs[0]).shape
        w = graph.tensor(node.inputs[1]).shape
        g, n = int(a["group"]), len(a["kernel"])
        ocg = int(w[1])
        return dict(
            NOC=int(x[0]) * ocg * g,
            OC=ocg * g,
            C=int(x[1]),
            ICG=int(x[1]) // g,
            OCG=ocg,
            S=nd_dims([int(v) for v in x[2:]], 1),
            O=nd_dims(list(a["out_spatial"]), 1),
            K=nd_dims(list(a["kernel"]), 1),
            ST=nd_dims(list(a["strides"]), 1),
            DL=nd_dims(list(a["dilations"]), 1),
            PB=nd_dims(list(a["pads"][:n]), 0),
        )
