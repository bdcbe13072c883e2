"""InstanceNormalization: y = scale[c] * (x - mean) / sqrt(var + eps) + B[c], with mean and
variance per (n, c) over the spatial axes. The channel axis is an attribute, so the op follows
transposes (`permute`) and runs channels-last after a Conv (statistics kept in scratch)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.numerics.literals import c_float
from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, register
from tinyc.ops.conv import apply_activation


@register
class InstanceNorm(OpDef):
    op = "InstanceNorm"
    onnx_ops = ("InstanceNormalization",)
    template = "instance_norm.c.j2"

    def import_onnx(self, ctx):
        shape = ctx.shape(0)
        if ctx.dtype(0) != "float32":
            ctx.unsupported(f"element type {ctx.dtype(0)} (float32 only)")
        if len(shape) < 3:
            ctx.unsupported(f"input rank {len(shape)} (needs N x C x D1 ...)")
        scale = ctx.require_const(1, "scale").astype(np.float32).reshape(-1)
        bias = ctx.require_const(2, "B").astype(np.float32).reshape(-1)
        if scale.size != shape[1] or bias.size != shape[1]:
            ctx.unsupported(f"scale/B sizes {scale.size}/{bias.size} do not match {shape[1]} channels")
        return ctx.make_node(
            "InstanceNorm",
            inputs=[ctx.inputs[0], ctx.add_constant("scale", scale), ctx.add_constant("B", bias)],
            outputs=ctx.outputs[:1],
            epsilon=float(ctx.attr("epsilon", 1e-5)),
            axis=1,
            batch_axis=0,
        )

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        x = inputs[0].astype(np.float64)
        red = tuple(i for i in range(x.ndim) if i not in (a["axis"], a["batch_axis"]))
        mean = x.mean(axis=red, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=red, keepdims=True)
        shape = [1] * x.ndim
        shape[a["axis"]] = x.shape[a["axis"]]
        y = (x - mean) / np.sqrt(var + a["epsilon"]) * inputs[1].reshape(shape) + inputs[2].reshape(shape)
        return [apply_activation(node, y.astype(inputs[0].dtype))]

    def macs(self, node: Node, graph: Graph) -> int:
        return 3 * graph.tensor(node.inputs[0]).size

    def params(self, node: Node, graph: Graph) -> int:
        return 2 * graph.tensor(node.inputs[1]).size

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return True

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        node.attrs["axis"] = perm[node.attrs["axis"]]
        node.attrs["batch_axis"] = perm[node.attrs["batch_axis"]]
        return True

    def _view(self, node: Node, graph: Graph) -> dict[str, Any]:
        """x as [P0][X][P1][Y][P2]: X and Y are the batch and channel axes (in tensor order),
        statistics per (x, y) over p0, p1, p2. Channels-last is P0 = P2 = 1, X = N, Y = C."""
        shape = graph.tensor(node.inputs[0]).shape
        ax, bx = node.attrs["axis"], node.attrs["batch_axis"]
        lo, hi = min(ax, bx), max(ax, bx)
        dims = [
            int(np.prod(shape[:lo])),
            int(shape[lo]),
            int(np.prod(shape[lo + 1 : hi])),
            int(shape[hi]),
            int(np.prod(shape[hi + 1 :])),
        ]
        return dict(
            P0=dims[0],
            X=dims[1],
            P1=dims[2],
            Y=dims[3],
            P2=dims[4],
            channel_is_x=ax < bx,
            count=dims[0] * dims[2] * dims[4],
            C=int(shape[ax]),
            channels_last=dims[0] == 1 and dims[4] == 1 and ax > bx,
        )

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        v = self._view(node, graph)
        return 2 * 8 * v["C"] if v["channels_last"] else 0

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        return dict(self._view(node, graph), eps=c_float(node.attrs["epsilon"]))
