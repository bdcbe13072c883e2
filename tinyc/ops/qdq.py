"""QuantizeLinear and DequantizeLinear (ONNX opsets 10-28, integer forms).

Both are elementwise affine maps whose parameters (scale, zero point) must be compile-time
constants. The arithmetic is ``tinyc.numerics.fixed_point`` (the project's one integer truth):

* Quantize: ``q = clamp(round_half_even(x / scale) + zp, qmin, qmax)`` with the division in
  x's float type (float32), like onnxruntime and ONNX's reference: the C kernel divides (it does
  not multiply by 1/scale, which rounds differently) and rounds with ``rintf`` (half to even in
  the default rounding mode).
* Dequantize: ``y = float32(x - zp) * scale``.

Per-tensor parameters are baked into the kernel as literals (the node has one input); per-axis
parameters are constant inputs 1 (scale, float32 [C]) and 2 (zero point, int32 [C]).
Float8 / int4 / int2 / float4 types and blocked quantization (``block_size`` > 0) are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import TensorProto

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node, QuantParams
from tinyc.ops.base import OpDef, OutputType, normalize_axis, register
from tinyc.numerics import fixed_point as arith

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext

#: Integer types a quantized tensor may have, with their [qmin, qmax].
QRANGE: dict[str, tuple[int, int]] = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (-32768, 32767),
    "uint16": (0, 65535),
}
#: DequantizeLinear also takes int32 input (e.g. biases).
DQ_IN = tuple(QRANGE) + ("int32",)
_ONNX_QTYPES: dict[int, str] = {  # keyed by TensorProto.DataType (an int)
    TensorProto.INT8: "int8",
    TensorProto.UINT8: "uint8",
    TensorProto.INT16: "int16",
    TensorProto.UINT16: "uint16",
    TensorProto.INT32: "int32",
}


def _type_name(elem: int) -> str:
    try:
        return TensorProto.DataType.Name(elem)
    except ValueError:
        return str(elem)


def _params(ctx: Any, qdtype: str | None) -> dict[str, Any]:
    """Common import: constant scale / zero point, per-tensor or per-axis, as node attrs or inputs.

    Returns attrs (``axis`` None for per-tensor, else ``scale``/``zp`` live in constant inputs
    ``inputs``) — ``qdtype`` is the quantized type (None: take it from the zero point)."""
    if int(ctx.attr("block_size", 0) or 0) > 0:
        ctx.unsupported(f"blocked quantization (block_size={ctx.attr('block_size')}) is not supported")
    if ctx.dtype(1) != "float32":
        ctx.unsupported(f"scale of type {ctx.dtype(1)} (float32 only)")
    scale = np.asarray(ctx.require_const(1, "scale"), dtype=np.float32)
    zp_in = ctx.const(2) if ctx.has_input(2) else None
    if ctx.has_input(2) and zp_in is None:
        ctx.unsupported("input 2 (zero point) must be a constant known at compile time")
    if zp_in is not None:
        zdt = ctx.dtype(2)
        if qdtype is not None and zdt != qdtype:
            ctx.unsupported(f"zero point type {zdt} differs from the quantized type {qdtype}")
        qdtype = zdt
        zp = np.asarray(zp_in).astype(np.int64)
        if zp.shape != scale.shape and zp.size != scale.size:
            ctx.unsupported(f"zero point shape {zp.shape} does not match scale shape {scale.shape}")
        zp = zp.reshape(scale.shape)
    else:
        zp = np.zeros(scale.shape, np.int64)
    if not np.all(np.isfinite(scale)):
        ctx.unsupported("scale must be finite")
    rank = len(ctx.shape(0))
    if scale.size == 1:  # scalar or 1-element: per-tensor (as onnxruntime treats it)
        return {
            "axis": None,
            "scale": float(scale.reshape(-1)[0]),
            "zp": int(zp.reshape(-1)[0]),
            "qdtype": qdtype,
            "inputs": [ctx.inputs[0]],
        }
    if scale.ndim != 1:
        ctx.unsupported(f"scale of shape {scale.shape}: only scalar or 1-D (per-axis) scales are supported")
    axis = normalize_axis(int(ctx.attr("axis", 1)), rank, f"node '{ctx.name}' ({ctx.op_type})")
    if rank == 0 or ctx.shape(0)[axis] != scale.size:
        ctx.unsupported(
            f"per-axis scale of length {scale.size} does not match dim {axis} of input shape {ctx.shape(0)}"
        )
    s = ctx.add_constant("scale", scale)
    z = ctx.add_constant("zero_point", zp.astype(np.int32))
    return {"axis": axis, "qdtype": qdtype, "inputs": [ctx.inputs[0], s, z]}


def _bshape(x: np.ndarray, axis: int) -> list[int]:
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return shape


def _split(shape: tuple[int, ...], axis: int) -> dict[str, int]:
    return {
        "outer": int(np.prod(shape[:axis], dtype=np.int64)),
        "C": int(shape[axis]),
        "inner": int(np.prod(shape[axis + 1 :], dtype=np.int64)),
    }


class _QDQ(OpDef):
    """Shared layout handling: per-tensor is layout-agnostic, per-axis remaps its axis."""

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return True

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Inputs now arrive untransposed (passes/layout.py): axis a is now axis perm[a]."""
        if node.attrs["axis"] is not None:
            node.attrs["axis"] = perm[node.attrs["axis"]]
        return True

    def _per_axis_ctx(self, node: Node, graph: Graph) -> dict[str, Any]:
        shape = graph.tensor(node.inputs[0]).shape
        if node.attrs["axis"] is None:
            return {"per_tensor": True, "count": int(np.prod(shape, dtype=np.int64)) if shape else 1}
        return dict(per_tensor=False, **_split(shape, node.attrs["axis"]))

    def _scale_zp(self, node: Node, x: np.ndarray, inputs: list[np.ndarray]) -> tuple[Any, Any]:
        if node.attrs["axis"] is None:
            return np.float32(node.attrs["scale"]), np.int64(node.attrs["zp"])
        shape = _bshape(x, node.attrs["axis"])
        return inputs[1].astype(np.float32).reshape(shape), inputs[2].astype(np.int64).reshape(shape)


