"""QLinearConv -> QConv: the first true integer kernel (int8/uint8 activations, int32 accumulation).

All quantization parameters are compile-time constants and are turned into integers at import:

* weights become ``w - w_zp`` (int8 when that fits, else int16; ONNX allows uint8 weights with a
  nonzero zero point), so the kernel never subtracts a weight zero point;
* ``M[c] = x_scale * w_scale[c] / y_scale`` becomes ``(multiplier[c], shift[c])`` via
  ``arith.requant_params`` (per output channel; a per-tensor w_scale is broadcast);
* the bias is int32 (zeros when absent).

Run time is pure integer arithmetic (docs/quantization.md): ``acc = bias[c] + sum (x - x_zp) * w'``
in int32, then ``clamp(mbqm(acc, multiplier[c], shift[c]) + y_zp, qmin, qmax)`` — for int8 output
exactly ``arith.requantize``. Padded taps are skipped, which equals padding with ``x_zp``.
onnxruntime requantizes in float, so it may differ from this by 1 LSB.

``build_qconv`` makes the same node from a float Conv of a QDQ or calibrated model (the int8
lowering): symmetric int8 weights per output channel (the model's own grid when it has one),
int32 bias on the grid ``s_x * s_w[c]``, the fused activation folded into the output clamp.

The C kernels (``QConv.implementations``, templates under ``kernels/qconv/``, knob ``variant``): ``baseline`` is the original one-pixel loop;
``direct`` / ``pointwise`` / ``depthwise`` compute a register tile of ``px_tile`` output pixels x
``oc_tile`` channels, so every weight load serves several pixels, with products formed in int16
(exact: see ``_mac_forms``) so that they vectorise, and a branch-free requantization loop equal
to ``tinyc_q_requantize`` bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node, QuantParams
from tinyc.ir.isa import Isa
from tinyc.ops.base import OutputType, get_op, register
from tinyc.ops.conv import (
    Conv,
    conv_dims,
    conv_out_size,
    grid_canonical,
    grid_conv_context,
    grid_conv_default,
    GRID_KNOBS,
    grid_knobs,
    resolve_pads,
)
from tinyc.ops.impl import Implementation, applicable, by_name
from tinyc.ops import _qconv_mve
from tinyc.ops import _qconv_mve_dw
from tinyc.numerics import fixed_point as arith
from tinyc.numerics.qparams import import_scale, import_zero_point
from tinyc.numerics.qparams import qparams_of

#: Activation types the kernel reads/writes, with their clamp ranges.
QRANGE: dict[str, tuple[int, int]] = {"int8": (-128, 127), "uint8": (0, 255)}
INT32_MAX = (1 << 31) - 1
#: mac values whose code uses an ISA extension (knob_isa), in order of preference.
SIMD_FORMS = ("dsp", "mve")
#: QConv register tiles above this many int32 accumulators are not searched on a microcontroller
#: (no logged convolution's best M4 tile had more than 8: 16 keeps a margin)
MCU_MAX_CONV_ACCUMULATORS = 16


def searched_on_mcu(
    space: list[dict[str, Any]], target: str, tiles: tuple[str, str], max_accumulators: int
) -> list[dict[str, Any]]:
    """What the tuner searches of a QConv / QMatMul space on a microcontroller target.

    Every record of the MLPerf Tiny tunings (benchmarks/tuning.py, 916 measurements on the M4
    and the M55) says two kinds of candidates never win there: a product form (`mac`) other than
    the widest SIMD form the space holds (the M4's portable forms were >= 1.45x slower than the
    best DSP candidate, the M55's non-Helium forms >= 3.4x), and register tiles of more than
    `max_accumulators` accumulators in the non-Helium forms (13 usable core registers: they
    spill; fully unrolled they also take seconds to compile, which made them the tuner's slowest
    candidates). The bound is each op's own (MCU_MAX_CONV_ACCUMULATORS here,
    qmatmul.MCU_MAX_MATMUL_ACCUMULATORS). Candidates without a `mac` (the baseline kernel) stay;
    the host and OpenCL spaces are left whole."""
    if Isa.parse(target).family != "mcu":
        return space
    forms = {c.get("mac") for c in space}
    widest = next((f for f in reversed(SIMD_FORMS) if f in forms), None)
    kept = []
    for c in space:
        mac = c.get("mac")
        if mac is None:
            kept.append(c)
            continue
        if widest is not None and mac != widest:
            continue
        if mac != "mve" and int(c.get(tiles[0], 1)) * int(c.get(tiles[1], 1)) > max_accumulators:
            continue
        kept.append(c)
    return kept


def requantize_any(
    acc: np.ndarray, multiplier: np.ndarray, shift: np.ndarray, zp: int, qmin: int, qmax: int, rounding: str = "tflite"
) -> np.ndarray:
    """arith.requantize for int8; for uint8 the same integer steps with a [0, 255] clamp."""
    if (qmin, qmax) == QRANGE["int8"]:
        return np.asarray(arith.requantize(acc, multiplier, shift, zp, qmin, qmax, rounding), dtype=np.int8)
    r = np.asarray(arith.multiply_by_quantized_multiplier(acc, multiplier, shift, rounding)).astype(np.int64)
    return np.clip(r + zp, qmin, qmax).astype(np.uint8)


# -- the int8 lowering's builder -------------------------------------------------------------
def _where(name: str, source: str) -> str:
    return f"node '{source or name}' (QConv)"


def reuse_weight_grid(
    wf: np.ndarray, quant: QuantParams | None, oc_axis: int, axes: tuple[int, ...]
) -> np.ndarray | None:
    """The model's own symmetric weight scales per output channel, or None (recompute them).

    `quant` is the grid a QDQ model gave the weight (per-tensor, or per-axis with the axis counted
    in the ONNX weight's own layout); `axes` are the axis numbers that mean "output channel"
    (`oc_axis` of `wf` as it is now). Reused only when it is symmetric (zero point 0), its scales
    are finite and > 0, and the weights lie on it within [-128, 127] (a grid that folding has
    made stale is not reused)."""
    if quant is None:
        return None
    oc = wf.shape[oc_axis]
    scale = np.asarray(quant.scale, np.float32).reshape(-1)
    zp = np.asarray(quant.zero_point).reshape(-1)
    if np.any(zp != 0) or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        return None
    if scale.size == 1:
        s = np.full(oc, scale[0], np.float32)
    elif scale.size == oc and quant.axis is not None and quant.axis in axes:
        s = scale.astype(np.float32)
    else:
        return None
    shape = [1] * wf.ndim
    shape[oc_axis] = oc
    r = wf.astype(np.float64) / s.astype(np.float64).reshape(shape)
    q = np.rint(r)
    if np.any(np.abs(r - q) > 1e-3) or q.min(initial=0) < -128 or q.max(initial=0) > 127:
        return None
    return s


def quantize_weights(
    wf: np.ndarray, quant: QuantParams | None, oc_axis: int, axes: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weights, float32 scale per output channel): the model's grid when `reuse_weight_grid`
    accepts it, else ``arith.quantize_weights_per_channel`` (max|w| / 127, zero point 0)."""
    s = reuse_weight_grid(wf, quant, oc_axis, axes)
    if s is None:
        q, s = arith.quantize_weights_per_channel(wf, axis=oc_axis)
        return np.asarray(q, np.int8), np.asarray(s, np.float32)
    shape = [1] * wf.ndim
    shape[oc_axis] = -1
    q = arith.quantize(np.asarray(wf, np.float32), s.reshape(shape), 0, -128, 127)
    return np.asarray(q, np.int8), s


def float_bias(graph: Graph, b: str, count: int, where: str) -> np.ndarray:
    """The float bias of a conv / fully connected layer being quantized: constant, `count` finite values."""
    bt = graph.tensor(b)
    if bt.data is None or bt.size != count:
        raise UnsupportedError(f"{where}: bias '{b}' must be a constant of {count} values")
    bf = np.asarray(bt.data, np.float32).reshape(-1)
    if not np.all(np.isfinite(bf)):
        raise UnsupportedError(f"{where}: bias is not finite")
    return bf


def quantize_bias_fitting(
    wf: np.ndarray, wq: np.ndarray, s_w: np.ndarray, bf: np.ndarray, s_x: float, oc_axis: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, weight scales, int32 bias): ``arith.quantize_bias`` on the grid s_x * s_w[c], except
    that a channel whose bias would need more than 2^30 steps of that grid (near-zero weights, e.g.
    a channel that folding or pruning left almost dead) gets the larger weight scale
    |b[c]| / (s_x * 2^30) and is re-quantized on it, as onnxruntime's quantizer does, so that the
    bias stays exact-ish and the int32 accumulator cannot overflow."""
    bs = np.float32(s_x) * np.asarray(s_w, np.float32)
    need = np.abs(np.asarray(bf, np.float64)) / bs.astype(np.float64)
    bad = need > float(1 << 30)
    if np.any(bad):
        s_w = np.asarray(s_w, np.float32).copy()
        s_w[bad] = (np.abs(bf[bad]).astype(np.float64) / (float(np.float32(s_x)) * float(1 << 30))).astype(np.float32)
        s_w[bad] = np.nextafter(s_w[bad], np.float32(np.inf))  # round up: strictly within the budget
        shape = [1] * wf.ndim
        shape[oc_axis] = -1
        wq = np.asarray(arith.quantize(np.asarray(wf, np.float32), s_w.reshape(shape), 0, -127, 127), np.int8)
    return wq, s_w, np.asarray(arith.quantize_bias(bf, np.float32(s_x), s_w), np.int32)


def requant_and_clamp(
    where: str, s_x: float, s_w: np.ndarray, s_y: float, zp_y: int, activation: tuple[float | None, float | None] | None
) -> tuple[list[int], list[int], int, int]:
    """(multipliers, shifts) for M[c] = s_x * s_w[c] / s_y and the int8 clamp of the activation."""
    try:
        mult, shift = arith.requant_params(np.float32(s_x), np.asarray(s_w, np.float32), np.float32(s_y))
    except ValueError as exc:
        raise UnsupportedError(f"{where}: requantization multiplier: {exc}") from None
    lo, hi = (None, None) if activation is None else activation
    act_min, act_max = arith.activation_range("clip", s_y, zp_y, lo, hi)
    if act_min > act_max:
        raise UnsupportedError(f"{where}: the activation clamp {activation} is empty on the output grid")
    return (
        [int(v) for v in np.asarray(mult).reshape(-1)],
        [int(v) for v in np.asarray(shift).reshape(-1)],
        int(act_min),
        int(act_max),
    )


def check_accumulator(where: str, wq: np.ndarray, oc_axis: int, bias: np.ndarray, xmax: int = 255) -> None:
    """Refuse when |bias[c]| + xmax * sum|w[c]| could exceed int32 (|x - x_zp| <= xmax)."""
    red = tuple(i for i in range(wq.ndim) if i != oc_axis % wq.ndim)
    wsum = np.abs(wq.astype(np.int64)).sum(axis=red)
    if int(np.max(np.abs(bias.astype(np.int64)) + xmax * wsum, initial=0)) > INT32_MAX:
        raise UnsupportedError(f"{where}: the int32 accumulator could overflow for this kernel size / weight range")


def _int8_tensor(graph: Graph, name: str, where: str) -> tuple[float, int]:
    t = graph.tensor(name)
    if t.dtype != "int8":
        raise UnsupportedError(f"{where}: tensor '{name}' is {t.dtype} (int8 only)")
    try:
        return qparams_of(graph, name)
    except UnsupportedError as exc:
        raise UnsupportedError(f"{where}: {exc}") from None


def build_qconv(
    graph: Graph,
    name: str,
    x: str,
    w: str,
    b: str | None,
    out: str,
    conv_attrs: dict[str, Any],
    activation: tuple[float | None, float | None] | None = None,
    source: str = "",
) -> Node:
    """A QConv node computing the float Conv (`conv_attrs`: its attrs after the passes, layout
    "NHWC" with weights [*K, C/G, OC], or "NCHW" with [OC, C/G, *K]) on int8 `x` into int8 `out`.

    Weights: int8, symmetric per output channel — the model's own grid (``graph.tensor(w).quant``,
    axis counted in the ONNX OIHW weight) when it is symmetric and fits, else max|w| / 127. Bias:
    int32 on the grid s_x * s_w[c] (``arith.quantize_bias``). Requantization per channel with
    M[c] = s_x * s_w[c] / s_y; `activation` (a real clamp (lo, hi)) becomes [act_min, act_max]."""
    where = _where(name, source)
    s_x, zp_x = _int8_tensor(graph, x, where)
    s_y, zp_y = _int8_tensor(graph, out, where)
    wt = graph.tensor(w)
    if wt.data is None:
        raise UnsupportedError(f"{where}: weights '{w}' must be constant")
    layout = conv_attrs.get("layout", "NCHW")
    if layout not in ("NCHW", "NHWC"):
        raise UnsupportedError(f"{where}: layout {layout!r}")
    wf = np.asarray(wt.data, np.float32)
    kernel = [int(k) for k in conv_attrs["kernel"]]
    if wf.ndim != len(kernel) + 2 or len(kernel) not in (1, 2):
        raise UnsupportedError(f"{where}: weights of shape {list(wf.shape)} for a {len(kernel)}-D kernel")
    if not np.all(np.isfinite(wf)):
        raise UnsupportedError(f"{where}: weights are not finite")
    oc_axis = 0 if layout == "NCHW" else wf.ndim - 1
    axes = (0,) if layout == "NCHW" else (0, wf.ndim - 1)  # ONNX's OIHW axis 0, or the current one
    OC = int(wf.shape[oc_axis])
    wq, s_w = quantize_weights(wf, wt.quant, oc_axis, axes)
    if b is None:
        bias = np.zeros(OC, np.int32)
    else:
        bf = float_bias(graph, b, OC, where)
        wq, s_w, bias = quantize_bias_fitting(wf, wq, s_w, bf, s_x, oc_axis)
    check_accumulator(where, wq, oc_axis, bias)
    mult, shift, act_min, act_max = requant_and_clamp(where, s_x, s_w, s_y, zp_y, activation)
    attrs = dict(
        kernel=kernel,
        strides=[int(v) for v in conv_attrs["strides"]],
        pads=[int(v) for v in conv_attrs["pads"]],
        dilations=[int(v) for v in conv_attrs["dilations"]],
        group=int(conv_attrs.get("group", 1)),
        layout=layout,
        multiplier=mult,
        shift=shift,
        x_zp=zp_x,
        y_zp=zp_y,
        act_min=act_min,
        act_max=act_max,
        qdtype="int8",
        w_scale=[float(v) for v in s_w],
    )
    xs = graph.tensor(x).shape
    C, G = int(xs[1] if layout == "NCHW" else xs[-1]), attrs["group"]
    icg = int(wf.shape[1] if layout == "NCHW" else wf.shape[-2])
    k_w = list(wf.shape[2:]) if layout == "NCHW" else list(wf.shape[:-2])
    if len(xs) != wf.ndim or G < 1 or C != icg * G or OC % G or k_w != kernel:
        raise UnsupportedError(
            f"{where}: input {list(xs)} / weights {list(wf.shape)} / group {G} / kernel {kernel} do not match"
        )
    node = Node(name, "QConv", [x, w, ""], [out], attrs, source=source)
    try:
        ((shape, _),) = get_op("QConv").infer(node, graph)
    except (KeyError, IndexError, ValueError, ZeroDivisionError) as exc:
        raise UnsupportedError(f"{where}: attributes {conv_attrs} do not describe a convolution ({exc})") from None
    if min(shape, default=1) < 1 or tuple(graph.tensor(out).shape) != tuple(shape):
        raise UnsupportedError(
            f"{where}: output '{out}' has shape {list(graph.tensor(out).shape)}, the convolution gives {list(shape)}"
        )
    node.inputs[1] = graph.add_constant(graph.unique_name(f"{name}_wq"), wq)
    node.inputs[2] = graph.add_constant(graph.unique_name(f"{name}_bias_q"), bias)
    return node


@register
class QConv(Conv):
    op = "QConv"
    onnx_ops = ("QLinearConv",)
    absorbs_activation = False  # the int8 kernel clamps; these facts of Conv are not QConv's
    int8_kernel = False
    requantizes = True
    template = "qconv.c.j2"
    channels_last_capable = True
    dtypes = ("int8", "uint8")

    def import_onnx(self, ctx):
        xs = ctx.shape(0)
        if len(xs) not in (3, 4):
            ctx.unsupported(f"only 1D and 2D convolutions are supported (input rank {len(xs)})")
        xdt = ctx.dtype(0)
        if xdt not in QRANGE:
            ctx.unsupported(f"input of type {xdt} (int8/uint8 only)")
        ydt = ctx.dtype(7) if ctx.has_input(7) else xdt
        if ydt not in QRANGE:
            ctx.unsupported(f"output of type {ydt} (int8/uint8 only)")
        wdt = ctx.dtype(3)
        if wdt not in QRANGE:
            ctx.unsupported(f"weights of type {wdt} (int8/uint8 only)")
        w = ctx.const(3)
        if w is None:
            ctx.unsupported("weights must be constant")
        x_scale = import_scale(ctx, 1, "input")
        y_scale = import_scale(ctx, 6, "output")
        x_zp = import_zero_point(ctx, 2, "input", xdt)
        y_zp = import_zero_point(ctx, 7, "output", ydt)
        OC = int(w.shape[0])
        w_scale = np.asarray(ctx.require_const(4, "weight scale"), dtype=np.float32).reshape(-1)
        if w_scale.size not in (1, OC):
            ctx.unsupported(f"weight scale of length {w_scale.size} (need 1 or {OC})")
        if not np.all(np.isfinite(w_scale)) or np.any(w_scale <= 0):
            ctx.unsupported("weight scales must be finite and > 0")
        w_zp = np.zeros(1, np.int64)
        if ctx.has_input(5):
            if ctx.dtype(5) != wdt:
                ctx.unsupported(f"weight zero point of type {ctx.dtype(5)} differs from the weight type {wdt}")
            w_zp = np.asarray(ctx.require_const(5, "weight zero point")).astype(np.int64).reshape(-1)
            if w_zp.size not in (1, OC):
                ctx.unsupported(f"weight zero point of length {w_zp.size} (need 1 or {OC})")
        wq = w.astype(np.int64) - w_zp.reshape(-1, *([1] * (w.ndim - 1)))
        wq = wq.astype(np.int8 if wq.min() >= -128 and wq.max() <= 127 else np.int16)

        n = len(xs) - 2
        kernel = [int(k) for k in (ctx.attr("kernel_shape") or w.shape[2:])]
        if list(w.shape[2:]) != kernel:
            ctx.unsupported(f"kernel_shape {kernel} differs from the weight shape {list(w.shape)}")
        strides = [int(s) for s in (ctx.attr("strides") or [1] * n)]
        dil = [int(d) for d in (ctx.attr("dilations") or [1] * n)]
        group = int(ctx.attr("group", 1))
        pads = resolve_pads(ctx, xs[2:], kernel, strides, dil)
        if group < 1 or xs[1] != w.shape[1] * group or OC % group:
            ctx.unsupported(
                f"input channels {xs[1]} / output channels {OC} do not match weights "
                f"{list(w.shape)} with {group} groups"
            )
        if any(conv_out_size(xs[2 + i], kernel[i], strides[i], dil[i], pads[i], pads[i + n]) < 1 for i in range(n)):
            ctx.unsupported("empty output")

        if ctx.has_input(8):
            if ctx.dtype(8) != "int32":
                ctx.unsupported(f"bias of type {ctx.dtype(8)} (int32 only)")
            b = np.asarray(ctx.require_const(8, "bias")).astype(np.int32).reshape(-1)
            if b.size != OC:
                ctx.unsupported(f"bias of length {b.size} (need {OC})")
        else:
            b = np.zeros(OC, np.int32)
        # The int32 accumulator must not overflow (C signed overflow is undefined).
        xmax = max(abs(QRANGE[xdt][0] - x_zp), abs(QRANGE[xdt][1] - x_zp))
        wsum = np.abs(wq.astype(np.int64)).reshape(OC, -1).sum(axis=1)
        if int(np.max(np.abs(b.astype(np.int64)) + xmax * wsum)) > INT32_MAX:
            ctx.unsupported("the int32 accumulator could overflow for this kernel size / weight range")
        try:
            mult, shift = arith.requant_params(
                np.float32(x_scale), np.broadcast_to(w_scale, (OC,)).astype(np.float32), np.float32(y_scale)
            )
        except ValueError as exc:
            ctx.unsupported(f"requantization multiplier: {exc}")
        qmin, qmax = QRANGE[ydt]
        ins = [ctx.inputs[0], ctx.add_constant("wq", wq), ctx.add_constant("bias_q", b)]
        return ctx.make_node(
            "QConv",
            inputs=ins,
            outputs=ctx.outputs[:1],
            kernel=kernel,
            strides=strides,
            pads=pads,
            dilations=dil,
            group=group,
            layout="NCHW",
            multiplier=[int(v) for v in np.asarray(mult).reshape(-1)],
            shift=[int(v) for v in np.asarray(shift).reshape(-1)],
            x_zp=x_zp,
            y_zp=y_zp,
            act_min=qmin,
            act_max=qmax,
            qdtype=ydt,
        )

    # -- shapes ---------------------------------------------------------------------------
    def onnx_weight_axis(self, op_type: str, attr: Any) -> int | None:
        return None  # QLinearConv arrives quantized: no weight for the QDQ export to quantize

    def task_dims(self, node: Node, graph: Graph) -> dict[str, int]:
        return {k: int(v) for k, v in self._dims(node, graph).items()}

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        ((shape, _),) = super().infer(node, graph)
        return [(shape, node.attrs["qdtype"])]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Integer golden model: int64 sums of (x - x_zp) * w' + bias (exact; import guarantees
        they fit int32), then the fixed-point requantization per output channel."""
        a = node.attrs
        x, w, b = inputs[0], inputs[1], inputs[2]
        if a["layout"] != "NCHW":
            x = np.moveaxis(x, -1, 1)
            w = np.moveaxis(np.moveaxis(w, -1, 0), -1, 1)  # [*K, ICg, OC] -> [OC, ICg, *K]
        n_sp = x.ndim - 2
        xi = x.astype(np.int64) - a["x_zp"]
        pad_width = [(0, 0), (0, 0)] + [(a["pads"][i], a["pads"][i + n_sp]) for i in range(n_sp)]
        xp = np.pad(xi, pad_width)  # zeros == padding with x_zp
        N, C = x.shape[:2]
        OC, group = w.shape[0], a["group"]
        icg, ocg = C // group, OC // group
        k = w.shape[2:]
        st, dl = a["strides"], a["dilations"]
        out_sp = [
            conv_out_size(x.shape[2 + i], k[i], st[i], dl[i], a["pads"][i], a["pads"][i + n_sp]) for i in range(n_sp)
        ]
        acc = np.zeros((N, OC, *out_sp), np.int64)
        wi = w.astype(np.int64)
        for kidx in np.ndindex(*k):
            sl = [slice(None), slice(None)]
            for i in range(n_sp):
                start = kidx[i] * dl[i]
                sl.append(slice(start, start + (out_sp[i] - 1) * st[i] + 1, st[i]))
            patch = xp[tuple(sl)]
            for g in range(group):
                pg = patch[:, g * icg : (g + 1) * icg]
                wg = wi[(slice(g * ocg, (g + 1) * ocg), slice(None)) + tuple(kidx)]
                acc[:, g * ocg : (g + 1) * ocg] += np.einsum("nc...,oc->no...", pg, wg)
        acc += b.astype(np.int64).reshape(1, OC, *([1] * n_sp))
        bshape = (OC,) + (1,) * n_sp
        mult = np.asarray(a["multiplier"], np.int64).reshape(bshape)
        shift = np.asarray(a["shift"], np.int64).reshape(bshape)
        y = requantize_any(acc, mult, shift, a["y_zp"], a["act_min"], a["act_max"], arith.rounding_of(a))
        if a["layout"] != "NCHW":
            y = np.moveaxis(y, 1, -1)
        return [np.ascontiguousarray(y)]

    # -- schedule -------------------------------------------------------------------------
    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        """variant: the tiled kernel for the shape ("pointwise" for 1x1 / stride 1 / no padding,
        "depthwise" for C/G == 1 — "depthwise_rows" when also stride 1 along W and channel
        multiplier 1: pixels x channels as one lane vector, first for C < 32 —, else "direct") or
        "baseline" (one pixel at a time, the original kernel); oc_tile / px_tile: the register tile (channels x output pixels, tails handled);
        mac: how products are formed (``_mac_forms``); wide_weights: widen int8 weights to int16
        into the scratch buffer once per call (a vector of int8 weights narrower than the SIMD
        width would not vectorise); loop_order: which tile loop is outside."""
        m = self._dims(node, graph)
        dw = _depthwise(m)
        ch = m["OC"] if dw else m["OCG"]
        oc_tiles = [t for t in (64, 32, 16, 8, 4, 2, 1) if t <= ch]
        if ch < 64 and ch not in oc_tiles:
            oc_tiles.insert(0, ch)
        pixels = m["N"] * m["OH"] * m["OW"]
        forms = _mac_forms(node, graph)
        int8_w = graph.tensor(node.inputs[1]).dtype == "int8" and forms[0] != "i32"
        return {
            "variant": [i.name for i in applicable(self.implementations, node, graph)],
            "oc_tile": oc_tiles,
            "px_tile": [t for t in (16, 8, 6, 4, 3, 2, 1) if t <= pixels],
            "mac": forms,
            "wide_weights": [False, True] if int8_w else [False],
            "loop_order": ["pixels_outer", "channels_outer"],
            **grid_knobs(),
        }

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        """Measured on x86 AVX-512 (benchmarks/qconv_kernels.py): 64 (else 32, else all) channels per
        tile, as many pixels as keep <= 256 int32 accumulators, the cheapest exact product form;
        on the host int16 weights (16-bit vectors of int16 products need no widening per load;
        depthwise reads int8 activations anyway, so there only for 16 <= tile < 64 channels)."""
        ks = self.knobs(node, graph)
        m = self._dims(node, graph)
        isa = Isa.parse(target)
        if isa.work_items:
            return grid_conv_default(m, ks)
        dw = ks["variant"][0] in ("depthwise", "depthwise_rows")
        ch = m["OC"] if dw else m["OCG"]
        t = 64 if ch >= 64 else (32 if ch >= 32 else ch)
        j = max([p for p in ks["px_tile"] if p * t <= 256 and p <= 8] or [1])
        if ks["variant"][0] == "depthwise_rows":  # about 128 lanes of pixels x channels
            j = max([p for p in ks["px_tile"] if p * m["C"] <= 128] or [1])
        wide = isa.family == "host" and True in ks["wide_weights"] and (not dw or 16 <= t < 64)
        order = "channels_outer" if graph.tensor(node.inputs[1]).nbytes > 256 * 1024 else "pixels_outer"
        sched = {
            "variant": ks["variant"][0],
            "oc_tile": t,
            "px_tile": j,
            "mac": ks["mac"][0],
            "wide_weights": wide,
            "loop_order": order,
        }
        simd = next((f for f in reversed(SIMD_FORMS) if isa.has(f) and f in ks["mac"]), None)
        if simd is not None:  # dsp: weights pre-split (2x their flash) up to 64 KiB of them
            # (measured on the M4: 4 SXTB16 fewer per 16 MACs; ResNet-8's 36 KiB 3x3 64 -> 64 conv)
            split = (
                simd == "dsp"
                and not dw
                and True in ks["wide_weights"]
                and graph.tensor(node.inputs[1]).nbytes <= 64 * 1024
            )
            sched.update(
                mac=simd,
                wide_weights=split,
                loop_order="pixels_outer",
                **_simd_tiles(simd, dw, ch, ks["px_tile"], self._dsp_run(m, ks["variant"][0])),
            )
            if dw:
                sched["variant"] = "depthwise"
        return sched

    def searched(self, node: Node, graph: Graph, space: list[dict[str, Any]], target: str) -> list[dict[str, Any]]:
        return searched_on_mcu(space, target, ("oc_tile", "px_tile"), MCU_MAX_CONV_ACCUMULATORS)

    def canonical_schedule(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> dict[str, Any]:
        """ "baseline" reads no knob; "grid" only oc_tile, px_tile, vec, local_mem and loop_order
        (``grid_canonical``; int32 products, no scratch); a SIMD form on a variant without that micro-kernel runs the
        "i16x2" loops; only dense "dsp" stores pre-split weights (wide_weights)."""
        sched = {k: v for k, v in schedule.items() if k not in ("vec", "local_mem")}
        if sched.get("variant") == "baseline":
            return {"variant": "baseline"}
        if sched.get("variant") == "grid":
            m = self._dims(node, graph)
            dw = m["ICG"] == 1 and m["G"] > 1
            ch = m["OC"] if dw else m["OCG"]
            return grid_canonical(
                schedule,
                ("oc_tile", "px_tile"),
                ch,
                self.knobs(node, graph)["px_tile"],
                vector_ok=not dw or m["OCG"] == 1,
            )
        if "mac" in sched and "variant" in sched:
            if sched["mac"] in SIMD_FORMS and self._simd(sched) is None:
                sched["mac"] = "i16x2"
            if self._simd(sched) == "mve" and sched["variant"] != "depthwise" and "px_tile" in sched:
                # the Helium dense kernel (_qconv_mve): blocks of <= 4 pixels x 1 channel, all of a
                # group's channels in one loop after the pixels' inputs are gathered (a narrower
                # channel tile only gathers them again)
                sched["px_tile"] = min(int(sched["px_tile"]), _qconv_mve.MVE_DENSE_PIXELS)
                sched["oc_tile"] = _qconv_mve.channel_tile(self._dims(node, graph)["OCG"])
            if self._simd(sched) == "mve" and sched["variant"] == "depthwise":
                # the Helium depthwise kernel (_qconv_mve_dw) reads px_tile only (1 or 2 pixels along
                # W; the channels always in blocks of 8, innermost)
                m = self._dims(node, graph)
                if "px_tile" in sched:
                    sched["px_tile"] = _qconv_mve_dw.pixels(sched, m)
                if "oc_tile" in sched:
                    sched["oc_tile"] = _simd_tiles("mve", True, m["OC"], [1])["oc_tile"]
                if "loop_order" in sched:
                    sched["loop_order"] = "pixels_outer"
            if "wide_weights" in sched and (
                self._simd(sched) == "mve" or (self._simd(sched) == "dsp" and sched["variant"] == "depthwise")
            ):
                sched["wide_weights"] = False
        return sched

    def implementation(
        self, node: Node, graph: Graph, schedule: dict[str, Any] | None, target: str
    ) -> tuple[Implementation, dict[str, Any]]:
        """The registered implementation a schedule runs, and the schedule completed with the
        target's default (the knobs it leaves out): what scratch_bytes and kernel_context use."""
        sched = {**self.default_schedule(node, graph, target), **(schedule or {})}
        name = self._simd(sched) or sched["variant"]
        if name == "mve" and _is_depthwise(node, graph):  # Helium depthwise has its own kernel
            name = "mve_depthwise"
        return by_name(self.implementations, name, f"node '{node.source or node.name}' (QConv)"), sched

    @staticmethod
    def _simd(sched: dict[str, Any]) -> str | None:
        """The SIMD micro-kernel the schedule runs ("dsp" / "mve"), None for the portable loops:
        "pointwise" / "direct" / "depthwise" have them; "depthwise_rows" runs "i16x2" for them."""
        mac, variant = sched.get("mac"), sched["variant"]
        if mac in SIMD_FORMS and variant in ("pointwise", "direct", "depthwise"):
            return mac
        return None

    def _rowmode(self, m: dict[str, int], sched: dict[str, Any]) -> bool:
        """SIMD direct kernels take a kernel row's KW taps as one run of KW * C contiguous inputs
        (one group, no dilation along W); "dsp" gathers the whole patch instead (``_patch``)."""
        return (
            self._simd(sched) is not None
            and sched["variant"] == "direct"
            and m["G"] == 1
            and m["DW"] == 1
            and not self._patch(m, sched)
        )

    def _patch(self, m: dict[str, int], sched: dict[str, Any]) -> bool:
        """The "dsp" direct kernels (one group) gather each output pixel's KH * KW * C inputs (x_zp where
        padding) into a scratch row once per pixel tile (CMSIS-NN's im2col), so that every channel
        tile runs one contiguous dot product over them: the row / tap pointers and padding tests
        are not redone per channel tile (the first layers with 1-3 input channels spent more on
        them than on the MACs: KWS 10x4x1 0.22 MAC/instruction)."""
        return self._simd(sched) == "dsp" and sched["variant"] == "direct" and m["G"] == 1

    def _dsp_run(self, m: dict[str, int], variant: str) -> int:
        """The inputs per dot product of the "dsp" dense kernel: the patch, or one tap's channels."""
        return self._patch_len(m) if variant == "direct" and m["G"] == 1 else m["ICG"]

    @staticmethod
    def _patch_len(m: dict[str, int]) -> int:
        """Bytes of one pixel's gathered inputs (KH * KW * C), rounded up to 4: the padding bytes
        are zeros and so are their weights, so the dot product has no scalar tail (first layers:
        3x3x3 = 27 -> 28)."""
        return (m["KH"] * m["KW"] * m["C"] + 3) // 4 * 4

    def _xsplit(self, m: dict[str, int], sched: dict[str, Any]) -> int:
        """int32 words per pixel when the "dsp" dense kernel (one group) splits each pixel's inputs
        once per pixel tile into the int16 pairs SXTB16 / SXTB16 ROR #8 make of them (as the
        pre-split weights; CMSIS-NN's int16 im2col), else 0: every channel tile then runs loads and
        SMLADs only (12 instructions per 16 MACs in a 2 x 2 block instead of 16). With 4 channels
        or fewer there are too few channel tiles to pay for the split."""
        if self._simd(sched) != "dsp" or sched["variant"] not in ("pointwise", "direct") or m["G"] != 1:
            return 0
        if m["OCG"] <= 4:
            return 0
        rl = self._patch_len(m) if sched["variant"] == "direct" else m["C"]
        return (rl - rl % 4) // 2 + rl % 4

    def _scratch_layout(self, node: Node, graph: Graph, sched: dict[str, Any]) -> tuple[int, int, int]:
        """(bytes of int16 weights, offset of the x_zp row, its length): the scratch buffer."""
        if sched["variant"] in ("baseline", "grid"):
            return 0, 0, 0
        m = self._dims(node, graph)
        if self._simd(sched) == "mve" and not _depthwise(m):  # the Helium dense kernel's gathered runs
            return _qconv_mve.scratch_layout(m, sched)
        if self._simd(sched) == "mve":  # the Helium depthwise kernel: its x_zp row only
            return 0, 0, _qconv_mve_dw.zrow_len(m, sched)
        wide = sched.get("wide_weights") and self._simd(sched) is None
        wbytes = 2 * graph.tensor(node.inputs[1]).size if wide else 0
        padded = any(m[k] for k in ("PT", "PL", "PB", "PR"))
        zlen = (
            {"depthwise": m["C"], "depthwise_rows": m["C"] * max(1, int(sched["px_tile"]))}.get(
                sched["variant"], m["ICG"]
            )
            if padded
            else 0
        )
        if padded and self._rowmode(m, sched):  # the x_zp row and one assembled row per pixel of a tile
            zlen = m["KW"] * m["C"] * (1 + max(1, min(int(sched["px_tile"]), m["N"] * m["OH"] * m["OW"])))
        px = max(1, min(int(sched["px_tile"]), m["N"] * m["OH"] * m["OW"]))
        if self._patch(m, sched):  # no x_zp row: the gathered patch of each pixel of a tile
            zlen = self._patch_len(m) * px
        if self._xsplit(m, sched):  # then (4-byte aligned) the split inputs of each pixel
            zlen = (zlen if self._patch(m, sched) else 0) + 4 * self._xsplit(m, sched) * px
        return wbytes, (wbytes + 15) // 16 * 16, zlen

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        impl, sched = self.implementation(node, graph, schedule, target)
        return impl.scratch(node, graph, sched)

    def tiled_scratch(self, node: Node, graph: Graph, sched: dict[str, Any]) -> int:
        """The tiled kernels' scratch: the widened weights, then (16-byte aligned) the x_zp row."""
        wbytes, zoff, zlen = self._scratch_layout(node, graph, sched)
        return zoff + zlen if zlen else wbytes

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        m = self._dims(node, graph)
        if node.attrs["layout"] != "NHWC":
            raise UnsupportedError(f"node '{node.source}': QConv kernels run channels-last only")
        a = node.attrs
        OC = m["OC"]
        mult = list(a["multiplier"]) * (OC if len(a["multiplier"]) == 1 else 1)
        shift = list(a["shift"]) * (OC if len(a["shift"]) == 1 else 1)
        impl, sched = self.implementation(node, graph, schedule, target)
        ks = self.knobs(node, graph)
        for k in ("variant", "mac"):  # (a "grid" schedule, OpenCL's, has no "mac")
            if k in sched and sched[k] not in ks[k]:
                raise UnsupportedError(
                    f"node '{node.source or node.name}' (QConv): schedule {k}={sched[k]!r} is not among {ks[k]}"
                )
        dw = m["ICG"] == 1 and m["G"] > 1
        xoff = 128 if graph.tensor(node.inputs[0]).dtype == "uint8" else 0
        ctx: dict[str, Any] = dict(
            m=m,
            variant=sched["variant"],
            dw=dw,
            mult=m["OCG"],
            multipliers=mult,
            shifts=shift,
            x_zp=a["x_zp"],
            y_zp=a["y_zp"],
            act_min=a["act_min"],
            act_max=a["act_max"],
            int8_out=a["qdtype"] == "int8",
            impl_template=impl.template,
            **arith.rounding_context(a),
        )
        if sched["variant"] == "baseline":
            return ctx
        if sched["variant"] == "grid":  # the branch-free requantization of the tiled variants
            ctx.update(
                grid_conv_context(m, sched, np.dtype(graph.tensor(node.inputs[1]).dtype).itemsize, ks["px_tile"]),
                rshifts=[max(-s, 0) for s in shift],
                lshift=any(s > 0 for s in shift),
                lmuls=[1 << max(s, 0) for s in shift],
            )
            return ctx
        ch = OC if dw else m["OCG"]
        wbytes, zoff, zlen = self._scratch_layout(node, graph, sched)
        folded = _mac_forms(node, graph, want_bias=True)[1] if sched["mac"] in ("i16x2", *SIMD_FORMS) else None
        simd = self._simd(sched)
        rowmode = self._rowmode(m, sched)
        patch = self._patch(m, sched)
        pixels = m["N"] * m["OH"] * m["OW"]
        wsplit = simd == "dsp" and not dw and bool(sched.get("wide_weights"))
        if simd is not None and not dw:  # weights contiguous along the input channels: [OC][KH][KW][ICG]
            w = np.asarray(graph.tensor(node.inputs[1]).data).reshape(m["KH"] * m["KW"] * m["ICG"], OC)
            nruns = 1 if patch else (m["KH"] if rowmode else m["KH"] * m["KW"])
            runs = np.ascontiguousarray(w.T).reshape(OC * nruns, -1)
            if patch:  # zero weights up to the patch's 4-byte length: no scalar tail steps
                runs = np.pad(runs, ((0, 0), (0, self._patch_len(m) - runs.shape[1])))
            wr = _split_pairs(runs) if wsplit else runs.reshape(-1)
            ctx.update(wr=_c_literals(wr), wr_len=int(wr.size))
        ctx.update(
            T=max(1, min(int(sched["oc_tile"]), ch)),
            J=max(1, min(int(sched["px_tile"]), m["N"] * m["OH"] * m["OW"])),
            mac="i16x2" if sched["mac"] in SIMD_FORMS else sched["mac"],
            simd=simd,
            rowmode=rowmode,
            patch=patch,
            plen=self._patch_len(m) if patch else 0,
            xsplit=self._xsplit(m, sched),
            xsoff=zoff + (self._patch_len(m) * max(1, min(int(sched["px_tile"]), pixels)) if patch else 0),
            wsplit=wsplit,
            wide=bool(wbytes),
            zoff=zoff,
            zlen=0 if patch or self._xsplit(m, sched) else zlen,
            xoff=xoff,
            pixels=m["N"] * m["OH"] * m["OW"],
            loop_order=sched.get("loop_order", "pixels_outer"),
            folded_bias=folded,
            rshifts=[max(-s, 0) for s in shift],
            lshift=any(s > 0 for s in shift),
            lmuls=[1 << max(s, 0) for s in shift],
        )
        if simd == "mve" and not dw:  # the Helium dense kernel: padded weight runs, vector requantization
            ctx.update(
                _qconv_mve.context(
                    m,
                    sched,
                    np.asarray(graph.tensor(node.inputs[1]).data),
                    folded,
                    mult,
                    ctx["rshifts"],
                    ctx["lshift"],
                    arith.rounding_of(a) == "half_even",
                    ctx["int8_out"],
                    a["act_min"],
                    a["act_max"],
                )
            )
        if simd == "mve" and dw:  # the Helium depthwise kernel (implementation "mve_depthwise")
            ctx.update(
                _qconv_mve_dw.context(
                    m,
                    sched,
                    np.asarray(graph.tensor(node.inputs[1]).data),
                    np.asarray(graph.tensor(node.inputs[2]).data),
                    a["x_zp"],
                    QRANGE[graph.tensor(node.inputs[0]).dtype],
                    mult,
                    ctx["rshifts"],
                    ctx["lshift"],
                    arith.rounding_of(a) == "half_even",
                )
            )
        if sched["variant"] == "depthwise_rows":
            C, J = m["C"], ctx["J"]
            w = np.asarray(graph.tensor(node.inputs[1]).data).reshape(-1, C)  # [KH*KW, C]
            bias = (
                folded
                if folded is not None
                else [int(v) for v in np.asarray(graph.tensor(node.inputs[2]).data).reshape(-1)]
            )
            rep = lambda v: [v[l % C] for l in range(J * C)]  # noqa: E731  (lane l is channel l % C)
            ctx["lanes"] = dict(
                w=[int(v) for q in range(w.shape[0]) for v in rep(w[q])],
                bias=rep(bias),
                mul=rep(mult),
                rsh=rep(ctx["rshifts"]),
                lmul=rep(ctx["lmuls"]),
            )
            lo = min(m["PL"], m["OW"])
            ctx.update(ow_lo=lo, ow_hi=max(lo, min(m["OW"], m["W"] + m["PL"] - (m["KW"] - 1) * m["DW"])))
        return ctx


# -- the registered implementations -------------------------------------------------------
def _depthwise(m: dict[str, int]) -> bool:
    """One input channel per group (and more than one group): the "depthwise" kernels."""
    return m["ICG"] == 1 and m["G"] > 1


def _is_depthwise(node: Node, graph: Graph) -> bool:
    return _depthwise(conv_dims(node, graph))


def _is_dense(node: Node, graph: Graph) -> bool:
    return not _is_depthwise(node, graph)


def _is_pointwise(node: Node, graph: Graph) -> bool:
    """1x1 taps, stride 1, no padding: pixel p's inputs are the row at x + p*C."""
    m = conv_dims(node, graph)
    return (
        not _depthwise(m)
        and all(m[k] == 1 for k in ("KH", "KW", "SH", "SW"))
        and not any(m[k] for k in ("PT", "PL", "PB", "PR"))
    )


def _has_rows(node: Node, graph: Graph) -> bool:
    """Depthwise, stride 1 along W, channel multiplier 1: pixels x channels are one lane run."""
    m = conv_dims(node, graph)
    return _depthwise(m) and m["SW"] == 1 and m["OCG"] == 1


def _rows_priority(node: Node, graph: Graph) -> int:
    """Pixels x channels lanes pay off with few channels (measured: first below 32 channels)."""
    return 25 if conv_dims(node, graph)["C"] < 32 else 5


def _simd_form(form: str) -> Any:
    def applies(node: Node, graph: Graph) -> bool:
        return form in _mac_forms(node, graph)

    return applies


def _mve_depthwise(node: Node, graph: Graph) -> bool:
    return _is_depthwise(node, graph) and "mve" in _mac_forms(node, graph)


def _tiled_scratch(node: Node, graph: Graph, sched: dict[str, Any]) -> int:
    return get_op("QConv").tiled_scratch(node, graph, sched)  # type: ignore[attr-defined]


#: The knobs the tiled kernels read (grid: ``grid_canonical``; baseline: none).
_TILED_KNOBS = ("variant", "oc_tile", "px_tile", "mac", "wide_weights", "loop_order")

QConv.implementations = (
    Implementation("pointwise", "qconv/tiled.c.j2", _is_pointwise, None, _TILED_KNOBS, _tiled_scratch, 30),
    Implementation("direct", "qconv/tiled.c.j2", _is_dense, None, _TILED_KNOBS, _tiled_scratch, 20),
    Implementation("depthwise_rows", "qconv/rows.c.j2", _has_rows, None, _TILED_KNOBS, _tiled_scratch, _rows_priority),
    Implementation("depthwise", "qconv/tiled.c.j2", _is_depthwise, None, _TILED_KNOBS, _tiled_scratch, 10),
    Implementation("baseline", "qconv/baseline.c.j2", priority=0, knobs=("variant",)),
    Implementation("grid", "qconv/grid.c.j2", needs="opencl", priority=-10, knobs=GRID_KNOBS),
    # the SIMD micro-kernels of "pointwise" / "direct" / "depthwise" (knob mac; _mac_forms says
    # when they are exact: int8 weights in [-127, 127], the folded bias inside int32)
    Implementation(
        "dsp", "qconv/tiled.c.j2", _simd_form("dsp"), "dsp", _TILED_KNOBS, _tiled_scratch, selected_by="mac"
    ),
    Implementation(
        "mve", "qconv/tiled.c.j2", _simd_form("mve"), "mve", _TILED_KNOBS, _tiled_scratch, selected_by="mac"
    ),
    # what mac "mve" runs on a depthwise layer: 8 int16 lanes per tap, its own template (_qconv_mve_dw)
    Implementation(
        "mve_depthwise", "qconv/mve_dw.c.j2", _mve_depthwise, "mve", _TILED_KNOBS, _tiled_scratch, selected_by="mac"
    ),
)


def _simd_tiles(simd: str, dw: bool, ch: int, px_tiles: list[int], run: int = 64) -> dict[str, int]:
    """Register blocks of the SIMD micro-kernels (output channels x pixels), measured in QEMU
    (benchmarks/kernels.py): DSP 2 x 2 (as CMSIS-NN: 4 accumulators + 4 operand pairs fill the
    13 core registers) for dot products of `run` >= 32 inputs; shorter ones (VWW's 8 / 16 channel
    pointwise layers, 3-channel first layers) 1 pixel x 4 channels, or x 8 for <= 8 inputs: fewer
    tiles, so less of their fixed cost per output (VWW layer 2: 1.23 M -> 1.08 M), MVE dense all of a group's channels x 4 pixels (``_qconv_mve``: 4 scalar
    accumulators per channel, the channels in a loop), depthwise 2 pixels along W (``_qconv_mve_dw``:
    blocks of 8 channels, 4 vector accumulators)."""
    want = {
        ("dsp", False): (2, 2) if run >= 32 else ((8, 1) if run <= 8 else (4, 1)),
        ("dsp", True): (4, 1),
        ("mve", False): (_qconv_mve.channel_tile(ch), _qconv_mve.MVE_DENSE_PIXELS),
        ("mve", True): (8, _qconv_mve_dw.MAX_PIXELS),
    }[simd, dw]
    oc = max([t for t in (64, 32, 16, 8, 4, 2, 1, ch) if t <= min(ch, want[0])] or [1])
    px = max([p for p in px_tiles if p <= want[1]] or [1])
    return {"oc_tile": oc, "px_tile": px}


def _split_pairs(runs: np.ndarray) -> np.ndarray:
    """Each row of int8 `runs` as int32 words for SMLAD without unpacking: per 4 weights
    w0..w3 the int16 pairs (w0, w2) and (w1, w3) (what SXTB16 and SXTB16 ROR #8 make of them),
    then the row's last len % 4 weights one per word."""
    rl = runs.shape[1]
    r4 = rl - rl % 4
    g = runs[:, :r4].astype(np.int64).reshape(runs.shape[0], -1, 4)
    lo = np.stack([g[..., 0], g[..., 1]], axis=-1) & 0xFFFF
    hi = np.stack([g[..., 2], g[..., 3]], axis=-1)
    words = (lo + hi * 65536).reshape(runs.shape[0], -1)  # hi * 2^16 + lo: the int16 pair as an int32
    return np.concatenate([words, runs[:, r4:].astype(np.int64)], axis=1).reshape(-1)


def _c_literals(values: np.ndarray, per_line: int = 24) -> str:
    """Integer C initializer list, `per_line` values a line (deterministic)."""
    items = [str(int(v)) for v in np.asarray(values).reshape(-1)]
    return ",\n        ".join(", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line))


def _mac_forms(node: Node, graph: Graph, want_bias: bool = False) -> Any:
    """Exact ways the tiled kernels may form products, fastest first:

    * "i16x2": x' = x - xoff (xoff = 128 for uint8, so x' is in [-128, 127]) times int8 weights in
      [-127, 127], two products summed in int16 (|x'a * wa + x'b * wb| <= 2 * 128 * 127 = 32512),
      then added to an int32 accumulator that starts at bias[c] - (x_zp - xoff) * sum(w[c]) (the
      zero point folded out; padded taps read x_zp, which that start value cancels). Needs every
      partial sum inside int32: |start| + 128 * sum|w[c]| <= 2^31 - 1.
    * "dsp" / "mve": the same folded start and x' = x - xoff, with SIMD micro-kernels
      (tinyc_simd.h): "dsp" sign-extends int8 pairs to packed int16 (SXTB16) and sums two products
      per SMLAD, "mve" sums 16 products per VMLADAVA (dense), or 4 int32 lanes per VMUL/VADD
      (depthwise); every partial sum is a subset sum of the "i16x2" bound, so none wraps. Exact
      on any core (intrinsics where the core has the extension, exact C emulations elsewhere).
      Depthwise (channel multiplier 1): "dsp" (int8 input) keeps one accumulator per channel lane
      (SMLABB / SMLATT on the SXTB16 halves of 4 channels), "mve" (int8 or uint8 input) 8 int16 lanes
      widened by VMULLB / VMULLT (``_qconv_mve_dw``, its own bias fold). They follow "i16x2", so
      the host default is unchanged; ``default_schedule`` picks them on targets with the ISA.
    * "i16": (x - x_zp) * w in int16 (|x - x_zp| <= 255, |w| <= 128: |product| <= 32640).
    * "i32": int32 products (always; int16 weights of a uint8 QLinearConv need it).

    With want_bias, returns (forms, folded int32 bias per channel or None)."""
    wt, bt = graph.tensor(node.inputs[1]), graph.tensor(node.inputs[2])
    forms = ["i32"]
    folded = None
    if wt.dtype == "int8" and wt.data is not None and bt.data is not None:
        oc = wt.shape[-1] if node.attrs["layout"] == "NHWC" else wt.shape[0]
        w = np.asarray(wt.data, np.int64)
        w = w.reshape(-1, oc) if node.attrs["layout"] == "NHWC" else w.reshape(oc, -1).T
        forms.insert(0, "i16")
        xoff = 128 if graph.tensor(node.inputs[0]).dtype == "uint8" else 0
        start = np.asarray(bt.data, np.int64).reshape(-1) - (int(node.attrs["x_zp"]) - xoff) * w.sum(axis=0)
        if (
            w.size
            and int(np.abs(w).max()) <= 127
            and int(np.max(np.abs(start) + 128 * np.abs(w).sum(axis=0))) <= INT32_MAX
        ):
            forms.insert(0, "i16x2")
            folded = [int(v) for v in start]
            a = node.attrs
            xs = graph.tensor(node.inputs[0]).shape
            dw = int(wt.shape[-2] if a["layout"] == "NHWC" else wt.shape[1]) == 1 and int(a.get("group", 1)) > 1
            # depthwise SIMD: channel multiplier 1 (lane c reads input channel c), "dsp" int8 input,
            # "mve" int8 or uint8 (its int16 lanes take uint8 as it is: _qconv_mve_dw)
            if not dw:
                forms[1:1] = list(SIMD_FORMS)
            elif oc == int(xs[-1] if a["layout"] == "NHWC" else xs[1]):
                forms[1:1] = list(SIMD_FORMS) if not xoff else ["mve"]
    return (forms, folded) if want_bias else forms
