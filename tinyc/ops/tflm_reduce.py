"""int8 MEAN and SUM exactly as TFLite Micro computes them (IR op ``TflmReduce``).

Why a new op: tinyc's ReduceMean is float only, and TFLite Micro's integer steps are its own
(reference_ops::Mean and QuantizedMeanOrSum). The input arrives with the reduced axes last
(the converter transposes them there), so each output is the int32 sum of one contiguous row of
``n`` int8 values (raw values, zero points included), then QuantizedMeanOrSum's finish:
``(multiplier, shift)`` = QuantizeMultiplier of input scale / output scale; for MEAN the 1/n is folded
in as TFLite does — ``k = min(floor(log2 n), 32, 31 + shift)``, ``multiplier = (multiplier << k) / n``,
``shift -= k`` — then ``clamp(MultiplyByQuantizedMultiplier(sum - in_zp * n) + out_zp)``.

Older TFLite Micro releases took a truncating ``sum / n`` for a MEAN whose input and output grids are
equal; the TFLite Micro this project is checked against requantizes then too (a rounded
mean), so that is done here for every grid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.numerics.fixed_point import multiply_by_quantized_multiplier, quantize_multiplier
from tinyc.ops.base import OpDef, OutputType, register

INT32_MAX = (1 << 31) - 1


def tflm_reduce_params(is_sum: bool, n: int, s_x: float, zp_x: int, s_y: float, zp_y: int) -> dict[str, Any]:
    """The node attrs (multiplier, shift, in_zp, out_zp) TFLite Micro's Prepare/Eval derive.

    Raises ValueError where the int32 arithmetic could overflow (TFLite leaves that undefined)."""
    if n * 128 > INT32_MAX:
        raise ValueError(f"a reduction over {n} values could overflow the int32 sum")
    mult, shift = (int(v) for v in quantize_multiplier(float(np.float32(s_x)) / float(np.float32(s_y))))
    if not is_sum:
        k = min(n.bit_length() - 1, 32, 31 + shift)
        if k < 0:
            raise ValueError("the mean's rescaling multiplier is too small")
        mult = (mult << k) // n
        shift -= k
    if 255 * n * (1 << max(shift, 0)) > INT32_MAX:
        raise ValueError("the rescaled sum could overflow int32 (output scale much finer than the input's)")
    return {"in_zp": int(zp_x), "out_zp": int(zp_y), "multiplier": mult, "shift": shift}


def tflm_reduce_golden(x: np.ndarray, n: int, attrs: dict[str, Any]) -> np.ndarray:
    """Rows of n int8 values -> one int8 each, the integer steps of the module docstring."""
    s = x.reshape(-1, n).astype(np.int64).sum(axis=1)
    v = multiply_by_quantized_multiplier(s - attrs["in_zp"] * n, attrs["multiplier"], attrs["shift"])
    return np.clip(np.asarray(v, np.int64) + attrs["out_zp"], -128, 127).astype(np.int8)


@register
class TflmReduce(OpDef):
    """input: x int8 whose last axes (n values) are reduced; attrs n, out_shape, multiplier, shift,
    in_zp, out_zp (``tflm_reduce_params``)."""

    op = "TflmReduce"
    template = "tflm_reduce.c.j2"
    dtypes = ("int8",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x = graph.tensor(node.inputs[0])
        if x.size % int(node.attrs["n"]) or x.size // int(node.attrs["n"]) != int(np.prod(node.attrs["out_shape"])):
            n, out = node.attrs["n"], node.attrs["out_shape"]
            raise ValueError(f"input {x.shape} does not reduce rows of {n} into {out}")
        return [(tuple(int(d) for d in node.attrs["out_shape"]), "int8")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        y = tflm_reduce_golden(inputs[0], int(node.attrs["n"]), node.attrs)
        return [y.reshape(tuple(node.attrs["out_shape"]))]

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.inputs[0]).size

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a = node.attrs
        n = int(a["n"])
        return {
            "rows": graph.tensor(node.inputs[0]).size // n,
            "n": n,
            "mult": int(a["multiplier"]),
            "shift": int(a["shift"]),
            "bias": -int(a["in_zp"]) * n,
            "out_zp": int(a["out_zp"]),
        }
