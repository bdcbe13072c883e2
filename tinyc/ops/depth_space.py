"""DepthToSpace and SpaceToDepth: pure permutations of a 6-D view of an NCHW tensor.

Each output element comes from one input element, so both render as the shared strided-copy
kernel (slice.c.j2): the output is walked in memory order as a 6-D view and the input strides
for that view are derived from the mode (DCR or CRD). Data movement only: every dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, register
from tinyc.ops.slice_gather import strided_copy_context

ALL_DTYPES: tuple[str, ...] = tuple(CTYPES)


def _import(ctx: Any, op: str) -> Any:
    if ctx.dtype(0) not in ALL_DTYPES:
        ctx.unsupported(f"element type {ctx.dtype(0)} is not supported")
    shape = tuple(int(d) for d in ctx.shape(0))
    if len(shape) != 4:
        ctx.unsupported(f"input of rank {len(shape)} (only 4-D NCHW)")
    bs = int(ctx.attr("blocksize", 0))
    if bs < 1:
        ctx.unsupported(f"blocksize {bs} (must be >= 1)")
    mode = str(ctx.attr("mode", "DCR")).upper()
    if mode not in ("DCR", "CRD"):
        ctx.unsupported(f"mode '{mode}' (DCR or CRD)")
    n, c, h, w = shape
    if op == "DepthToSpace" and c % (bs * bs):
        ctx.unsupported(f"channels {c} not divisible by blocksize^2 = {bs * bs}")
    if op == "SpaceToDepth" and (h % bs or w % bs):
        ctx.unsupported(f"spatial size {h}x{w} not divisible by blocksize {bs}")
    if any(d == 0 for d in shape):
        ctx.unsupported(f"zero-size input {shape}")
    return ctx.make_node(op, inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], blocksize=bs, mode=mode)


class _Block(OpDef):
    """attrs: `blocksize`, `mode` (DCR | CRD)."""

    dtypes = ALL_DTYPES
    template = "slice.c.j2"

    def import_onnx(self, ctx):
        return _import(ctx, self.op)

    def view(self, shape: tuple[int, ...], bs: int, mode: str) -> tuple[list[int], list[int]]:
        """(6-D output view dims, input element strides for it)."""
        raise NotImplementedError

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        n, c, h, w = t.shape
        bs = node.attrs["blocksize"]
        if self.op == "DepthToSpace":
            return [((n, c // (bs * bs), h * bs, w * bs), t.dtype)]
        return [((n, c * bs * bs, h // bs, w // bs), t.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        dims, strides = self.view(x.shape, node.attrs["blocksize"], node.attrs["mode"])
        flat = x.reshape(-1)
        idx = np.zeros(dims, dtype=np.int64)
        for k, (d, s) in enumerate(zip(dims, strides)):
            shape = [1] * len(dims)
            shape[k] = d
            idx = idx + (np.arange(d, dtype=np.int64) * s).reshape(shape)
        y = flat[idx.reshape(-1)]
        n, c, h, w = x.shape
        bs = node.attrs["blocksize"]
        out_shape = (
            (n, c // (bs * bs), h * bs, w * bs) if self.op == "DepthToSpace" else (n, c * bs * bs, h // bs, w // bs)
        )
        return [np.ascontiguousarray(y.reshape(out_shape))]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        dims, strides = self.view(graph.tensor(node.inputs[0]).shape, node.attrs["blocksize"], node.attrs["mode"])
        return strided_copy_context(dims, strides, 0)


@register
class DepthToSpace(_Block):
    op = "DepthToSpace"
    onnx_ops = ("DepthToSpace",)
    int8_passthrough = True

    def view(self, shape: tuple[int, ...], bs: int, mode: str) -> tuple[list[int], list[int]]:
        # y[b, c, h*bs + i, w*bs + j] = x[b, ch(c, i, j), h, w] viewed as [b, c, h, i, w, j]
        n, c, h, w = (int(d) for d in shape)
        co = c // (bs * bs)
        hw = h * w
        if mode == "DCR":  # ch = (i * bs + j) * co + c
            s_c, s_i, s_j = hw, bs * co * hw, co * hw
        else:  # CRD: ch = c * bs * bs + i * bs + j
            s_c, s_i, s_j = bs * bs * hw, bs * hw, hw
        return [n, co, h, bs, w, bs], [c * hw, s_c, w, s_i, 1, s_j]


@register
class SpaceToDepth(_Block):
    op = "SpaceToDepth"
    onnx_ops = ("SpaceToDepth",)
    int8_passthrough = True

    def view(self, shape: tuple[int, ...], bs: int, mode: str) -> tuple[list[int], list[int]]:
        # y[b, ch(c, i, j), h, w] = x[b, c, h*bs + i, w*bs + j]
        n, c, h, w = (int(d) for d in shape)
        ho, wo = h // bs, w // bs
        hw = h * w
        if mode == "DCR":  # ch = (i * bs + j) * c + c_  -> view [b, i, j, c, ho, wo]
            return [n, bs, bs, c, ho, wo], [c * hw, w, 1, hw, bs * w, bs]
        # CRD: ch = c_ * bs * bs + i * bs + j -> view [b, c, i, j, ho, wo]
        return [n, c, bs, bs, ho, wo], [c * hw, hw, w, 1, bs * w, bs]
