"""Det: the determinant of each square matrix in x [..., n, n].

Gaussian elimination with partial pivoting on a copy of the matrix in scratch, accumulated in
double (the product of the pivots, its sign flipped per row swap); the numpy model computes
np.linalg.det in float64 (LU with partial pivoting too), so the two agree to rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, OutputType, register


@register
class Det(OpDef):
    op = "Det"
    onnx_ops = ("Det",)
    template = "det.c.j2"
    dtypes = ("float32", "float64")

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        s = ctx.shape(0)
        if len(s) < 2 or s[-1] != s[-2]:
            ctx.invalid(f"input of shape {s} is not a (batch of) square matrices")
        if s[-1] == 0:
            return ctx.set_constant(0, np.ones(s[:-2], ctx.dtype(0)))
        if any(d == 0 for d in s):
            return ctx.set_constant(0, np.zeros(s[:-2], ctx.dtype(0)))
        return ctx.make_node("Det", inputs=ctx.inputs[:1], outputs=ctx.outputs[:1])

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        return [(tuple(t.shape[:-2]), t.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.asarray(np.linalg.det(x.astype(np.float64))).astype(x.dtype)]

    def macs(self, node: Node, graph: Graph) -> int:
        s = graph.tensor(node.inputs[0]).shape
        return int(np.prod(s[:-2], dtype=np.int64)) * int(s[-1]) ** 3 // 3

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        n = int(graph.tensor(node.inputs[0]).shape[-1])
        return n * n * 8

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        s = graph.tensor(node.inputs[0]).shape
        return {"nb": int(np.prod(s[:-2], dtype=np.int64)), "n": int(s[-1])}
