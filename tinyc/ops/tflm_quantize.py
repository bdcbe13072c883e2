"""float32 -> int8 QUANTIZE exactly as TFLite Micro computes it (IR op ``TflmQuantize``).

TFLM's AffineQuantize divides in float32 and rounds with ``TfLiteRound`` (std::round: half AWAY from
zero), where tinyc's ONNX QuantizeLinear rounds half to even as ONNX specifies: the two differ on every
exact tie (x / scale = k + 1/2), so TFLite models get this op. Per element::

    v = float32(x) / float32(scale);  r = round_half_away(v)
    q = clamp(wrap32(int32(r) + zp), -128, 127)

Out of range, TFLM's build does what x86 does with that undefined C++: ``int32(r)`` of NaN, +-inf or a
value outside int32 is INT32_MIN, and the int32 sum with the zero point wraps (so NaN gives 127 when the
zero point is negative, -128 otherwise). The C kernel reproduces both without undefined behaviour:
it tests the range before converting and adds in uint32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node, QuantParams
from tinyc.numerics.fixed_point import round_half_away
from tinyc.ops.base import OpDef, OutputType, register


def tflm_quantize_golden(x: np.ndarray, scale: float, zp: int) -> np.ndarray:
    """The steps of the module docstring in numpy (float32 division, half-away rounding)."""
    with np.errstate(all="ignore"):
        v = (np.asarray(x, np.float32) / np.float32(scale)).astype(np.float32)
        r = round_half_away(v)
        ok = np.isfinite(r) & (r >= -(2.0**31)) & (r < 2.0**31)
        t = np.where(ok, np.where(ok, r, 0).astype(np.int64), -(2**31)) + int(zp)
    q = ((t + (1 << 31)) % (1 << 32)) - (1 << 31)
    return np.clip(q, -128, 127).astype(np.int8)


@register
class TflmQuantize(OpDef):
    """input: x float32; attrs: scale, zp (int8 output)."""

    op = "TflmQuantize"
    template = "tflm_quantize.c.j2"
    dtypes = ("float32",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, "int8")]

    def folded_quant(self, node: Node, graph: Graph) -> QuantParams | None:
        return graph.tensor(node.outputs[0]).quant

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        return [tflm_quantize_golden(inputs[0], a["scale"], a["zp"])]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        return {"count": graph.tensor(node.inputs[0]).size}
