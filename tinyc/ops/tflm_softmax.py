"""int8 Softmax exactly as TFLite Micro computes it (IR op ``TflmSoftmax``), over the last axis.

TFLite Micro's reference kernel (and CMSIS-NN's ``arm_softmax_s8``, which matches it) works in
gemmlowp fixed point (``tinyc/numerics/gemmlowp.py``). Per row of ``n`` values::

    d      = x - max(x)                                   in [-255, 0]
    E[d]   = exp_on_negative_values(F5(SRDHM(d << left_shift, beta_multiplier)))    F0 raw,
             0 where d < diff_min (a term too small to count)
    sum    = sum of RoundingDivideByPOT(E[d], 12)         F12 raw (int32 for n < 4096)
    scale, bits = GetReciprocal(sum, 12)                  one per row (Newton-Raphson, in C)
    y      = clamp(RoundingDivideByPOT(SRDHM(scale, E[d]), bits + 23) - 128, -128, 127)

E depends on one int8 difference only, so it is a 256-entry int32 table computed at compile time
(input 1, indexed by ``max - x``); what remains at run time is the row maximum, the sum, one
reciprocal and one multiply-and-shift per element — the same integers as TFLite Micro's kernel.
The output grid is TFLite's fixed one for int8 softmax: scale 1/256, zero point -128.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.numerics import gemmlowp
from tinyc.numerics.fixed_point import quantize_multiplier
from tinyc.numerics.qparams import qparams_of
from tinyc.ops.base import OpDef, OutputType, register

#: gemmlowp formats of TFLite's int8 softmax: the scaled difference is F5, the sum F12.
SCALED_DIFF_INTEGER_BITS = 5
ACCUMULATION_INTEGER_BITS = 12


def softmax_params(beta: float, input_scale: float) -> tuple[int, int, int]:
    """(input_multiplier, input_left_shift, diff_min) as TFLite's PreprocessSoftmaxScaling and
    CalculateInputRadius give them (double arithmetic from the float32 scale, double rounding build)."""
    real = min(
        float(beta) * float(np.float32(input_scale)) * float(1 << (31 - SCALED_DIFF_INTEGER_BITS)), float((1 << 31) - 1)
    )
    mult, shift = quantize_multiplier(real)
    mult, shift = int(mult), int(shift)
    if shift < 0:
        raise ValueError(f"beta * input scale = {beta * float(input_scale):g} is too small for TFLite's int8 softmax")
    max_input_rescaled = (
        1.0 * ((1 << SCALED_DIFF_INTEGER_BITS) - 1) * float(1 << (31 - SCALED_DIFF_INTEGER_BITS)) / float(1 << shift)
    )
    diff_min = -int(math.floor(max_input_rescaled))
    return mult, shift, diff_min


def exp_table(beta: float, input_scale: float) -> np.ndarray:
    """E[max - x] for max - x = 0..255 (int32): the F0 raw exp TFLite Micro computes, 0 below diff_min."""
    mult, shift, diff_min = softmax_params(beta, input_scale)
    d = -np.arange(256, dtype=np.int64)
    rescaled = gemmlowp.srdhm(d * (1 << shift), mult)
    e = gemmlowp.exp_on_negative_values(rescaled, SCALED_DIFF_INTEGER_BITS)
    return np.where(d >= diff_min, e, 0).astype(np.int32)


def tflm_softmax_golden(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Rows on the last axis of int8 x -> int8, the integer steps of the module docstring."""
    rows = x.reshape(-1, x.shape[-1]).astype(np.int64)
    e = np.asarray(table, np.int64)[rows.max(axis=1, keepdims=True) - rows]
    total = gemmlowp.rdbpot(e, ACCUMULATION_INTEGER_BITS).sum(axis=1, keepdims=True)
    scale, bits = gemmlowp.get_reciprocal(total, ACCUMULATION_INTEGER_BITS)
    y = gemmlowp.rdbpot(gemmlowp.srdhm(scale, e), bits + 31 - 8) - 128
    return np.clip(y, -128, 127).astype(np.int8).reshape(x.shape)


def build_tflm_softmax(graph: Graph, name: str, x: str, out: str, beta: float, source: str = "") -> Node:
    """int8 x (any grid) -> int8 out on TFLite's softmax grid (1/256, -128), last axis."""
    where = f"node '{source or name}' (TflmSoftmax)"
    xt, yt = graph.tensor(x), graph.tensor(out)
    if xt.dtype != "int8" or yt.dtype != "int8" or xt.quant is None or yt.quant is None:
        raise UnsupportedError(f"{where}: needs quantized int8 input and output")
    s_out, zp_out = qparams_of(graph, out)
    if zp_out != -128 or abs(s_out * 256.0 - 1.0) > 1e-6:
        raise UnsupportedError(
            f"{where}: int8 softmax output must have scale 1/256 and zero point -128 (has {s_out:g}, {zp_out})"
        )
    if not xt.shape or xt.shape[-1] >= 4096:
        raise UnsupportedError(f"{where}: rows of {xt.shape[-1] if xt.shape else 0} values (1..4095 supported)")
    try:
        table = exp_table(beta, qparams_of(graph, x)[0])
    except ValueError as exc:
        raise UnsupportedError(f"{where}: {exc}") from None
    t = graph.add_constant(graph.unique_name(f"{name}_exp"), table)
    return Node(name, "TflmSoftmax", [x, t], [out], {"beta": float(beta)}, source=source)


@register
class TflmSoftmax(OpDef):
    """inputs: x int8 [..., n], the exp table int32 [256]; attr beta (for reports)."""

    op = "TflmSoftmax"
    template = "tflm_softmax.c.j2"
    dtypes = ("int8",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, "int8")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [tflm_softmax_golden(inputs[0], inputs[1])]

    def macs(self, node: Node, graph: Graph) -> int:
        return 3 * graph.tensor(node.inputs[0]).size

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        shape = graph.tensor(node.inputs[0]).shape
        n = int(shape[-1])
        return {"rows": graph.tensor(node.inputs[0]).size // n, "n": n}
