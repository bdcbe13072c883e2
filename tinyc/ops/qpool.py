"""int8 pooling: MaxPool on the float ``Pool`` op, AveragePool as the integer ``QAvgPool``.

MaxPool needs no arithmetic: when input and output share scale and zero point the maximum of the
quantized values *is* the quantized maximum, so ``build_qmaxpool`` returns a plain ``Pool`` node
(which runs on int8/uint8) and refuses differing parameters (the lowering then adds a requantize).

AveragePool / GlobalAveragePool (``QAvgPool``, docs/quantization.md), all integer at run time::

    acc   = sum over the window's valid taps of (x - x_zp)          int32, |acc| <= 255 * taps
    count = taps counted by ONNX (with or without padding, per count_include_pad; ceil_mode's
            overhang past the end padding never counts)
    y     = clamp(y_zp + mbqm(acc * 2^L, M_count * 2^-L), act_min, act_max)
            M_count = x_scale / (y_scale * count)

``M_count * 2^-L`` is turned into ``(multiplier, shift)`` by ``arith.quantize_multiplier`` at compile
time, one entry per distinct count (global pooling: one). Padded taps add nothing (they equal x_zp).
The pre-shift L (the largest with 255 * taps * 2^L <= INT32_MAX and every shift - L >= -31) makes
the final right shift, not srdhm, do the rounding: without it mbqm's double rounding is off the
exact mean by up to 0.625 LSB (e.g. 329 * 0.147 = 48.36 -> srdhm 193.53 -> 194 -> 194 / 4 = 48.5
-> 49); with it, by at most 1/2 + 2^-(L+1-shift) (shift <= 0 when M < 1). The last rounding is
half away from zero; onnxruntime's QDQ average (DQ -> float mean -> Q) rounds half to even in
float, so the two differ by 1 LSB at exact ties (and nowhere else in our measurements).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.ir.isa import Isa
from tinyc.ops.base import OutputType, register
from tinyc.ops.impl import Implementation, applicable, by_name
from tinyc.ops.conv import resolve_pads
from tinyc.ops.pool import Pool, _windows
from tinyc.numerics import fixed_point as arith
from tinyc.numerics.qparams import qparams_of

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext

INT32_MAX = (1 << 31) - 1
#: The kernel starts from -x_zp * taps and adds raw x: every partial sum stays within 256 * taps
#: (the final |acc| <= 255 * taps), so this many taps always fit an int32.
MAX_TAPS = INT32_MAX // 256


def _where(source: str, name: str) -> str:
    return f"node '{source or name}'"


def _same_qparams(graph: Graph, a: str, b: str) -> bool:
    sa, za = qparams_of(graph, a)
    sb, zb = qparams_of(graph, b)
    return np.float32(sa) == np.float32(sb) and za == zb


def _require_int8(graph: Graph, names: list[str], where: str, op: str) -> None:
    for t in names:
        if graph.tensor(t).dtype != "int8":
            raise UnsupportedError(f"{where} ({op}): tensor '{t}' is {graph.tensor(t).dtype} (int8 only)")


def build_qmaxpool(graph: Graph, name: str, x: str, out: str, pool_attrs: dict[str, Any], source: str = "") -> Node:
    """int8 MaxPool / GlobalMaxPool: a "Pool" node with `pool_attrs` (layout NHWC or NCHW).
    Exact only when x and out share their quantization parameters; otherwise UnsupportedError."""
    where = _where(source, name)
    if graph.tensor(x).dtype not in Pool.INT_DTYPES or graph.tensor(out).dtype != graph.tensor(x).dtype:
        raise UnsupportedError(
            f"{where} (MaxPool): needs int8/uint8 input and output of the same type "
            f"(got {graph.tensor(x).dtype} -> {graph.tensor(out).dtype})"
        )
    if pool_attrs.get("kind", "max") != "max":
        raise UnsupportedError(f"{where} (MaxPool): pool kind {pool_attrs.get('kind')!r} is not 'max'")
    if not _same_qparams(graph, x, out):
        raise UnsupportedError(
            f"{where} (MaxPool): input {qparams_of(graph, x)} and output "
            f"{qparams_of(graph, out)} quantization parameters differ (requantize first)"
        )
    attrs = dict(pool_attrs, kind="max")
    attrs.setdefault("is_global", False)
    return Node(name, "Pool", [x], [out], attrs, source=source)


def avgpool_counts(dims: dict[str, Any], include_pad: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per output pixel [OH, OW]: the ONNX divisor (count) and the number of in-bounds taps."""
    wh = _windows(dims["H"], dims["KH"], dims["SH"], dims["DH"], dims["PT"], dims["PB"], dims["OH"], include_pad)
    ww = _windows(dims["W"], dims["KW"], dims["SW"], dims["DW"], dims["PL"], dims["PR"], dims["OW"], include_pad)
    count = np.outer([c for _, _, c in wh], [c for _, _, c in ww]).astype(np.int64)
    valid = np.outer([v for _, v, _ in wh], [v for _, v, _ in ww]).astype(np.int64)
    return count, valid


