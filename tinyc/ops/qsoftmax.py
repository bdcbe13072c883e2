"""int8 Softmax (IR op ``QSoftmax``): all integer at run time, exact against its numpy golden model.

x is viewed as [outer][n][inner] around a contiguous run of axes (one axis for the lowering and for
opset >= 13; opset < 13 QLinearSoftmax normalises over all axes from `axis` on). Per row
(docs/quantization.md)::

    d     = max(x) - x                                   in [0, 255]
    e     = E[d],  E[d] = floor(exp(-x_scale * d) * 2^B + 1/2)   compile-time table, E[0] = 2^B
    sum   = sum of e along the row                      >= 2^B; int32 when n * 2^B < 2^31, else int64
    inv   = floor((K + floor(sum / 2)) / sum)            one int64 division per row,
            K = floor(2^S / y_scale + 1/2)               a compile-time constant < 2^62
    q     = floor((e * inv + 2^(S-1)) / 2^S)             int64 multiply + shift, e * inv < 2^62 + 2^B
    y     = clamp(y_zp + min(q, 255), -128, 127)

so y = y_zp + round(E[d] / (sum * y_scale)): the exponential of the real input difference over the
real sum, quantized with the output scale. x_zp drops out (softmax ignores shifts).
B = min(24, floor(log2((2^31 - 1) / n))) (21..24) for n <= 512 (int32 sums), B = min(30, max(24,
ceil(log2 n) + 13)) beyond (int64 sums); S = B + 16 (lower only for output scales below 2^(B - 46);
refused below 2^(B - 56)). Error budget against the exact E[d] / (sum * y_scale): the table rounding
adds at most 255 * n / 2^(B+1) output LSB (<= 1/32 for n <= 2^17), K and inv at most 2^(B-1-S):
the final rounding (half up) dominates. onnxruntime's QDQ softmax rounds p / y_scale half to even in
float32, so the two may differ by 1 LSB (measured: under 0.1% of outputs).
Targets without a 64-bit divider (Cortex-M) pay one __aeabi_ldivmod call per row.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, OutputType, normalize_axis, register
from tinyc.ops.softmax import _split
from tinyc.numerics import fixed_point as arith
from tinyc.numerics.qparams import qparams_of

INT32_MAX = (1 << 31) - 1
#: rows up to this length sum in int32 (B >= 21 keeps the table's rounding error tiny)
INT32_ROW_MAX = 512
TILE = 32


def softmax_params(s_in: float, s_out: float, n: int) -> dict[str, Any]:
    """The compile-time integers of one QSoftmax: table E (int32 [256]), B, S, K, wide (int64 sum).
    Raises ValueError when the output scale is too small for the fixed-point scheme."""
    if n <= INT32_ROW_MAX:
        B = min(24, int(math.floor(math.log2(INT32_MAX // n))))
        wide = False
    else:
        B = min(30, max(24, math.ceil(math.log2(n)) + 13))
        wide = True
        if n * (1 << B) >= 1 << 61:
            raise ValueError(f"rows of {n} elements are too long")
    si, so = float(np.float32(s_in)), float(np.float32(s_out))
    d = np.arange(256, dtype=np.float64)
    E = np.floor(np.exp(-si * d) * float(1 << B) + 0.5).astype(np.int64)
    # K = round(2^S / so) < 2^62 and S <= B + 16
    S = min(B + 16, int(math.floor(62 + math.log2(so))))
    while S > 0 and math.floor(math.ldexp(1.0, S) / so + 0.5) >= 1 << 62:
        S -= 1
    if S < B + 6:
        raise ValueError(f"output scale {so} is too small (below 2^{B + 6 - 62})")
    K = int(math.floor(math.ldexp(1.0, S) / so + 0.5))
    return dict(table=E.astype(np.int32), B=B, S=S, K=K, wide=wide)


def qsoftmax_golden(x3: np.ndarray, table: np.ndarray, K: int, S: int, y_zp: int, qmin: int, qmax: int) -> np.ndarray:
    """The integer steps of the module docstring on x viewed as [outer][n][inner] (int64 numpy)."""
    x = x3.astype(np.int64)
    d = x.max(axis=1, keepdims=True) - x
    e = np.asarray(table, np.int64)[d]
    s = e.sum(axis=1, keepdims=True)
    inv = (K + (s >> 1)) // s
    q = (e * inv + (1 << (S - 1))) >> S
    return np.clip(y_zp + np.minimum(q, 255), qmin, qmax)


def build_qsoftmax(graph: Graph, name: str, x: str, out: str, axis: int, source: str = "") -> Node:
    """int8 Softmax along `axis` as "QSoftmax" (x, out: int8 tensors with per-tensor quant)."""
    return _build(
        graph,
        name,
        x,
        out,
        [normalize_axis(int(axis), len(graph.tensor(x).shape), f"node '{source or name}' (Softmax)")],
        source,
    )


def _build(graph: Graph, name: str, x: str, out: str, axes: list[int], source: str) -> Node:
    where = f"node '{source or name}' (Softmax)"
    for t in (x, out):
        if graph.tensor(t).dtype != "int8":
            raise UnsupportedError(f"{where}: tensor '{t}' is {graph.tensor(t).dtype} (int8 only)")
    si, _ = qparams_of(graph, x)
    so, zo = qparams_of(graph, out)
    _, n, _ = _split(graph.tensor(x).shape, axes)
    if n < 1:
        raise UnsupportedError(f"{where}: empty softmax axis")
    try:
        p = softmax_params(si, so, n)
    except ValueError as exc:
        raise UnsupportedError(f"{where}: {exc}") from None
    table = graph.add_constant(graph.unique_name(f"{name}_exp_table"), p["table"])
    return Node(
        name,
        "QSoftmax",
        [x, table],
        [out],
        dict(
            axes=list(axes),
            B=p["B"],
            S=p["S"],
            K=p["K"],
            wide=p["wide"],
            y_zp=int(zo),
            act_min=arith.INT8_MIN,
            act_max=arith.INT8_MAX,
        ),
        source=source,
    )


@register
class QSoftmax(OpDef):
    """attrs: axes (sorted, contiguous), B, S, K, wide, y_zp, act_min, act_max; inputs x, table."""

    op = "QSoftmax"
    ms_ops = ("QLinearSoftmax",)
    template = "q_softmax.c.j2"
    dtypes = ("int8",)

    def import_onnx(self, ctx):
        """com.microsoft QLinearSoftmax (X, x_scale, x_zp, y_scale, y_zp; attrs axis, opset): opset < 13
        normalises over axes axis.. (the old 2D coercion); uint8 runs on the int8 kernel between
        exact QRequantize shifts."""
        from tinyc.ops.qelementwise import _MsIO

        rank = len(ctx.shape(0))
        if rank == 0:
            ctx.unsupported("a scalar input has no axis to normalise over")
        if not ctx.has_attr("opset"):
            ctx.unsupported("the 'opset' attribute is required")
        opset = int(ctx.attr("opset"))
        axis = int(ctx.attr("axis", -1 if opset >= 13 else 1))
        if not -rank <= axis < rank:
            ctx.unsupported(f"axis {axis} out of range for rank {rank}")
        axis %= rank
        if any(d == 0 for d in ctx.shape(0)):
            ctx.unsupported("empty input")
        ms = _MsIO(ctx)
        x = ms.input(0, 1, 2, "X")
        s_out, zo, out_dtype = ms.out_params(3, 4, ctx.dtype(0))
        y = ms.output(ctx.shape(0), s_out, zo, out_dtype)
        axes = [axis] if opset >= 13 else list(range(axis, rank))
        return ms.finish(_build(ctx.graph, ctx.name, x, y, axes, ctx.name))

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, "int8")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        x = inputs[0]
        outer, n, inner = _split(x.shape, a["axes"])
        y = qsoftmax_golden(
            x.reshape(outer, n, inner), inputs[1], a["K"], a["S"], a["y_zp"], a["act_min"], a["act_max"]
        )
        return [np.ascontiguousarray(y.reshape(x.shape).astype(np.int8))]

    def macs(self, node: Node, graph: Graph) -> int:
        return 3 * graph.tensor(node.inputs[0]).size

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Any permutation that keeps the normalised axes contiguous (always, for one axis)."""
        new = sorted(perm[a] for a in node.attrs["axes"])
        return len(perm) == len(graph.tensor(node.inputs[0]).shape) and new[-1] - new[0] + 1 == len(new)

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        if not self.can_permute(node, graph, perm):
            return False
        node.attrs["axes"] = sorted(perm[a] for a in node.attrs["axes"])
        return True

    def check_supported(self, node: Node, graph: Graph) -> None:
        for t in (node.inputs[0], node.outputs[0]):
            if graph.tensor(t).dtype != "int8":
                raise UnsupportedError(
                    f"node '{node.source or node.name}' (QSoftmax): tensor '{t}' is {graph.tensor(t).dtype} (int8 only)"
                )

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a = node.attrs
        outer, n, inner = _split(graph.tensor(node.inputs[0]).shape, a["axes"])
        return dict(
            outer=outer,
            n=n,
            inner=inner,
            S=a["S"],
            K=a["K"],
            y_zp=a["y_zp"],
            act_min=a["act_min"],
            act_max=a["act_max"],
            SUM_T="int64_t" if a["wide"] else "int32_t",
            tile=min(inner, TILE),
        )
