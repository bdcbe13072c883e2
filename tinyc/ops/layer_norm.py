"""LayerNormalization, RMSNormalization (normalise trailing axes) and LpNormalization (one axis).

Layer/RMS norm view x as [outer][n] rows (the normalised axes are always the trailing ones, so
each row is contiguous): a mean pass, a variance pass and an affine pass per row, statistics
in float (stash_type 1). Scale/bias are flattened to the normalised shape: constants are
broadcast at compile time, runtime ones must already have that shape. LpNormalization views x
as [outer][n][inner] and keeps the per-column norms in scratch so loops run along memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.ops.base import AxisPermutable, CTYPES, OpDef, OutputType, register

FLOATS = ("float32", "float64")


def _prod(dims: Any) -> int:
    return int(np.prod([int(d) for d in dims], dtype=np.int64))


def _param_input(ctx: Any, i: int, norm_shape: tuple[int, ...], what: str) -> str:
    """Scale/bias as an input of exactly the normalised shape (constants broadcast here)."""
    shape = tuple(int(d) for d in ctx.shape(i))
    if ctx.dtype(i) != ctx.dtype(0):
        ctx.unsupported(f"{what} of type {ctx.dtype(i)} differs from the input type {ctx.dtype(0)}")
    stripped = shape
    while len(stripped) > len(norm_shape) and stripped[0] == 1:
        stripped = stripped[1:]
    try:
        ok = tuple(int(d) for d in np.broadcast_shapes(stripped, norm_shape)) == norm_shape
    except ValueError:
        ok = False
    if not ok:
        ctx.unsupported(f"{what} of shape {shape} does not broadcast to the normalised shape {norm_shape}")
    value = ctx.const(i)
    if value is not None:
        flat = np.broadcast_to(np.asarray(value).reshape(stripped), norm_shape).reshape(-1)
        return ctx.add_constant(what.lower(), np.ascontiguousarray(flat).astype(ctx.dtype(0)))
    if _prod(shape) != _prod(norm_shape):
        ctx.unsupported(
            f"runtime {what} of shape {shape} broadcast to {norm_shape} is not supported "
            f"(make it a constant or give it the full normalised shape)"
        )
    return ctx.inputs[i]


class _RowNorm(OpDef):
    """LayerNormalization / RMSNormalization. attrs: `axis` (normalised), `epsilon`, `rms`."""

    template = "layer_norm.c.j2"
    dtypes = FLOATS
    rms = False

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        stash = int(ctx.attr("stash_type", 1))
        if stash != 1:
            ctx.unsupported(f"stash_type {stash} (only 1, float32 statistics)")
        shape = tuple(int(d) for d in ctx.shape(0))
        rank = len(shape)
        axis = int(ctx.attr("axis", -1))
        if rank == 0 or not -rank <= axis < rank:
            ctx.unsupported(f"axis {axis} out of range for rank {rank}")
        axis %= rank
        if any(d == 0 for d in shape):
            ctx.unsupported(f"zero-size input {shape}")
        norm_shape = shape[axis:]
        scale = _param_input(ctx, 1, norm_shape, "Scale")
        inputs = [ctx.inputs[0], scale]
        if not self.rms and ctx.has_input(2):
            inputs.append(_param_input(ctx, 2, norm_shape, "B"))
        outputs = list(ctx.outputs[:1] if self.rms else ctx.outputs[:3])
        return ctx.make_node(
            self.op, inputs=inputs, outputs=outputs, axis=axis, epsilon=float(ctx.attr("epsilon", 1e-5)), rms=self.rms
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        ax = node.attrs["axis"]
        stat = tuple(t.shape[:ax]) + (1,) * (len(t.shape) - ax)
        return [(t.shape, t.dtype), (stat, "float32"), (stat, "float32")][: len(node.outputs)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        ax = node.attrs["axis"]
        outer, n = _prod(x.shape[:ax]), _prod(x.shape[ax:])
        xm = x.reshape(outer, n).astype(np.float64)
        eps = float(np.float32(node.attrs["epsilon"]))
        scale = inputs[1].reshape(1, n).astype(np.float64)
        with np.errstate(all="ignore"):
            if node.attrs["rms"]:
                mean = np.zeros((outer, 1))
                inv = 1.0 / np.sqrt(np.mean(xm * xm, axis=1, keepdims=True) + eps)
                y = xm * inv * scale
            else:
                mean = xm.mean(axis=1, keepdims=True)
                inv = 1.0 / np.sqrt(((xm - mean) ** 2).mean(axis=1, keepdims=True) + eps)
                y = (xm - mean) * inv * scale
                if len(inputs) > 2 and inputs[2] is not None:
                    y = y + inputs[2].reshape(1, n).astype(np.float64)
        stat = tuple(x.shape[:ax]) + (1,) * (x.ndim - ax)
        outs = [
            y.reshape(x.shape).astype(x.dtype),
            mean.reshape(stat).astype(np.float32),
            inv.reshape(stat).astype(np.float32),
        ]
        return outs[: len(node.outputs)]

    def macs(self, node: Node, graph: Graph) -> int:
        return 4 * graph.tensor(node.inputs[0]).size

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Only permutations of the leading (not normalised) axes keep each row contiguous."""
        ax = node.attrs["axis"]
        return len(perm) == len(graph.tensor(node.outputs[0]).shape) and all(perm[a] == a for a in range(ax, len(perm)))

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return self.can_permute(node, graph, perm)

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        if t.dtype not in self.dtypes:
            raise UnsupportedError(f"node '{node.source or node.name}' ({node.op}): element type {t.dtype}")
        ax = node.attrs["axis"]
        outs = [o for o in node.outputs]
        return {
            "outer": _prod(t.shape[:ax]),
            "n": _prod(t.shape[ax:]),
            "T": CTYPES[t.dtype],
            "eps": node.attrs["epsilon"],
            "rms": node.attrs["rms"],
            "has_bias": len(node.inputs) > 2 and bool(node.inputs[2]),
            "has_mean": len(outs) > 1 and bool(outs[1]),
            "has_inv": len(outs) > 2 and bool(outs[2]),
        }


