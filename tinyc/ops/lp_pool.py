"""LpPool: (sum |x|^p)^(1/p) over each window's taps inside the input, 1D-3D, with pads,
auto_pad, strides, dilations and ceil_mode. Padded taps add nothing (they are zeros), as
onnx.reference and onnxruntime compute it. It runs as the N-D pooling kernel (pool.PoolND, kind
"lp")."""

from __future__ import annotations

from tinyc.ops.base import OpDef, register
from tinyc.ops.pool import import_pool_nd


@register
class LpPool(OpDef):
    op = "_LpPool"
    onnx_ops = ("LpPool",)

    def import_onnx(self, ctx):
        p = ctx.attr("p", 2)
        if isinstance(p, float) and not p.is_integer():
            ctx.unsupported(f"p = {p} (an integer only)")
        if int(p) < 1:
            ctx.invalid(f"p = {p} must be >= 1")
        return import_pool_nd(ctx, "lp", int(p))