@register
class QuantizeLinear(_QDQ):
    op = "QuantizeLinear"
    onnx_ops = ("QuantizeLinear",)
    template = "quantize_linear.c.j2"
    dtypes = ("float32", "int32")

    def import_onnx(self, ctx: ImportContext) -> Node | list[Node]:
        if ctx.dtype(0) not in self.dtypes:
            ctx.unsupported(f"input of type {ctx.dtype(0)} (float32 or int32 only)")
        precision = int(ctx.attr("precision", 0) or 0)
        if precision not in (0, TensorProto.FLOAT):
            ctx.unsupported(f"precision {_type_name(precision)} (float32 only)")
        qdtype: str | None = None
        out_dt = int(ctx.attr("output_dtype", 0) or 0)
        if out_dt:
            qdtype = _ONNX_QTYPES.get(out_dt)
            if qdtype not in QRANGE:
                ctx.unsupported(f"output_dtype {_type_name(out_dt)} (int8/uint8/int16/uint16 only)")
        if ctx.has_input(2) and ctx.dtype(2) not in QRANGE:
            ctx.unsupported(f"quantized type {ctx.dtype(2)} (int8/uint8/int16/uint16 only)")
        p = _params(ctx, qdtype)
        # `saturate` only affects float8 outputs, which are refused above.
        qd = p["qdtype"] or "uint8"  # no zero point and no output_dtype: uint8 (ONNX default)
        attrs = {k: v for k, v in p.items() if k not in ("inputs", "qdtype")}
        return ctx.make_node(self.op, inputs=p["inputs"], outputs=ctx.outputs[:1], qdtype=qd, **attrs)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, node.attrs["qdtype"])]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        qmin, qmax = QRANGE[node.attrs["qdtype"]]
        scale, zp = self._scale_zp(node, x, inputs)
        with np.errstate(all="ignore"):
            q = arith.quantize(x, scale, zp, qmin, qmax).astype(np.int64)
        if x.dtype.kind == "f":
            q = np.where(np.isnan(x), qmin, q)  # the C kernel's (and onnxruntime's x86) NaN rule
        return [q.astype(node.attrs["qdtype"])]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        qmin, qmax = QRANGE[node.attrs["qdtype"]]
        x = graph.tensor(node.inputs[0])
        return dict(
            self._per_axis_ctx(node, graph),
            qmin=qmin,
            qmax=qmax,
            T="double" if x.dtype == "int32" else "float",
            rint="rint" if x.dtype == "int32" else "rintf",
        )


@register
class DequantizeLinear(_QDQ):
    op = "DequantizeLinear"
    onnx_ops = ("DequantizeLinear",)
    template = "dequantize_linear.c.j2"
    dtypes = DQ_IN

    def import_onnx(self, ctx):
        if ctx.dtype(0) not in DQ_IN:
            ctx.unsupported(f"input of type {ctx.dtype(0)} (int8/uint8/int16/uint16/int32 only)")
        out_dt = int(ctx.attr("output_dtype", 0) or 0)
        if out_dt not in (0, TensorProto.FLOAT):
            ctx.unsupported(f"output_dtype {_type_name(out_dt)} (float32 only)")
        if ctx.has_input(2) and ctx.dtype(2) != ctx.dtype(0):
            ctx.unsupported(f"zero point type {ctx.dtype(2)} differs from input type {ctx.dtype(0)}")
        p = _params(ctx, ctx.dtype(0))
        attrs = {k: v for k, v in p.items() if k not in ("inputs", "qdtype")}
        return ctx.make_node(self.op, inputs=p["inputs"], outputs=ctx.outputs[:1], **attrs)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, "float32")]

    def folded_quant(self, node: Node, graph: Graph) -> QuantParams:
        """The parameters of a constant this node dequantizes at import (its grid, for the lowering)."""
        a = node.attrs
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
        return [np.asarray(arith.dequantize(x, scale, zp, np.float32), dtype=np.float32).reshape(x.shape)]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        x = graph.tensor(node.inputs[0])
        if x.dtype not in DQ_IN:
            raise UnsupportedError(f"node '{node.source or node.name}' (DequantizeLinear): input type {x.dtype}")
        return dict(self._per_axis_ctx(node, graph), wide="int64_t" if x.dtype == "int32" else "int32_t")
