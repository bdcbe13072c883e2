"""int8 LogSoftmax exactly as TFLite Micro computes it (IR op ``TflmLogSoftmax``), over the last axis.

TFLite Micro's LOG_SOFTMAX Prepare (beta 1, 5 integer bits for the scaled difference) derives from the input
scale ``s``: ``input_multiplier``/``input_left_shift`` = QuantizeMultiplier(min(s * 2^26, 2^31 - 1)), the
reverse multiplier of 2^(31 - left_shift) / input_multiplier (``reverse_scaling_divisor`` / ``_shift``) and
``diff_min = -floor(31 * 2^26 / 2^left_shift)``. Its reference kernel (``LogSoftmaxQuantized``), per row::

    d        = x - max(x)                                                in [-255, 0]
    D[d]     = MultiplyByQuantizedMultiplier(d, input_multiplier, input_left_shift)     F5 raw
    E[d]     = Rescale<12>(exp_on_negative_values(F5 D[d])), 0 where d < diff_min       F12 raw
    log_sum  = log_x_for_x_greater_than_or_equal_to_1<5>(F12 sum of E)                  F5 raw
    adj      = max(diff_min - 1, MultiplyByQuantizedMultiplier(log_sum + INT32_MIN, divisor, shift))
    y        = clamp(RoundingDivideByPOT(D[d] - log_sum, 22) + 127, -128, 127)  if d > adj, else -128

D and E depend on one int8 difference only, so they are two 256-entry int32 tables computed at compile time
(inputs 1 and 2, indexed by ``max - x``); what remains at run time is the row maximum, the sum, one fixed-point
log (``tinyc/numerics/gemmlowp_log.py``, in C a static function of the template), one multiply for the cut-off
and a shift per element. The output grid is TFLite's fixed one for int8 log-softmax: scale 16/256, zero
point 127.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.numerics import gemmlowp
from tinyc.numerics.fixed_point import INT32_MIN, multiply_by_quantized_multiplier, quantize_multiplier
from tinyc.numerics.gemmlowp_log import log_x_for_x_greater_than_or_equal_to_1, wrap32
from tinyc.numerics.qparams import qparams_of
from tinyc.ops.base import OpDef, OutputType, register

#: gemmlowp formats of TFLite's int8 log-softmax: the scaled difference and the log are F5, the sum F12,
#: the output has 4 integer bits (scale 16/256).
INPUT_INTEGER_BITS = 5
ACCUMULATION_INTEGER_BITS = 12
OUTPUT_INTEGER_BITS = 4
#: TFLite's fixed int8 output grid.
OUTPUT_SCALE = 16.0 / 256.0
OUTPUT_ZERO_POINT = 127


def log_softmax_params(input_scale: float) -> tuple[int, int, int, int, int]:
    """(input_multiplier, input_left_shift, reverse_scaling_divisor, reverse_scaling_shift, diff_min) as
    TFLite Micro's PreprocessLogSoftmaxScalingExp and CalculateInputRadius give them (double arithmetic
    from the float32 scale); the shift is the one MultiplyByQuantizedMultiplier takes (<= 0, a right shift).
    Raises ValueError where TFLite Micro's checks would abort."""
    real = min(float(np.float32(input_scale)) * float(1 << (31 - INPUT_INTEGER_BITS)), float((1 << 31) - 1))
    if not real > 1.0:
        raise ValueError(f"input scale {float(input_scale):g} is too small (input scale * 2^26 must exceed 1)")
    mult, shift = (int(v) for v in quantize_multiplier(real))
    reverse = float(1 << (31 - shift)) / float(mult)
    if not 0.0 < reverse < 1.0:
        raise ValueError(
            f"input scale {float(input_scale):g} gives a reverse scaling divisor {reverse:g} outside (0, 1)"
        )
    rev_mult, rev_shift = (int(v) for v in quantize_multiplier(reverse))
    if rev_shift < -31:
        raise ValueError(f"input scale {float(input_scale):g} gives a reverse scaling shift {rev_shift} below -31")
    radius = 1.0 * ((1 << INPUT_INTEGER_BITS) - 1) * float(1 << (31 - INPUT_INTEGER_BITS)) / float(1 << shift)
    return mult, shift, rev_mult, rev_shift, -int(math.floor(radius))


