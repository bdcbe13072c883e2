"""IsNaN and IsInf: classify float elements into a bool tensor (unary_any.c.j2 kernel)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, OutputType, register

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext

FLOATS = ("float32", "float64")


class _Classify(OpDef):
    template = "unary_any.c.j2"
    layout_agnostic = True
    dtypes = FLOATS

    def import_onnx(self, ctx: ImportContext) -> Node | list[Node]:
        self.require_dtype(ctx)
        attrs: dict[str, Any] = {}
        if self.op == "IsInf":
            attrs = {"pos": bool(int(ctx.attr("detect_positive", 1))), "neg": bool(int(ctx.attr("detect_negative", 1)))}
        return ctx.make_node(self.op, inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], **attrs)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, "bool")]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        return {"count": graph.tensor(node.inputs[0]).size, "expr": self.classify_expr(node)}

    def classify_expr(self, node: Node) -> str:
        raise NotImplementedError


@register
class IsNaN(_Classify):
    op = "IsNaN"
    onnx_ops = ("IsNaN",)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.isnan(inputs[0])]

    def classify_expr(self, node: Node) -> str:
        return "(uint8_t)(v != v)"


@register
class IsInf(_Classify):
    """attrs: `pos`, `neg` (detect_positive / detect_negative)."""

    op = "IsInf"
    onnx_ops = ("IsInf",)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        return [(np.isposinf(x) & node.attrs["pos"]) | (np.isneginf(x) & node.attrs["neg"])]

    def classify_expr(self, node: Node) -> str:
        pos, neg = node.attrs["pos"], node.attrs["neg"]
        if pos and neg:
            return "(uint8_t)(v == INFINITY || v == -INFINITY)"
        if pos:
            return "(uint8_t)(v == INFINITY)"
        if neg:
            return "(uint8_t)(v == -INFINITY)"
        return "(uint8_t)0 * (uint8_t)(v != v)"
