"""int8 elementwise kernels: QAdd, QMul (numpy broadcasting), QLut (any unary op as a 256-entry
table) and QRequantize (move a tensor to another scale / zero point, int8 <-> uint8).

The int8 lowering (tinyc/quantize/lower.py) calls the ``build_*`` functions; onnxruntime's
com.microsoft QOperators (QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu) import through
them too. Every integer constant (multipliers, shifts, offsets, clamp bounds, tables) is derived at
compile time from the tensors' per-tensor quantization parameters and stored on the node, so the
run time is integer only (tinyc/numerics/fixed_point.py == runtime_c/include/tinyc_q.h, bit for bit):

* QAdd: TFLite's int8 Add (``arith.add_params`` / ``add_int8``: both inputs to a common scale with
  20 fractional bits, summed, requantized), fused clamp folded into [act_min, act_max].
* QMul: ``acc = (a - a_zp) * (b - b_zp)`` (exact in int32), requantized with M = s_a * s_b / s_out.
* QLut: ``y = lut[x + 128]``; lut built on the host by ``arith.build_lut`` rounding half to even,
  i.e. exactly DequantizeLinear -> f -> QuantizeLinear evaluated in float64.
* QRequantize: equal scales: ``clamp(x - zp_in + zp_out)`` (exact); else
  ``clamp(zp_out + mbqm((x - zp_in) << k, M = s_in / s_out / 2^k))`` with k <= 20 fraction bits
  (``arith.rescale``); int8 or uint8 on either side.

uint8 QOperators run on the int8 kernels between exact QRequantize shifts (q_int8 = q_uint8 - 128).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any
from collections.abc import Callable

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node, QuantParams
from tinyc.ir.isa import Isa
from tinyc.ops.base import OpDef, OutputType, register
from tinyc.ops.impl import Implementation, applicable, by_name
from tinyc.ops.elementwise import collapse_broadcast
from tinyc.numerics import fixed_point as arith
from tinyc.numerics.qparams import add_qconstant, add_qtensor, import_scale, import_zero_point, per_tensor, qparams_of

#: Integer activation types and their ranges.
QRANGE: dict[str, tuple[int, int]] = {"int8": (-128, 127), "uint8": (0, 255)}
ADD_FIELDS = tuple(f.name for f in dataclasses.fields(arith.AddParams))


# -- shared builder helpers ------------------------------------------------------------------------
def _where(name: str, source: str, op: str) -> str:
    return f"node '{source or name}' ({op})"


def qtensor(graph: Graph, tensor: str, where: str, dtypes: tuple[str, ...] = ("int8",)) -> tuple[float, int]:
    """(scale, zero point) of a quantized tensor of one of `dtypes`, with a clear error otherwise."""
    if tensor not in graph.tensors:
        raise UnsupportedError(f"{where}: no tensor named '{tensor}'")
    t = graph.tensor(tensor)
    if t.dtype not in dtypes:
        raise UnsupportedError(f"{where}: tensor '{tensor}' is {t.dtype} (need {' or '.join(dtypes)})")
    if t.size == 0:
        raise UnsupportedError(f"{where}: tensor '{tensor}' is empty")
    try:
        s, zp = qparams_of(graph, tensor)
    except UnsupportedError as exc:
        raise UnsupportedError(f"{where}: {exc}") from None
    lo, hi = QRANGE[t.dtype]
    if not lo <= zp <= hi:
        raise UnsupportedError(f"{where}: zero point {zp} of '{tensor}' is outside the {t.dtype} range")
    return s, zp


def clamp_range(
    activation: tuple[float | None, float | None] | None, s_out: float, zp_out: int, where: str
) -> tuple[int, int]:
    """A real clamp (lo, hi) (None: no clamp) as the int8 output range [act_min, act_max]."""
    if activation is None:
        return arith.INT8_MIN, arith.INT8_MAX
    lo, hi = activation
    lo = None if lo is None or (math.isinf(lo) and lo < 0) else float(lo)
    hi = None if hi is None or (math.isinf(hi) and hi > 0) else float(hi)
    try:
        amin, amax = arith.activation_range("clip", s_out, zp_out, lo, hi)
    except (OverflowError, ValueError) as exc:
        raise UnsupportedError(f"{where}: activation range {activation}: {exc}") from None
    # a bound beyond the int8 range saturates every output to that end
    amin, amax = min(amin, arith.INT8_MAX), max(amax, arith.INT8_MIN)
    if amin > amax:
        raise UnsupportedError(f"{where}: empty activation range {activation}")
    return int(amin), int(amax)


def _check_out_shape(graph: Graph, out: str, shape: tuple[int, ...], where: str) -> None:
    have = graph.tensor(out).shape
    if tuple(have) != tuple(shape):
        raise UnsupportedError(f"{where}: output '{out}' has shape {list(have)}, the op gives {list(shape)}")


def _broadcast(graph: Graph, a: str, b: str, where: str) -> tuple[int, ...]:
    sa, sb = graph.tensor(a).shape, graph.tensor(b).shape
    try:
        return tuple(int(d) for d in np.broadcast_shapes(sa, sb))
    except ValueError:
        raise UnsupportedError(f"{where}: shapes {list(sa)} and {list(sb)} do not broadcast") from None


class _QOp(OpDef):
    """Shared by the int8 kernels: a folded node keeps the quantization its output was declared with."""

    def folded_quant(self, node: Node, graph: Graph) -> QuantParams | None:
        return graph.tensor(node.outputs[0]).quant


# -- QAdd / QMul ---------------------------------------------------------------------------------------
def build_qadd(
    graph: Graph,
    name: str,
    a: str,
    b: str,
    out: str,
    activation: tuple[float | None, float | None] | None = None,
    source: str = "",
) -> Node:
    """int8 a + int8 b -> int8 out (numpy broadcasting): TFLite's integer Add, clamp fused."""
    where = _where(name, source, "QAdd")
    (s1, z1), (s2, z2), (so, zo) = (qtensor(graph, t, where) for t in (a, b, out))
    _check_out_shape(graph, out, _broadcast(graph, a, b, where), where)
    amin, amax = clamp_range(activation, so, zo, where)
    try:
        p = arith.add_params(s1, z1, s2, z2, so, zo, amin, amax)
    except ValueError as exc:
        raise UnsupportedError(f"{where}: output rescale {exc}") from None
    attrs = dataclasses.asdict(p)
    del attrs["rounding"]  # the node says it by name (attr "rounding", set by the lowering when not TFLite's)
    return Node(name, "QAdd", [a, b], [out], attrs, source=source)


