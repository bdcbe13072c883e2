"""RoiAlign: average (or max) of bilinear samples on a regular grid inside each bin of each
region of interest, as onnxruntime and onnx's reference compute it.

rois [R, 4] (x1, y1, x2, y2 in input pixels before spatial_scale) and batch_indices [R] may both
be run-time inputs: a detector's proposals feed them. Per sample point the four neighbour
offsets and weights are computed once and applied to every channel. Quirks kept on purpose
(the reference's): `output_half_pixel` forces regions to at least 1x1, samples more than one
pixel outside the map count as zero, and max mode takes the largest *weighted* neighbour.
A batch index outside [0, N) is clamped instead of reading out of bounds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.numerics.literals import c_float
from tinyc.ops.base import OpDef, OutputType, register


def _bilinear(y: float, x: float, h: int, w: int) -> tuple[list[int], list[np.float32]]:
    f = np.float32
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return [0, 0, 0, 0], [f(0)] * 4
    y, x = max(y, f(0)), max(x, f(0))
    yl, xl = int(y), int(x)
    if yl >= h - 1:
        yl = yh = h - 1
        y = f(yl)
    else:
        yh = yl + 1
    if xl >= w - 1:
        xl = xh = w - 1
        x = f(xl)
    else:
        xh = xl + 1
    ly, lx = f(y - yl), f(x - xl)
    hy, hx = f(1) - ly, f(1) - lx
    return [yl * w + xl, yl * w + xh, yh * w + xl, yh * w + xh], [hy * hx, hy * lx, ly * hx, ly * lx]


def roi_align(x: np.ndarray, rois: np.ndarray, bidx: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    """numpy RoiAlign (float32 arithmetic, the reference's order of operations)."""
    f = np.float32
    n, c, h, w = x.shape
    ph_n, pw_n = a["out_h"], a["out_w"]
    flat = x.reshape(n, c, h * w).astype(np.float32)
    y = np.zeros((len(bidx), c, ph_n, pw_n), np.float32)
    off = f(0.5 if a["half_pixel"] else 0.0)
    scale = f(a["scale"])
    for r in range(len(bidx)):
        b = min(max(int(bidx[r]), 0), n - 1)
        sw, sh, ew, eh = (f(v) * scale - off for v in rois[r])
        rw, rh = f(ew - sw), f(eh - sh)
        if not a["half_pixel"]:
            rw, rh = max(rw, f(1)), max(rh, f(1))
        bh, bw = f(rh / f(ph_n)), f(rw / f(pw_n))
        sr = a["sampling_ratio"]
        gh = sr if sr > 0 else int(math.ceil(rh / f(ph_n)))
        gw = sr if sr > 0 else int(math.ceil(rw / f(pw_n)))
        count = f(max(gh * gw, 1))
        for ph in range(ph_n):
            for pw in range(pw_n):
                acc = np.zeros(c, np.float32)
                first = True
                for iy in range(gh):
                    yy = f(sh + f(ph) * bh + f(f(iy + 0.5) * bh) / f(gh))
                    for ix in range(gw):
                        xx = f(sw + f(pw) * bw + f(f(ix + 0.5) * bw) / f(gw))
                        pos, wt = _bilinear(yy, xx, h, w)
                        terms = np.stack([wt[k] * flat[b][:, pos[k]] for k in range(4)])
                        if a["mode"] == "avg":
                            acc = acc + terms.sum(0)
                        else:
                            v = terms.max(0)
                            acc = v if first else np.maximum(acc, v)
                        first = False
                y[r, :, ph, pw] = acc / count if a["mode"] == "avg" else acc
    return y.astype(x.dtype)


@register
class RoiAlign(OpDef):
    """inputs: X [N, C, H, W], rois [R, 4], batch_indices [R] (int64).
    attrs: mode (avg | max), out_h, out_w, sampling_ratio, scale, half_pixel."""

    op = "RoiAlign"
    onnx_ops = ("RoiAlign",)
    template = "roi_align.c.j2"
    dtypes = ("float32",)

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        xs, rs, bs = ctx.shape(0), ctx.shape(1), ctx.shape(2)
        if len(xs) != 4 or len(rs) != 2 or rs[1] != 4 or len(bs) != 1 or bs[0] != rs[0]:
            ctx.invalid(f"X {xs}, rois {rs}, batch_indices {bs} (want [N,C,H,W], [R,4], [R])")
        if ctx.dtype(1) != "float32" or ctx.dtype(2) not in ("int64", "int32"):
            ctx.unsupported(f"rois {ctx.dtype(1)} / batch_indices {ctx.dtype(2)} (float32 / int64)")
        mode = str(ctx.attr("mode", "avg"))
        if mode not in ("avg", "max"):
            ctx.unsupported(f"mode '{mode}'")
        ctm = str(ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel"))
        if ctm not in ("half_pixel", "output_half_pixel"):
            ctx.unsupported(f"coordinate_transformation_mode '{ctm}'")
        out_h, out_w = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
        if out_h <= 0 or out_w <= 0:
            ctx.invalid(f"output size {out_h}x{out_w}")
        return ctx.make_node(
            "RoiAlign",
            inputs=ctx.inputs[:3],
            outputs=ctx.outputs[:1],
            mode=mode,
            out_h=out_h,
            out_w=out_w,
            sampling_ratio=int(ctx.attr("sampling_ratio", 0)),
            scale=float(ctx.attr("spatial_scale", 1.0)),
            half_pixel=ctm == "half_pixel",
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x = graph.tensor(node.inputs[0])
        r = graph.tensor(node.inputs[1]).shape[0]
        return [((r, x.shape[1], node.attrs["out_h"], node.attrs["out_w"]), x.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [roi_align(inputs[0], inputs[1], np.asarray(inputs[2]).reshape(-1), node.attrs)]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        n, c, h, w = (int(d) for d in graph.tensor(node.inputs[0]).shape)
        a = node.attrs
        return {
            "N": n,
            "C": c,
            "H": h,
            "W": w,
            "R": int(graph.tensor(node.inputs[1]).shape[0]),
            "PH": a["out_h"],
            "PW": a["out_w"],
            "SR": a["sampling_ratio"],
            "scale": c_float(a["scale"]),
            "half_pixel": a["half_pixel"],
            "max_mode": a["mode"] == "max",
        }