@register
class LayerNormalization(_RowNorm):
    op = "LayerNormalization"
    onnx_ops = ("LayerNormalization",)


@register
class RMSNormalization(_RowNorm):
    op = "RMSNormalization"
    onnx_ops = ("RMSNormalization",)
    rms = True


@register
class LpNormalization(AxisPermutable, OpDef):
    """attrs: `axis`, `p` (1 or 2). y = x / ||x||_p along axis; a zero norm gives 0."""

    op = "LpNormalization"
    onnx_ops = ("LpNormalization",)
    template = "lp_norm.c.j2"
    dtypes = FLOATS

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        rank = len(ctx.shape(0))
        axis = int(ctx.attr("axis", -1))
        if rank == 0 or not -rank <= axis < rank:
            ctx.unsupported(f"axis {axis} out of range for rank {rank}")
        p = int(ctx.attr("p", 2))
        if p not in (1, 2):
            ctx.unsupported(f"p = {p} (only 1 and 2)")
        if any(d == 0 for d in ctx.shape(0)):
            return ctx.set_constant(0, np.zeros(ctx.shape(0), ctx.dtype(0)))
        return ctx.make_node(self.op, inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], axis=axis % rank, p=p)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        xd = x.astype(np.float64)
        ax = node.attrs["axis"]
        if node.attrs["p"] == 1:
            norm = np.abs(xd).sum(axis=ax, keepdims=True)
        else:
            norm = np.sqrt((xd * xd).sum(axis=ax, keepdims=True))
        with np.errstate(all="ignore"):
            y = np.where(norm == 0, 0.0, xd / norm)
        return [y.astype(x.dtype)]

    def macs(self, node: Node, graph: Graph) -> int:
        return 2 * graph.tensor(node.inputs[0]).size

    def _split(self, node: Node, graph: Graph) -> tuple[int, int, int]:
        shape = graph.tensor(node.inputs[0]).shape
        ax = node.attrs["axis"]
        return _prod(shape[:ax]), int(shape[ax]), _prod(shape[ax + 1 :])

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        inner = self._split(node, graph)[2]
        return 0 if inner == 1 else inner * (8 if graph.tensor(node.inputs[0]).dtype == "float64" else 4)

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        if t.dtype not in self.dtypes:
            raise UnsupportedError(f"node '{node.source or node.name}' ({node.op}): element type {t.dtype}")
        outer, n, inner = self._split(node, graph)
        ct = CTYPES[t.dtype]
        return {
            "outer": outer,
            "n": n,
            "inner": inner,
            "T": ct,
            "p": node.attrs["p"],
            "sfx": "f" if ct == "float" else "",
        }