def add_params_of(attrs: dict[str, Any]) -> arith.AddParams:
    """The node's AddParams, its ``rounding`` mode name turned into the C constant."""
    return arith.AddParams(
        **{k: attrs[k] for k in ADD_FIELDS if k != "rounding"}, rounding=arith.rounding_code(arith.rounding_of(attrs))
    )


def build_qmul(
    graph: Graph,
    name: str,
    a: str,
    b: str,
    out: str,
    activation: tuple[float | None, float | None] | None = None,
    source: str = "",
) -> Node:
    """int8 a * int8 b -> int8 out (numpy broadcasting): int32 product, one requantization."""
    where = _where(name, source, "QMul")
    (s1, z1), (s2, z2), (so, zo) = (qtensor(graph, t, where) for t in (a, b, out))
    _check_out_shape(graph, out, _broadcast(graph, a, b, where), where)
    amin, amax = clamp_range(activation, so, zo, where)
    try:
        m, sh = arith.requant_params(np.float32(s1), np.float32(s2), np.float32(so))
    except ValueError as exc:
        raise UnsupportedError(f"{where}: multiplier s_a * s_b / s_out: {exc}") from None
    return Node(
        name,
        "QMul",
        [a, b],
        [out],
        dict(a_zp=z1, b_zp=z2, multiplier=int(m), shift=int(sh), out_zp=zo, act_min=amin, act_max=amax),
        source=source,
    )


# -- QAdd's fast kernels: exact input tables, one multiply-high requantization ---------------------
#: Table index of an int8 value q: its byte, q mod 256 (a zero-extending byte load, VLDRB.U32).
_Q_BY_BYTE = ((np.arange(256, dtype=np.int64) + 128) % 256) - 128


