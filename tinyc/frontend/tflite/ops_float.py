"""float32 TFLite operators: convolutions, fully connected, elementwise arithmetic, pooling,
softmax and the activations, on tinyc's float kernels (channels-last, as the file stores them).

TFLite Micro's float kernels compute the same real-valued formulas as tinyc's float ops, so the
results agree to float rounding (not bit for bit). A fused activation becomes a separate Relu /
Clip node after the operator (tinyc's fuse pass absorbs it into Conv / Gemm / Add). MAX_POOL_2D
is converted here for both float32 and int8: a maximum needs no arithmetic, so int8 max pooling
is the same Pool node on the quantized values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinyc.frontend.tflite.context import TflContext, converts
from tinyc.frontend.tflite.ops_core import pool2d_attrs


def _require_float(ctx: TflContext, *tensors: Any) -> None:
    """float32 tensors only: int8 weights on a float input would be a hybrid model, which tinyc does not run."""
    for t in tensors:
        if t.dtype != "float32":
            ctx.unsupported(f"tensor '{t.name}' is {t.dtype} in a float32 operator (hybrid models are not supported)")


def _act_node(ctx: TflContext, src: str, target: str, clamp: tuple[float, float]) -> None:
    """The fused activation (a real clamp) from `src` into `target` as a Relu or Clip node."""
    lo, hi = clamp
    if lo == 0.0 and math.isinf(hi):
        ctx.add(ctx.node("Relu", [src], [target]))
    else:
        ctx.add(ctx.node("Clip", [src], [target], min=float(lo), max=float(hi)))


def _emit(ctx: TflContext, op: str, inputs: list[str], target: str, shape: tuple[int, ...], **attrs: Any) -> None:
    """One node into `target`, followed by the operator's fused activation when it has one."""
    clamp = ctx.float_act()
    if clamp is None:
        ctx.add(ctx.node(op, inputs, [target], **attrs))
        return
    raw = ctx.intermediate("pre_act", shape, "float32")
    ctx.add(ctx.node(op, inputs, [raw], **attrs))
    _act_node(ctx, raw, target, clamp)


def _float_const(ctx: TflContext, i: int, what: str, size: int) -> np.ndarray:
    """A float32 constant input of `size` values, flattened (bias vectors)."""
    v = ctx.require_const(i, what)
    if v.dtype != np.float32 or v.size != size:
        ctx.unsupported(f"{what} of type {v.dtype} and {v.size} values (float32 [{size}] needed)")
    return np.ascontiguousarray(v.reshape(-1), np.float32)


def _input(ctx: TflContext, i: int) -> str:
    name = ctx.input(i)
    assert name is not None
    return name


# -- called by ops_core for float32 inputs ------------------------------------------------------------
def float_conv(ctx: TflContext, wk: np.ndarray, group: int, strides: Any, dil: Any, pads: list[int]) -> None:
    """CONV_2D / DEPTHWISE_CONV_2D in float32: a "Conv" node with NHWC weights [KH, KW, C/G, OC]."""
    x, w, y = ctx.tensor(0), ctx.tensor(1), ctx.out_tensor(0)
    _require_float(ctx, x, w, y)
    KH, KW, _, OC = (int(d) for d in wk.shape)
    bias = _float_const(ctx, 2, "bias", OC) if ctx.has_input(2) else np.zeros(OC, np.float32)
    ins = [_input(ctx, 0), ctx.constant("w", np.ascontiguousarray(wk, np.float32)), ctx.constant("bias", bias)]
    _emit(
        ctx,
        "Conv",
        ins,
        ctx.output(0),
        tuple(y.shape),
        kernel=[KH, KW],
        strides=[int(s) for s in strides],
        pads=[int(p) for p in pads],
        dilations=[int(d) for d in dil],
        group=int(group),
        layout="NHWC",
    )


