"""GlobalLpPool: (sum |x|^p)^(1/p) over all spatial axes, keeping them as size 1. For p = 1 and
p = 2 that is exactly ReduceL1 / ReduceL2 over axes 2.., so it imports as those (no kernel)."""

from __future__ import annotations

from tinyc.ops.base import OpDef, register


@register
class GlobalLpPool(OpDef):
    op = "_GlobalLpPool"
    onnx_ops = ("GlobalLpPool",)

    def import_onnx(self, ctx):
        if ctx.dtype(0) not in ("float32", "float64"):
            ctx.unsupported(f"element type {ctx.dtype(0)} (supported: float32, float64)")
        rank = len(ctx.shape(0))
        if rank < 3:
            ctx.unsupported(f"input of rank {rank} (needs N, C and spatial axes)")
        p = int(ctx.attr("p", 2))
        if p not in (1, 2):
            ctx.unsupported(f"p = {p} (only 1 and 2)")
        if any(d == 0 for d in ctx.shape(0)):
            ctx.unsupported(f"zero-size input {ctx.shape(0)}")
        return ctx.make_node(
            "ReduceL1" if p == 1 else "ReduceL2",
            inputs=ctx.inputs[:1],
            outputs=ctx.outputs[:1],
            axes=list(range(2, rank)),
            keepdims=True,
        )
