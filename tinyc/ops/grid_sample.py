"""GridSample: sample X [N, C, *spatial] at the normalised positions of grid [N, *out, D]
(D = the spatial rank, 2-D images or 3-D volumes; grid's last axis lists x first, i.e. the
innermost spatial axis first).

The sampling is separable, so each output position resolves, axis by axis, its taps (1 nearest,
2 linear, 4 cubic) to source indices (-1 for a zero-padded tap) and weights, once for all C
channels; the channel loop is then a small weighted gather. The arithmetic follows onnx's
reference step for step (denormalise in float, nearest rounds half to even, out-of-range
positions clamp or reflect, each tap index is padded again, reflection in double), so the
kernel and the numpy golden model below agree with it to float rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, OutputType, register

MODES = {"linear": "linear", "bilinear": "linear", "nearest": "nearest", "cubic": "cubic", "bicubic": "cubic"}
PADDINGS = ("zeros", "border", "reflection")
TAPS = {"nearest": 1, "linear": 2, "cubic": 4}
CUBIC_A = -0.75


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Fold positions outside [lo, hi] back in by mirroring at the borders (float64)."""
    x = np.asarray(x, dtype=np.float64)
    rng = hi - lo
    if rng <= 0:
        return np.where((x < lo) | (x > hi), lo, x)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, x - hi)
    n = np.floor(np.abs(dx) / rng)
    r = dx - n * rng
    even = n % 2 == 0
    out = np.where(below, np.where(even, lo + r, hi - r), x)
    return np.where(above, np.where(even, hi - r, lo + r), out)