def _input_stage(q: np.ndarray, offset: int, multiplier: int, shift: int, left_shift: int) -> np.ndarray:
    """One Add input's rescaled value (``arith.add_int8``'s a_i) for each int8 q, int64."""
    return np.asarray(arith.multiply_by_quantized_multiplier((q + offset) << left_shift, multiplier, shift), np.int64)


@functools.lru_cache(maxsize=256)
def add_plan(p: arith.AddParams) -> dict[str, Any] | None:
    """How the "fast" / "mve" QAdd kernels compute `p` exactly, or None (the "scalar" kernel then).

    An Add is a function of two int8 values, so every claim is checked over all 65536 pairs
    against ``arith.add_int8`` at compile time. Each input stage a_i(q) (TFLite rounding) is either
    exactly affine in q (``A * q + B``: the larger-scale input has M = 1/2 and a_i = (q - zp) * 2^19)
    or a 256-entry int32 table (1 KiB of flash) indexed by the byte of q. With s = a_1 + a_2 and
    r = -out_shift >= 1, the output is tried as one rounding, half up:
    ``floor((floor(s * m / 2^31) + C) / 2^r)`` with C = 2^(r-1) + zp * 2^r, then the clamp (form
    "up": SMMLA / VQDMLASH, then SSAT / VQSHL). It equals half-even rounding whenever no pair
    lands on a tie (s * m is never an odd multiple of 2^(30+r) when v2(m) < 30 + r - log2|s|max:
    the MLPerf QDQ models). TFLite's double rounding differs from it near halves, so for that
    rounding the form "tflite" computes it exactly: c + srdhm(s, m) (SMMLAR / VQRDMLASH), minus
    1 where s < 0 (rounding_divide_by_pot's ties away from zero; where srdhm is 0 the -1 cannot
    change the quotient). Where neither holds the kernels requantize with the branch-free helpers
    (form "helper": ``tinyc_q_mbqm_r`` / ``tinyc_q_mbqm_even_r`` and their vector twins, exact by
    contract). The scalar kernel's "up" / "tflite" forms hold the table and affine values doubled
    (``_add_kernel_terms`` f = 2), so that SMMLA's floor(2s * m / 2^32) is floor(s * m / 2^31)."""
    if p.left_shift != arith.ADD_LEFT_SHIFT or p.out_shift > -1 or not 0 <= p.out_multiplier <= arith.INT32_MAX:
        return None
    q = np.arange(-128, 128, dtype=np.int64)
    stages = [
        _input_stage(q, p.in1_offset, p.in1_multiplier, p.in1_shift, p.left_shift),
        _input_stage(q, p.in2_offset, p.in2_multiplier, p.in2_shift, p.left_shift),
    ]
    s = stages[0][:, None] + stages[1][None, :]
    if np.abs(s).max() >= 2**30:  # 2s fits int32 (always: |a_i| < 2^27)
        return None
    golden = np.asarray(arith.add_int8(q[:, None], q[None, :], p), np.int64)
    r, mo, zp = -p.out_shift, p.out_multiplier, p.out_zp
    rounding = arith.ROUNDINGS[p.rounding]
    form, lo_need, hi_need = "helper", True, True
    c = (1 << (r - 1)) + zp * (1 << r) if r <= 31 else 0
    if r <= 31 and arith.INT32_MIN <= c <= arith.INT32_MAX:
        candidates = [("up", (s * mo >> 31) + c)]
        if rounding == "tflite":  # c + srdhm(s, m), minus 1 where s < 0 (rdbpot rounds ties away from 0)
            candidates.append(("tflite", ((s * mo + (1 << 30)) >> 31) + c - (s < 0)))
        for name, h in candidates:
            if arith.INT32_MIN < h.min() and h.max() < arith.INT32_MAX:  # (and h + 1: no saturation)
                o = h >> r
                if np.array_equal(np.clip(o, p.act_min, p.act_max), golden):
                    form = name
                    lo_need, hi_need = bool(o.min() < p.act_min), bool(o.max() > p.act_max)
                    break
    if form == "helper" and r > (30 if rounding == "half_even" else 31):
        return None  # outside the vector helpers' domain
    terms = []
    for st in stages:
        a = int(st[1] - st[0])
        affine = bool(np.array_equal(st, st[0] + a * (q + 128)))
        terms.append(dict(affine=affine, A=a, B=int(st[128]), table=st[_Q_BY_BYTE + 128]))
    return dict(
        form=form,
        terms=terms,
        r=r,
        mo=mo,
        zp=zp,
        C=c,
        lo=p.act_min,
        hi=p.act_max,
        lo_need=lo_need,
        hi_need=hi_need,
        rq_r="tinyc_q_mbqm_even_r" if rounding == "half_even" else "tinyc_q_mbqm_r",
        even=rounding == "half_even",
    )


