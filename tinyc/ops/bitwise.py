"""BitwiseAnd / BitwiseOr / BitwiseXor (broadcasting) and BitwiseNot, on integer tensors.

The binary ones are the broadcasting binary kernel of tinyc.ops.elementwise with an integer-only
expression; BitwiseNot is the any-type elementwise kernel. C's integer promotion widens narrow
operands to int, so every result is cast back to the element type (the bits are the same).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, register_instance
from tinyc.ops.elementwise import INT_TYPES, BinaryOp, BinarySpec


class BitwiseBinary(BinaryOp):
    """y = a OP b on integers of one type (no float form, no int8 kernel)."""

    def __init__(self, spec: BinarySpec) -> None:
        super().__init__(spec)
        self.dtypes = INT_TYPES


for _spec in (
    BinarySpec("BitwiseAnd", np.bitwise_and, "", "(a & b)"),
    BinarySpec("BitwiseOr", np.bitwise_or, "", "(a | b)"),
    BinarySpec("BitwiseXor", np.bitwise_xor, "", "(a ^ b)"),
):
    register_instance(BitwiseBinary(_spec))


class BitwiseNot(OpDef):
    """y = ~x on an integer tensor."""

    op = "BitwiseNot"
    onnx_ops = ("BitwiseNot",)
    template = "unary_any.c.j2"
    inplace = True
    layout_agnostic = True
    dtypes = INT_TYPES

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        return ctx.make_node("BitwiseNot", inputs=ctx.inputs[:1])

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.invert(inputs[0])]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        return {"count": t.size, "expr": f"({CTYPES[t.dtype]})~v"}


register_instance(BitwiseNot())