def float_fc(ctx: TflContext, src: str, wd: np.ndarray, target: str) -> None:
    """FULLY_CONNECTED in float32: y = src @ W^T + b as a Gemm on rows (more leading dims are flattened)."""
    x, w = ctx.tensor(0), ctx.tensor(1)
    _require_float(ctx, x, w, ctx.out_tensor(0))
    N, K = (int(d) for d in wd.shape)
    in_shape = tuple(ctx.graph.tensor(src).shape)
    out_shape = tuple(ctx.graph.tensor(target).shape)
    rows = int(np.prod(in_shape[:-1], dtype=np.int64))
    if len(in_shape) != 2:  # Gemm is 2-D: keep_num_dims inputs of higher rank run as [rows, K]
        flat = ctx.intermediate("rows2d", (rows, K), "float32")
        ctx.add(ctx.node("Reshape", [src], [flat], shape=[rows, K]))
        src = flat
    ins = [src, ctx.constant("w_kn", np.ascontiguousarray(wd.T, np.float32))]
    if ctx.has_input(2):
        ins.append(ctx.constant("bias", _float_const(ctx, 2, "bias", N)))
    gemm_out = target if len(out_shape) == 2 else ctx.intermediate("fc2d", (rows, N), "float32")
    _emit(ctx, "Gemm", ins, gemm_out, (rows, N), transA=0, transB=0, alpha=1.0, beta=1.0)
    if gemm_out != target:
        ctx.add(ctx.node("Reshape", [gemm_out], [target], shape=list(out_shape)))


def float_binary(ctx: TflContext, op_name: str) -> None:
    """An elementwise binary operator (numpy broadcasting) plus the fused activation: ADD, SUB, MUL, DIV, ..."""
    a, b, y = ctx.tensor(0), ctx.tensor(1), ctx.out_tensor(0)
    _require_float(ctx, a, b, y)
    _emit(ctx, op_name, [_input(ctx, 0), _input(ctx, 1)], ctx.output(0), tuple(y.shape))


def float_unary(ctx: TflContext, onnx_op: str, **attrs: Any) -> None:
    """An elementwise unary operator as tinyc's `onnx_op` node (attrs as that op takes them)."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _require_float(ctx, x, y)
    ctx.add(ctx.node(onnx_op, [_input(ctx, 0)], [ctx.output(0)], **attrs))


def float_pool(ctx: TflContext, attrs: dict[str, Any]) -> None:
    """AVERAGE_POOL_2D / MAX_POOL_2D in float32: a "Pool" node (attrs prepared by the caller) + activation."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _require_float(ctx, x, y)
    _emit(ctx, "Pool", [_input(ctx, 0)], ctx.output(0), tuple(y.shape), **attrs)


def float_softmax(ctx: TflContext, beta: float) -> None:
    """SOFTMAX in float32 over the last axis: softmax(beta * x), the input scaled first when beta != 1."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _require_float(ctx, x, y)
    if not math.isfinite(beta) or beta < 0:
        ctx.unsupported(f"beta {beta:g} (a finite beta >= 0 is supported)")
    if not x.shape:
        ctx.unsupported("a scalar input has no axis to normalise over")
    src = _input(ctx, 0)
    if beta != 1.0:
        scaled = ctx.intermediate("scaled", tuple(x.shape), "float32")
        ctx.add(ctx.node("Mul", [src, ctx.constant("beta", np.asarray(beta, np.float32))], [scaled]))
        src = scaled
    ctx.add(ctx.node("Softmax", [src], [ctx.output(0)], kind="softmax", axes=[len(x.shape) - 1]))


# -- float32 elementwise builtins (their converters live in ops_elementwise, which calls this) -------------
#: binary builtins -> tinyc op (ADD, SUB, MUL, DIV carry a fused activation; the others have none)
_BINARY = {"ADD": "Add", "SUB": "Sub", "MUL": "Mul", "DIV": "Div", "MAXIMUM": "Max", "MINIMUM": "Min", "PRELU": "PRelu"}
#: unary builtins without options -> (tinyc op, attrs)
_UNARY: dict[str, tuple[str, dict[str, float]]] = {
    "LOGISTIC": ("Sigmoid", {}),
    "TANH": ("Tanh", {}),
    "RELU": ("Relu", {}),
    "RELU6": ("Clip", {"min": 0.0, "max": 6.0}),
    "RELU_N1_TO_1": ("Clip", {"min": -1.0, "max": 1.0}),
    "HARD_SWISH": ("HardSwish", {}),
    "ELU": ("Elu", {"alpha": 1.0}),
    "EXP": ("Exp", {}),
    "LOG": ("Log", {}),
    "SQRT": ("Sqrt", {}),
    "ABS": ("Abs", {}),
    "NEG": ("Neg", {}),
}
#: every builtin float_elementwise converts
FLOAT_ELEMENTWISE = frozenset({*_BINARY, *_UNARY, "LEAKY_RELU", "SQUARED_DIFFERENCE", "RSQRT"})


def _squared_difference(ctx: TflContext) -> None:
    """(a - b)^2 as TFLite computes it: the difference, then its product with itself."""
    a, b, y = ctx.tensor(0), ctx.tensor(1), ctx.out_tensor(0)
    _require_float(ctx, a, b, y)
    diff = ctx.intermediate("diff", tuple(y.shape), "float32")
    ctx.add(ctx.node("Sub", [_input(ctx, 0), _input(ctx, 1)], [diff]))
    ctx.add(ctx.node("Mul", [diff, diff], [ctx.output(0)]))


def _rsqrt(ctx: TflContext) -> None:
    """1 / sqrt(x), the two steps TFLite's float kernel takes."""
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    _require_float(ctx, x, y)
    root = ctx.intermediate("sqrt", tuple(x.shape), "float32")
    ctx.add(ctx.node("Sqrt", [_input(ctx, 0)], [root]))
    ctx.add(ctx.node("Reciprocal", [root], [ctx.output(0)]))


