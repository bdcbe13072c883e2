"""Cast and CastLike between every element type tinyc stores, narrow ones included.

Numeric types convert with C's casts (float -> int truncates toward zero). The narrow types
(float16, bfloat16, 8-bit floats, float4, int4/int2: tinyc/numerics/dtypes.py) convert through
runtime_c/include/tinyc_fp.h, which equals ml_dtypes (ONNX's reference) bit for bit: round to
nearest even, ONNX's `saturate` for the 8-bit floats (clamp to the largest finite value instead
of overflowing to infinity or NaN). A double or integer source reaches a narrow float through a
round-to-odd float32, so there is one rounding, as numpy's direct conversion does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import helper

from tinyc.ir import Graph, Node
from tinyc.numerics import dtypes as nd
from tinyc.ops.base import CTYPES, OpDef, OutputType, register

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext

#: Every element type Cast converts between (ONNX's string and float8 e8m0 are refused).
CAST_TYPES: tuple[str, ...] = tuple(CTYPES) + tuple(nd.STORAGE_CTYPES)


def _onnx_type(ctx: ImportContext, elem: int) -> str:
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(int(elem))))
    except Exception:
        ctx.unsupported(f"cast to element type {elem} is not supported")


def _decode(src: str, x: str) -> tuple[str, str]:
    """A C expression of the source value in a type C computes with, and that type's kind
    ('f32', 'f64' or 'int')."""
    if src == "float64":
        return x, "f64"
    if src == "float32":
        return x, "f32"
    if src == "float16":
        return f"tinyc_f16_to_f32({x})", "f32"
    if src == "bfloat16":
        return f"tinyc_bf16_to_f32({x})", "f32"
    if src in nd.MINIFLOATS:
        f = nd.MINIFLOATS[src]
        return f"tinyc_mf_to_f32({x}, {f.E}, {f.M}, {f.bias}, {f.kind})", "f32"
    if src == nd.E8M0:
        return f"tinyc_e8m0_to_f32({x})", "f32"
    if src in nd.INTN:
        bits, signed = nd.INTN[src]
        return f"tinyc_intn_value({x}, {bits}, {int(signed)})", "int"
    return x, "int"


def _as_f32(w: str, kind: str) -> str:
    """`w` as a float32 that rounds once more correctly (round to odd from double)."""
    if kind == "f32":
        return w
    if kind == "f64":
        return f"tinyc_f64_to_f32_odd({w})"
    return f"tinyc_f64_to_f32_odd((double)({w}))"


def cast_expr(src: str, to: str, x: str, saturate: bool, round_mode: str = "up") -> str:
    """The C expression converting the element `x` of type `src` to type `to` (storage bits for a
    narrow type; `round_mode` for float8 e8m0)."""
    w, kind = _decode(src, x)
    if to == nd.E8M0:  # from float32: ONNX's reference first rounds any other type to float32
        return f"tinyc_f32_to_e8m0((float)({w}), {nd.E8M0_ROUND[round_mode]}, {int(saturate)})"
    if to == "bool":
        return f"(uint8_t)({w} != 0)"
    if to in CTYPES:
        return f"({CTYPES[to]})({w})"
    if to == "float16":
        return f"tinyc_f32_to_f16({_as_f32(w, kind)})"
    if to == "bfloat16":
        return f"tinyc_f32_to_bf16({_as_f32(w, kind)})"
    if to in nd.MINIFLOATS:
        f = nd.MINIFLOATS[to]
        sat = int(saturate and to in nd.FLOAT8)
        return f"(uint8_t)tinyc_f32_to_mf({_as_f32(w, kind)}, {f.E}, {f.M}, {f.bias}, {f.kind}, {sat})"
    bits, _ = nd.INTN[to]
    lo, hi = nd.intn_range(to)
    if kind == "f32":
        return f"tinyc_f32_to_intn({w}, {lo}, {hi}, {bits})"
    if kind == "f64":
        return f"tinyc_f64_to_intn({w}, {lo}, {hi}, {bits})"
    return f"(uint8_t)((uint32_t)({w}) & {(1 << bits) - 1}u)"


def cast_reference(x: np.ndarray, to: str, saturate: bool, round_mode: str = "up") -> np.ndarray:
    """numpy/ml_dtypes conversion as ONNX's reference does it (saturation only for the 8-bit floats)."""
    import ml_dtypes
    from onnx.numpy_helper import to_float8e8m0

    with np.errstate(all="ignore"):
        if to == nd.E8M0:
            return np.asarray(to_float8e8m0(np.asarray(x).astype(np.float32), saturate, round_mode))
        if saturate and to in nd.FLOAT8 and x.dtype.kind != "b":
            info = ml_dtypes.finfo(np.dtype(to))
            x = np.clip(x, info.min, info.max)
        return np.asarray(x).astype(to)


@register
class Cast(OpDef):
    op = "Cast"
    onnx_ops = ("Cast", "CastLike")
    template = "cast.c.j2"
    dtypes = CAST_TYPES

    def import_onnx(self, ctx):
        to = ctx.dtype(1) if ctx.op_type == "CastLike" else _onnx_type(ctx, ctx.attr("to"))
        if to not in CAST_TYPES or ctx.dtype(0) not in CAST_TYPES:
            ctx.unsupported(f"cast from {ctx.dtype(0)} to {to} is not supported")
        saturate = bool(int(ctx.attr("saturate", 1)))
        mode = ctx.attr("round_mode", "up")
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        if mode not in nd.E8M0_ROUND:
            ctx.invalid(f"round_mode '{mode}' (nearest, up or down)")
        return ctx.make_node("Cast", inputs=ctx.inputs[:1], to=to, saturate=saturate, round_mode=mode)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, node.attrs["to"])]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        return [cast_reference(inputs[0], a["to"], bool(a.get("saturate", True)), a.get("round_mode", "up"))]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        src = graph.tensor(node.inputs[0]).dtype
        a = node.attrs
        expr = cast_expr(src, a["to"], "in0[i]", bool(a.get("saturate", True)), a.get("round_mode", "up"))
        return {"count": graph.tensor(node.inputs[0]).size, "expr": expr}