def _add_kernel_terms(plan: dict[str, Any], f: int) -> dict[str, Any]:
    """Template view of a plan's input terms with factor f (2: the scalar "up" form): per input
    "affine" (coefficient A) or a table (the constant B of every affine term folded into the first
    table, or into K when there is none)."""
    terms = plan["terms"]
    k = sum(t["B"] for t in terms if t["affine"])
    out = []
    folded = False
    for t in terms:
        if t["affine"]:
            out.append(dict(affine=True, A=f * t["A"], table=[]))
        else:
            tab = t["table"] + (k if not folded else 0)
            folded = True
            out.append(dict(affine=False, A=0, table=[int(v) for v in f * tab]))
    return dict(terms=out, K=0 if folded else f * k)


class _QBinary(_QOp):
    dtypes = ("int8",)
    inplace = True
    layout_agnostic = True  # attrs hold every parameter, so transposed constants need no quant

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        sa, sb = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        return [(tuple(int(d) for d in np.broadcast_shapes(sa, sb)), "int8")]

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.outputs[0]).size

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a, b = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        dims, (sa, sb) = collapse_broadcast(graph.tensor(node.outputs[0]).shape, [a.shape, b.shape])
        return {"dims": dims, "sa": sa, "sb": sb}


@register
class QAdd(_QBinary):
    """attrs: the fields of ``arith.AddParams`` (offsets, multipliers, shifts, out_zp, act range)."""

    op = "QAdd"
    requantizes = True
    ms_ops = ("QLinearAdd",)
    template = "q_add.c.j2"

    def import_onnx(self, ctx):
        return _import_binary(ctx, build_qadd)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(arith.add_int8(inputs[0], inputs[1], add_params_of(node.attrs)), np.int8)]

    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        """variant: the kernels that compute this node exactly (``add_plan``), best first."""
        return {"variant": [i.name for i in applicable(self.implementations, node, graph)]}

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        """The best variant the target's core runs; OpenCL keeps the per-element "scalar" kernel."""
        isa = Isa.parse(target)
        names = [i.name for i in applicable(self.implementations, node, graph) if isa.has(i.needs)]
        return {"variant": "scalar" if isa.work_items or not names else names[0]}

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        p = add_params_of(node.attrs)
        ctx = super().kernel_context(node, graph, schedule, target)
        where = f"node '{node.source or node.name}' (QAdd)"
        variant = {**self.default_schedule(node, graph, target), **(schedule or {})}["variant"]
        impl = by_name(self.implementations, variant, where)
        if not impl.applies(node, graph):
            raise UnsupportedError(f"{where}: variant '{variant}' does not compute this node exactly")
        ctx.update(variant=variant, params_init=[getattr(p, f) for f in ADD_FIELDS])
        if variant == "scalar":
            return ctx
        plan = add_plan(p)
        assert plan is not None  # the variant applies
        kt = _add_kernel_terms(plan, 2 if variant == "fast" and plan["form"] != "helper" else 1)
        inner = [ctx["sa"][-1], ctx["sb"][-1]]
        cont = [k for k in (0, 1) if inner[k]]
        terms = kt["terms"]
        if len(cont) == 1:
            va = [cont[0]] if terms[cont[0]]["affine"] else []
        else:
            va = [0] if terms[0]["affine"] and terms[1]["affine"] else []
        return dict(ctx, plan=plan, kt=kt, cont=cont, vA=va)