def float_elementwise(ctx: TflContext) -> None:
    """The float32 path of an elementwise builtin (FLOAT_ELEMENTWISE), for the int8 converters to delegate to."""
    name = ctx.op.name
    if name in _BINARY:
        float_binary(ctx, _BINARY[name])
    elif name in _UNARY:
        op, attrs = _UNARY[name]
        float_unary(ctx, op, **attrs)
    elif name == "LEAKY_RELU":
        float_unary(ctx, "LeakyRelu", alpha=float(np.float32(ctx.opt("alpha", 0.0))))
    elif name == "SQUARED_DIFFERENCE":
        _squared_difference(ctx)
    elif name == "RSQRT":
        _rsqrt(ctx)
    else:
        ctx.unsupported(f"{name} has no float32 conversion")


# -- MAX_POOL_2D (float32 and int8) -----------------------------------------------------------------------
@converts("MAX_POOL_2D")
def max_pool(ctx: TflContext) -> None:
    """Max pooling over the in-bounds taps (TFLite's SAME padding never wins a maximum).

    int8: the maximum of quantized values is the quantized maximum when input and output share
    their grid, so the float Pool node runs on int8 unchanged; the fused activation is TFLite's
    act_range clamp, applied as a 256-entry table (QLut) when it clips anything.
    """
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    attrs = pool2d_attrs(ctx, "max")
    if x.dtype == "float32":
        float_pool(ctx, attrs)
        return
    for t in (x, y):
        if t.dtype != "int8":
            ctx.unsupported(f"tensor '{t.name}' is {t.dtype} (int8 or float32 models)")
    s_x, zp_x = ctx.require_per_tensor(x, "input")
    s_y, zp_y = ctx.require_per_tensor(y, "output")
    if np.float32(s_x) != np.float32(s_y) or zp_x != zp_y:
        ctx.unsupported(f"input grid ({s_x:g}, {zp_x}) and output grid ({s_y:g}, {zp_y}) differ")
    lo, hi = ctx.act_range(y)
    out = ctx.output(0)
    if (lo, hi) == (-128, 127):
        ctx.add(ctx.node("Pool", [_input(ctx, 0)], [out], **attrs))
        return
    raw = ctx.intermediate("pool", tuple(y.shape), "int8", s_y, zp_y)
    ctx.add(ctx.node("Pool", [_input(ctx, 0)], [raw], **attrs))
    table = np.clip(np.arange(-128, 128), lo, hi).astype(np.int8)
    ctx.add(ctx.node("QLut", [raw, ctx.constant("clamp_lut", table)], [out]))
