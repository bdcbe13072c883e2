"""ReverseSequence: for each batch entry b, the first lens[b] steps along the time axis reversed,
the rest copied.

The data is viewed as [A][B][inner] with (A, B) = (time, batch) or (batch, time) (the two axes
must be 0 and 1, as ONNX requires). sequence_lens may be a constant or a run-time tensor; the
kernel clamps each length to [0, T] so a bad length cannot read out of bounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, register

ALL_DTYPES: tuple[str, ...] = tuple(CTYPES)


@register
class ReverseSequence(OpDef):
    """inputs: x, sequence_lens. attrs: `batch_axis`, `time_axis` (0/1, distinct)."""

    op = "ReverseSequence"
    onnx_ops = ("ReverseSequence",)
    template = "reverse_sequence.c.j2"
    dtypes = ALL_DTYPES
    int8_passthrough = True
    qdq_shares_qparams = ("ReverseSequence",)

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        shape = ctx.shape(0)
        ba, ta = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
        if len(shape) < 2 or {ba, ta} != {0, 1}:
            ctx.invalid(f"batch_axis {ba} and time_axis {ta} must be 0 and 1 of a rank >= 2 input")
        if tuple(ctx.shape(1)) != (shape[ba],):
            ctx.invalid(f"sequence_lens shape {ctx.shape(1)} should be ({shape[ba]},)")
        if ctx.dtype(1) not in ("int32", "int64"):
            ctx.unsupported(f"sequence_lens of type {ctx.dtype(1)} (int32/int64 only)")
        lens = ctx.const(1)
        if lens is not None and ((lens < 0).any() or (lens > shape[ta]).any()):
            ctx.invalid(f"sequence_lens {lens.tolist()} outside [0, {shape[ta]}]")
        if any(d == 0 for d in shape):
            return ctx.set_constant(0, np.zeros(shape, ctx.dtype(0)))
        return ctx.make_node("ReverseSequence", inputs=ctx.inputs[:2], outputs=ctx.outputs[:1], batch_axis=ba)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0] if node.attrs["batch_axis"] == 0 else np.swapaxes(inputs[0], 0, 1)
        lens = np.clip(np.asarray(inputs[1]).astype(np.int64), 0, x.shape[1])
        y = np.array(x, copy=True)
        for b, n in enumerate(lens):
            y[b, :n] = x[b, :n][::-1]
        return [np.ascontiguousarray(y if node.attrs["batch_axis"] == 0 else np.swapaxes(y, 0, 1))]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        x = graph.tensor(node.inputs[0])
        ba = node.attrs["batch_axis"]
        return {
            "nb": int(x.shape[ba]),
            "nt": int(x.shape[1 - ba]),
            "inner": int(np.prod(x.shape[2:], dtype=np.int64)),
            "batch_major": ba == 0,
        }
