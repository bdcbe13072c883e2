"""Converters of TFLite's elementwise builtins, bit-exact with TFLite Micro's int8 kernels.

* int8 unary ops become one ``QLut``: TFLM's kernel depends on one int8 value only, so its 256 results
  are computed at compile time by emulating TFLM's integer (or float32) steps
  (``tinyc/numerics/tflm_unary.py``) and looked up at run time.
* int8 binary ops: MUL is ``QMul`` (TFLite's Mul arithmetic); SUB is ``QAdd`` with input 2's multiplier
  negated (TFLM's Sub is its Add on -x2; the rounding is symmetric, so mbqm(x, -m) = -mbqm(x, m));
  SQUARED_DIFFERENCE, MAXIMUM, MINIMUM, PRELU and DIV are ``TflmBinary`` (``tinyc/ops/tflm_binary.py``).
* QUANTIZE float32 -> int8 is ``TflmQuantize`` (half away from zero, as TFLM rounds); DEQUANTIZE
  is ``DequantizeLinear`` (TFLM's float(double(scale) * (q - zp)) is the correctly rounded float32
  product, as tinyc's); CAST is ``Cast`` for the type pairs whose C++ conversion is defined.
* float32 tensors go to ``ops_float.float_elementwise`` (TFLM's float kernels).

What TFLM has no int8 kernel for (EXP, LOG, SQRT, NEG; RELU_N1_TO_1 has no kernel at all) is refused
with a message saying so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from tinyc.frontend.tflite.context import TflContext, converts
from tinyc.frontend.tflite.reader import TflTensor
from tinyc.ir import Node
from tinyc.numerics import fixed_point as arith
from tinyc.numerics import tflm_unary
from tinyc.ops.qelementwise import build_qmul
from tinyc.ops.tflm_binary import build_tflm_binary

Grid = tuple[float, int]


def _float(ctx: TflContext) -> bool:
    """Hand a float32 operator to the float converters; True when it was one."""
    if ctx.tensor(0).dtype != "float32":
        return False
    from tinyc.frontend.tflite.ops_float import float_elementwise

    float_elementwise(ctx)
    return True


def _int8(ctx: TflContext, t: TflTensor, what: str) -> Grid:
    """(scale, zero point) of an int8 per-tensor quantized tensor, refused otherwise."""
    if t.dtype != "int8":
        ctx.unsupported(f"{what} '{t.name}' is {t.dtype} (int8 or float32 supported)")
    return ctx.require_per_tensor(t, what)


def _lut(ctx: TflContext, table: np.ndarray) -> None:
    lut = ctx.constant("lut", np.asarray(table, np.int8))
    ctx.add(ctx.node("QLut", [ctx.input(0), lut], [ctx.output(0)]))  # type: ignore[list-item]


# -- unary ---------------------------------------------------------------------------------------------------
Table = Callable[[TflContext, Grid, Grid], np.ndarray]


def _logistic(ctx: TflContext, x: Grid, y: Grid) -> np.ndarray:
    if y[1] != -128:
        ctx.unsupported(f"int8 LOGISTIC needs the output zero point -128 (TFLite Micro checks it), has {y[1]}")
    return tflm_unary.logistic_table(*x)


UNARY: dict[str, Table] = {
    "LOGISTIC": _logistic,
    "TANH": lambda ctx, x, y: tflm_unary.tanh_table(*x),
    "RELU": lambda ctx, x, y: tflm_unary.relu_table(*x, *y),
    "RELU6": lambda ctx, x, y: tflm_unary.relu6_table(*x),
    "LEAKY_RELU": lambda ctx, x, y: tflm_unary.leaky_relu_table(*x, *y, float(ctx.opt("alpha", 0.0))),
    "HARD_SWISH": lambda ctx, x, y: tflm_unary.hard_swish_table(*x, *y),
    "ELU": lambda ctx, x, y: tflm_unary.elu_table(*x, *y),
    "ABS": lambda ctx, x, y: tflm_unary.abs_table(*x, *y),
    "RSQRT": lambda ctx, x, y: tflm_unary.rsqrt_table(*x, *y),
}
#: builtins TFLite Micro runs on float32 only
FLOAT_ONLY_UNARY = ("EXP", "LOG", "SQRT", "NEG")


@converts(*UNARY)
def unary_int8(ctx: TflContext) -> None:
    if _float(ctx):
        return
    x, y = _int8(ctx, ctx.tensor(0), "input"), _int8(ctx, ctx.out_tensor(0), "output")
    try:
        table = UNARY[ctx.op.name](ctx, x, y)
    except ValueError as exc:
        ctx.unsupported(str(exc))
    _lut(ctx, table)


@converts(*FLOAT_ONLY_UNARY)
def unary_float_only(ctx: TflContext) -> None:
    if not _float(ctx):
        ctx.unsupported(f"TFLite Micro has no {ctx.tensor(0).dtype} kernel for {ctx.op.name} (float32 only)")


@converts("RELU_N1_TO_1")
def relu_n1_to_1(ctx: TflContext) -> None:
    if not _float(ctx):
        ctx.unsupported("TFLite Micro has no RELU_N1_TO_1 kernel (its op resolver does not register one)")


# -- QUANTIZE / DEQUANTIZE / CAST ------------------------------------------------------------------------------
@converts("QUANTIZE")
def quantize(ctx: TflContext) -> None:
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    if x.dtype == "float32":
        s, zp = _int8(ctx, y, "output")
        ctx.add(ctx.node("TflmQuantize", [ctx.input(0)], [ctx.output(0)], scale=s, zp=zp))  # type: ignore[list-item]
        return
    if x.dtype != "int8" or y.dtype != "int8":
        ctx.unsupported(f"QUANTIZE {x.dtype} -> {y.dtype} (float32 -> int8 and int8 -> int8 supported)")
    gx, gy = ctx.require_per_tensor(x, "input"), ctx.require_per_tensor(y, "output")
    try:
        table = tflm_unary.requantize_table(*gx, *gy)
    except ValueError as exc:
        ctx.unsupported(str(exc))
    _lut(ctx, table)


@converts("DEQUANTIZE")
def dequantize(ctx: TflContext) -> None:
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    if x.dtype != "int8" or y.dtype != "float32":
        ctx.unsupported(f"DEQUANTIZE {x.dtype} -> {y.dtype} (int8 -> float32 supported)")
    s, zp = ctx.require_per_tensor(x, "input")
    ctx.add(ctx.node("DequantizeLinear", [ctx.input(0)], [ctx.output(0)], axis=None, scale=s, zp=zp))  # type: ignore[list-item]


#: (from, to) pairs whose TFLM cast (a C++ static_cast) tinyc's Cast computes alike. float32 -> int32 agrees for
#: values inside int32 only (TFLM saturates, NaN -> 0); float32 -> int8, int16 (tinyc has no int16 activations)
#: and bool are left out
CASTS = {("int8", "int32"), ("int8", "float32"), ("int32", "float32"), ("int32", "int8"), ("float32", "int32")}


@converts("CAST")
def cast(ctx: TflContext) -> None:
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    if x.dtype == y.dtype:
        ctx.add(ctx.node("Identity", [ctx.input(0)], [ctx.output(0)]))  # type: ignore[list-item]
        return
    if (x.dtype, y.dtype) not in CASTS:
        ctx.unsupported(f"CAST {x.dtype} -> {y.dtype} is not supported")
    ctx.add(ctx.node("Cast", [ctx.input(0)], [ctx.output(0)], to=y.dtype))  # type: ignore[list-item]


# -- binary --------------------------------------------------------------------------------------------------
def _binary_grids(ctx: TflContext) -> tuple[Grid, Grid, Grid]:
    return (
        _int8(ctx, ctx.tensor(0), "input 1"),
        _int8(ctx, ctx.tensor(1), "input 2"),
        _int8(ctx, ctx.out_tensor(0), "output"),
    )


@converts("MUL")
def mul(ctx: TflContext) -> None:
    if _float(ctx):
        return
    _binary_grids(ctx)
    node = build_qmul(
        ctx.graph,
        ctx.graph.unique_name(ctx.name),
        ctx.input_name(0),
        ctx.input_name(1),
        ctx.output(0),
        None,
        source=ctx.name,
    )
    node.attrs["act_min"], node.attrs["act_max"] = ctx.act_range(ctx.out_tensor(0))
    ctx.add(node)


def sub_params(g1: Grid, g2: Grid, go: Grid, act_min: int, act_max: int) -> arith.AddParams:
    """TFLM's int8 Sub preparation is its Add's (float64 ratios of the float32 scales to 2 * max(s1, s2),
    20 fraction bits; checked against TFLM on random grids: a float32 evaluation differs on near-ties), with
    input 2's multiplier negated so that QAdd subtracts."""
    p = arith.add_params(*g1, *g2, *go, act_min, act_max)
    return dataclasses.replace(p, in2_multiplier=-p.in2_multiplier)


