"""int8 TRANSPOSE_CONV exactly as TFLite Micro computes it (IR op ``TflmTransposeConv``).

TFLite's reference integer TransposeConv scatters: every input pixel (iy, ix) adds
``(x - x_zp) * w[oc, ky, kx, c]`` into int32 accumulator (iy * stride - pad + ky, ix * stride - pad + kx),
dropping taps outside the output; then per output channel ``acc + bias[oc]`` is requantized with
MultiplyByQuantizedMultiplier (per-channel multiplier/shift, double rounding), shifted by the output
zero point and clamped to the activation range. Integer addition is exact, so the C kernel gathers
instead (each output sums the taps that land on it: no scratch buffer, no write races) and gets the
same integers. Layouts are TFLite's: x NHWC, weights [OC, KH, KW, IC].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.numerics.fixed_point import multiply_by_quantized_multiplier
from tinyc.ops.base import OpDef, OutputType, register


def tflm_transpose_conv_golden(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray, mult: np.ndarray, shift: np.ndarray, attrs: dict[str, Any]
) -> np.ndarray:
    """The scatter of the module docstring in int64 (no overflow: the converter bounds the sums)."""
    n, h, wd, _ = x.shape
    oc, kh, kw, _ = w.shape
    sh, sw = attrs["strides"]
    pt, pl = attrs["pads"]
    oh, ow = attrs["out_spatial"]
    fh, fw = max((h - 1) * sh + kh, pt + oh), max((wd - 1) * sw + kw, pl + ow)
    acc = np.zeros((n, fh, fw, oc), np.int64)
    xc = x.astype(np.int64) - int(attrs["x_zp"])
    w64 = w.astype(np.int64)
    for ky in range(kh):
        for kx in range(kw):
            contrib = np.einsum("nhwc,oc->nhwo", xc, w64[:, ky, kx, :])
            acc[:, ky : ky + (h - 1) * sh + 1 : sh, kx : kx + (wd - 1) * sw + 1 : sw, :] += contrib
    acc = acc[:, pt : pt + oh, pl : pl + ow, :] + bias.astype(np.int64).reshape(-1)
    y = multiply_by_quantized_multiplier(acc, np.asarray(mult, np.int32), np.asarray(shift, np.int32))
    y = np.asarray(y, np.int64) + int(attrs["y_zp"])
    return np.clip(y, int(attrs["act_min"]), int(attrs["act_max"])).astype(np.int8)


@register
class TflmTransposeConv(OpDef):
    """inputs: x int8 [N, H, W, C], w int8 [OC, KH, KW, C], bias int32 [OC], multiplier int32 [OC],
    shift int32 [OC]; attrs strides, pads [top, left], out_spatial [OH, OW], x_zp, y_zp, act_min, act_max."""

    op = "TflmTransposeConv"
    template = "tflm_transpose_conv.c.j2"
    dtypes = ("int8",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        n = graph.tensor(node.inputs[0]).shape[0]
        oc = graph.tensor(node.inputs[1]).shape[0]
        oh, ow = node.attrs["out_spatial"]
        return [((int(n), int(oh), int(ow), int(oc)), "int8")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, w, bias, mult, shift = inputs[:5]
        return [tflm_transpose_conv_golden(x, w, bias, mult, shift, node.attrs)]

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.inputs[0]).size * int(np.prod(graph.tensor(node.inputs[1]).shape[:3]))

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        n, h, w, c = (int(d) for d in graph.tensor(node.inputs[0]).shape)
        oc, kh, kw, _ = (int(d) for d in graph.tensor(node.inputs[1]).shape)
        a = node.attrs
        return dict(
            N=n,
            H=h,
            W=w,
            C=c,
            OC=oc,
            KH=kh,
            KW=kw,
            SH=int(a["strides"][0]),
            SW=int(a["strides"][1]),
            PT=int(a["pads"][0]),
            PL=int(a["pads"][1]),
            OH=int(a["out_spatial"][0]),
            OW=int(a["out_spatial"][1]),
            x_zp=int(a["x_zp"]),
            y_zp=int(a["y_zp"]),
            act_min=int(a["act_min"]),
            act_max=int(a["act_max"]),
        )
