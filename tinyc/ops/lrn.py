"""LRN (local response normalisation across channels, AlexNet/GoogLeNet era).

y = x / (bias + alpha / size * sum_{c' in window(c)} x[c']^2) ^ beta, the window running from
c - floor((size-1)/2) to c + ceil((size-1)/2). The channel axis is an attribute, so the op
follows transposes (`permute`) and runs channels-last between NHWC convolutions and pools.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinyc.numerics.literals import c_float
from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, register


@register
class LRN(OpDef):
    op = "LRN"
    onnx_ops = ("LRN",)
    template = "lrn.c.j2"

    def import_onnx(self, ctx):
        if ctx.dtype(0) != "float32":
            ctx.unsupported(f"element type {ctx.dtype(0)} (float32 only)")
        if len(ctx.shape(0)) < 2:
            ctx.unsupported(f"input rank {len(ctx.shape(0))} (needs N x C x ...)")
        size = ctx.attr("size")
        if size is None or int(size) < 1:
            ctx.unsupported(f"size={size!r} (a positive odd or even integer is required)")
        return ctx.make_node(
            "LRN",
            inputs=ctx.inputs[:1],
            outputs=ctx.outputs[:1],
            size=int(size),
            alpha=float(ctx.attr("alpha", 1e-4)),
            beta=float(ctx.attr("beta", 0.75)),
            bias=float(ctx.attr("bias", 1.0)),
            axis=1,
        )

    def _window(self, node: Node) -> tuple[int, int]:
        """Channels before and after c that the window covers."""
        size = node.attrs["size"]
        return math.floor((size - 1) / 2), math.ceil((size - 1) / 2)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        x = np.moveaxis(inputs[0].astype(np.float64), a["axis"], 0)
        before, after = self._window(node)
        sq = x * x
        C = x.shape[0]
        s = np.zeros_like(x)
        for c in range(C):
            s[c] = sq[max(0, c - before) : min(C, c + after + 1)].sum(axis=0)
        y = x / (a["bias"] + a["alpha"] / a["size"] * s) ** a["beta"]
        return [np.ascontiguousarray(np.moveaxis(y, 0, a["axis"])).astype(inputs[0].dtype)]

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.inputs[0]).size * (node.attrs["size"] + 2)

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return True

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        node.attrs["axis"] = perm[node.attrs["axis"]]
        return True

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a = node.attrs
        shape = graph.tensor(node.inputs[0]).shape
        ax = a["axis"]
        before, after = self._window(node)
        beta = a["beta"]
        # s^-beta: cheaper exact forms for the usual exponents
        if beta == 0.75:
            inv = "1.0f / sqrtf(s * sqrtf(s))"
        elif beta == 0.5:
            inv = "1.0f / sqrtf(s)"
        elif beta == 1.0:
            inv = "1.0f / s"
        else:
            inv = f"powf(s, {c_float(-beta)})"
        return dict(
            outer=int(np.prod(shape[:ax])),
            C=int(shape[ax]),
            inner=int(np.prod(shape[ax + 1 :])),
            before=before,
            after=after,
            bias=c_float(a["bias"]),
            coef=c_float(a["alpha"] / a["size"]),
            inv_pow=inv,
        )