def avg_multipliers(s_in: float, s_out: float, counts: list[int], taps: int) -> tuple[list[int], list[int], int]:
    """(multipliers, shifts, L): (multiplier, shift) of M = s_in / (s_out * count) * 2^-L per count
    (count 0: (0, 0); acc is 0 there) and the pre-shift L for sums of at most `taps` terms.
    M is computed in float64 from the float32 scales, as arith.requant_params does."""
    real = {c: float(np.float32(s_in)) / (float(np.float32(s_out)) * c) for c in counts if c}
    base = {c: arith.quantize_multiplier(m) for c, m in real.items()}
    L = max(0, int(np.floor(np.log2(INT32_MAX // (255 * max(1, taps))))))
    live = [int(sh) for mu, sh in base.values() if mu]
    if live:
        L = max(0, min(L, 31 + min(live)))
    mults, shifts = [], []
    for c in counts:
        if c == 0:
            mults.append(0)
            shifts.append(0)
            continue
        m, sh = arith.quantize_multiplier(np.ldexp(real[c], -L))
        mults.append(int(m))
        shifts.append(int(sh))
    return mults, shifts, L


def valid_taps(dims: dict[str, Any]) -> np.ndarray:
    """In-bounds taps per output pixel [OH, OW] (what TFLite Micro divides by)."""
    return avgpool_counts(dims, False)[1]


def build_qavgpool(graph: Graph, name: str, x: str, out: str, pool_attrs: dict[str, Any], source: str = "") -> Node:
    """int8 AveragePool / GlobalAveragePool as "QAvgPool" (pool_attrs as the float Pool node's)."""
    where = _where(source, name)
    _require_int8(graph, [x, out], where, "AveragePool")
    si, zi = qparams_of(graph, x)
    so, zo = qparams_of(graph, out)
    attrs = dict(pool_attrs, kind="avg")
    attrs.setdefault("is_global", False)
    node = Node(name, "QAvgPool", [x], [out], attrs, source=source)
    dims = QAvgPool()._dims(node, graph)
    if dims["KH"] * dims["KW"] > MAX_TAPS:
        raise UnsupportedError(
            f"{where} (AveragePool): a window of {dims['KH'] * dims['KW']} taps could "
            f"overflow the int32 sum (max {MAX_TAPS})"
        )
    count, _ = avgpool_counts(dims, bool(attrs["count_include_pad"]))
    counts = sorted({int(c) for c in count.reshape(-1)})
    try:
        mults, shifts, pre = avg_multipliers(si, so, counts, dims["KH"] * dims["KW"])
    except ValueError as exc:
        raise UnsupportedError(f"{where} (AveragePool): requantization multiplier: {exc}") from None
    node.attrs.update(
        x_zp=int(zi),
        y_zp=int(zo),
        counts=counts,
        multiplier=mults,
        shift=shifts,
        pre_shift=pre,
        act_min=arith.INT8_MIN,
        act_max=arith.INT8_MAX,
    )
    return node


def build_tflm_avgpool(
    graph: Graph, name: str, x: str, out: str, pool_attrs: dict[str, Any], act_min: int, act_max: int, source: str = ""
) -> Node:
    """TFLite Micro's int8 AVERAGE_POOL_2D as a "QAvgPool" node in mode ``tflm``: the in-bounds
    taps' raw sum divided by their count, rounded half away from zero (TFLite's integer division
    with a +-count/2 nudge), clamped to the fused activation; input and output share one grid."""
    where = _where(source, name)
    _require_int8(graph, [x, out], where, "AVERAGE_POOL_2D")
    if not _same_qparams(graph, x, out):
        raise UnsupportedError(
            f"{where} (AVERAGE_POOL_2D): input {qparams_of(graph, x)} and output {qparams_of(graph, out)} "
            "quantization parameters differ (TFLite Micro requires them equal)"
        )
    attrs = dict(pool_attrs, kind="avg", count_include_pad=0, ceil_mode=0)
    attrs.setdefault("is_global", False)
    node = Node(name, "QAvgPool", [x], [out], attrs, source=source)
    dims = QAvgPool()._dims(node, graph)
    if dims["KH"] * dims["KW"] > MAX_TAPS:
        raise UnsupportedError(f"{where} (AVERAGE_POOL_2D): a window of {dims['KH'] * dims['KW']} taps could overflow")
    count, _ = avgpool_counts(dims, False)
    counts = sorted({int(c) for c in count.reshape(-1)})
    zp = int(qparams_of(graph, x)[1])
    node.attrs.update(
        x_zp=zp,
        y_zp=zp,
        counts=counts,
        multiplier=[0] * len(counts),
        shift=[0] * len(counts),
        pre_shift=0,
        act_min=int(act_min),
        act_max=int(act_max),
        tflm=True,
    )
    return node


@register
class QAvgPool(Pool):
    """Integer average pooling; attrs: the Pool attrs plus x_zp, y_zp, counts, multiplier, shift,
    pre_shift, act_min, act_max (all computed by build_qavgpool)."""

    op = "QAvgPool"
    onnx_ops = ()
    int8_kernel = False  # already integer
    requantizes = True
    ms_ops = ("QLinearAveragePool", "QLinearGlobalAveragePool")
    template = "q_avgpool.c.j2"
    channels_last_capable = True
    dtypes = ("int8",)

    def import_onnx(self, ctx: ImportContext) -> Node | list[Node]:
        """com.microsoft QLinearAveragePool / QLinearGlobalAveragePool (X, x_scale, x_zp, y_scale,
        y_zp; attr channels_last): uint8 runs on the int8 kernel between exact QRequantize shifts."""
        from tinyc.ops.qelementwise import _MsIO

        xs = ctx.shape(0)
        if len(xs) not in (3, 4):
            ctx.unsupported(f"only 1D and 2D pooling is supported (input rank {len(xs)})")
        ms = _MsIO(ctx)
        x = ms.input(0, 1, 2, "X")
        s_out, zo, out_dtype = ms.out_params(3, 4, ctx.dtype(0))
        channels_last = int(ctx.attr("channels_last", 0))
        if channels_last not in (0, 1):
            ctx.unsupported(f"channels_last={channels_last}")
        spatial = tuple(xs[1:-1]) if channels_last else tuple(xs[2:])
        n = len(spatial)
        layout = "NHWC" if channels_last else "NCHW"
        if ctx.op_type == "QLinearGlobalAveragePool":
            attrs: dict[str, Any] = dict(
                kind="avg",
                kernel=list(spatial),
                strides=[1] * n,
                pads=[0] * (2 * n),
                dilations=[1] * n,
                ceil_mode=0,
                count_include_pad=0,
                layout=layout,
                is_global=True,
            )
        else:
            if not ctx.has_attr("kernel_shape"):
                ctx.unsupported("kernel_shape is required")
            kernel = [int(k) for k in ctx.attr("kernel_shape")]
            strides = [int(s) for s in (ctx.attr("strides") or [1] * n)]
            dil = [int(d) for d in (ctx.attr("dilations") or [1] * n)]
            if len(kernel) != n or len(strides) != n or len(dil) != n:
                ctx.unsupported(f"kernel_shape/strides/dilations do not match {n} spatial dims")
            pads = resolve_pads(ctx, spatial, kernel, strides, dil)
            if len(pads) != 2 * n:
                ctx.unsupported(f"pads {pads} do not match {n} spatial dims")
            attrs = dict(
                kind="avg",
                kernel=kernel,
                strides=strides,
                pads=pads,
                dilations=dil,
                ceil_mode=int(ctx.attr("ceil_mode", 0)),
                count_include_pad=int(ctx.attr("count_include_pad", 0)),
                layout=layout,
                is_global=False,
            )
        probe = Node(ctx.name, "QAvgPool", [x], [ctx.outputs[0]], attrs, source=ctx.name)
        ((shape, _),) = self.infer(probe, ctx.graph)
        if any(d < 1 for d in shape):
            ctx.unsupported(f"empty output {list(shape)}")
        y = ms.output(shape, s_out, zo, out_dtype)
        return ms.finish(build_qavgpool(ctx.graph, ctx.name, x, y, attrs, source=ctx.name))

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        ((shape, _),) = super().infer(node, graph)
        return [(shape, "int8")]

    def check_supported(self, node: Node, graph: Graph) -> None:
        for t in (node.inputs[0], node.outputs[0]):
            if graph.tensor(t).dtype != "int8":
                raise UnsupportedError(
                    f"node '{node.source or node.name}' (QAvgPool): tensor '{t}' is {graph.tensor(t).dtype} (int8 only)"
                )

    def _tables(self, node: Node, graph: Graph) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
        a = node.attrs
        m = self._dims(node, graph)
        count, valid = avgpool_counts(m, bool(a["count_include_pad"]))
        missing = sorted({int(c) for c in count.reshape(-1)} - set(a["counts"]))
        if missing:
            raise UnsupportedError(
                f"node '{node.source or node.name}' (QAvgPool): no multiplier for window "
                f"count(s) {missing} (shapes changed after build_qavgpool?)"
            )
        return m, count, valid

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Golden integer model: int64 window sums of (x - x_zp) times 2^pre_shift (< 2^31 by
        construction), then arith.requantize with the (multiplier, shift) of each pixel's count."""
        a = node.attrs
        m, count, _ = self._tables(node, graph)
        x = inputs[0]
        if a["layout"] == "NCHW":
            x = np.moveaxis(x, 1, -1)
        x4 = x.reshape(m["N"], m["H"], m["W"], m["C"]).astype(np.int64) - a["x_zp"]
        acc = np.zeros((m["N"], m["OH"], m["OW"], m["C"]), np.int64)
        for kh in range(m["KH"]):
            for kw in range(m["KW"]):
                ih = np.arange(m["OH"]) * m["SH"] - m["PT"] + kh * m["DH"]
                iw = np.arange(m["OW"]) * m["SW"] - m["PL"] + kw * m["DW"]
                okh = (ih >= 0) & (ih < m["H"])
                okw = (iw >= 0) & (iw < m["W"])
                tap = x4[:, np.clip(ih, 0, m["H"] - 1)][:, :, np.clip(iw, 0, m["W"] - 1)]
                acc += tap * (okh[:, None] & okw[None, :])[None, :, :, None]
        if a.get("tflm"):
            raw = acc + a["x_zp"] * valid_taps(m)[None, :, :, None]
            cnt = np.maximum(valid_taps(m), 1)[None, :, :, None]
            v = np.where(raw > 0, (raw + cnt // 2) // cnt, -((-raw + cnt // 2) // cnt))
            y = np.clip(v, a["act_min"], a["act_max"]).astype(np.int8)
            y = y.reshape(m["N"], *([m["OH"], m["OW"]][2 - m["n"] :]), m["C"])
            if a["layout"] == "NCHW":
                y = np.moveaxis(y, -1, 1)
            return [np.ascontiguousarray(y)]
        lut = {c: (mu, sh) for c, mu, sh in zip(a["counts"], a["multiplier"], a["shift"])}
        mult = np.vectorize(lambda c: lut[int(c)][0], otypes=[np.int64])(count)[None, :, :, None]
        shift = np.vectorize(lambda c: lut[int(c)][1], otypes=[np.int64])(count)[None, :, :, None]
        acc = acc * (1 << a["pre_shift"])  # < 2^31 in magnitude by the choice of pre_shift
        y = np.asarray(
            arith.requantize(acc, mult, shift, a["y_zp"], a["act_min"], a["act_max"], arith.rounding_of(a)), np.int8
        )
        y = y.reshape(m["N"], *([m["OH"], m["OW"]][2 - m["n"] :]), m["C"])
        if a["layout"] == "NCHW":
            y = np.moveaxis(y, -1, 1)
        return [np.ascontiguousarray(y)]

    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        """variant: "mve" (Helium, where its requantization domain holds) or "scalar"."""
        return {"variant": [i.name for i in applicable(self.implementations, node, graph)]}

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        isa = Isa.parse(target)
        names = [i.name for i in applicable(self.implementations, node, graph) if isa.has(i.needs)]
        return {"variant": names[0] if names and not isa.work_items else "scalar"}

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        where = f"node '{node.source or node.name}' (QAvgPool)"
        variant = {**self.default_schedule(node, graph, target), **(schedule or {})}["variant"]
        if not by_name(self.implementations, variant, where).applies(node, graph):
            raise UnsupportedError(f"{where}: variant '{variant}' does not compute this node exactly")
        # scalar: 32 accumulators vectorise on a desktop CPU; a Cortex-M keeps 8 in core registers
        # (32 live in memory: a load and a store per tap and channel)
        tile = 8 if Isa.parse(target).family == "mcu" else 32
        return dict(self._context(node, graph), variant=variant, channel_tile=tile)

    def _context(self, node: Node, graph: Graph) -> dict[str, Any]:
        if node.attrs["layout"] != "NHWC":
            raise UnsupportedError(
                f"node '{node.source or node.name}' (QAvgPool): kernels run channels-last "
                "only (run the layout pass first)"
            )
        a = node.attrs
        m, count, valid = self._tables(node, graph)
        padded = any(m[k] for k in ("PT", "PL", "PB", "PR")) or bool(a["ceil_mode"])
        uniform = len(set(count.reshape(-1).tolist())) == 1 and len(set(valid.reshape(-1).tolist())) == 1
        lut = {c: (mu, sh) for c, mu, sh in zip(a["counts"], a["multiplier"], a["shift"])}
        top = max(a["counts"])
        table_mul = [lut.get(c, (0, 0))[0] for c in range(top + 1)]
        table_shift = [lut.get(c, (0, 0))[1] for c in range(top + 1)]
        wh = _windows(m["H"], m["KH"], m["SH"], m["DH"], m["PT"], m["PB"], m["OH"], bool(a["count_include_pad"]))
        ww = _windows(m["W"], m["KW"], m["SW"], m["DW"], m["PL"], m["PR"], m["OW"], bool(a["count_include_pad"]))
        c0 = int(count.reshape(-1)[0])
        return dict(
            m=m,
            padded=padded,
            uniform=uniform,
            pre_mul=1 << a["pre_shift"],
            global_pool=bool(a.get("is_global", False)),
            x_zp=a["x_zp"],
            y_zp=a["y_zp"],
            act_min=a["act_min"],
            act_max=a["act_max"],
            u_mul=lut[c0][0],
            u_shift=lut[c0][1],
            u_valid=int(valid.reshape(-1)[0]),
            table_mul=table_mul,
            table_shift=table_shift,
            cnt_h=[c for _, _, c in wh],
            cnt_w=[c for _, _, c in ww],
            val_h=[v for _, v, _ in wh],
            val_w=[v for _, v, _ in ww],
            tflm=bool(a.get("tflm", False)),
            **arith.rounding_context(a),
        )


def _avg_mve_applies(node: Node, graph: Graph) -> bool:
    """The vector tile requantizes with tinyc_vmbqm_r_n / tinyc_vmbqm_even_r_s: every used count's
    right shift in their domain (1..31, half even 1..30); TFLite Micro's division form stays scalar."""
    a = node.attrs
    if a.get("tflm"):
        return False
    top = 30 if arith.rounding_of(a) == "half_even" else 31
    return all(1 <= -int(sh) <= top for sh in a["shift"])


QAvgPool.implementations = (
    Implementation("mve", "q_avgpool.c.j2", _avg_mve_applies, "mve", ("variant",), priority=10),
    Implementation("scalar", "q_avgpool.c.j2", knobs=("variant",), priority=0),
)