@register
class QMul(_QBinary):
    """attrs: a_zp, b_zp, multiplier, shift (M = s_a * s_b / s_out), out_zp, act_min, act_max."""

    op = "QMul"
    requantizes = True
    ms_ops = ("QLinearMul",)
    template = "q_mul.c.j2"

    def import_onnx(self, ctx):
        return _import_binary(ctx, build_qmul)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        return [
            np.asarray(
                arith.mul_int8(
                    inputs[0],
                    inputs[1],
                    a["a_zp"],
                    a["b_zp"],
                    a["multiplier"],
                    a["shift"],
                    a["out_zp"],
                    a["act_min"],
                    a["act_max"],
                    arith.rounding_of(a),
                ),
                np.int8,
            )
        ]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        return dict(super().kernel_context(node, graph, schedule, target), **arith.rounding_context(node.attrs))


def _add_fast_applies(node: Node, graph: Graph) -> bool:
    return add_plan(add_params_of(node.attrs)) is not None


def _add_mve_applies(node: Node, graph: Graph) -> bool:
    """The 4-lane loop walks the innermost run: at least one input must be contiguous in it
    (the other may be broadcast across it, read once per run)."""
    if not _add_fast_applies(node, graph):
        return False
    a, b = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
    _, (sa, sb) = collapse_broadcast(graph.tensor(node.outputs[0]).shape, [a.shape, b.shape])
    return sa[-1] in (0, 1) and sb[-1] in (0, 1) and bool(sa[-1] or sb[-1])


QAdd.implementations = (
    Implementation("mve", "q_add.c.j2", _add_mve_applies, "mve", ("variant",), priority=30),
    Implementation("fast", "q_add.c.j2", _add_fast_applies, None, ("variant",), priority=20),
    Implementation("scalar", "q_add.c.j2", knobs=("variant",), priority=0),
)


# -- QLut ---------------------------------------------------------------------------------------------
def build_qlut(
    graph: Graph, name: str, x: str, out: str, fn: Callable[[np.ndarray], np.ndarray], source: str = ""
) -> Node:
    """y = lut[x + 128] with lut[q + 128] = QuantizeLinear(fn(DequantizeLinear(q))) (float64, rounding
    half to even); `fn` maps a float64 array to float64. NaN results map to -128 (what tinyc's
    QuantizeLinear kernel gives NaN), +-inf saturate."""
    where = _where(name, source, "QLut")
    (si, zi), (so, zo) = qtensor(graph, x, where), qtensor(graph, out, where)
    _check_out_shape(graph, out, graph.tensor(x).shape, where)

    def f(v: np.ndarray) -> np.ndarray:
        try:
            with np.errstate(all="ignore"):
                y = np.asarray(fn(v), dtype=np.float64)
            y = np.broadcast_to(y, v.shape)
        except Exception as exc:  # a bad function is the caller's input: name the node
            raise UnsupportedError(f"{where}: the table function failed: {type(exc).__name__}: {exc}") from None
        return np.where(np.isnan(y), -np.inf, y)

    with np.errstate(all="ignore"):
        table = arith.build_lut(f, si, zi, so, zo, rounding="half_even")
    lut = graph.add_constant(graph.unique_name(f"{name}_lut"), np.asarray(table, np.int8))
    return Node(name, "QLut", [x, lut], [out], {}, source=source)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _leaky_relu(alpha: float) -> Callable[[np.ndarray], np.ndarray]:
    a = float(np.float32(alpha))
    return lambda v: np.where(v >= 0, v, v * a)


