"""Converters of the operators the MLPerf Tiny models are made of (int8): convolutions, fully
connected, ADD, average pooling, RESHAPE, SOFTMAX — TFLite Micro's integer semantics on
tinyc's channels-last kernels."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.frontend.tflite.context import TflContext, converts
from tinyc.numerics import fixed_point as arith
from tinyc.ops.qconv import INT32_MAX
from tinyc.ops.qelementwise import build_qadd
from tinyc.ops.qpool import build_tflm_avgpool
from tinyc.ops.tflm_softmax import build_tflm_softmax


def same_or_valid_pads(
    ctx: TflContext, in_hw: tuple[int, int], k_hw: tuple[int, int], strides: tuple[int, int], dil: tuple[int, int]
) -> tuple[list[int], tuple[int, int]]:
    """TFLite's ComputePaddingHeightWidth: ([top, left, bottom, right], (OH, OW)); SAME puts the odd
    pixel after (offset), VALID pads nothing."""
    pads_b, pads_e, out = [], [], []
    for n, k, s, d in zip(in_hw, k_hw, strides, dil):
        eff = (k - 1) * d + 1
        if ctx.padding() == "SAME":
            o = (n + s - 1) // s
        else:
            o = (n - eff + s) // s
        total = max((o - 1) * s + eff - n, 0)
        pads_b.append(total // 2)
        pads_e.append(total - total // 2)
        out.append(o)
    if min(out) < 1:
        ctx.unsupported(f"empty output for input {list(in_hw)} and kernel {list(k_hw)}")
    return pads_b + pads_e, (out[0], out[1])


def _int8_io(ctx: TflContext, *tensors: Any) -> None:
    for t in tensors:
        if t.dtype != "int8":
            ctx.unsupported(f"tensor '{t.name}' is {t.dtype} (int8 or float32 models)")
        ctx.require_per_tensor(t, "tensor")


def _requant(ctx: TflContext, s_in: float, s_w: np.ndarray, s_out: float) -> tuple[list[int], list[int]]:
    try:
        mult, shift = arith.requant_params(np.float32(s_in), np.asarray(s_w, np.float32), np.float32(s_out))
    except ValueError as exc:
        ctx.unsupported(f"requantization multiplier: {exc}")
    return [int(v) for v in np.asarray(mult).reshape(-1)], [int(v) for v in np.asarray(shift).reshape(-1)]


def _weight_scales(ctx: TflContext, w: Any, oc: int, axis: int) -> np.ndarray:
    if not w.quantized:
        ctx.unsupported(f"weights '{w.name}' have no quantization parameters")
    if np.any(w.zero_point != 0):
        ctx.unsupported(f"weights '{w.name}' have a non-zero zero point (TFLite int8 weights are symmetric)")
    s = np.asarray(w.scale, np.float32)
    if s.size not in (1, oc) or (s.size > 1 and w.quantized_dimension != axis):
        ctx.unsupported(f"weights '{w.name}': {s.size} scales on dimension {w.quantized_dimension} for {oc} channels")
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        ctx.unsupported(f"weights '{w.name}' have a non-positive scale")
    return np.broadcast_to(s, (oc,)).astype(np.float32)


def _bias(ctx: TflContext, i: int, oc: int) -> np.ndarray:
    if not ctx.has_input(i):
        return np.zeros(oc, np.int32)
    b = ctx.require_const(i, "bias")
    if b.dtype != np.int32 or b.size != oc:
        ctx.unsupported(f"bias of type {b.dtype} and {b.size} values (int32 [{oc}] needed)")
    return b.astype(np.int32).reshape(-1)


def _check_acc(ctx: TflContext, wq: np.ndarray, bias: np.ndarray, x_zp: int) -> None:
    xmax = max(abs(-128 - x_zp), abs(127 - x_zp))
    wsum = np.abs(wq.astype(np.int64)).reshape(-1, wq.shape[-1]).sum(axis=0)
    if int(np.max(np.abs(bias.astype(np.int64)) + xmax * wsum)) > INT32_MAX:
        ctx.unsupported("the int32 accumulator could overflow for this kernel size / weight range")


@converts("CONV_2D", "DEPTHWISE_CONV_2D")
def conv2d(ctx: TflContext) -> None:
    x, w = ctx.tensor(0), ctx.tensor(1)
    if len(x.shape) != 4 or len(w.shape) != 4:
        ctx.unsupported(f"input {list(x.shape)} and filter {list(w.shape)} must be 4-D (NHWC)")
    wd = ctx.require_const(1, "filter")
    N, H, W, C = x.shape
    depthwise = ctx.op.name == "DEPTHWISE_CONV_2D"
    if depthwise:
        _, KH, KW, OC = w.shape
        group = C
        if OC % C:
            ctx.unsupported(f"filter channels {OC} are not a multiple of the input channels {C}")
        wk = wd.reshape(KH, KW, 1, OC)  # [1, KH, KW, C*M] -> [KH, KW, 1, OC]: group c owns outputs c*M ..
        w_axis = 3
    else:
        OC, KH, KW, ICg = w.shape
        if ICg < 1 or C % ICg:
            ctx.unsupported(f"input channels {C} do not divide into filters of {ICg}")
        group = C // ICg
        if OC % group:
            ctx.unsupported(f"{OC} filters do not divide into {group} groups")
        wk = np.transpose(wd, (1, 2, 3, 0))  # [OC, KH, KW, IC/G] -> [KH, KW, IC/G, OC]
        w_axis = 0
    strides = (int(ctx.opt("stride_h", 1)), int(ctx.opt("stride_w", 1)))
    dil = (
        int(ctx.opt("dilation_h_factor", ctx.opt("dilation_hfactor", 1))),
        int(ctx.opt("dilation_w_factor", ctx.opt("dilation_wfactor", 1))),
    )
    pads, _ = same_or_valid_pads(ctx, (H, W), (KH, KW), strides, dil)
    y = ctx.out_tensor(0)
    if x.dtype == "float32":
        _float_conv(ctx, wk, group, strides, dil, pads)
        return
    _int8_io(ctx, x, y)
    if w.dtype != "int8":
        ctx.unsupported(f"filter '{w.name}' is {w.dtype} (int8 only)")
    s_x, zp_x = ctx.qparams(x)
    s_y, zp_y = ctx.qparams(y)
    s_w = _weight_scales(ctx, w, OC, w_axis)
    bias = _bias(ctx, 2, OC)
    wq = np.ascontiguousarray(wk.astype(np.int8))
    _check_acc(ctx, wq, bias, zp_x)
    mult, shift = _requant(ctx, s_x, s_w, s_y)
    act_min, act_max = ctx.act_range(y)
    node = ctx.node(
        "QConv",
        [ctx.input_name(0), ctx.constant("wq", wq), ctx.constant("bias_q", bias)],
        [ctx.output(0)],
        kernel=[KH, KW],
        strides=list(strides),
        pads=pads,
        dilations=list(dil),
        group=group,
        layout="NHWC",
        multiplier=mult,
        shift=shift,
        x_zp=zp_x,
        y_zp=zp_y,
        act_min=act_min,
        act_max=act_max,
        qdtype="int8",
        w_scale=[float(v) for v in s_w],
    )
    ctx.add(node)


def _float_conv(ctx: TflContext, wk: np.ndarray, group: int, strides: Any, dil: Any, pads: list[int]) -> None:
    from tinyc.frontend.tflite.ops_float import float_conv

    float_conv(ctx, wk, group, strides, dil, pads)


@converts("FULLY_CONNECTED")
def fully_connected(ctx: TflContext) -> None:
    x, w, y = ctx.tensor(0), ctx.tensor(1), ctx.out_tensor(0)
    if len(w.shape) != 2:
        ctx.unsupported(f"weights of shape {list(w.shape)} (2-D [N, K] needed)")
    if int(ctx.opt("weights_format", 0)) != 0:
        ctx.unsupported("shuffled weights format")
    N, K = (int(d) for d in w.shape)
    wd = ctx.require_const(1, "weights")
    size = int(np.prod(x.shape, dtype=np.int64))
    if size % K:
        ctx.unsupported(f"input {list(x.shape)} does not flatten into rows of {K}")
    src = ctx.input_name(0)
    rows_shape = (
        tuple(x.shape[:-1]) if ctx.opt("keep_num_dims", False) and x.shape and x.shape[-1] == K else (size // K,)
    )
    if tuple(x.shape) != (*rows_shape, K):
        flat = ctx.intermediate("rows", (*rows_shape, K), x.dtype, *(ctx.qparams(x) if x.quantized else (None, 0)))
        ctx.add(ctx.node("Reshape", [src], [flat], shape=[*rows_shape, K]))
        src = flat
    out = ctx.output(0)
    produced_shape = (*rows_shape, N)
    direct = tuple(y.shape) == produced_shape
    target = (
        out
        if direct
        else ctx.intermediate("fc", produced_shape, y.dtype, *(ctx.qparams(y) if y.quantized else (None, 0)))
    )
    if x.dtype == "float32":
        from tinyc.frontend.tflite.ops_float import float_fc

        float_fc(ctx, src, wd, target)
    else:
        _int8_io(ctx, x, y)
        if w.dtype != "int8":
            ctx.unsupported(f"weights '{w.name}' are {w.dtype} (int8 only)")
        s_x, zp_x = ctx.qparams(x)
        s_y, zp_y = ctx.qparams(y)
        s_w = _weight_scales(ctx, w, N, 0)
        bias = _bias(ctx, 2, N)
        wq = np.ascontiguousarray(wd.astype(np.int8).T)  # [N, K] -> [K, N]
        _check_acc(ctx, wq, bias, zp_x)
        mult, shift = _requant(ctx, s_x, s_w, s_y)
        act_min, act_max = ctx.act_range(y)
        ins = [src, ctx.constant("wq", wq), ctx.constant("bias_q", bias)]
        ctx.add(
            ctx.node(
                "QMatMul",
                ins,
                [target],
                multiplier=mult,
                shift=shift,
                a_zp=zp_x,
                b_zp=[0] * N,
                y_zp=zp_y,
                qmin=-128,
                qmax=127,
                ydtype="int8",
                act_min=act_min,
                act_max=act_max,
                w_scale=[float(v) for v in s_w],
            )
        )
    if not direct:
        ctx.add(ctx.node("Reshape", [target], [out], shape=list(y.shape)))


@converts("ADD")
def add(ctx: TflContext) -> None:
    a, b, y = ctx.tensor(0), ctx.tensor(1), ctx.out_tensor(0)
    if a.dtype == "float32":
        from tinyc.frontend.tflite.ops_float import float_binary

        float_binary(ctx, "Add")
        return
    _int8_io(ctx, a, b, y)
    node = build_qadd(
        ctx.graph,
        ctx.graph.unique_name(ctx.name),
        ctx.input_name(0),
        ctx.input_name(1),
        ctx.output(0),
        None,
        source=ctx.name,
    )
    node.attrs["act_min"], node.attrs["act_max"] = ctx.act_range(y)
    ctx.add(node)


def pool2d_attrs(ctx: TflContext, kind: str) -> dict[str, Any]:
    """A "Pool" node's attrs (kind "avg" or "max") from Pool2DOptions on a 4-D NHWC input; TFLite
    counts only in-bounds taps (count_include_pad 0) and pads SAME as ``same_or_valid_pads``."""
    x = ctx.tensor(0)
    if len(x.shape) != 4:
        ctx.unsupported(f"input {list(x.shape)} must be 4-D (NHWC)")
    k = (int(ctx.opt("filter_height", 1)), int(ctx.opt("filter_width", 1)))
    s = (int(ctx.opt("stride_h", 1)), int(ctx.opt("stride_w", 1)))
    pads, _ = same_or_valid_pads(ctx, (x.shape[1], x.shape[2]), k, s, (1, 1))
    return dict(
        kind=kind,
        kernel=list(k),
        strides=list(s),
        pads=pads,
        dilations=[1, 1],
        ceil_mode=0,
        count_include_pad=0,
        layout="NHWC",
        is_global=False,
    )


@converts("AVERAGE_POOL_2D")
def average_pool(ctx: TflContext) -> None:
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    attrs = pool2d_attrs(ctx, "avg")
    if x.dtype == "float32":
        from tinyc.frontend.tflite.ops_float import float_pool

        float_pool(ctx, attrs)
        return
    _int8_io(ctx, x, y)
    lo, hi = ctx.act_range(y)
    ctx.add(
        build_tflm_avgpool(
            ctx.graph, ctx.graph.unique_name(ctx.name), ctx.input_name(0), ctx.output(0), attrs, lo, hi, source=ctx.name
        )
    )


@converts("RESHAPE")
def reshape(ctx: TflContext) -> None:
    x, y = ctx.tensor(0), ctx.out_tensor(0)
    if int(np.prod(x.shape, dtype=np.int64)) != int(np.prod(y.shape, dtype=np.int64)):
        ctx.unsupported(f"cannot reshape {list(x.shape)} into {list(y.shape)}")
    if x.quantized and y.quantized and ctx.qparams(x) != ctx.qparams(y):
        ctx.unsupported("input and output quantization differ")
    ctx.add(ctx.node("Reshape", [ctx.input_name(0)], [ctx.output(0)], shape=list(y.shape)))


@converts("SOFTMAX")
def softmax(ctx: TflContext) -> None:
    x = ctx.tensor(0)
    beta = float(ctx.opt("beta", 1.0))
    if x.dtype == "float32":
        from tinyc.frontend.tflite.ops_float import float_softmax

        float_softmax(ctx, beta)
        return
    _int8_io(ctx, x, ctx.out_tensor(0))
    ctx.add(
        build_tflm_softmax(
            ctx.graph, ctx.graph.unique_name(ctx.name), ctx.input_name(0), ctx.output(0), beta, source=ctx.name
        )
    )
