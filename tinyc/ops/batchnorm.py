"""BatchNormalization (inference): imported as a per-channel affine y = x * scale + shift.
Usually folded into the preceding Conv/Gemm by the passes; this kernel handles the rest."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, register
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
        if int(ctx.attr("training_mode", 0)) or any(o for o in ctx.outputs[1:]):
            ctx.unsupported("training mode (extra outputs) is not supported")
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
