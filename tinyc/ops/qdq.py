"""QuantizeLinear and DequantizeLinear (ONNX opsets 10-28): integer, 4-/2-bit, float8 and float4
quantized types; per-tensor, per-axis and blocked (``block_size``) parameters.

Both are elementwise affine maps whose parameters (scale, zero point) must be compile-time
constants. The integer arithmetic is ``tinyc.numerics.fixed_point`` (the project's one integer truth):

* Quantize to an integer type: ``q = clamp(round_half_even(x / scale) + zp, qmin, qmax)`` with the
  division in x's float type (float32), like onnxruntime and ONNX's reference: the C kernel divides
  (it does not multiply by 1/scale, which rounds differently) and rounds with ``rintf`` (half to even
  in the default rounding mode). int4/uint4/int2/uint2 are stored one per byte (their numpy bits).
* Quantize to a float8 type: ``x / scale`` converted like Cast (``saturate``; the zero point must be
  0); to float4: ``x / scale + zp`` converted (float4 saturates). As ONNX's reference.
* Dequantize: ``y = float32(x - zp) * scale`` (float8/float4 inputs: ``float32(x) * scale``, their
  zero point ignored as ONNX's reference does).

Per-tensor parameters are baked into the kernel as literals (the node has one input); per-axis and
blocked parameters are constant inputs 1 (scale, float32) and 2 (zero point, int32; float32 for
float4). Blocked scales have the input's shape with dim ``axis`` divided (rounded up) by ``block_size``.
A float16 / bfloat16 input or scale is widened to float32 at import (tinyc/frontend/widen.py) and the
float output narrowed back, which is ONNX's reference arithmetic for DequantizeLinear.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import TensorProto, helper

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node, QuantParams
from tinyc.numerics import dtypes as nd
from tinyc.numerics import fixed_point as arith
from tinyc.ops.base import OpDef, OutputType, normalize_axis, register
from tinyc.ops.cast import cast_reference

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext

#: Integer types a quantized tensor may have, with their [qmin, qmax].
QRANGE: dict[str, tuple[int, int]] = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (-32768, 32767),
    "uint16": (0, 65535),
    **{name: nd.intn_range(name) for name in nd.INTN},
}
#: Float quantized types (float8: Cast's conversion with `saturate`; float4 saturates always).
QFLOAT = nd.FLOAT8 + ("float4_e2m1fn",)
QTYPES = tuple(QRANGE) + QFLOAT
#: 16-bit floats QuantizeLinear reads as such (x / scale rounds to them, as in ONNX's reference).
_HALF = ("float16", "bfloat16")
#: DequantizeLinear also takes int32 input (e.g. biases).
DQ_IN = QTYPES + ("int32",)


def _type_name(elem: int) -> str:
    try:
        return TensorProto.DataType.Name(elem)
    except ValueError:
        return str(elem)


def _onnx_dtype(elem: int) -> str | None:
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem)))
    except Exception:
        return None


def _zero_point(ctx: Any, qdtype: str | None, scale: np.ndarray) -> tuple[np.ndarray, str | None]:
    """The zero point (int64, or float32 for float4; zeros when absent) and the quantized type."""
    zp_in = ctx.const(2) if ctx.has_input(2) else None
    if ctx.has_input(2) and zp_in is None:
        ctx.unsupported("input 2 (zero point) must be a constant known at compile time")
    if zp_in is None:
        return np.zeros(scale.shape, np.int64), qdtype
    zdt = ctx.dtype(2)
    if qdtype is not None and zdt != qdtype:
        ctx.unsupported(f"zero point type {zdt} differs from the quantized type {qdtype}")
    zp = np.asarray(zp_in)
    if zp.shape != scale.shape and zp.size != scale.size:
        ctx.unsupported(f"zero point shape {zp.shape} does not match scale shape {scale.shape}")
    zp = zp.reshape(scale.shape)
    if zdt in nd.FLOAT8:
        if np.any(zp.astype(np.float32) != 0):
            ctx.unsupported("a float8 zero point must be 0")
        return np.zeros(scale.shape, np.int64), zdt
    if zdt == "float4_e2m1fn":
        return zp.astype(np.float32), zdt
    return zp.astype(np.int64), zdt


def _params(ctx: Any, qdtype: str | None) -> dict[str, Any]:
    """Common import: constant scale / zero point, per-tensor, per-axis or blocked, as node attrs or
    inputs. Returns attrs (``axis`` None for per-tensor, else ``scale``/``zp`` live in constant
    inputs ``inputs``) — ``qdtype`` is the quantized type (None: take it from the zero point)."""
    if ctx.dtype(1) not in ("float32",) + _HALF:
        ctx.unsupported(f"scale of type {ctx.dtype(1)} (float32, float16 or bfloat16 only)")
    scale = np.asarray(ctx.require_const(1, "scale")).astype(np.float32)  # exact from float16/bfloat16
    zp, qdtype = _zero_point(ctx, qdtype, scale)
    if not np.all(np.isfinite(scale)):
        ctx.unsupported("scale must be finite")
    rank = len(ctx.shape(0))
    block = int(ctx.attr("block_size", 0) or 0)
    zp_c = zp.astype(np.float32) if zp.dtype.kind == "f" else zp.astype(np.int32)
    if block > 0:
        return _blocked(ctx, scale, zp_c, qdtype, block, rank)
    if scale.size == 1:  # scalar or 1-element: per-tensor (as onnxruntime treats it)
        z = zp.reshape(-1)[0]
        return {
            "axis": None,
            "scale": float(scale.reshape(-1)[0]),
            "zp": float(z) if zp.dtype.kind == "f" else int(z),
            "qdtype": qdtype,
            "inputs": [ctx.inputs[0]],
        }
    if scale.ndim != 1:
        ctx.unsupported(f"scale of shape {scale.shape}: scalar, 1-D (per-axis) or blocked (block_size) only")
    axis = normalize_axis(int(ctx.attr("axis", 1)), rank, f"node '{ctx.name}' ({ctx.op_type})")
    if rank == 0 or ctx.shape(0)[axis] != scale.size:
        ctx.unsupported(
            f"per-axis scale of length {scale.size} does not match dim {axis} of input shape {ctx.shape(0)}"
        )
    s = ctx.add_constant("scale", scale)
    z = ctx.add_constant("zero_point", zp_c)
    return {"axis": axis, "qdtype": qdtype, "inputs": [ctx.inputs[0], s, z]}


def _blocked(ctx: Any, scale: np.ndarray, zp: np.ndarray, qdtype: str | None, block: int, rank: int) -> dict[str, Any]:
    shape = ctx.shape(0)
    axis = normalize_axis(int(ctx.attr("axis", 1)), rank, f"node '{ctx.name}' ({ctx.op_type})")
    want = tuple(-(-d // block) if i == axis else d for i, d in enumerate(shape))
    if scale.shape != want:
        ctx.invalid(f"blocked scale of shape {scale.shape}: expected {want} (block_size {block} on axis {axis})")
    s = ctx.add_constant("scale", scale)
    z = ctx.add_constant("zero_point", zp.reshape(want))
    return {"axis": axis, "block_size": block, "qdtype": qdtype, "inputs": [ctx.inputs[0], s, z]}


def _split(shape: tuple[int, ...], axis: int) -> dict[str, int]:
    return {
        "outer": int(np.prod(shape[:axis], dtype=np.int64)),
        "C": int(shape[axis]),
        "inner": int(np.prod(shape[axis + 1 :], dtype=np.int64)),
    }


def _expand(p: np.ndarray, shape: tuple[int, ...], axis: int, block: int) -> np.ndarray:
    """Per-axis ([C]) or blocked parameters broadcast to the input's shape (ONNX's reshape_input)."""
    if block:
        return np.repeat(p, block, axis=axis).take(range(shape[axis]), axis=axis)
    b = [1] * len(shape)
    b[axis] = shape[axis]
    return p.reshape(b)


def _round_to(dtype: str | None) -> tuple[str, str]:
    """C text around a float expression that rounds it to float16/bfloat16 and back (or nothing)."""
    if dtype == "float16":
        return "tinyc_f16_to_f32(tinyc_f32_to_f16(", "))"
    if dtype == "bfloat16":
        return "tinyc_bf16_to_f32(tinyc_f32_to_bf16(", "))"
    return "", ""


def _decode(dtype: str, x: str) -> str:
    """C: the quantized element `x` as a number (int or float) for dequantization."""
    if dtype in nd.INTN:
        bits, signed = nd.INTN[dtype]
        return f"tinyc_intn_value({x}, {bits}, {int(signed)})"
    if dtype in nd.MINIFLOATS:
        f = nd.MINIFLOATS[dtype]
        return f"tinyc_mf_to_f32({x}, {f.E}, {f.M}, {f.bias}, {f.kind})"
    return x


class _QDQ(OpDef):
    """Shared layout handling: per-tensor is layout-agnostic, per-axis remaps its axis."""

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return not node.attrs.get("block_size")  # blocked scales would need transposing too

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Inputs now arrive untransposed (passes/layout.py): axis a is now axis perm[a]."""
        if node.attrs["axis"] is not None:
            node.attrs["axis"] = perm[node.attrs["axis"]]
        return True

    def _per_axis_ctx(self, node: Node, graph: Graph) -> dict[str, Any]:
        shape = graph.tensor(node.inputs[0]).shape
        if node.attrs["axis"] is None:
            return {"per_tensor": True, "count": int(np.prod(shape, dtype=np.int64)) if shape else 1}
        sp = _split(shape, node.attrs["axis"])
        block = int(node.attrs.get("block_size") or 0)
        if block:  # scale index (o * NB + c / block) * inner + i
            nb = -(-sp["C"] // block)
            strides = {"BS": block, "SO": nb * sp["inner"], "SC": sp["inner"], "SI": 1}
        else:  # scale index c
            strides = {"BS": 1, "SO": 0, "SC": 1, "SI": 0}
        return dict(per_tensor=False, **sp, **strides)

    def _scale_zp(self, node: Node, x: np.ndarray, inputs: list[np.ndarray]) -> tuple[Any, Any]:
        if node.attrs["axis"] is None:
            zp = node.attrs["zp"]
            return np.float32(node.attrs["scale"]), np.float32(zp) if isinstance(zp, float) else np.int64(zp)
        axis, block = node.attrs["axis"], int(node.attrs.get("block_size") or 0)
        z = inputs[2]
        z = z.astype(np.float32) if z.dtype.kind == "f" else z.astype(np.int64)
        return _expand(inputs[1].astype(np.float32), x.shape, axis, block), _expand(z, x.shape, axis, block)


@register
class QuantizeLinear(_QDQ):
    op = "QuantizeLinear"
    onnx_ops = ("QuantizeLinear",)
    template = "quantize_linear.c.j2"
    #: input 0 is float32 or int32; the quantized types are listed so that a narrow zero point is not
    #: widened at import (tinyc/frontend/widen.py reads `dtypes`)
    dtypes = ("float32", "int32") + _HALF + QTYPES

    def import_onnx(self, ctx: ImportContext) -> Node | list[Node]:
        if ctx.dtype(0) not in ("float32", "int32") + _HALF:
            ctx.unsupported(f"input of type {ctx.dtype(0)} (float32, float16, bfloat16 or int32 only)")
        if ctx.const(1) is None:  # a scale the graph computes (expanded DynamicQuantizeLinear)
            from tinyc.ops.dynamic_quantize import import_runtime_scale

            return import_runtime_scale(ctx)
        precision = int(ctx.attr("precision", 0) or 0)
        if precision not in (0, TensorProto.FLOAT):
            ctx.unsupported(f"precision {_type_name(precision)} (float32 only)")
        qdtype: str | None = None
        out_dt = int(ctx.attr("output_dtype", 0) or 0)
        if out_dt:
            qdtype = _onnx_dtype(out_dt)
            if qdtype not in QTYPES:
                ctx.unsupported(f"output_dtype {_type_name(out_dt)} is not a supported quantized type")
        if ctx.has_input(2) and ctx.dtype(2) not in QTYPES:
            ctx.unsupported(f"quantized type {ctx.dtype(2)} ({', '.join(QTYPES)} only)")
        p = _params(ctx, qdtype)
        qd = p["qdtype"] or "uint8"  # no zero point and no output_dtype: uint8 (ONNX default)
        attrs = {k: v for k, v in p.items() if k not in ("inputs", "qdtype")}
        saturate = bool(int(ctx.attr("saturate", 1)))
        # float16 x and float16 scale: ONNX divides in float16 (one rounding of the quotient)
        q_round = ctx.dtype(0) if ctx.dtype(0) in _HALF and ctx.dtype(1) == ctx.dtype(0) else None
        return ctx.make_node(
            self.op, inputs=p["inputs"], outputs=ctx.outputs[:1], qdtype=qd, saturate=saturate, q_round=q_round, **attrs
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, node.attrs["qdtype"])]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        qd = node.attrs["qdtype"]
        scale, zp = self._scale_zp(node, x, inputs)
        if x.dtype.name in _HALF:  # the quotient in float32, rounded to x's type when ONNX divides in it
            with np.errstate(all="ignore"):
                x = (x.astype(np.float32) / scale).astype(np.float32)
            if node.attrs.get("q_round"):
                x = x.astype(node.attrs["q_round"]).astype(np.float32)
            scale = np.float32(1)
        if qd in QFLOAT:
            with np.errstate(all="ignore"):
                v = (x / scale).astype(np.float32)
                if qd == "float4_e2m1fn":
                    v = (v + np.asarray(zp, np.float32)).astype(np.float32)
            return [cast_reference(v, qd, bool(node.attrs.get("saturate", True)))]
        qmin, qmax = QRANGE[qd]
        with np.errstate(all="ignore"):
            q = arith.quantize(x, scale, zp, qmin, qmax).astype(np.int64)
        if x.dtype.kind == "f":
            q = np.where(np.isnan(x), qmin, q)  # the C kernel's (and onnxruntime's x86) NaN rule
        return [q.astype(qd)]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        qd = node.attrs["qdtype"]
        x = graph.tensor(node.inputs[0])
        ctx = dict(
            self._per_axis_ctx(node, graph),
            T="double" if x.dtype == "int32" else "float",
            rint="rint" if x.dtype == "int32" else "rintf",
            is_float=qd in QFLOAT,
            zp_float=qd == "float4_e2m1fn",
            load={"float16": "tinyc_f16_to_f32(@X)", "bfloat16": "tinyc_bf16_to_f32(@X)"}.get(x.dtype, "@X"),
            qwrap=_round_to(node.attrs.get("q_round")),
        )
        if qd in QFLOAT:
            f = nd.MINIFLOATS[qd]
            sat = int(bool(node.attrs.get("saturate", True)) and qd in nd.FLOAT8)
            ctx["enc"] = f"{f.E}, {f.M}, {f.bias}, {f.kind}, {sat}"
        else:
            ctx["qmin"], ctx["qmax"] = QRANGE[qd]
            ctx["mask"] = (1 << nd.INTN[qd][0]) - 1 if qd in nd.INTN else 0
        return ctx


