"""DeformConv (2D): a convolution whose every kernel tap samples the input at its regular place
plus a learned offset (input 2, [N, offset_group * 2 * KH * KW, OH, OW], (dy, dx) per tap),
bilinearly, zero outside the input (onnx.reference: GridSample with align_corners=1), times an
optional mask (input 4, [N, offset_group * KH * KW, OH, OW]); grouped, strided, padded, dilated.
Offsets and mask are run-time tensors; each (image, output channel) writes only its own plane."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, OutputType, register
from tinyc.ops.conv import check_bias, check_window


def bilinear_zeros(img: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """img [H, W] sampled at (y, x) (any equal shapes), zero outside: the four neighbours weighted
    by their distances, each neighbour outside the image contributing 0."""
    H, W = img.shape
    y0, x0 = np.floor(y), np.floor(x)
    fy, fx = y - y0, x - x0
    out = np.zeros(y.shape)
    for dy, wy in ((0, 1 - fy), (1, fy)):
        for dx, wx in ((0, 1 - fx), (1, fx)):
            yy, xx = (y0 + dy).astype(np.int64), (x0 + dx).astype(np.int64)
            ok = (yy >= 0) & (yy < H) & (xx >= 0) & (xx < W)
            out += np.where(ok, img[np.clip(yy, 0, H - 1), np.clip(xx, 0, W - 1)], 0.0) * wy * wx
    return out


@register
class DeformConv(OpDef):
    """inputs: x, w, offset, bias (zeros when absent)[, mask]; attrs: kernel, strides, pads,
    dilations, group, offset_group, has_mask."""

    op = "DeformConv"
    onnx_ops = ("DeformConv",)
    template = "deform_conv.c.j2"

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        xs, ws, offs = ctx.shape(0), ctx.shape(1), ctx.shape(2)
        if len(xs) != 4:
            ctx.unsupported(f"only 2D deformable convolution is supported (input rank {len(xs)})")
        group, og = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
        N, C, H, W = (int(v) for v in xs)
        if len(ws) != 4 or group < 1 or og < 1 or C % og or int(ws[0]) % group or int(ws[1]) * group != C:
            ctx.invalid(f"weights {list(ws)}, group {group}, offset_group {og} do not fit the input {list(xs)}")
        k = [int(v) for v in (ctx.attr("kernel_shape") or ws[2:])]
        if k != [int(v) for v in ws[2:]]:
            ctx.invalid(f"kernel_shape {k} differs from the weights' kernel {list(ws[2:])}")
        s = [int(v) for v in (ctx.attr("strides") or [1, 1])]
        d = [int(v) for v in (ctx.attr("dilations") or [1, 1])]
        pads = [int(v) for v in (ctx.attr("pads") or [0] * 4)]
        check_window(ctx, xs[2:], k, s, d)
        if len(pads) != 4 or min(pads) < 0:
            ctx.invalid(f"pads {pads} must be 4 values >= 0")
        out = [(int(xs[2 + i]) + pads[i] + pads[i + 2] - (k[i] - 1) * d[i] - 1) // s[i] + 1 for i in range(2)]
        if min(out) < 1 or list(offs) != [N, og * 2 * k[0] * k[1], *out]:
            ctx.invalid(f"offset of shape {list(offs)}; the geometry needs {[N, og * 2 * k[0] * k[1], *out]}")
        oc = int(ws[0])
        ins = list(ctx.inputs[:3])
        if ctx.has_input(3):
            check_bias(ctx, 3, oc)
            ins.append(ctx.inputs[3])
        else:
            ins.append(ctx.add_constant("bias", np.zeros(oc, np.float32)))
        has_mask = ctx.has_input(4)
        if has_mask:
            if list(ctx.shape(4)) != [N, og * k[0] * k[1], *out]:
                ctx.invalid(f"mask of shape {list(ctx.shape(4))}; the geometry needs {[N, og * k[0] * k[1], *out]}")
            ins.append(ctx.inputs[4])
        if any(ctx.dtype(i) != "float32" for i in range(len(ctx.inputs)) if ctx.has_input(i)):
            ctx.unsupported("every input must be float32")
        return ctx.make_node(
            "DeformConv",
            inputs=ins,
            outputs=ctx.outputs[:1],
            kernel=k,
            strides=s,
            pads=pads,
            dilations=d,
            group=group,
            offset_group=og,
            has_mask=has_mask,
            out=out,
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x, w = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        return [((x[0], w[0], *node.attrs["out"]), "float32")]

    def macs(self, node: Node, graph: Graph) -> int:
        w = graph.tensor(node.inputs[1]).shape
        return int(np.prod(graph.tensor(node.outputs[0]).shape)) * int(np.prod(w[1:])) * 4

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        x, w, off, b = (v.astype(np.float64) for v in inputs[:4])
        N, C = x.shape[:2]
        OC, ICG, KH, KW = w.shape
        OH, OW = a["out"]
        og = a["offset_group"]
        off = off.reshape(N, og, KH, KW, 2, OH, OW)
        mask = inputs[4].astype(np.float64).reshape(N, og, KH, KW, OH, OW) if a["has_mask"] else None
        base_y = (np.arange(OH) * a["strides"][0] - a["pads"][0]).reshape(-1, 1)
        base_x = (np.arange(OW) * a["strides"][1] - a["pads"][1]).reshape(1, -1)
        y = np.zeros((N, OC, OH, OW)) + b.reshape(1, -1, 1, 1)
        ocg = OC // a["group"]
        for n in range(N):
            for c in range(C):
                g, o = c // ICG, c // (C // og)
                for kh in range(KH):
                    for kw in range(KW):
                        sy = base_y + kh * a["dilations"][0] + off[n, o, kh, kw, 0]
                        sx = base_x + kw * a["dilations"][1] + off[n, o, kh, kw, 1]
                        v = bilinear_zeros(x[n, c], sy, sx)
                        if mask is not None:
                            v = v * mask[n, o, kh, kw]
                        wk = w[g * ocg : (g + 1) * ocg, c % ICG, kh, kw].reshape(-1, 1, 1)
                        y[n, g * ocg : (g + 1) * ocg] += wk * v
        return [y.astype(np.float32)]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a = node.attrs
        N, C, H, W = graph.tensor(node.inputs[0]).shape
        OC, ICG, KH, KW = graph.tensor(node.inputs[1]).shape
        return dict(
            N=N,
            C=C,
            H=H,
            W=W,
            OC=OC,
            ICG=ICG,
            OCG=OC // a["group"],
            KH=KH,
            KW=KW,
            OH=a["out"][0],
            OW=a["out"][1],
            OG=a["offset_group"],
            ICOG=C // a["offset_group"],
            SH=a["strides"][0],
            SW=a["strides"][1],
            DH=a["dilations"][0],
            DW=a["dilations"][1],
            PT=a["pads"][0],
            PL=a["pads"][1],
            has_mask=a["has_mask"],
        )
