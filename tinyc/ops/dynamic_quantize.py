"""DynamicQuantizeLinear: uint8 quantization with a scale and zero point computed from the data
at run time (ONNX's definition, in float32 throughout, as onnx's reference computes it):

    lo = min(0, min x), hi = max(0, max x), scale = (hi == lo ? 1 : hi - lo) / 255
    zp = round_half_even(clamp(0 - lo / scale, 0, 255))
    y = clamp(round_half_even(x / scale) + zp, 0, 255)

The kernel is one serial pass for the range and one for the values (rintf rounds half to even in
the default rounding mode, like numpy's rint). Outputs: y (uint8), y_scale (float32 scalar),
y_zero_point (uint8 scalar).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, OutputType, register


def dynamic_quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y, scale, zero point) exactly as the kernel computes them (float32 arithmetic)."""
    f = np.float32
    x = np.asarray(x, f)
    hi = f(max(f(0), x.max())) if x.size else f(0)
    lo = f(min(f(0), x.min())) if x.size else f(0)
    scale = f(f(1) if hi == lo else f(hi - lo)) / f(255)
    zp = np.rint(f(np.clip(f(f(0) - lo / scale), f(0), f(255))))
    with np.errstate(all="ignore"):
        y = np.clip(np.rint(x / scale) + zp, f(0), f(255))
    return y.astype(np.uint8), np.asarray(scale, f), np.asarray(zp, np.uint8)


@register
class DynamicQuantizeLinear(OpDef):
    """input: x (float32). Outputs: y, y_scale, y_zero_point."""

    op = "DynamicQuantizeLinear"
    onnx_ops = ("DynamicQuantizeLinear",)
    template = "dynamic_quantize_linear.c.j2"
    dtypes = ("float32",)

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        if any(d == 0 for d in ctx.shape(0)):
            ctx.unsupported("an empty input has no range to quantize")
        return ctx.make_node("DynamicQuantizeLinear", inputs=ctx.inputs[:1], outputs=ctx.outputs[:3])

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, "uint8"), ((), "float32"), ((), "uint8")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return list(dynamic_quantize(inputs[0]))

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.inputs[0]).size

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        return {"count": graph.tensor(node.inputs[0]).size, "outs_present": [bool(o) for o in node.outputs]}


#: the integer ranges a run-time zero point may select
_QRANGE = {"uint8": (0, 255), "int8": (-128, 127)}


def import_runtime_scale(ctx: Any) -> Node:
    """QuantizeLinear whose per-tensor scale (and zero point) are computed by the graph (the
    expanded DynamicQuantizeLinear): called by QuantizeLinear's import when input 1 is not a
    constant. Only the per-tensor, 8-bit integer form has a run-time kernel; anything else keeps
    QuantizeLinear's "must be a constant" refusal."""
    qd = ctx.dtype(2) if ctx.has_input(2) else "uint8"
    per_tensor = int(np.prod(ctx.shape(1), dtype=np.int64)) == 1 and (
        not ctx.has_input(2) or int(np.prod(ctx.shape(2), dtype=np.int64)) == 1
    )
    plain = not int(ctx.attr("block_size", 0) or 0) and not int(ctx.attr("output_dtype", 0) or 0)
    if ctx.dtype(0) != "float32" or ctx.dtype(1) != "float32" or qd not in _QRANGE or not (per_tensor and plain):
        ctx.unsupported("input 1 (scale) must be a constant known at compile time")
    ins = ctx.inputs[:3] if ctx.has_input(2) else ctx.inputs[:2]
    return ctx.make_node("QuantizeLinearRuntime", inputs=ins, outputs=ctx.outputs[:1], qdtype=qd)


@register
class QuantizeLinearRuntime(OpDef):
    """QuantizeLinear with a run-time per-tensor scale (in1) and zero point (in2, optional):
    y = clamp(round_half_even(x / scale) + zp, qmin, qmax), as the constant-scale kernel computes
    it (divide, rintf, clamp in float against [qmin - zp, qmax - zp], then add zp). Not an ONNX op
    of its own: QuantizeLinear's import builds it (``import_runtime_scale``)."""

    op = "QuantizeLinearRuntime"
    template = "quantize_linear_runtime.c.j2"
    dtypes = ("float32",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, node.attrs["qdtype"])]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        f = np.float32
        qmin, qmax = _QRANGE[node.attrs["qdtype"]]
        scale = f(np.asarray(inputs[1]).reshape(-1)[0])
        zp = int(np.asarray(inputs[2]).reshape(-1)[0]) if len(inputs) > 2 else 0
        with np.errstate(all="ignore"):
            v = np.rint(np.asarray(inputs[0], f) / scale)
        v = np.where(~(v >= f(qmin - zp)), f(qmin - zp), np.minimum(v, f(qmax - zp)))
        return [(v.astype(np.int32) + zp).astype(node.attrs["qdtype"])]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        qmin, qmax = _QRANGE[node.attrs["qdtype"]]
        has_zp = len(node.inputs) > 2 and bool(node.inputs[2])
        return {"count": graph.tensor(node.inputs[0]).size, "qmin": qmin, "qmax": qmax, "has_zp": has_zp}