@register
class QLut(_QOp):
    """inputs: x (int8), the int8[256] table (constant); no attrs."""

    op = "QLut"
    ms_ops = ("QLinearSigmoid", "QLinearLeakyRelu")
    template = "q_lut.c.j2"
    dtypes = ("int8",)
    inplace = True

    def import_onnx(self, ctx):
        fn = _sigmoid if ctx.op_type == "QLinearSigmoid" else _leaky_relu(float(ctx.attr("alpha", 0.01)))
        ms = _MsIO(ctx)
        x = ms.input(0, 1, 2)
        s, zp, dt = ms.out_params(3, 4, ctx.dtype(0))
        y = ms.output(ctx.graph.tensor(x).shape, s, zp, dt)
        return ms.finish(build_qlut(ctx.graph, ctx.name, x, y, fn, source=ctx.name))

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, "int8")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(arith.lut_lookup(inputs[1].reshape(-1), inputs[0]), np.int8)]

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return True

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Elementwise: any layout works; the table is not a tensor with axes."""
        return True

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        if graph.tensor(node.inputs[1]).size != 256:
            raise UnsupportedError(f"node '{node.source or node.name}' (QLut): the table must have 256 entries")
        return {"count": graph.tensor(node.inputs[0]).size}


# -- QRequantize ------------------------------------------------------------------------------------
def build_qrequantize(graph: Graph, name: str, x: str, out: str, source: str = "") -> Node:
    """x (int8/uint8, grid s_in, zp_in) -> out (int8/uint8, grid s_out, zp_out)."""
    where = _where(name, source, "QRequantize")
    (si, zi), (so, zo) = (qtensor(graph, t, where, tuple(QRANGE)) for t in (x, out))
    _check_out_shape(graph, out, graph.tensor(x).shape, where)
    out_dtype = graph.tensor(out).dtype
    qmin, qmax = QRANGE[out_dtype]
    try:
        mult = arith.rescale_params(si, so)
    except ValueError as exc:
        raise UnsupportedError(f"{where}: multiplier s_in / s_out: {exc}") from None
    return Node(
        name,
        "QRequantize",
        [x],
        [out],
        dict(
            in_zp=zi,
            out_zp=zo,
            exact=mult is None,
            multiplier=0 if mult is None else mult[0],
            shift=0 if mult is None else mult[1],
            left_shift=0 if mult is None else mult[2],
            qmin=qmin,
            qmax=qmax,
            out_dtype=out_dtype,
        ),
        source=source,
    )


def rescale_attrs(a: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """The golden QRequantize of x under attrs `a` (also one QConcat input)."""
    return arith.rescale(
        x,
        a["in_zp"],
        a["out_zp"],
        a["qmin"],
        a["qmax"],
        None if a["exact"] else a["multiplier"],
        a["shift"],
        a["left_shift"],
    )


@register
class QRequantize(_QOp):
    """attrs: in_zp, out_zp, exact (equal scales), multiplier, shift, left_shift (M = s_in / s_out, see
    ``arith.rescale_params``), qmin, qmax, out_dtype."""

    op = "QRequantize"
    template = "q_requantize.c.j2"
    dtypes = tuple(QRANGE)
    inplace = True
    layout_agnostic = True

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, node.attrs["out_dtype"])]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [rescale_attrs(node.attrs, inputs[0]).astype(node.attrs["out_dtype"])]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        return {"count": graph.tensor(node.inputs[0]).size}


# -- com.microsoft QOperators ---------------------------------------------------------------------------
class _MsIO:
    """The int8 view of one com.microsoft QLinear* node: constant scales / zero points, uint8 inputs
    and outputs bridged by exact QRequantize shifts, the output's quantization declared up front."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.g: Graph = ctx.graph
        self.before: list[Node] = []
        self.after: list[Node] = []

    def scale(self, i: int, what: str) -> float:
        ctx = self.ctx
        if not ctx.has_input(i):
            ctx.unsupported(f"input {i} ({what} scale) is required")
        if ctx.dtype(i) not in ("float32", "float16"):
            ctx.unsupported(f"{what} scale of type {ctx.dtype(i)} (float32 only)")
        return import_scale(ctx, i, what)

    def zero_point(self, i: int, what: str, dtype: str) -> int:
        return import_zero_point(self.ctx, i, what, dtype)

    def input(self, i: int, si: int, zi: int, what: str = "") -> str:
        """The int8 tensor standing for data input i (scale at si, zero point at zi)."""
        ctx, g = self.ctx, self.g
        what = what or f"input {i}"
        if not ctx.has_input(i):
            ctx.unsupported(f"{what} is required")
        name, dt = ctx.inputs[i], ctx.dtype(i)
        if dt not in QRANGE:
            ctx.unsupported(f"{what} '{name}' of type {dt} (int8/uint8 only)")
        s, zp = self.scale(si, what), self.zero_point(zi, what, dt)
        t = g.tensor(name)
        if t.size == 0:
            ctx.unsupported(f"{what} '{name}' is empty")
        if t.quant is None:
            t.quant = per_tensor(s, zp)
        else:
            try:
                have = qparams_of(g, name)
            except UnsupportedError as exc:
                ctx.unsupported(str(exc))
            if have != (float(np.float32(s)), zp):
                ctx.unsupported(f"{what} '{name}' is already quantized as {have}, this node reads it as {(s, zp)}")
        if dt == "int8":
            return name
        if t.data is not None:  # uint8 constant -> int8 constant, exactly
            return add_qconstant(
                g, f"{ctx.name}_{name}_i8", (t.data.astype(np.int16) - 128).astype(np.int8), s, zp - 128
            )
        for n in [*g.nodes, *self.before]:  # an int8 twin exists: made for an earlier QOperator, or the
            if n.op != "QRequantize" or not n.attrs["exact"]:  # int8 value a uint8 output was made from
                continue
            if n.inputs[0] == name and n.attrs["out_dtype"] == "int8" and n.attrs["out_zp"] == n.attrs["in_zp"] - 128:
                return n.outputs[0]
            if (
                n.outputs[0] == name
                and g.tensor(n.inputs[0]).dtype == "int8"
                and n.attrs["out_zp"] == n.attrs["in_zp"] + 128
            ):
                return n.inputs[0]
        mid = g.unique_name(f"{name}_i8")
        add_qtensor(g, mid, t.shape, s, zp - 128)
        self.before.append(build_qrequantize(g, g.unique_name(f"{ctx.name}_{mid}"), name, mid, source=ctx.name))
        return mid

    def out_params(self, si: int, zi: int, default_dtype: str) -> tuple[float, int, str]:
        """Output scale, zero point and type (the zero point's type; `default_dtype` without one)."""
        ctx = self.ctx
        dt = ctx.dtype(zi) if ctx.has_input(zi) else default_dtype
        if dt not in QRANGE:
            ctx.unsupported(f"output of type {dt} (int8/uint8 only)")
        return self.scale(si, "output"), self.zero_point(zi, "output", dt), dt

    def output(self, shape: tuple[int, ...], s: float, zp: int, dtype: str) -> str:
        """Declare the node's output (with its quantization); returns the int8 tensor the kernel writes."""
        ctx, g = self.ctx, self.g
        out = ctx.outputs[0]
        if out in g.tensors:
            ctx.unsupported(f"output '{out}' is defined twice")
        add_qtensor(g, out, shape, s, zp, dtype)
        if dtype == "int8":
            return out
        mid = g.unique_name(f"{out}_i8")
        add_qtensor(g, mid, shape, s, zp - 128)
        self.after.append(build_qrequantize(g, g.unique_name(f"{ctx.name}_{out}_u8"), mid, out, source=ctx.name))
        return mid

    def finish(self, core: Node) -> list[Node]:
        return [*self.before, core, *self.after]


def _import_binary(ctx: Any, build: Callable[..., Node]) -> list[Node]:
    """QLinearAdd / QLinearMul: (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp) -> C."""
    ms = _MsIO(ctx)
    a = ms.input(0, 1, 2, "A")
    b = ms.input(3, 4, 5, "B")
    s, zp, dt = ms.out_params(6, 7, ctx.dtype(0))
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(ctx.shape(0), ctx.shape(3)))
    except ValueError:
        ctx.unsupported(f"shapes {list(ctx.shape(0))} and {list(ctx.shape(3))} do not broadcast")
    y = ms.output(shape, s, zp, dt)
    return ms.finish(build(ctx.graph, ctx.name, a, b, y, source=ctx.name))