@converts("SUB")
def sub(ctx: TflContext) -> None:
    if _float(ctx):
        return
    g1, g2, go = _binary_grids(ctx)
    lo, hi = ctx.act_range(ctx.out_tensor(0))
    try:
        p = sub_params(g1, g2, go, lo, hi)
    except ValueError as exc:
        ctx.unsupported(f"SUB multipliers: {exc}")
    attrs = dataclasses.asdict(p)
    del attrs["rounding"]  # the C constant; the node names its rounding (TFLite's, set for the whole import)
    name = ctx.graph.unique_name(ctx.name)
    ctx.add(Node(name, "QAdd", [ctx.input(0), ctx.input(1)], [ctx.output(0)], attrs, source=ctx.name))  # type: ignore[list-item]


def _tflm_binary(ctx: TflContext, mode: str) -> None:
    if _float(ctx):
        return
    _binary_grids(ctx)
    act = ctx.act_range(ctx.out_tensor(0)) if mode == "div" else (-128, 127)
    name = ctx.graph.unique_name(ctx.name)
    node = build_tflm_binary(ctx.graph, name, mode, ctx.input(0), ctx.input(1), ctx.output(0), act, source=ctx.name)  # type: ignore[arg-type]
    ctx.add(node)


@converts("SQUARED_DIFFERENCE")
def squared_difference(ctx: TflContext) -> None:
    _tflm_binary(ctx, "squared_difference")


@converts("MAXIMUM")
def maximum(ctx: TflContext) -> None:
    _tflm_binary(ctx, "maximum")


@converts("MINIMUM")
def minimum(ctx: TflContext) -> None:
    _tflm_binary(ctx, "minimum")


@converts("PRELU")
def prelu(ctx: TflContext) -> None:
    _tflm_binary(ctx, "prelu")


@converts("DIV")
def div(ctx: TflContext) -> None:
    _tflm_binary(ctx, "div")
