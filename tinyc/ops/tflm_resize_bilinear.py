"""RESIZE_BILINEAR exactly as TFLite Micro computes it (IR op ``TflmResizeBilinear``), NHWC.

Why a new op: TFLite's source coordinates and weights are not ONNX Resize's. For int8 TFLite Micro runs
``ResizeBilinearInteger``: a 10-bit fixed-point scale ``scale_10 = (1024 * in + out / 2) / out``
(``align_corners``: ``(1024 * (in - 1) + (out - 1) / 2) / (out - 1)``), source ``s = o * scale_10``
(``half_pixel_centers``: ``o * scale_10 + scale_10 / 2 - 512``), ``i0 = max(s / 1024, 0)``,
``i1 = min((s + 1023) / 1024, in - 1)``, weights ``w1 = s - 1024 * i0`` and ``w0 = 1024 - w1``; each output
is ``sum v * wy * wx`` in int64 rounded by ``(acc +- 2^19) / 2^20`` (C division, ties away from zero).
float32 runs ``ResizeBilinear``: the same with float32 coordinates (``s = (o + 0.5) * scale - 0.5``,
floor / ceil bounds) and the four products summed in TFLite's order. Both depend only on the output
row / column, so the per-axis indices and weights are compile-time tables (inputs 1..4).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, OutputType, register


def _scaled(in_size: int, out_size: int, align: bool, half: bool) -> tuple[np.ndarray, np.ndarray]:
    """int8 tables: indices [out, 2] (i0, i1) and weights [out, 2] (w0, w1), 10-bit fixed point."""
    if align and out_size > 1:
        scale = (1024 * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    else:
        scale = (1024 * in_size + out_size // 2) // out_size
    o = np.arange(out_size, dtype=np.int64)
    s = o * scale + scale // 2 - 512 if half else o * scale
    lo = np.maximum(np.where(s >= 0, s // 1024, 0), 0)  # C division: s > -1024, truncates to 0
    hi = np.minimum((s + 1023) // 1024, in_size - 1)
    w1 = s - 1024 * lo
    return np.stack([lo, hi], 1).astype(np.int32), np.stack([1024 - w1, w1], 1).astype(np.int32)


def _scaled_float(in_size: int, out_size: int, align: bool, half: bool) -> tuple[np.ndarray, np.ndarray]:
    """float32 tables: indices [out, 2] and weights [out, 2] = (1 - (s - i0), s - i0) in float32."""
    f = np.float32
    scale = f(in_size - 1) / f(out_size - 1) if align and out_size > 1 else f(in_size) / f(out_size)
    o = np.arange(out_size, dtype=f)
    s = ((o + f(0.5)) * scale - f(0.5)).astype(f) if half else (o * scale).astype(f)
    lo = np.maximum(np.floor(s).astype(np.int64), 0)
    hi = np.minimum(np.ceil(s).astype(np.int64), in_size - 1)
    d = (s - lo.astype(f)).astype(f)
    return np.stack([lo, hi], 1).astype(np.int32), np.stack([f(1) - d, d], 1).astype(f)


def resize_tables(
    dtype: str, in_hw: tuple[int, int], out_hw: tuple[int, int], align: bool, half: bool
) -> list[np.ndarray]:
    """[y indices, x indices, y weights, x weights] for TflmResizeBilinear's inputs 1..4."""
    fn = _scaled if dtype == "int8" else _scaled_float
    (yi, yw), (xi, xw) = fn(in_hw[0], out_hw[0], align, half), fn(in_hw[1], out_hw[1], align, half)
    return [yi, xi, yw, xw]


def tflm_resize_bilinear_golden(
    x: np.ndarray, yi: np.ndarray, xi: np.ndarray, yw: np.ndarray, xw: np.ndarray
) -> np.ndarray:
    """The module docstring's arithmetic on NHWC x."""
    if x.dtype == np.int8:
        v = x.astype(np.int64)
        g = [[v[:, yi[:, r]][:, :, xi[:, t]] for t in range(2)] for r in range(2)]
        wy = [yw[:, k].astype(np.int64)[None, :, None, None] for k in range(2)]
        wx = [xw[:, k].astype(np.int64)[None, None, :, None] for k in range(2)]
        acc = sum((g[r][t] * wy[r] * wx[t] for r in range(2) for t in range(2)), np.zeros((), np.int64))
        q = np.where(acc > 0, acc + (1 << 19), acc - (1 << 19))
        return (np.sign(q) * (np.abs(q) >> 20)).astype(np.int8)
    f = np.float32
    v = x.astype(f)
    a = [[v[:, yi[:, r]][:, :, xi[:, s]] for s in range(2)] for r in range(2)]
    wy0, wy1 = (yw[:, k].astype(f)[None, :, None, None] for k in range(2))
    wx0, wx1 = (xw[:, k].astype(f)[None, None, :, None] for k in range(2))
    y = a[0][0] * wy0 * wx0 + a[1][0] * wy1 * wx0 + a[0][1] * wy0 * wx1 + a[1][1] * wy1 * wx1
    return y.astype(f)


@register
class TflmResizeBilinear(OpDef):
    """inputs: x [N, H, W, C] (int8 or float32), y indices int32 [OH, 2], x indices int32 [OW, 2], y weights
    [OH, 2], x weights [OW, 2] (int32 10-bit for int8, float32 for float32) — ``resize_tables``."""

    op = "TflmResizeBilinear"
    template = "tflm_resize_bilinear.c.j2"
    dtypes = ("int8", "float32")

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x = graph.tensor(node.inputs[0])
        oh, ow = graph.tensor(node.inputs[1]).shape[0], graph.tensor(node.inputs[2]).shape[0]
        return [((int(x.shape[0]), int(oh), int(ow), int(x.shape[3])), x.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, yi, xi, yw, xw = inputs[:5]
        return [tflm_resize_bilinear_golden(x, yi, xi, yw, xw)]

    def macs(self, node: Node, graph: Graph) -> int:
        return 8 * graph.tensor(node.outputs[0]).size

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        n, oh, ow, c = (int(d) for d in graph.tensor(node.outputs[0]).shape)
        _, h, w, _ = (int(d) for d in graph.tensor(node.inputs[0]).shape)
        return {
            "N": n,
            "H": h,
            "W": w,
            "C": c,
            "OH": oh,
            "OW": ow,
            "is_int8": graph.tensor(node.inputs[0]).dtype == "int8",
        }
