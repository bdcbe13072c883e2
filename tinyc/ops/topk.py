"""TopK: the k largest (or smallest) values along one axis, sorted, with their int64 indices.

x is viewed as [outer][n][inner]; each (outer, inner) position keeps a sorted list of k
candidates in the outputs themselves and inserts every element that beats the last one
(insertion sort, O(n k): k is small in practice). Comparisons are strict, so of equal values
the lower index comes first, as ONNX's reference (a stable lexsort) orders them. Output values
are input values, so on int8 the same kernel runs on the input's grid (no requantization).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, Int8Lowering, OpDef, OutputType, normalize_axis, register
from tinyc.ops.slice_gather import _where
from tinyc.numerics.qparams import qparams_of

DTYPES = ("float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def topk_reference(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """Values and int64 indices of the top k along `axis`; ties: the lower index first."""
    pos = np.indices(x.shape)[axis]
    if largest:  # ascending by (value, -index), then reversed: descending value, ascending index
        order = np.flip(np.lexsort((-pos, x), axis=axis), axis=axis)
    else:
        order = np.lexsort((pos, x), axis=axis)
    order = np.take(order, np.arange(k), axis=axis)
    return np.ascontiguousarray(np.take_along_axis(x, order, axis=axis)), np.ascontiguousarray(order.astype(np.int64))


@register
class TopK(OpDef):
    """attrs: `axis`, `k`, `largest`. Output 0: values, output 1: int64 indices (always sorted:
    `sorted=0` leaves the order unspecified, and sorted is one valid order)."""

    op = "TopK"
    onnx_ops = ("TopK",)
    template = "topk.c.j2"
    dtypes = DTYPES
    int8_passthrough = True
    qdq_shares_qparams = ("TopK",)

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        shape = ctx.shape(0)
        if not shape:
            ctx.unsupported("a scalar input has no axis")
        axis = normalize_axis(int(ctx.attr("axis", -1)), len(shape), _where(ctx))
        if ctx.opset < 10:
            k = int(ctx.attr("k", 0))
        else:
            kv = np.asarray(ctx.require_const(1, "K")).reshape(-1)
            if kv.size != 1:
                ctx.invalid(f"K must hold one value, got {kv.size}")
            k = int(kv[0])
        if k < 0 or k > shape[axis]:
            ctx.invalid(f"K = {k} is outside [0, {shape[axis]}] (the size of axis {axis})")
        out_shape = tuple(shape[:axis]) + (k,) + tuple(shape[axis + 1 :])
        if any(d == 0 for d in out_shape):
            ctx.set_constant(0, np.zeros(out_shape, ctx.dtype(0)))
            return ctx.set_constant(1, np.zeros(out_shape, np.int64))
        return ctx.make_node(
            "TopK",
            inputs=ctx.inputs[:1],
            outputs=ctx.outputs[:2],
            axis=axis,
            k=k,
            largest=bool(int(ctx.attr("largest", 1))),
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        ax = node.attrs["axis"]
        shape = tuple(t.shape[:ax]) + (int(node.attrs["k"]),) + tuple(t.shape[ax + 1 :])
        return [(shape, t.dtype), (shape, "int64")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        return list(topk_reference(inputs[0], int(a["k"]), a["axis"], bool(a["largest"])))

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """The same kernel on the int8 values (their order is the real values' order); the
        indices output stays int64. A model wanting another grid on the values gets none: the
        values are input values, which calibration already put on the input's grid."""
        x_q = low.as_int8(node.inputs[0])
        values = node.outputs[0]
        y_q = low.int8_output(values, qparams_of(low.g, x_q))
        new = Node(node.name, node.op, [x_q], [y_q] + node.outputs[1:], dict(node.attrs), source=node.source)
        low.emit(new, values, y_q)
        return None

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.inputs[0]).size * int(node.attrs["k"])

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        ax = node.attrs["axis"]
        return {
            "outer": int(np.prod(t.shape[:ax], dtype=np.int64)),
            "n": int(t.shape[ax]),
            "inner": int(np.prod(t.shape[ax + 1 :], dtype=np.int64)),
            "k": int(node.attrs["k"]),
            "better": ">" if node.attrs["largest"] else "<",
            "T": CTYPES[t.dtype],
        }
