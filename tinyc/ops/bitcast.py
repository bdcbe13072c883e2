"""BitCast: the input's bytes read as another element type of the same width (no conversion).

The kernel copies bytes (char access may alias any type in C), so it is the same for every pair
of types; the numpy model is a view with the new dtype. Float bit patterns (NaN payloads,
negative zero) pass unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

from tinyc.ir import DTYPE_BYTES, Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, register

DTYPES = tuple(CTYPES)


@register
class BitCast(OpDef):
    """attrs: `to` (tinyc element type of the output)."""

    op = "BitCast"
    onnx_ops = ("BitCast",)
    template = "bitcast.c.j2"
    inplace = True
    dtypes = DTYPES

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        try:
            to = str(np.dtype(helper.tensor_dtype_to_np_dtype(int(ctx.attr("to")))))
        except Exception:
            ctx.unsupported(f"bit cast to element type {ctx.attr('to')} is not supported")
        if to not in DTYPES:
            ctx.unsupported(f"bit cast to element type {to} is not supported (supported: {', '.join(DTYPES)})")
        if DTYPE_BYTES[to] != DTYPE_BYTES[ctx.dtype(0)]:
            ctx.invalid(f"{ctx.dtype(0)} and {to} differ in width")
        return ctx.make_node("BitCast", inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], to=to)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, node.attrs["to"])]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.ascontiguousarray(inputs[0])
        return [x.view(np.dtype(node.attrs["to"])).reshape(x.shape).copy()]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        return {"nbytes": graph.tensor(node.inputs[0]).nbytes}
