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
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.ops.base import OutputType, register
from tinyc.ops.conv import Conv, conv_out_size, resolve_pads
from tinyc.quantize import arith

#: Activation types the kernel reads/writes, with their clamp ranges.
QRANGE: dict[str, tuple[int, int]] = {"int8": (-128, 127), "uint8": (0, 255)}
INT32_MAX = (1 << 31) - 1


def _scalar_zp(ctx: Any, i: int, what: str, dtype: str) -> int:
    """A per-tensor zero point (input i), checked against the activation type."""
    if not ctx.has_input(i):
        return 0
    if ctx.dtype(i) != dtype:
        ctx.unsupported(f"{what} zero point of type {ctx.dtype(i)} differs from the data type {dtype}")
    zp = np.asarray(ctx.require_const(i, f"{what} zero point"))
    if zp.size != 1:
        ctx.unsupported(f"{what} zero point must be per-tensor (got shape {zp.shape})")
    return int(zp.reshape(-1)[0])


def _scalar_scale(ctx: Any, i: int, what: str) -> float:
    s = np.asarray(ctx.require_const(i, f"{what} scale"))
    if s.size != 1:
        ctx.unsupported(f"{what} scale must be per-tensor (got shape {s.shape})")
    v = np.float32(s.reshape(-1)[0])
    if not np.isfinite(v) or v <= 0:
        ctx.unsupported(f"{what} scale must be finite and > 0 (got {v})")
    return float(v)


def requantize_any(acc: np.ndarray, multiplier: np.ndarray, shift: np.ndarray, zp: int,
                   qmin: int, qmax: int) -> np.ndarray:
    """arith.requantize for int8; for uint8 the same integer steps with a [0, 255] clamp."""
    if (qmin, qmax) == QRANGE["int8"]:
        return np.asarray(arith.requantize(acc, multiplier, shift, zp, qmin, qmax), dtype=np.int8)
    r = np.asarray(arith.multiply_by_quantized_multiplier(acc, multiplier, shift)).astype(np.int64)
    return np.clip(r + zp, qmin, qmax).astype(np.uint8)


@register
class QConv(Conv):
    op = "QConv"
    onnx_ops = ("QLinearConv",)
    template = "qconv.c.j2"
    channels_last_capable = True
    dtypes = ("int8", "uint8")

    def import_onnx(self, ctx):  # type: ignore[override]
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
        x_scale = _scalar_scale(ctx, 1, "input")
        y_scale = _scalar_scale(ctx, 6, "output")
        x_zp = _scalar_zp(ctx, 2, "input", xdt)
        y_zp = _scalar_zp(ctx, 7, "output", ydt)
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
            ctx.unsupported(f"input channels {xs[1]} / output channels {OC} do not match weights "
                            f"{list(w.shape)} with {group} groups")
        if any(conv_out_size(xs[2 + i], kernel[i], strides[i], dil[i], pads[i], pads[i + n]) < 1
               for i in range(n)):
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
            mult, shift = arith.requant_params(np.float32(x_scale),
                                               np.broadcast_to(w_scale, (OC,)).astype(np.float32),
                                               np.float32(y_scale))
        except ValueError as exc:
            ctx.unsupported(f"requantization multiplier: {exc}")
        qmin, qmax = QRANGE[ydt]
        ins = [ctx.inputs[0], ctx.add_constant("wq", wq), ctx.add_constant("bias_q", b)]
        return ctx.make_node("QConv", inputs=ins, outputs=ctx.outputs[:1], kernel=kernel, strides=strides,
                             pads=pads, dilations=dil, group=group, layout="NCHW",
                             multiplier=[int(v) for v in np.asarray(mult).reshape(-1)],
                             shift=[int(v) for v in np.asarray(shift).reshape(-1)],
                             x_zp=x_zp, y_zp=y_zp, act_min=qmin, act_max=qmax, qdtype=ydt)

    # -- shapes ---------------------------------------------------------------------------
    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        (shape, _), = super().infer(node, graph)
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
        out_sp = [conv_out_size(x.shape[2 + i], k[i], st[i], dl[i], a["pads"][i], a["pads"][i + n_sp])
                  for i in range(n_sp)]
        acc = np.zeros((N, OC, *out_sp), np.int64)
        wi = w.astype(np.int64)
        for kidx in np.ndindex(*k):
            sl = [slice(None), slice(None)]
            for i in range(n_sp):
                start = kidx[i] * dl[i]
                sl.append(slice(start, start + (out_sp[i] - 1) * st[i] + 1, st[i]))
            patch = xp[tuple(sl)]
            for g in range(group):
                pg = patch[:, g * icg:(g + 1) * icg]
                wg = wi[(slice(g * ocg, (g + 1) * ocg), slice(None), *kidx)]
                acc[:, g * ocg:(g + 1) * ocg] += np.einsum("nc...,oc->no...", pg, wg)
        acc += b.astype(np.int64).reshape(1, OC, *([1] * n_sp))
        bshape = (OC,) + (1,) * n_sp
        mult = np.asarray(a["multiplier"], np.int64).reshape(bshape)
        shift = np.asarray(a["shift"], np.int64).reshape(bshape)
        y = requantize_any(acc, mult, shift, a["y_zp"], a["act_min"], a["act_max"])
        if a["layout"] != "NCHW":
            y = np.moveaxis(y, 1, -1)
        return [np.ascontiguousarray(y)]

    # -- schedule -------------------------------------------------------------------------
    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        m = self._dims(node, graph)
        return {"variant": ["depthwise" if m["ICG"] == 1 and m["G"] > 1 else "direct"]}

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        return {"variant": self.knobs(node, graph)["variant"][0]}

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> int:
        return 0

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> dict[str, Any]:
        m = self._dims(node, graph)
        if node.attrs["layout"] != "NHWC":
            raise UnsupportedError(f"node '{node.source}': QConv kernels run channels-last only")
        a = node.attrs
        OC = m["OC"]
        mult = list(a["multiplier"]) * (OC if len(a["multiplier"]) == 1 else 1)
        shift = list(a["shift"]) * (OC if len(a["shift"]) == 1 else 1)
        sched = schedule or self.default_schedule(node, graph, "host")
        return dict(m=m, variant=sched.get("variant", "direct"), mult=m["OCG"], multipliers=mult, shifts=shift,
                    x_zp=a["x_zp"], y_zp=a["y_zp"], act_min=a["act_min"], act_max=a["act_max"],
                    int8_out=a["qdtype"] == "int8")
