"""OneHot: indices [outer][inner] -> [outer][depth][inner], on_value where the (wrapped) index
equals the position along the new axis, off_value elsewhere.

depth is a compile-time constant (it fixes the output shape); indices and values
([off_value, on_value]) may be run-time tensors. A negative index in [-depth, -1] wraps; any other
out-of-range index matches nothing (a row of off_value), as in onnx's reference. Float indices are
compared as they are (a fractional index matches nothing).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, register

INDEX_DTYPES = ("float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
VALUE_DTYPES = tuple(CTYPES)


@register
class OneHot(OpDef):
    """inputs: indices, values. attrs: `depth`, `axis` (of the output)."""

    op = "OneHot"
    onnx_ops = ("OneHot",)
    template = "onehot.c.j2"
    dtypes = INDEX_DTYPES

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        if ctx.dtype(2) not in VALUE_DTYPES:
            ctx.unsupported(f"values of type {ctx.dtype(2)} (supported: {', '.join(VALUE_DTYPES)})")
        dv = np.asarray(ctx.require_const(1, "depth")).reshape(-1)
        if dv.size != 1:
            ctx.invalid(f"depth must hold one value, got {dv.size}")
        depth = int(dv[0])
        if depth <= 0:
            ctx.invalid(f"depth {depth} must be positive")
        if int(np.prod(ctx.shape(2), dtype=np.int64)) != 2:
            ctx.invalid(f"values must hold [off_value, on_value], got shape {ctx.shape(2)}")
        rank = len(ctx.shape(0))
        axis = int(ctx.attr("axis", -1))
        if not -rank - 1 <= axis <= rank:
            ctx.invalid(f"axis {axis} out of range for output rank {rank + 1}")
        axis = axis + rank + 1 if axis < 0 else axis
        return ctx.make_node(
            "OneHot", inputs=[ctx.inputs[0], ctx.inputs[2]], outputs=ctx.outputs[:1], depth=depth, axis=axis
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        s = graph.tensor(node.inputs[0]).shape
        ax = node.attrs["axis"]
        return [(tuple(s[:ax]) + (node.attrs["depth"],) + tuple(s[ax:]), graph.tensor(node.inputs[1]).dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        ind, vals = np.asarray(inputs[0]), np.asarray(inputs[1]).reshape(-1)
        depth, ax = node.attrs["depth"], node.attrs["axis"]
        if np.issubdtype(ind.dtype, np.signedinteger) or np.issubdtype(ind.dtype, np.floating):
            ind = np.where(ind < 0, ind + depth, ind)
        hit = np.expand_dims(ind, ax) == np.arange(depth).reshape((depth,) + (1,) * (ind.ndim - ax))
        return [np.ascontiguousarray(np.where(hit, vals[1], vals[0]).astype(vals.dtype))]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        ax = node.attrs["axis"]
        return {
            "outer": int(np.prod(t.shape[:ax], dtype=np.int64)),
            "inner": int(np.prod(t.shape[ax:], dtype=np.int64)),
            "depth": node.attrs["depth"],
            "IT": CTYPES[t.dtype],
            "signed": not t.dtype.startswith("uint"),
        }
