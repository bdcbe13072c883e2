"""MaxUnpool: scatter X to the flat positions Indices (MaxPool's second output) name in the
zero tensor of the shape MaxPool's input had ((in - 1) * stride - pads + kernel per spatial dim),
placed at the start of each dim of output_shape when one is given (constant), as onnx.reference
does. The scatter is one serial loop: with repeated indices the last write wins, in order."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, register, strides_of

DTYPES = ("float32", "float64", "int8", "uint8", "int32", "int64")


@register
class MaxUnpool(OpDef):
    """attrs: `inferred` (the unpooled shape the indices address), `shape` (the output's)."""

    op = "MaxUnpool"
    onnx_ops = ("MaxUnpool",)
    template = "max_unpool.c.j2"
    dtypes = DTYPES

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        xs = ctx.shape(0)
        n = len(xs) - 2
        if n < 1:
            ctx.unsupported(f"input of rank {len(xs)} (needs N, C and spatial axes)")
        if tuple(ctx.shape(1)) != tuple(xs):
            ctx.invalid(f"indices of shape {list(ctx.shape(1))} must have the input's shape {list(xs)}")
        if ctx.dtype(1) != "int64":
            ctx.invalid(f"indices of type {ctx.dtype(1)} (int64 only)")
        if ctx.attr("kernel_shape") is None:
            ctx.invalid("the kernel_shape attribute is required")
        k = [int(v) for v in ctx.attr("kernel_shape")]
        s = [int(v) for v in (ctx.attr("strides") or [1] * n)]
        pads = [int(v) for v in (ctx.attr("pads") or [0] * (2 * n))]
        if len(k) != n or len(s) != n or len(pads) != 2 * n or min(k + s) < 1 or min(pads) < 0:
            ctx.invalid(f"kernel_shape {k}, strides {s}, pads {pads} do not fit {n} spatial dims")
        inferred = [int(xs[0]), int(xs[1])] + [
            (int(xs[2 + i]) - 1) * s[i] - (pads[i] + pads[i + n]) + k[i] for i in range(n)
        ]
        if min(inferred) < 1:
            ctx.invalid(f"the unpooled shape {inferred} is empty")
        shape = inferred
        if ctx.has_input(2):
            shape = [int(v) for v in np.asarray(ctx.require_const(2, "output_shape")).reshape(-1)]
            if len(shape) != len(xs) or any(shape[i] < inferred[i] for i in range(len(xs))):
                ctx.unsupported(f"output_shape {shape} smaller than the unpooled shape {inferred}")
        return ctx.make_node(
            "MaxUnpool", inputs=ctx.inputs[:2], outputs=ctx.outputs[:1], inferred=inferred, shape=shape
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(tuple(node.attrs["shape"]), graph.tensor(node.inputs[0]).dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, idx = inputs[0].reshape(-1), inputs[1].reshape(-1)
        inferred = node.attrs["inferred"]
        flat = np.zeros(int(np.prod(inferred)), x.dtype)
        ok = (idx >= 0) & (idx < flat.size)  # out-of-range indices are dropped, as the C kernel does
        for j in np.flatnonzero(ok):  # in order: the last of repeated indices wins
            flat[idx[j]] = x[j]
        y = np.zeros(node.attrs["shape"], x.dtype)
        y[tuple(slice(0, v) for v in inferred)] = flat.reshape(inferred)
        return [y]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        inferred, shape = node.attrs["inferred"], node.attrs["shape"]
        return dict(
            T=CTYPES[graph.tensor(node.inputs[0]).dtype],
            count=graph.tensor(node.inputs[0]).size,
            total=int(np.prod(inferred)),
            out_total=int(np.prod(shape)),
            same=list(inferred) == list(shape),
            dims=list(zip(inferred, strides_of(inferred), strides_of(shape))),
        )
