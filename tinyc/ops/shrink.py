"""Shrink: y = x + bias if x < -lambd; x - bias if x > lambd; else 0.

The worked example in docs/adding-an-op.md: everything about the op lives in this module and
templates/kernels/shrink.c.j2."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, register


@register
class Shrink(OpDef):
    op = "Shrink"  # the IR name
    onnx_ops = ("Shrink",)  # ONNX op types imported by this definition
    template = "shrink.c.j2"  # kernel template in templates/kernels/
    inplace = True  # elementwise: may overwrite its input's buffer
    layout_agnostic = True  # elementwise: the layout pass may move transposes across it

    def import_onnx(self, ctx):
        if ctx.dtype(0) != "float32":
            ctx.unsupported(f"element type {ctx.dtype(0)} (float32 only)")
        return ctx.make_node(
            "Shrink", inputs=ctx.inputs[:1], lambd=float(ctx.attr("lambd", 0.5)), bias=float(ctx.attr("bias", 0.0))
        )

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        lambd, bias = np.float32(node.attrs["lambd"]), np.float32(node.attrs["bias"])
        y = np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, np.float32(0)))
        return [y.astype(x.dtype)]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        return {"count": graph.tensor(node.inputs[0]).size}
