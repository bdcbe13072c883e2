"""AffineGrid: the sampling grid [N, (D,) H, W, dims] of an affine map theta [N, dims, dims + 1]
applied to the normalised output coordinates, for GridSample (a spatial transformer).

The base coordinates of each axis depend only on the (constant) size and align_corners, so they
are tables in the kernel; a grid point is then dims + 1 multiply-adds per coordinate, in double
as onnx's reference computes them (it rounds to float32 only at the end).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, OutputType, register


def base_coords(size: int, align: bool) -> np.ndarray:
    """Normalised centres (or, align_corners, corners) of `size` cells in [-1, 1], float64."""
    if align:
        return -1.0 + np.arange(size) * (2.0 / (size - 1)) if size > 1 else np.full(1, -1.0)
    step = 2.0 / size
    return -1.0 + step / 2 + np.arange(size) * step


def affine_grid(theta: np.ndarray, spatial: tuple[int, ...], align: bool) -> np.ndarray:
    """numpy AffineGrid: grid[..., i] = theta[i] . (x, y, (z,) 1), x along the innermost axis."""
    axes = [base_coords(s, align) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # per spatial axis, outermost first
    homo = np.stack([*reversed(mesh), np.ones(tuple(spatial))], axis=-1).reshape(-1, len(spatial) + 1)
    grid = np.einsum("nij,pj->npi", theta.astype(np.float64), homo)
    return grid.reshape(theta.shape[0], *spatial, len(spatial)).astype(np.float32)


@register
class AffineGrid(OpDef):
    """inputs: theta; attrs: spatial (the output's spatial sizes, from the constant `size`), align."""

    op = "AffineGrid"
    onnx_ops = ("AffineGrid",)
    template = "affine_grid.c.j2"
    dtypes = ("float32",)

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        size = [int(v) for v in np.asarray(ctx.require_const(1, "size")).reshape(-1)]
        th = ctx.shape(0)
        dims = len(size) - 2
        if dims not in (2, 3) or th != (size[0], dims, dims + 1):
            ctx.invalid(f"theta {th} and size {size} do not match ([N, 2, 3] with 4 sizes or [N, 3, 4] with 5)")
        if any(s <= 0 for s in size):
            ctx.unsupported(f"empty output size {size}")
        return ctx.make_node(
            "AffineGrid",
            inputs=ctx.inputs[:1],
            outputs=ctx.outputs[:1],
            spatial=tuple(size[2:]),
            align=bool(int(ctx.attr("align_corners", 0))),
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        n = graph.tensor(node.inputs[0]).shape[0]
        sp = tuple(node.attrs["spatial"])
        return [((n, *sp, len(sp)), "float32")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [affine_grid(inputs[0], tuple(node.attrs["spatial"]), node.attrs["align"])]

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.outputs[0]).size * (len(node.attrs["spatial"]) + 1)

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        sp = [int(s) for s in node.attrs["spatial"]]
        tables = [", ".join(repr(float(v)) for v in base_coords(s, node.attrs["align"])) for s in sp]
        return {"N": int(graph.tensor(node.inputs[0]).shape[0]), "sizes": sp, "dims": len(sp), "tables": tables}
