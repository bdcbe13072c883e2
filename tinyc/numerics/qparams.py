"""Quantization parameters carried by int8 tensors of the IR.

Every integer activation tensor made by the int8 lowering (or by a QOperator importer) carries its
affine parameters in ``Tensor.quant`` (per-tensor: scalar scale and zero point), so each int8 op's
builder can derive its integer constants (multipliers, shifts, offsets, tables) from its own
inputs and output alone, and the report can dequantize any int8 tensor for comparison.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, QuantParams, Tensor
from tinyc.numerics.fixed_point import quantize


def per_tensor(scale: float, zero_point: int) -> QuantParams:
    """Per-tensor parameters with the scale stored as float32 (the precision ONNX scales have)."""
    s = np.float32(scale)
    if not np.isfinite(s) or s <= 0:
        raise UnsupportedError(f"quantization scale must be finite and > 0 (got {scale})")
    return QuantParams(np.array(s, np.float32), np.array(int(zero_point), np.int64), None)


def qparams_of(graph: Graph, name: str) -> tuple[float, int]:
    """(scale, zero point) of a per-tensor quantized tensor; a clear error when it has none."""
    t = graph.tensor(name)
    q = t.quant
    if q is None or q.axis is not None or np.asarray(q.scale).size != 1:
        raise UnsupportedError(f"tensor '{name}' has no per-tensor quantization parameters")
    return float(np.asarray(q.scale, np.float32).reshape(-1)[0]), int(np.asarray(q.zero_point).reshape(-1)[0])


def add_qtensor(
    graph: Graph, name: str, shape: tuple[int, ...], scale: float, zero_point: int, dtype: str = "int8"
) -> Tensor:
    """A new (non-constant) quantized tensor named exactly `name` (callers pick unique names)."""
    return graph.add_tensor(Tensor(name, tuple(int(d) for d in shape), dtype, None, per_tensor(scale, zero_point)))


def add_qconstant(graph: Graph, base: str, q: np.ndarray, scale: float, zero_point: int) -> str:
    """A constant int8 tensor (e.g. the quantized operand of an Add with a constant) with its params."""
    name = graph.add_constant(graph.unique_name(base), np.asarray(q))
    graph.tensor(name).quant = per_tensor(scale, zero_point)
    return name


def quantize_constant(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Float constant -> int8 with the given parameters (ONNX QuantizeLinear rounding)."""
    return np.asarray(quantize(np.asarray(x, np.float32), np.float32(scale), zero_point), dtype=np.int8)


def import_scale(ctx: Any, i: int, what: str) -> float:
    """A QOperator node's per-tensor scale (constant input i), refused unless finite and > 0."""
    s = np.asarray(ctx.require_const(i, f"{what} scale"))
    if s.size != 1:
        ctx.unsupported(f"{what} scale must be per-tensor (got shape {list(s.shape)})")
    v = np.float32(s.reshape(-1)[0])
    if not np.isfinite(v) or v <= 0:
        ctx.unsupported(f"{what} scale must be finite and > 0 (got {v})")
    return float(v)


def import_zero_point(ctx: Any, i: int, what: str, dtype: str) -> int:
    """A QOperator node's per-tensor zero point (constant input i, 0 when absent), of the data's type."""
    if not ctx.has_input(i):
        return 0
    if ctx.dtype(i) != dtype:
        ctx.unsupported(f"{what} zero point of type {ctx.dtype(i)} differs from the data type {dtype}")
    zp = np.asarray(ctx.require_const(i, f"{what} zero point"))
    if zp.size != 1:
        ctx.unsupported(f"{what} zero point must be per-tensor (got shape {list(zp.shape)})")
    return int(zp.reshape(-1)[0])
