"""QConcat: concatenation of int8 tensors that may each sit on their own grid.

Each input is moved to the output's grid as QRequantize would (``arith.rescale``): a plain copy
when its scale and zero point equal the output's, an exact zero-point shift when only the scales
(float32) are equal, else ``clamp(out_zp + mbqm((x - in_zp) << k, M = s_in / s_out / 2^k))``. The copy loops
are Concat's ([outer][row], input k fills a fixed column range). Also imports onnxruntime's
com.microsoft QLinearConcat (uint8 through exact QRequantize shifts).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node, QuantParams
from tinyc.ops.base import register
from tinyc.ops.concat_split import Concat
from tinyc.ops.qelementwise import QRANGE, _MsIO, _where, qtensor, rescale_attrs
from tinyc.numerics import fixed_point as arith


def build_qconcat(graph: Graph, name: str, inputs: list[str], out: str, axis: int, source: str = "") -> Node:
    """int8 inputs (each with its own quantization) -> int8 out, concatenated along `axis`."""
    where = _where(name, source, "QConcat")
    if not inputs:
        raise UnsupportedError(f"{where}: no inputs")
    so, zo = qtensor(graph, out, where)
    shapes = [graph.tensor(i).shape for i in inputs]
    rank = len(shapes[0])
    if rank == 0 or not -rank <= axis < rank:
        raise UnsupportedError(f"{where}: axis {axis} out of range for rank {rank}")
    axis %= rank
    if any(len(s) != rank or any(a != b for k, (a, b) in enumerate(zip(s, shapes[0])) if k != axis) for s in shapes):
        raise UnsupportedError(f"{where}: input shapes {[list(s) for s in shapes]} do not agree off axis {axis}")
    oshape = list(shapes[0])
    oshape[axis] = sum(s[axis] for s in shapes)
    if tuple(graph.tensor(out).shape) != tuple(oshape):
        raise UnsupportedError(
            f"{where}: output '{out}' has shape {list(graph.tensor(out).shape)}, the inputs give {oshape}"
        )
    modes, in_zp, mult, shift, lshift = [], [], [], [], []
    for i in inputs:
        if graph.tensor(i).dtype != "int8":
            raise UnsupportedError(f"{where}: tensor '{i}' is {graph.tensor(i).dtype} (need int8)")
        si, zi = (0.0, 0) if graph.tensor(i).size == 0 else qtensor(graph, i, where)
        try:
            m = arith.rescale_params(si, so) if graph.tensor(i).size else None
        except ValueError as exc:
            raise UnsupportedError(f"{where}: multiplier s_in / s_out of '{i}': {exc}") from None
        exact_same = m is None and zi == zo
        modes.append("copy" if exact_same or graph.tensor(i).size == 0 else "shift" if m is None else "rescale")
        in_zp.append(int(zi))
        mult.append(0 if m is None else m[0])
        shift.append(0 if m is None else m[1])
        lshift.append(0 if m is None else m[2])
    return Node(
        name,
        "QConcat",
        list(inputs),
        [out],
        dict(axis=axis, modes=modes, in_zp=in_zp, multiplier=mult, shift=shift, left_shift=lshift, out_zp=zo),
        source=source,
    )


@register
class QConcat(Concat):
    """attrs: axis; per input: modes ("copy" | "shift" | "rescale"), in_zp, multiplier, shift, left_shift;
    out_zp.
    Shapes, `permute` (constants are transposed, data inputs must share the transpose) and the
    copy plan are Concat's."""

    op = "QConcat"
    int8_kernel = False  # already integer
    quantizes_constant_operands = False
    onnx_ops = ()
    ms_ops = ("QLinearConcat",)
    template = "q_concat.c.j2"
    dtypes = ("int8",)

    def import_onnx(self, ctx):
        """(Y_scale, Y_zp, then (X, X_scale, X_zp) per input) -> Y; attr axis."""
        n = len(ctx.inputs) - 2
        if n < 3 or n % 3:
            ctx.unsupported(
                f"{len(ctx.inputs)} inputs: need Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) triples"
            )
        if not ctx.has_attr("axis"):
            ctx.unsupported("attribute 'axis' is required")
        ms = _MsIO(ctx)
        xs = [ms.input(2 + 3 * k, 3 + 3 * k, 4 + 3 * k, f"input {k}") for k in range(n // 3)]
        first = ctx.dtype(2)
        s, zp, dt = ms.out_params(0, 1, first)
        shapes = [ctx.shape(2 + 3 * k) for k in range(n // 3)]
        rank = len(shapes[0])
        axis = int(ctx.attr("axis"))
        if rank == 0 or not -rank <= axis < rank:
            ctx.unsupported(f"axis {axis} out of range for rank {rank}")
        axis %= rank
        if any(
            len(sh) != rank or any(a != b for k, (a, b) in enumerate(zip(sh, shapes[0])) if k != axis) for sh in shapes
        ):
            ctx.unsupported(f"input shapes {[list(sh) for sh in shapes]} do not agree off axis {axis}")
        oshape = list(shapes[0])
        oshape[axis] = sum(sh[axis] for sh in shapes)
        y = ms.output(tuple(oshape), s, zp, dt)
        return ms.finish(build_qconcat(ctx.graph, ctx.name, xs, y, axis, source=ctx.name))

    def folded_quant(self, node: Node, graph: Graph) -> QuantParams | None:
        return graph.tensor(node.outputs[0]).quant

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        parts = []
        for k, x in enumerate(inputs):
            if a["modes"][k] == "copy":
                parts.append(x.astype(np.int8))
                continue
            pa = dict(
                in_zp=a["in_zp"][k],
                out_zp=a["out_zp"],
                exact=a["modes"][k] == "shift",
                multiplier=a["multiplier"][k],
                shift=a["shift"][k],
                left_shift=a["left_shift"][k],
                qmin=QRANGE["int8"][0],
                qmax=QRANGE["int8"][1],
            )
            parts.append(rescale_attrs(pa, x).astype(np.int8))
        return [np.ascontiguousarray(np.concatenate(parts, axis=a["axis"]))]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        ctx = super().kernel_context(node, graph, schedule, target)
        a = node.attrs
        for p in ctx["parts"]:
            k = p["index"]
            p.update(
                mode=a["modes"][k],
                in_zp=a["in_zp"][k],
                multiplier=a["multiplier"][k],
                shift=a["shift"][k],
                left_shift=a["left_shift"][k],
            )
        return dict(ctx, out_zp=a["out_zp"])