def cubic_coeffs(f: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution weights (alpha -0.75) of the taps -1, 0, 1, 2 at fraction f."""
    a = np.float32(CUBIC_A)
    x = np.abs(f).astype(np.float32)
    one = np.float32(1)
    c0 = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a
    c1 = ((a + 2) * x - (a + 3)) * x * x + 1
    c2 = ((a + 2) * (one - x) - (a + 3)) * (one - x) * (one - x) + 1
    c3 = ((a * (2 - x) - 5 * a) * (2 - x) + 8 * a) * (2 - x) - 4 * a
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.float32)


def axis_taps(g: np.ndarray, size: int, mode: str, padding: str, align: bool) -> tuple[np.ndarray, np.ndarray]:
    """Source indices (-1: a zero tap) and weights [..., taps] of normalised coordinates g on one axis."""
    g = g.astype(np.float32)
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if align:
        x = (g + np.float32(1)) / np.float32(2) * np.float32(size - 1)
    else:
        x = ((g + np.float32(1)) * np.float32(size) - np.float32(1)) / np.float32(2)
    if mode == "nearest":
        x = np.rint(x)
    out = (x < lo) | (x > hi)
    if padding == "border":
        x = np.where(out, np.clip(x, 0, size - 1), x).astype(np.float32)
    elif padding == "reflection":
        x = np.where(out, _reflect(x, lo, hi), x).astype(np.float32)
    else:
        x = np.clip(x, lo - 4, hi + 4).astype(np.float32)
    if mode == "nearest":
        idx = np.trunc(x).astype(np.int64)[..., None]
        w = np.ones(idx.shape, np.float32)
    else:
        x0 = np.floor(x)
        f = (x - x0).astype(np.float32)
        first = -1 if mode == "cubic" else 0
        idx = x0.astype(np.int64)[..., None] + np.arange(first, first + TAPS[mode])
        w = cubic_coeffs(f) if mode == "cubic" else np.stack([1 - f, f], axis=-1)
    if padding == "zeros":
        idx = np.where((idx >= 0) & (idx < size), idx, -1)
    elif padding == "border":
        idx = np.clip(idx, 0, size - 1)
    else:
        idx = np.clip(np.trunc(_reflect(idx, lo, hi)).astype(np.int64), 0, size - 1)
    return idx, w.astype(np.float32)


def grid_sample(x: np.ndarray, grid: np.ndarray, mode: str, padding: str, align: bool) -> np.ndarray:
    """numpy GridSample (any spatial rank): the golden model of the kernel."""
    n, c, *spatial = x.shape
    dims = len(spatial)
    out_sp = grid.shape[1:-1]
    flat_x = x.reshape(n, c, -1).astype(np.float32)
    g = grid.reshape(n, -1, dims)
    strides = [int(np.prod(spatial[i + 1 :])) for i in range(dims)]
    off = np.zeros((n, g.shape[1], 1), np.int64)
    wt = np.ones((n, g.shape[1], 1), np.float32)
    for i in range(dims):
        idx, w = axis_taps(g[..., dims - 1 - i], spatial[i], mode, padding, align)
        valid = (off[..., :, None] >= 0) & (idx[..., None, :] >= 0)
        off = np.where(valid, off[..., :, None] + idx[..., None, :] * strides[i], -1).reshape(n, g.shape[1], -1)
        wt = (wt[..., :, None] * w[..., None, :]).reshape(n, g.shape[1], -1)
    y = np.zeros((n, c, g.shape[1]), np.float32)
    for b in range(n):
        vals = np.where(off[b] >= 0, flat_x[b][:, np.maximum(off[b], 0)], 0)  # [c, P, T]
        y[b] = (vals * wt[b][None]).sum(-1)
    return y.reshape(n, c, *out_sp).astype(x.dtype)


@register
class GridSample(OpDef):
    """attrs: mode (linear | nearest | cubic), padding (zeros | border | reflection), align."""

    op = "GridSample"
    onnx_ops = ("GridSample",)
    template = "grid_sample.c.j2"
    dtypes = ("float32",)

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        xs, gs = ctx.shape(0), ctx.shape(1)
        if ctx.dtype(1) != "float32":
            ctx.unsupported(f"grid of type {ctx.dtype(1)} (float32 only)")
        dims = len(xs) - 2
        if dims < 1 or len(gs) != dims + 2 or gs[0] != xs[0] or gs[-1] != dims:
            ctx.invalid(f"X {xs} and grid {gs} do not match (grid must be [N, *out, {max(dims, 0)}])")
        default = "bilinear" if ctx.opset < 20 else "linear"
        mode = str(ctx.attr("mode", default))
        padding = str(ctx.attr("padding_mode", "zeros"))
        if mode not in MODES:
            ctx.unsupported(f"mode '{mode}' (supported: {', '.join(MODES)})")
        if padding not in PADDINGS:
            ctx.unsupported(f"padding_mode '{padding}' (supported: {', '.join(PADDINGS)})")
        if MODES[mode] == "cubic" and dims != 2:
            ctx.unsupported(f"cubic mode on {dims}-D input (onnx defines it for 2-D only)")
        return ctx.make_node(
            "GridSample",
            inputs=ctx.inputs[:2],
            outputs=ctx.outputs[:1],
            mode=MODES[mode],
            padding=padding,
            align=bool(int(ctx.attr("align_corners", 0))),
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x, g = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        return [((x.shape[0], x.shape[1], *g.shape[1:-1]), x.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        return [grid_sample(inputs[0], inputs[1], a["mode"], a["padding"], a["align"])]

    def macs(self, node: Node, graph: Graph) -> int:
        dims = len(graph.tensor(node.inputs[0]).shape) - 2
        return graph.tensor(node.outputs[0]).size * TAPS[node.attrs["mode"]] ** dims

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        x = graph.tensor(node.inputs[0])
        n, c, *spatial = (int(d) for d in x.shape)
        out_sp = graph.tensor(node.inputs[1]).shape[1:-1]
        dims = len(spatial)
        return {
            "N": n,
            "C": c,
            "P": int(np.prod(out_sp, dtype=np.int64)),
            "S": int(np.prod(spatial, dtype=np.int64)),
            "dims": dims,
            "sizes": spatial,
            "strides": [int(np.prod(spatial[i + 1 :], dtype=np.int64)) for i in range(dims)],
            "taps": TAPS[node.attrs["mode"]],
            "mode": node.attrs["mode"],
            "padding": node.attrs["padding"],
            "align": node.attrs["align"],
        }