@register
class DequantizeLinear(_QDQ):
    op = "DequantizeLinear"
    onnx_ops = ("DequantizeLinear",)
    template = "dequantize_linear.c.j2"
    dtypes = DQ_IN

    def import_onnx(self, ctx):
        if ctx.dtype(0) not in DQ_IN:
            ctx.unsupported(f"input of type {ctx.dtype(0)} ({', '.join(DQ_IN)} only)")
        out_dt = int(ctx.attr("output_dtype", 0) or 0)
        out_type = _onnx_dtype(out_dt) if out_dt else "float32"
        if out_type not in ("float32", "float16", "bfloat16"):
            ctx.unsupported(f"output_dtype {_type_name(out_dt)} (float32, float16 or bfloat16 only)")
        if ctx.has_input(2) and ctx.dtype(2) != ctx.dtype(0):
            ctx.unsupported(f"zero point type {ctx.dtype(2)} differs from input type {ctx.dtype(0)}")
        p = _params(ctx, ctx.dtype(0))
        attrs = {k: v for k, v in p.items() if k not in ("inputs", "qdtype")}
        if out_type == "float32":
            return ctx.make_node(self.op, inputs=p["inputs"], outputs=ctx.outputs[:1], **attrs)
        tmp = ctx.graph.unique_name(f"{ctx.outputs[0]}__float32")
        dq = ctx.make_node(self.op, inputs=p["inputs"], outputs=[tmp], **attrs)
        return [dq, ctx.make_node("Cast", inputs=[tmp], outputs=ctx.outputs[:1], to=out_type, saturate=False)]

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, "float32")]

    def folded_quant(self, node: Node, graph: Graph) -> QuantParams | None:
        """The parameters of a constant this node dequantizes at import (its grid, for the lowering)."""
        a = node.attrs
        if a.get("block_size") or graph.tensor(node.inputs[0]).dtype in QFLOAT:
            return None  # no per-tensor/per-axis integer grid
        if a["axis"] is None:
            return QuantParams(np.array(a["scale"], np.float32), np.array(a["zp"], np.int64), None)
        return QuantParams(
            np.asarray(graph.tensor(node.inputs[1]).data, np.float32).copy(),
            np.asarray(graph.tensor(node.inputs[2]).data, np.int64).copy(),
            int(a["axis"]),
        )

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        scale, zp = self._scale_zp(node, x, inputs)
        if x.dtype.name in QFLOAT:
            return [(x.astype(np.float32) * scale).astype(np.float32).reshape(x.shape)]
        xi = x.astype(np.int64) if x.dtype.name in nd.INTN else x
        return [np.asarray(arith.dequantize(xi, scale, zp, np.float32), dtype=np.float32).reshape(x.shape)]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        x = graph.tensor(node.inputs[0])
        if x.dtype not in DQ_IN:
            raise UnsupportedError(f"node '{node.source or node.name}' (DequantizeLinear): input type {x.dtype}")
        return dict(
            self._per_axis_ctx(node, graph),
            wide="int64_t" if x.dtype == "int32" else "int32_t",
            dec=_decode(x.dtype, "@X"),
            is_float=x.dtype in QFLOAT,
        )
