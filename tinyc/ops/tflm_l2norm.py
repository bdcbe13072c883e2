"""L2_NORMALIZATION over the last axis exactly as TFLite Micro computes it (IR op ``TflmL2Norm``).

int8 (reference_integer_ops::L2Normalization): per row ``acc = sum (x - zp)^2`` in int32, then
GetInvSqrtQuantizedMultiplierExp(acc, reverse_shift=-1) — normalise acc into [2^27, 2^29) by bit pairs,
five gemmlowp Newton-Raphson steps for 1/sqrt in F3 fixed point, times sqrt(2)/2 — gives a multiplier
and shift, and each ``y = clamp(MultiplyByQuantizedMultiplier(x - zp, inv, shift + 7), -128, 127)`` on the
fixed output grid (1/128, 0). acc <= 1 uses (INT32_MAX, 0). The steps depend on the run-time row, so
they run in the C kernel; ``inv_sqrt_multiplier`` is their numpy twin.
float32 (reference_ops::L2Normalization): ``y = x / max(sqrt(sum x^2), 1e-6)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.numerics import gemmlowp
from tinyc.numerics.fixed_point import multiply_by_quantized_multiplier
from tinyc.ops.base import OpDef, OutputType, register

INT32_MAX = (1 << 31) - 1
HALF_THREE_F3 = (1 << 28) + (1 << 27)
HALF_SQRT2_F0 = 1518500250
EPSILON = np.float32(1e-6)


def _wrap(x: np.ndarray) -> np.ndarray:
    return ((np.asarray(x, np.int64) + (1 << 31)) % (1 << 32)) - (1 << 31)


def inv_sqrt_multiplier(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GetInvSqrtQuantizedMultiplierExp(acc, -1) per element: (multiplier, left shift), int64 arrays."""
    v = np.asarray(acc, np.int64).copy()
    shift = np.full(v.shape, 11, np.int64)
    while np.any(v >= (1 << 29)):
        big = v >= (1 << 29)
        v = np.where(big, v // 4, v)
        shift = shift + big
    small = v <= 1
    v = np.where(small, 2, v)  # placeholder: those rows take (INT32_MAX, 0) below
    pairs = (gemmlowp.count_leading_zeros(v) - 1) // 2 - 1
    shift = shift - pairs
    v = v << (2 * pairs)
    half_in = gemmlowp.rdbpot(v >> 1, 1)
    x = np.full(v.shape, 1 << 28, np.int64)
    for _ in range(5):
        x3 = gemmlowp.mul_by_pot(gemmlowp.srdhm(gemmlowp.srdhm(x, x), x), 6)
        x = gemmlowp.mul_by_pot(_wrap(gemmlowp.srdhm(HALF_THREE_F3, x) - gemmlowp.srdhm(half_in, x3)), 3)
    inv = gemmlowp.srdhm(x, HALF_SQRT2_F0)
    inv = np.where(shift < 0, _wrap(inv << np.maximum(-shift, 0)), inv)
    shift = np.maximum(shift, 0)
    return np.where(small, INT32_MAX, inv), np.where(small, 0, -shift)


def tflm_l2norm_golden(x: np.ndarray, zp: int) -> np.ndarray:
    """Rows on the last axis; int8 on (1/128, 0), or float32."""
    n = x.shape[-1]
    if x.dtype == np.float32:
        rows = x.reshape(-1, n)
        norm = np.maximum(np.sqrt((rows * rows).sum(axis=1, keepdims=True, dtype=np.float32)), EPSILON)
        return (rows / norm).astype(np.float32).reshape(x.shape)
    d = x.reshape(-1, n).astype(np.int64) - zp
    inv, shift = inv_sqrt_multiplier((d * d).sum(axis=1))
    y = np.stack(
        [np.asarray(multiply_by_quantized_multiplier(d[r], int(inv[r]), int(shift[r]) + 7)) for r in range(len(d))]
    )
    return np.clip(y, -128, 127).astype(np.int8).reshape(x.shape)


@register
class TflmL2Norm(OpDef):
    """input: x [..., n] (int8 or float32); attr x_zp (int8)."""

    op = "TflmL2Norm"
    template = "tflm_l2norm.c.j2"
    dtypes = ("int8", "float32")

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x = graph.tensor(node.inputs[0])
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [tflm_l2norm_golden(inputs[0], int(node.attrs.get("x_zp", 0)))]

    def macs(self, node: Node, graph: Graph) -> int:
        return 2 * graph.tensor(node.inputs[0]).size

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        x = graph.tensor(node.inputs[0])
        n = int(x.shape[-1])
        return {"rows": x.size // n, "n": n, "is_int8": x.dtype == "int8", "zp": int(node.attrs.get("x_zp", 0))}
