"""Col2Im: the inverse of im2col, summing columns [N, C * prod(block), L] back into images
[N, C, *image_shape] (1D-3D; image_shape and block_shape constant), with strides, pads and
dilations. Each (image, channel) sums its own columns, so no two iterations write the same output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, register
from tinyc.ops.conv import check_window, nd_dims

DTYPES = ("float32", "float64")


def _blocks(image: list[int], block: list[int], s: list[int], d: list[int], pads: list[int]) -> list[int]:
    """Sliding blocks per spatial dim (the columns' L is their product)."""
    n = len(image)
    return [(image[i] + pads[i] + pads[i + n] - d[i] * (block[i] - 1) - 1) // s[i] + 1 for i in range(n)]


@register
class Col2Im(OpDef):
    """attrs: `image`, `block` (spatial sizes), `strides`, `pads` [begin..., end...], `dilations`."""

    op = "Col2Im"
    onnx_ops = ("Col2Im",)
    template = "col2im.c.j2"
    dtypes = DTYPES

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        xs = ctx.shape(0)
        if len(xs) != 3:
            ctx.unsupported(f"input of rank {len(xs)} (needs [N, C * prod(block_shape), L])")
        image = [int(v) for v in np.asarray(ctx.require_const(1, "image_shape")).reshape(-1)]
        block = [int(v) for v in np.asarray(ctx.require_const(2, "block_shape")).reshape(-1)]
        n = len(image)
        if len(block) != n or not 1 <= n <= 3:
            ctx.unsupported(f"image_shape {image} and block_shape {block} (1 to 3 spatial dims, one each)")
        s = [int(v) for v in (ctx.attr("strides") or [1] * n)]
        d = [int(v) for v in (ctx.attr("dilations") or [1] * n)]
        pads = [int(v) for v in (ctx.attr("pads") or [0] * (2 * n))]
        check_window(ctx, image, block, s, d)
        if len(pads) != 2 * n or min(pads) < 0:
            ctx.invalid(f"pads {pads} must be {2 * n} values >= 0")
        bl = int(np.prod(block))
        if min(image) < 1 or int(xs[1]) % bl:
            ctx.invalid(f"input channels {xs[1]} must be a multiple of prod(block_shape {block}) = {bl}")
        nb = _blocks(image, block, s, d, pads)
        if min(nb) < 1 or int(np.prod(nb)) != int(xs[2]):
            ctx.invalid(f"the input has {xs[2]} columns, the geometry gives {nb} = {int(np.prod(nb))} blocks")
        return ctx.make_node(
            "Col2Im",
            inputs=ctx.inputs[:1],
            outputs=ctx.outputs[:1],
            image=image,
            block=block,
            strides=s,
            pads=pads,
            dilations=d,
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        c = int(t.shape[1]) // int(np.prod(node.attrs["block"]))
        return [((int(t.shape[0]), c, *node.attrs["image"]), t.dtype)]

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.inputs[0]).size

    def _geometry(self, node: Node) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int]]:
        a = node.attrs
        n = len(a["image"])
        nb = _blocks(a["image"], a["block"], a["strides"], a["dilations"], a["pads"])
        return a["image"], a["block"], a["strides"], a["dilations"], list(a["pads"][:n]), nb

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Scatter-add of each block tap's column plane into a padded image, then the crop."""
        x = inputs[0]
        image, block, s, d, pb, nb = self._geometry(node)
        n = len(image)
        N, CB, _ = x.shape
        bl = int(np.prod(block))
        cols = x.astype(np.float64).reshape(N, CB // bl, *block, *nb)
        hi = [max(pb[i] + image[i], (nb[i] - 1) * s[i] + (block[i] - 1) * d[i] + 1) for i in range(n)]
        buf = np.zeros((N, CB // bl, *hi))
        for kidx in np.ndindex(*block):
            sl = tuple(slice(kidx[i] * d[i], kidx[i] * d[i] + (nb[i] - 1) * s[i] + 1, s[i]) for i in range(n))
            buf[(slice(None), slice(None)) + tuple(sl)] += cols[(slice(None), slice(None)) + tuple(kidx)]
        crop = tuple(slice(pb[i], pb[i] + image[i]) for i in range(n))
        return [np.ascontiguousarray(buf[(slice(None), slice(None)) + tuple(crop)].astype(x.dtype))]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        image, block, s, d, pb, nb = self._geometry(node)
        bl = int(np.prod(block))
        return dict(
            NC=int(t.shape[0]) * (int(t.shape[1]) // bl),
            T=CTYPES[t.dtype],
            S=nd_dims(image, 1),
            K=nd_dims(block, 1),
            B=nd_dims(nb, 1),
            ST=nd_dims(s, 1),
            DL=nd_dims(d, 1),
            PB=nd_dims(pb, 0),
            BL=bl,
            L=int(np.prod(nb)),
        )
