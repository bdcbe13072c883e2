"""Softmax, LogSoftmax and Hardmax over a contiguous range of axes.

Opset >= 13 normalises over one axis; older opsets coerce the input to 2D at `axis` and
normalise over all trailing axes. Both are "a contiguous run of axes", viewed as
[outer][n][inner]. Softmax/LogSoftmax subtract the maximum first (numerically stable); with
inner > 1 the per-column max and sum live in scratch so every loop runs along contiguous memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.ops.base import Int8Lowering, OpDef, OutputType, register
from tinyc.ops.reduce import running_arg

KINDS = {"Softmax": "softmax", "LogSoftmax": "logsoftmax", "Hardmax": "hardmax"}
FLOAT_FNS = {"float": {"exp": "expf", "log": "logf"}, "double": {"exp": "exp", "log": "log"}}


def _split(shape: tuple[int, ...], axes: list[int]) -> tuple[int, int, int]:
    """(outer, n, inner) for a contiguous run of axes (empty: n = 1 at the end)."""
    a0 = min(axes) if axes else len(shape)
    a1 = max(axes) + 1 if axes else len(shape)
    p = lambda dims: int(np.prod(dims, dtype=np.int64))  # noqa: E731
    return p(shape[:a0]), p(shape[a0:a1]), p(shape[a1:])


@register
class Softmax(OpDef):
    """attrs: `kind` (softmax / logsoftmax / hardmax), `axes` (sorted, contiguous)."""

    op = "Softmax"
    onnx_ops = ("Softmax", "LogSoftmax", "Hardmax")
    int8_kernel = True
    template = "softmax.c.j2"
    dtypes = ("float32", "float64")

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        rank = len(ctx.shape(0))
        if rank == 0:
            ctx.unsupported("a scalar input has no axis to normalise over")
        if ctx.opset < 13:
            axis = int(ctx.attr("axis", 1))
            if not -rank <= axis <= rank:
                ctx.unsupported(f"axis {axis} out of range for rank {rank}")
            axis = axis + rank if axis < 0 else axis
            axes = list(range(axis, rank))
        else:
            axis = int(ctx.attr("axis", -1))
            if not -rank <= axis < rank:
                ctx.unsupported(f"axis {axis} out of range for rank {rank}")
            axes = [axis % rank]
        if any(d == 0 for d in ctx.shape(0)):  # nothing to compute
            return ctx.set_constant(0, np.zeros(ctx.shape(0), ctx.dtype(0)))
        return ctx.make_node(
            "Softmax", inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], kind=KINDS[ctx.op_type], axes=axes
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        return [(t.shape, t.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        outer, n, inner = _split(x.shape, node.attrs["axes"])
        x3 = x.reshape(outer, n, inner).astype(np.float64)
        kind = node.attrs["kind"]
        if kind == "hardmax":
            # the first maximum by a running comparison (as ArgMax); a NaN there (only a
            # leading NaN stays the best) gives a row of zeros, as onnxruntime does
            y = np.zeros_like(x3)
            idx = running_arg(x3, 1, "max")[:, None, :]
            np.put_along_axis(y, idx, np.where(np.isnan(np.take_along_axis(x3, idx, axis=1)), 0.0, 1.0), axis=1)
        else:
            m = x3.max(axis=1, keepdims=True)
            with np.errstate(all="ignore"):
                e = np.exp(x3 - m)
                s = e.sum(axis=1, keepdims=True)
                y = e / s if kind == "softmax" else (x3 - m) - np.log(s)
        return [np.ascontiguousarray(y.reshape(x.shape).astype(x.dtype))]

    def macs(self, node: Node, graph: Graph) -> int:
        return 3 * graph.tensor(node.inputs[0]).size

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Normalising over a set of axes does not depend on their order, so any permutation
        that keeps the set contiguous is fine (always true for a single axis)."""
        new = sorted(perm[a] for a in node.attrs["axes"])
        return len(perm) == len(graph.tensor(node.outputs[0]).shape) and (not new or new[-1] - new[0] + 1 == len(new))

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        if not self.can_permute(node, graph, perm):
            return False
        if node.attrs["axes"]:
            node.attrs["axes"] = sorted(perm[a] for a in node.attrs["axes"])
        return True

    def fixed_int8_grid(self, node: Node) -> tuple[float, int] | None:
        """Probabilities in [0, 1) on 256 steps, as TFLite fixes them."""
        return (1.0 / 256.0, -128) if node.attrs.get("kind") == "softmax" else None

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        from tinyc.ops.qsoftmax import build_qsoftmax

        if node.attrs.get("kind") != "softmax" or len(node.attrs.get("axes", [])) != 1:
            return "only single-axis Softmax has an int8 kernel"
        why = low.needs_output(node)
        if why:
            return why
        x_q = low.as_int8(node.inputs[0])
        out = node.outputs[0]
        y_q = low.int8_output(out)
        low.emit(build_qsoftmax(low.g, node.name, x_q, y_q, node.attrs["axes"][0], source=node.source), out, y_q)
        return None

    def _inner(self, node: Node, graph: Graph) -> int:
        return _split(graph.tensor(node.inputs[0]).shape, node.attrs["axes"])[2]

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        inner = self._inner(node, graph)
        if inner == 1 or node.attrs["kind"] == "hardmax":
            return 0
        return 2 * inner * (8 if graph.tensor(node.inputs[0]).dtype == "float64" else 4)

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        if t.dtype not in self.dtypes:
            raise UnsupportedError(f"node '{node.source or node.name}' (Softmax): element type {t.dtype}")
        outer, n, inner = _split(t.shape, node.attrs["axes"])
        ct = "double" if t.dtype == "float64" else "float"
        return {
            "outer": outer,
            "n": n,
            "inner": inner,
            "kind": node.attrs["kind"],
            "T": ct,
            "fexp": FLOAT_FNS[ct]["exp"],
            "flog": FLOAT_FNS[ct]["log"],
        }
