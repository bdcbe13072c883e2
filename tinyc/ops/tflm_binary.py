"""int8 binary elementwise kernels exactly as TFLite Micro computes them (IR op ``TflmBinary``).

One op, several ``mode``s, each TFLM's integer reference arithmetic with numpy broadcasting (the
output shape is the broadcast of both inputs; the C loops over pre-collapsed dims as QAdd does):

* ``squared_difference`` (squared_difference.cc): both inputs to a common scale 2 * max(s1, s2) with 7
  fraction bits (``v_i = mbqm((q_i - zp_i) << 7, m_i, sh_i)``), ``d = v1 - v2``, ``y = mbqm(d * d, m_out,
  sh_out) + zp_out`` clamped to int8 (TFLM fuses no activation here).
* ``maximum`` / ``minimum`` (maximum_minimum.cc): the raw int8 values compared, whatever the grids.
* ``prelu`` (prelu.h): ``x = q - zp_in``; ``x >= 0``: ``mbqm(x, m_pos, sh_pos)``; else
  ``mbqm(x * (alpha - zp_alpha), m_neg, sh_neg)``; plus zp_out, clamped.
* ``div`` (div.h): ``x1 = q1 - zp1``, ``x2 = q2 - zp2``, both negated when x2 < 0; ``inv, bits =
  GetReciprocal(x2, 31)``; ``h = CountLeadingSignBits(x1)``; ``u = srdhm(x1 << h, inv)``; ``y =
  RoundingDivideByPOT(srdhm(u, m_out), h + bits - sh_out) + zp_out`` clamped to the fused activation's
  range. That exponent is often 32..39 (|x1| small), beyond what RoundingDivideByPOT defines; TFLM's
  x86 build then computes ``(v >> (e - 32)) + (v >= 0)`` (a 64-bit mask truncated to -1, the 32-bit
  shift count taken mod 32), and tinyc computes the same, explicitly. A zero divisor (q2 == zp2) gets
  what TFLM's unchecked code gives too (GetReciprocal(0) = 1/(1 + (-1)) of gemmlowp, bits -1).

``mbqm`` is TFLite's double-rounding MultiplyByQuantizedMultiplier (``tinyc_q_mbqm``). The multipliers
come from the grids at compile time (``tflm_binary_attrs``), in the float64/float32 expressions of the
TFLM Prepare functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node, QuantParams
from tinyc.numerics import gemmlowp
from tinyc.numerics.fixed_point import multiply_by_quantized_multiplier, quantize_multiplier
from tinyc.ops.base import OpDef, OutputType, register
from tinyc.ops.elementwise import collapse_broadcast

MODES = ("squared_difference", "maximum", "minimum", "prelu", "div")
#: the integer attrs each mode needs
FIELDS: dict[str, tuple[str, ...]] = {
    "squared_difference": (
        "in1_offset",
        "in2_offset",
        "in1_multiplier",
        "in1_shift",
        "in2_multiplier",
        "in2_shift",
        "out_multiplier",
        "out_shift",
        "out_zp",
    ),
    "maximum": (),
    "minimum": (),
    "prelu": ("in_offset", "alpha_offset", "pos_multiplier", "pos_shift", "neg_multiplier", "neg_shift", "out_zp"),
    "div": ("in1_offset", "in2_offset", "out_multiplier", "out_shift", "out_zp", "act_min", "act_max"),
}
#: div's output shift range for which the rounding exponent stays in [0, 63] (|x1| <= 255: h >= 23)
DIV_SHIFTS = (-24, 22)
#: squared_difference's pre-shift of both inputs (TFLM: 255^2 * 2^14 still fits int32)
SQDIFF_LEFT_SHIFT = 7


def _qm(real: float, what: str) -> tuple[int, int]:
    m, s = quantize_multiplier(real)
    if int(m) == 0 and real != 0.0:
        raise ValueError(f"{what} multiplier {real:g} is too small")
    return int(m), int(s)


def tflm_binary_attrs(
    mode: str, grids: tuple[tuple[float, int], ...], act: tuple[int, int] = (-128, 127)
) -> dict[str, int]:
    """The node attrs of `mode` for the grids ((s1, zp1), (s2, zp2), (s_out, zp_out)), as TFLM's Prepare
    derives them (`act`: div's fused activation range). Raises ValueError for a multiplier TFLite cannot
    represent."""
    (s1, z1), (s2, z2), (so, zo) = ((float(np.float32(s)), int(z)) for s, z in grids)
    if mode in ("maximum", "minimum"):
        return {}
    if mode == "squared_difference":
        twice_max = 2.0 * max(s1, s2)
        m1, sh1 = _qm(s1 / twice_max, "input 1")
        m2, sh2 = _qm(s2 / twice_max, "input 2")
        # (1 << 14) * output scale is a float product in TFLM (exact: a power of two)
        mo, sho = _qm(twice_max * twice_max / (float(1 << (2 * SQDIFF_LEFT_SHIFT)) * so), "output")
        return dict(
            in1_offset=-z1,
            in2_offset=-z2,
            in1_multiplier=m1,
            in1_shift=sh1,
            in2_multiplier=m2,
            in2_shift=sh2,
            out_multiplier=mo,
            out_shift=sho,
            out_zp=zo,
        )
    if mode == "prelu":
        mp, shp = _qm(s1 / so, "identity")
        mn, shn = _qm(s1 * s2 / so, "alpha")
        return dict(
            in_offset=-z1,
            alpha_offset=-z2,
            pos_multiplier=mp,
            pos_shift=shp,
            neg_multiplier=mn,
            neg_shift=shn,
            out_zp=zo,
        )
    if mode == "div":
        mo, sho = _qm(s1 / (s2 * so), "output")
        if not DIV_SHIFTS[0] <= sho <= DIV_SHIFTS[1]:
            raise ValueError(f"output multiplier s1 / (s2 * s_out) = {s1 / (s2 * so):g} is out of range")
        return dict(
            in1_offset=-z1, in2_offset=-z2, out_multiplier=mo, out_shift=sho, out_zp=zo, act_min=act[0], act_max=act[1]
        )
    raise ValueError(f"unknown TflmBinary mode {mode!r}")


def _wrap32(x: np.ndarray) -> np.ndarray:
    return ((np.asarray(x, np.int64) + (1 << 31)) % (1 << 32)) - (1 << 31)


def _leading_sign_bits(x: np.ndarray) -> np.ndarray:
    """CountLeadingSignBits of int32 (GCC's __builtin_clrsb; 31 for 0)."""
    return np.where(x == 0, 31, gemmlowp.count_leading_zeros(np.where(x < 0, ~x, x)) - 1)


def _rdbpot_x86(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """RoundingDivideByPOT for 0 <= e <= 63 as TFLM's x86 build runs it (e > 31: see the module docstring)."""
    big = e > 31
    small = gemmlowp.rdbpot(x, np.where(big, 0, e))
    return np.where(big, _wrap32((x >> np.where(big, e - 32, 0)) + (x >= 0)), small)


def _div(x: np.ndarray, y: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    x1, x2 = np.broadcast_arrays(x + p["in1_offset"], y + p["in2_offset"])
    neg = x2 < 0
    x1, x2 = np.where(neg, -x1, x1), np.where(neg, -x2, x2)
    inv, bits = gemmlowp.get_reciprocal(x2, 31)
    h = _leading_sign_bits(x1)
    u = gemmlowp.srdhm(_wrap32(x1 << h), inv)
    q = _rdbpot_x86(gemmlowp.srdhm(u, p["out_multiplier"]), h + bits - p["out_shift"])
    return np.clip(q + p["out_zp"], p["act_min"], p["act_max"])


def _mbqm(x: np.ndarray, m: int, s: int) -> np.ndarray:
    return np.asarray(multiply_by_quantized_multiplier(x, m, s)).astype(np.int64)


def tflm_binary_golden(mode: str, a: np.ndarray, b: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """int8 a (op) int8 b -> int8, numpy broadcasting: the integer steps of the module docstring."""
    x, y = np.asarray(a, np.int64), np.asarray(b, np.int64)
    if mode == "maximum":
        return np.maximum(x, y).astype(np.int8)
    if mode == "minimum":
        return np.minimum(x, y).astype(np.int8)
    p = attrs
    if mode == "squared_difference":
        v1 = _mbqm((x + p["in1_offset"]) << SQDIFF_LEFT_SHIFT, p["in1_multiplier"], p["in1_shift"])
        v2 = _mbqm((y + p["in2_offset"]) << SQDIFF_LEFT_SHIFT, p["in2_multiplier"], p["in2_shift"])
        d = v1 - v2
        r = _mbqm(d * d, p["out_multiplier"], p["out_shift"]) + p["out_zp"]
    elif mode == "prelu":
        v = np.broadcast_to(x + p["in_offset"], np.broadcast_shapes(x.shape, y.shape))
        pos = _mbqm(v, p["pos_multiplier"], p["pos_shift"])
        neg = _mbqm(v * (y + p["alpha_offset"]), p["neg_multiplier"], p["neg_shift"])
        r = np.where(v >= 0, pos, neg) + p["out_zp"]
    elif mode == "div":
        r = _div(x, y, p)
    else:
        raise ValueError(f"unknown TflmBinary mode {mode!r}")
    return np.clip(r, -128, 127).astype(np.int8)


def build_tflm_binary(
    graph: Graph, name: str, mode: str, a: str, b: str, out: str, act: tuple[int, int] = (-128, 127), source: str = ""
) -> Node:
    """int8 a, b (per-tensor grids) -> int8 out: TFLM's `mode` kernel (`act`: div's fused clamp)."""
    where = f"node '{source or name}' (TflmBinary {mode})"
    grids = []
    for t in (a, b, out):
        q = graph.tensor(t).quant
        if graph.tensor(t).dtype != "int8" or q is None or np.asarray(q.scale).size != 1:
            raise UnsupportedError(f"{where}: '{t}' must be int8 with one scale and zero point")
        grids.append((float(np.asarray(q.scale).reshape(-1)[0]), int(np.asarray(q.zero_point).reshape(-1)[0])))
    try:
        attrs: dict[str, Any] = tflm_binary_attrs(mode, tuple(grids), act)
    except ValueError as exc:
        raise UnsupportedError(f"{where}: {exc}") from None
    attrs["mode"] = mode
    return Node(name, "TflmBinary", [a, b], [out], attrs, source=source)


@register
class TflmBinary(OpDef):
    """inputs: a, b int8 (numpy broadcasting); attrs: mode and its integer parameters (``FIELDS``)."""

    op = "TflmBinary"
    template = "tflm_binary.c.j2"
    dtypes = ("int8",)
    inplace = True
    layout_agnostic = True  # attrs hold every parameter

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        if node.attrs.get("mode") not in MODES:
            raise UnsupportedError(
                f"node '{node.source or node.name}' (TflmBinary): unknown mode {node.attrs.get('mode')!r}"
            )
        sa, sb = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        try:
            shape = np.broadcast_shapes(sa, sb)
        except ValueError:
            raise UnsupportedError(
                f"node '{node.source or node.name}' (TflmBinary): shapes {list(sa)} and {list(sb)} do not broadcast"
            ) from None
        return [(tuple(int(d) for d in shape), "int8")]

    def folded_quant(self, node: Node, graph: Graph) -> QuantParams | None:
        return graph.tensor(node.outputs[0]).quant

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.outputs[0]).size

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [tflm_binary_golden(node.attrs["mode"], inputs[0], inputs[1], node.attrs)]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a, b = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        dims, (sa, sb) = collapse_broadcast(graph.tensor(node.outputs[0]).shape, [a.shape, b.shape])
        return {
            "dims": dims,
            "sa": sa,
            "sb": sb,
            "mode": node.attrs["mode"],
            "p": node.attrs,
            "left_shift": SQDIFF_LEFT_SHIFT,
        }
