"""BatchNormalization (inference): imported as a per-channel affine y = x * scale + shift.
Usually folded into the preceding Conv/Gemm by the passes; this kernel handles the rest.

Training mode (opset >= 14, `training_mode=1`) is deterministic: it normalises with the batch's own
mean and variance (over every axis but 1) and also returns the updated running statistics
(running = stored * momentum + batch * (1 - momentum)). It is imported as the ONNX nodes that
compute exactly that (ReduceMean, Sub, Mul, Sqrt, Div, Add), as onnx's reference does."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, register
from tinyc.ops.sequences import emit
from tinyc.ops.conv import apply_activation


@register
class ChannelAffine(OpDef):
    op = "ChannelAffine"
    onnx_ops = ("BatchNormalization",)
    absorbs_activation = True
    template = "channel_affine.c.j2"
    inplace = True

    def import_onnx(self, ctx):
        if ctx.dtype(0) != "float32":
            ctx.unsupported(f"element type {ctx.dtype(0)} (float32 only)")
        if int(ctx.attr("training_mode", 0)) and ctx.opset >= 14:
            return training_mode(ctx)
        if any(o for o in ctx.outputs[1:]):
            ctx.unsupported("the extra outputs of opset < 14 training mode (saved statistics) are not supported")
        if ctx.opset < 7 and not int(ctx.attr("spatial", 1)):
            ctx.unsupported("spatial=0 is not supported")
        gamma, beta = ctx.require_const(1, "scale"), ctx.require_const(2, "bias")
        mean, var = ctx.require_const(3, "mean"), ctx.require_const(4, "var")
        eps = float(ctx.attr("epsilon", 1e-5))
        scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
        shift = beta.astype(np.float64) - mean.astype(np.float64) * scale
        s = ctx.add_constant("scale", scale.astype(np.float32))
        b = ctx.add_constant("shift", shift.astype(np.float32))
        return ctx.make_node("ChannelAffine", inputs=[ctx.inputs[0], s, b], outputs=ctx.outputs[:1], axis=1)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        shape = [1] * x.ndim
        ax = node.attrs["axis"]
        shape[ax] = x.shape[ax]
        y = x.astype(np.float64) * inputs[1].reshape(shape) + inputs[2].reshape(shape)
        return [apply_activation(node, y.astype(x.dtype))]

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return True

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Inputs now arrive untransposed (see passes/layout.py): axis a is now axis perm[a]."""
        node.attrs["axis"] = perm[node.attrs["axis"]]
        return True

    def fuses_onnx_activation(self) -> bool:
        """The QDQ export keeps the Q/DQ pair between a BatchNormalization and its Relu/Clip (it
        never counted BatchNormalization among the fusing producers), although the ChannelAffine
        it becomes takes a fused activation."""
        return False

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        shape = graph.tensor(node.inputs[0]).shape
        ax = node.attrs["axis"]
        return dict(outer=int(np.prod(shape[:ax])), C=int(shape[ax]), inner=int(np.prod(shape[ax + 1 :])))


def training_mode(ctx: Any) -> list[Node]:
    """Y, running_mean, running_var of a training-mode BatchNormalization, as ordinary ONNX nodes."""
    shape = ctx.shape(0)
    if len(shape) < 2:
        ctx.invalid(f"input must have a channel axis, got shape {shape}")
    if ctx.dtype(0) != "float32" or any(ctx.dtype(i) != "float32" for i in range(1, 5)):
        ctx.unsupported("training mode is supported for float32 tensors only")
    c = shape[1]
    eps, momentum = float(ctx.attr("epsilon", 1e-5)), float(ctx.attr("momentum", 0.9))
    axes = [a for a in range(len(shape)) if a != 1]
    bshape = [1, c] + [1] * (len(shape) - 2)
    name = ctx.graph.unique_name
    t = {k: name(f"{ctx.name}__bn_{k}") for k in ("mean", "d", "d2", "var", "ve", "sd", "xn", "s", "b", "ys")}

    def const(tag: str, value: Any) -> str:
        return ctx.add_constant(tag, np.asarray(value))

    def mean(src: str, dst: str) -> onnx.NodeProto:
        if ctx.opset >= 18:
            return helper.make_node("ReduceMean", [src, const("axes", np.asarray(axes, np.int64))], [dst], keepdims=1)
        return helper.make_node("ReduceMean", [src], [dst], axes=axes, keepdims=1)

    def reshape(src: str, dst: str, to: list[int]) -> onnx.NodeProto:
        return helper.make_node("Reshape", [src, const("shape", np.asarray(to, np.int64))], [dst])

    x, scale, bias, r_mean, r_var = ctx.inputs[:5]
    nodes = [
        mean(x, t["mean"]),
        helper.make_node("Sub", [x, t["mean"]], [t["d"]]),
        helper.make_node("Mul", [t["d"], t["d"]], [t["d2"]]),
        mean(t["d2"], t["var"]),
        helper.make_node("Add", [t["var"], const("eps", np.float32(eps))], [t["ve"]]),
        helper.make_node("Sqrt", [t["ve"]], [t["sd"]]),
        helper.make_node("Div", [t["d"], t["sd"]], [t["xn"]]),
        reshape(scale, t["s"], bshape),
        reshape(bias, t["b"], bshape),
        helper.make_node("Mul", [t["xn"], t["s"]], [t["ys"]]),
        helper.make_node("Add", [t["ys"], t["b"]], [ctx.outputs[0]]),
    ]
    outputs = [ctx.outputs[0]]
    for k, (stored, batch) in enumerate(((r_mean, t["mean"]), (r_var, t["var"]))):
        out = ctx.outputs[k + 1] if len(ctx.outputs) > k + 1 else ""
        if not out:
            continue
        flat, old, new = (name(f"{ctx.name}__bn_run{k}_{s}") for s in ("flat", "old", "new"))
        nodes += [
            reshape(batch, flat, [c]),
            helper.make_node("Mul", [stored, const("momentum", np.float32(momentum))], [old]),
            helper.make_node("Mul", [flat, const("rest", np.float32(1.0 - momentum))], [new]),
            helper.make_node("Add", [old, new], [out]),
        ]
        outputs.append(out)
    return emit(ctx, nodes, outputs)