def log_softmax_tables(input_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(D, E) for max - x = 0..255 (int32): the F5 scaled difference and its F12 exp, both 0 below diff_min
    (TFLite Micro never computes them there: the shifted difference would not fit int32)."""
    mult, shift, _, _, diff_min = log_softmax_params(input_scale)
    d = -np.arange(256, dtype=np.int64)
    used = d >= diff_min
    scaled = np.asarray(multiply_by_quantized_multiplier(np.where(used, d, 0), mult, shift), np.int64)
    e = gemmlowp.rdbpot(gemmlowp.exp_on_negative_values(scaled, INPUT_INTEGER_BITS), ACCUMULATION_INTEGER_BITS)
    return np.where(used, scaled, 0).astype(np.int32), np.where(used, e, 0).astype(np.int32)


def tflm_log_softmax_golden(
    x: np.ndarray, d_table: np.ndarray, e_table: np.ndarray, rev_mult: int, rev_shift: int, diff_min: int
) -> np.ndarray:
    """Rows on the last axis of int8 x -> int8, the integer steps of the module docstring."""
    rows = x.reshape(-1, x.shape[-1]).astype(np.int64)
    k = rows.max(axis=1, keepdims=True) - rows
    scaled = np.asarray(d_table, np.int64)[k]
    total = wrap32(np.asarray(e_table, np.int64)[k].sum(axis=1, keepdims=True))
    log_sum = log_x_for_x_greater_than_or_equal_to_1(total, ACCUMULATION_INTEGER_BITS, INPUT_INTEGER_BITS)
    cut = np.asarray(multiply_by_quantized_multiplier(wrap32(log_sum + INT32_MIN), rev_mult, rev_shift), np.int64)
    adjusted = np.maximum(diff_min - 1, cut)
    shift = 31 - INPUT_INTEGER_BITS - OUTPUT_INTEGER_BITS
    y = np.clip(gemmlowp.rdbpot(wrap32(scaled - log_sum), shift) + 127, -128, 127)
    return np.where(-k > adjusted, y, -128).astype(np.int8).reshape(x.shape)


def build_tflm_log_softmax(graph: Graph, name: str, x: str, out: str, source: str = "") -> Node:
    """int8 x (any grid TFLite Micro accepts) -> int8 out on TFLite's log-softmax grid (16/256, 127), last axis."""
    where = f"node '{source or name}' (TflmLogSoftmax)"
    xt, yt = graph.tensor(x), graph.tensor(out)
    if xt.dtype != "int8" or yt.dtype != "int8" or xt.quant is None or yt.quant is None:
        raise UnsupportedError(f"{where}: needs quantized int8 input and output")
    s_out, zp_out = qparams_of(graph, out)
    if zp_out != OUTPUT_ZERO_POINT or np.float32(s_out) != np.float32(OUTPUT_SCALE):
        raise UnsupportedError(
            f"{where}: int8 log-softmax output must have scale 16/256 and zero point 127 (has {s_out:g}, {zp_out})"
        )
    if not xt.shape or not 1 <= xt.shape[-1] < 4096:
        raise UnsupportedError(
            f"{where}: rows of {xt.shape[-1] if xt.shape else 0} values (1..4095 supported: TFLite Micro's F12 "
            "sum of exps overflows int32 beyond)"
        )
    s_in = qparams_of(graph, x)[0]
    try:
        _, _, rev_mult, rev_shift, diff_min = log_softmax_params(s_in)
        d_table, e_table = log_softmax_tables(s_in)
    except ValueError as exc:
        raise UnsupportedError(f"{where}: {exc}") from None
    d = graph.add_constant(graph.unique_name(f"{name}_diff"), d_table)
    e = graph.add_constant(graph.unique_name(f"{name}_exp"), e_table)
    attrs = {"reverse_multiplier": rev_mult, "reverse_shift": rev_shift, "diff_min": diff_min}
    return Node(name, "TflmLogSoftmax", [x, d, e], [out], attrs, source=source)


@register
class TflmLogSoftmax(OpDef):
    """inputs: x int8 [..., n], the scaled-difference table int32 [256], the exp table int32 [256];
    attrs reverse_multiplier, reverse_shift (the cut-off's multiplier), diff_min."""

    op = "TflmLogSoftmax"
    template = "tflm_log_softmax.c.j2"
    dtypes = ("int8",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, "int8")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        return [
            tflm_log_softmax_golden(
                inputs[0],
                inputs[1],
                inputs[2],
                int(a["reverse_multiplier"]),
                int(a["reverse_shift"]),
                int(a["diff_min"]),
            )
        ]

    def macs(self, node: Node, graph: Graph) -> int:
        return 3 * graph.tensor(node.inputs[0]).size

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        shape = graph.tensor(node.inputs[0]).shape
        n = int(shape[-1])
        a = node.attrs
        return {
            "rows": graph.tensor(node.inputs[0]).size // n,
            "n": n,
            "rev_mult": int(a["reverse_multiplier"]),
            "rev_shift": int(a["reverse_shift"]),
            "diff_min": int(a["diff_min"]),
        }
