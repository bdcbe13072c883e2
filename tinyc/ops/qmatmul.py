"""ONNX QLinearMatMul as an int32-accumulating integer kernel (IR op ``QMatMul``).

The arithmetic is the project's one integer truth (``tinyc.numerics.fixed_point`` / ``tinyc_q.h``):
``acc = sum_k (a - a_zp) * (b - b_zp)`` in int32, then TFLite's fixed-point requantization
``clamp(mbqm(acc, multiplier[n], shift[n]) + y_zp, qmin, qmax)`` with per-column parameters
``requant_params(a_scale, b_scale[n], y_scale)``. No floating point at run time.

``b`` and every scale / zero point must be constants. ``b`` is kept [.., K, N] (the inner loop
walks N contiguously). A 2-D ``b`` treats ``a`` as rows (leading dims flattened, no copy); an
N-D ``b`` is a batched product with numpy broadcasting of the batch dims. ``a_zp`` and ``y_zp`` are
per-tensor; ``b_scale``/``b_zp`` per-tensor or per-column (N). A non-zero ``b_zp`` costs one row
sum per output row (``acc -= b_zp[n] * sum_k (a - a_zp)``), not a subtraction per MAC.

The same node serves fully connected layers (``build_qfc``, the int8 lowering of a float Gemm) and
com.microsoft ``QGemm``: an optional third input, an int32 bias per column on the grid
``a_scale * b_scale[n]`` (QGemm: times alpha), starts the accumulator, and ``act_min`` /
``act_max`` (a fused activation) narrow the output clamp. QGemm's uint8 activations run on the
int8 kernel between exact ``QRequantize`` shifts (q_int8 = q_uint8 - 128).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.ir.isa import Isa
from tinyc.ops.base import OpDef, OutputType, broadcast_strides, register
from tinyc.ops.conv import GRID_ORDERS, grid_canonical, grid_knob_target, grid_knobs
from tinyc.ops.gemm import GRID_MATMUL_KNOBS, grid_batches, grid_matmul_context, grid_matmul_default
from tinyc.ops import _qconv_mve
from tinyc.ops.impl import Implementation, applicable, by_name
from tinyc.ops.qconv import (
    SIMD_FORMS,
    searched_on_mcu,
    _c_literals,
    _int8_tensor,
    _split_pairs,
    float_bias,
    quantize_bias_fitting,
    quantize_weights,
    requant_and_clamp,
)
from tinyc.numerics import fixed_point as arith
from tinyc.numerics.qparams import add_qtensor, per_tensor, qparams_of

QTYPES: dict[str, tuple[int, int]] = {"int8": (-128, 127), "uint8": (0, 255)}
#: |(a - a_zp) * (b - b_zp)| <= 255 * 255, so K terms stay inside int32 up to this K.
MAX_K = (2**31 - 1) // (255 * 255)
#: QMatMul register tiles above this many int32 accumulators are not searched on a microcontroller
#: (searched_on_mcu): wider than QConv's bound, as AD's 8 -> 128 layer's best M4 tile has 64
MCU_MAX_MATMUL_ACCUMULATORS = 64
INT32_MAX = 2**31 - 1

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext


def _scalar(ctx: Any, i: int, what: str) -> np.ndarray:
    v = np.asarray(ctx.require_const(i, what))
    if v.size != 1:
        ctx.unsupported(f"{what} must be a scalar (per-tensor), got shape {v.shape}")
    return v.reshape(())


def _per_col(ctx: ImportContext, i: int, what: str, n: int) -> np.ndarray:
    """A per-tensor (size 1) or per-column (size N, shape [N] or [..., 1, N]) constant, as [N]."""
    v = np.asarray(ctx.require_const(i, what))
    if v.size == 1:
        return np.broadcast_to(v.reshape(1), (n,))
    if v.size == n and v.shape[-1] == n:
        return v.reshape(n)
    ctx.unsupported(f"{what} of shape {v.shape}: only per-tensor or per-column (N={n}) is supported")


def _check_bias_acc(where: str, bias: np.ndarray, b_raw: np.ndarray, b_zp: np.ndarray) -> None:
    """|bias[n]| + 255 * sum_k |b[k, n] - b_zp[n]| (the result) and + 255 * sum_k |b[k, n]| (the
    kernel's partial sums before the b_zp row-sum correction) must fit int32."""
    bl = np.asarray(b_raw, np.int64)
    col = np.maximum(np.abs(bl - np.asarray(b_zp, np.int64).reshape(1, -1)).sum(axis=0), np.abs(bl).sum(axis=0))
    if int(np.max(np.abs(np.asarray(bias, np.int64)) + 255 * col, initial=0)) > INT32_MAX:
        raise UnsupportedError(f"{where}: the int32 accumulator could overflow for this K / weight range / bias")


def build_qfc(
    graph: Graph,
    name: str,
    x: str,
    w: str,
    b: str | None,
    out: str,
    activation: tuple[float | None, float | None] | None = None,
    source: str = "",
) -> Node:
    """A QMatMul node computing the float fully connected layer x @ w + b (x [.., K] int8, `w` a
    float32 constant [K, N], `b` a float32 constant [N] or None) into int8 `out` [.., N].

    Weights: int8, symmetric per column — the model's own grid (``graph.tensor(w).quant``: per
    tensor, or per axis on N: axis 1 of [K, N], or axis 0 of a transB [N, K] original) when it is
    symmetric and the weights lie on it, else max|w[:, n]| / 127. Bias: int32 on the grid
    s_x * s_w[n]. M[n] = s_x * s_w[n] / s_y; `activation` (a real clamp) narrows the output clamp."""
    where = f"node '{source or name}' (QMatMul)"
    s_x, zp_x = _int8_tensor(graph, x, where)
    s_y, zp_y = _int8_tensor(graph, out, where)
    wt = graph.tensor(w)
    if wt.data is None or wt.data.ndim != 2:
        raise UnsupportedError(f"{where}: weights '{w}' must be a constant matrix [K, N]")
    wf = np.asarray(wt.data, np.float32)
    if not np.all(np.isfinite(wf)):
        raise UnsupportedError(f"{where}: weights are not finite")
    K, N = (int(d) for d in wf.shape)
    xs = graph.tensor(x).shape
    if len(xs) < 1 or xs[-1] != K:
        raise UnsupportedError(f"{where}: input {list(xs)} does not match weights [{K}, {N}]")
    if tuple(graph.tensor(out).shape) != (*xs[:-1], N):
        raise UnsupportedError(
            f"{where}: output '{out}' has shape {list(graph.tensor(out).shape)}, expected {[*xs[:-1], N]}"
        )
    wq, s_w = quantize_weights(wf, wt.quant, 1, (1, 0))
    bias = None
    if b is not None:
        wq, s_w, bias = quantize_bias_fitting(wf, wq, s_w, float_bias(graph, b, N, where), s_x, 1)
    _check_bias_acc(where, np.zeros(N) if bias is None else bias, wq, np.zeros(N))
    mult, shift, act_min, act_max = requant_and_clamp(where, s_x, s_w, s_y, zp_y, activation)
    ins = [x, graph.add_constant(graph.unique_name(f"{name}_wq"), wq)]
    if bias is not None:
        ins.append(graph.add_constant(graph.unique_name(f"{name}_bias_q"), bias))
    return Node(
        name,
        "QMatMul",
        ins,
        [out],
        dict(
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
        ),
        source=source,
    )


@register
class QMatMul(OpDef):
    """y = requantize((a - a_zp) @ (b - b_zp)) with a constant b (int8/uint8 in and out)."""

    op = "QMatMul"
    onnx_ops = ("QLinearMatMul",)
    requantizes = True
    ms_ops = ("QGemm",)
    template = "qmatmul.c.j2"
    dtypes = tuple(QTYPES)

    def import_onnx(self, ctx):
        if ctx.op_type == "QGemm":
            return _import_qgemm(ctx)
        for i, what in ((0, "a"), (3, "b"), (7, "y_zero_point")):
            if not ctx.has_input(i):
                ctx.unsupported(f"input {i} ({what}) is required")
            if ctx.dtype(i) not in QTYPES:
                ctx.unsupported(f"{what} of type {ctx.dtype(i)} (int8/uint8 only)")
        for zi, ti, what in ((2, 0, "a_zero_point"), (5, 3, "b_zero_point")):
            if ctx.has_input(zi) and ctx.dtype(zi) != ctx.dtype(ti):
                ctx.unsupported(f"{what} type {ctx.dtype(zi)} differs from its tensor's type {ctx.dtype(ti)}")
        for si, what in ((1, "a_scale"), (4, "b_scale"), (6, "y_scale")):
            if ctx.dtype(si) not in ("float32", "float16"):
                ctx.unsupported(f"{what} of type {ctx.dtype(si)} (float32/float16 only)")
        b = np.asarray(ctx.require_const(3, "b"))
        a_shape = ctx.shape(0)
        if b.ndim < 2 or len(a_shape) < 2:
            ctx.unsupported(f"a {a_shape} and b {b.shape} must both have rank >= 2")
        K, N = int(b.shape[-2]), int(b.shape[-1])
        if a_shape[-1] != K:
            ctx.unsupported(f"inner dimensions differ: a {a_shape} vs b {b.shape}")
        if K > MAX_K:
            ctx.unsupported(f"K = {K} could overflow the int32 accumulator (max {MAX_K})")
        try:
            np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b.shape[:-2]))
        except ValueError:
            ctx.unsupported(f"batch dims of a {a_shape} and b {b.shape} do not broadcast")
        a_scale = _scalar(ctx, 1, "a_scale").astype(np.float32)
        y_scale = _scalar(ctx, 6, "y_scale").astype(np.float32)
        b_scale = _per_col(ctx, 4, "b_scale", N).astype(np.float32)
        a_zp = int(_scalar(ctx, 2, "a_zero_point")) if ctx.has_input(2) else 0
        y_zp = int(_scalar(ctx, 7, "y_zero_point"))
        b_zp = _per_col(ctx, 5, "b_zero_point", N).astype(np.int64) if ctx.has_input(5) else np.zeros(N, np.int64)
        scales = np.concatenate([a_scale.reshape(1), b_scale, y_scale.reshape(1)])
        if not np.all(np.isfinite(scales)) or np.any(scales < 0) or not y_scale > 0:
            ctx.unsupported("scales must be finite, non-negative, and y_scale > 0")
        try:
            mult, shift = arith.requant_params(a_scale, b_scale, y_scale)
        except ValueError as e:
            ctx.unsupported(f"requantization multiplier: {e}")
        qmin, qmax = QTYPES[ctx.dtype(7)]
        w = ctx.add_constant("b_kn", np.ascontiguousarray(b))
        return ctx.make_node(
            self.op,
            inputs=[ctx.inputs[0], w],
            outputs=ctx.outputs[:1],
            multiplier=[int(v) for v in np.asarray(mult).reshape(N)],
            shift=[int(v) for v in np.asarray(shift).reshape(N)],
            a_zp=a_zp,
            b_zp=[int(v) for v in b_zp],
            y_zp=y_zp,
            qmin=qmin,
            qmax=qmax,
            ydtype=ctx.dtype(7),
        )

    # -- shapes ------------------------------------------------------------------------------
    @staticmethod
    def _dims(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[list[int], int, int, int, tuple[int, ...]]:
        """(batch, M, K, N, out_shape); a 2-D b flattens a's leading dims into M rows."""
        K, N = int(b[-2]), int(b[-1])
        if len(b) == 2:
            return [], int(np.prod(a[:-1], dtype=np.int64)), K, N, (*a[:-1], N)
        batch = [int(d) for d in np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))]
        return batch, int(a[-2]), K, N, (*batch, int(a[-2]), N)

    def task_dims(self, node: Node, graph: Graph) -> dict[str, int]:
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        return {"M": int(np.prod(a[:-1])), "K": int(a[-1]), "N": int(b[-1])}

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        return [(tuple(int(d) for d in self._dims(a, b)[4]), node.attrs["ydtype"])]

    def macs(self, node: Node, graph: Graph) -> int:
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        batch, M, K, N, _ = self._dims(a, b)
        return int(np.prod(batch, dtype=np.int64)) * M * K * N

    # -- golden model --------------------------------------------------------------------------
    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Integers only: exact int64 product of the zero-point-corrected operands, then arith's
        requantization per column (the accumulator provably fits int32: K <= MAX_K)."""
        at = node.attrs
        a, b = inputs[0], inputs[1]
        a64 = a.astype(np.int64) - at["a_zp"]
        b64 = b.astype(np.int64) - np.asarray(at["b_zp"], dtype=np.int64)
        if b.ndim == 2:
            acc = (a64.reshape(-1, a.shape[-1]) @ b64).reshape(*a.shape[:-1], b.shape[-1])
        else:
            acc = np.matmul(a64, b64)
        if len(inputs) > 2 and inputs[2] is not None:
            acc = acc + inputs[2].astype(np.int64).reshape(-1)
        x = np.asarray(
            arith.multiply_by_quantized_multiplier(
                acc, np.asarray(at["multiplier"], np.int32), np.asarray(at["shift"], np.int32), arith.rounding_of(at)
            )
        ).astype(np.int64)
        lo, hi = _clamp(at)
        y = np.clip(x + at["y_zp"], lo, hi)
        return [y.astype(at["ydtype"])]

    # -- code generation -------------------------------------------------------------------------
    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        """n_tile x m_tile int32 accumulators (tails handled); mac "i16": (a - a_zp) * b formed in
        int16 (int8 b: |product| <= 255 * 128 < 2^15), so it vectorises as 16-bit multiplies."""
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        _, M, _, N, _ = self._dims(a, b)
        n_tiles = [t for t in (64, 32, 16, 8, 4, 2, 1) if t <= N]
        if N < 64 and N not in n_tiles:
            n_tiles.insert(0, N)
        macs = ["i16", "i32"] if graph.tensor(node.inputs[1]).dtype == "int8" else ["i32"]
        simd = _simd_bias(node, graph) is not None
        if simd:
            macs[1:1] = list(SIMD_FORMS)
        return {
            "n_tile": n_tiles,
            "m_tile": [t for t in (4, 2, 1) if t <= M],
            "mac": macs,
            "wide_weights": [False, True] if simd else [False],
            "variant": [i.name for i in applicable(self.implementations, node, graph)],
            **grid_knobs(),
            "loop_order": list(GRID_ORDERS["matmul"]),
        }

    def knob_isa(self, knob: str, value: Any) -> str | None:
        return super().knob_isa(knob, value) or grid_knob_target(knob, value, (("loop_order", "columns_outer"),))

    def searched(self, node: Node, graph: Graph, space: list[dict[str, Any]], target: str) -> list[dict[str, Any]]:
        return searched_on_mcu(space, target, ("n_tile", "m_tile"), MCU_MAX_MATMUL_ACCUMULATORS)

    def canonical_schedule(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> dict[str, Any]:
        """Only "dsp" stores pre-split weights: wide_weights is moot for the other forms. "grid"
        reads n_tile, m_tile, vec, local_mem, loop_order (``grid_canonical``; int32 products);
        "tiled" is the variant a schedule without one runs, so it is left out (the C targets'
        schedules stay as they were)."""
        if schedule.get("variant") == "grid":
            a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
            return grid_canonical(
                schedule, ("n_tile", "m_tile"), self._dims(a, b)[3], self.knobs(node, graph)["m_tile"], family="matmul"
            )
        sched = {k: v for k, v in schedule.items() if k not in ("variant", "vec", "local_mem", "loop_order")}
        if "wide_weights" in sched and sched.get("mac") != "dsp":
            sched["wide_weights"] = False
        return sched

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        """Widest column tile (64 int8 columns fill an AVX-512 vector), then as many rows (<= 4) as
        keep <= 256 int32 accumulators; int16 products where exact. On targets with the DSP
        extension / MVE the SIMD dot products (measured in QEMU, benchmarks/kernels.py): small
        register blocks of columns x rows; dsp unpacks int8 weights with SXTB16 (the pre-split int16
        weights of ``wide_weights`` measured 1.4x slower on both NOTES.md FC shapes on the M4: twice
        the loads for one FC row, found by the tuner)."""
        ks = self.knobs(node, graph)
        isa = Isa.parse(target)
        if isa.work_items:
            a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
            batch, M, _, N, _ = self._dims(a, b)
            return grid_matmul_default(M, N, ks, int(np.prod(batch, dtype=np.int64)))
        s = {k: v[0] for k, v in ks.items() if k not in ("variant", "vec", "local_mem", "loop_order")}
        fits = [r for r in ks["m_tile"] if r * s["n_tile"] <= 256]
        s["m_tile"] = max(fits) if fits else 1
        simd = next((f for f in reversed(SIMD_FORMS) if isa.has(f) and f in ks["mac"]), None)
        if simd is not None:
            n, m = SIMD_BLOCK[simd]
            s.update(
                mac=simd,
                n_tile=max([t for t in ks["n_tile"] if t <= n] or [1]),
                m_tile=max([t for t in ks["m_tile"] if t <= m] or [1]),
                wide_weights=False,
            )
        return s

    def implementation(
        self, node: Node, graph: Graph, schedule: dict[str, Any] | None, target: str
    ) -> tuple[Implementation, dict[str, Any]]:
        """The registered implementation a schedule runs ("tiled" unless it says "grid", its SIMD
        forms by mac) and the schedule completed with the target's default."""
        sched = {**self.default_schedule(node, graph, target), **(schedule or {})}
        name = "grid" if sched.get("variant") == "grid" else sched["mac"] if sched["mac"] in SIMD_FORMS else "tiled"
        return by_name(self.implementations, name, f"node '{node.source or node.name}' (QMatMul)"), sched

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        batch, M, K, N, _ = self._dims(a, b)
        impl, sched = self.implementation(node, graph, schedule, target)
        if impl.name == "grid":
            return dict(self._grid_context(node, graph, sched), impl_template=impl.template)
        if sched["mac"] not in self.knobs(node, graph)["mac"]:
            raise UnsupportedError(f"node '{node.source or node.name}' (QMatMul): mac={sched['mac']!r} needs int8 b")
        at = node.attrs
        if batch:
            a2, b2 = tuple(a[:-2]), tuple(b[:-2])
            bsa = [s * M * K for s in broadcast_strides(a2, batch)]
            bsb = [s * K * N for s in broadcast_strides(b2, batch)]
        else:
            bsa, bsb = [], []
        simd = sched["mac"] if sched["mac"] in SIMD_FORMS else None
        extra: dict[str, Any] = {"simd": simd, "impl_template": impl.template}
        if simd is not None:  # b as [N][K] (contiguous along K), the a zero point folded into the bias
            bt = np.ascontiguousarray(np.asarray(graph.tensor(node.inputs[1]).data).T)
            wsplit = simd == "dsp" and bool(sched.get("wide_weights"))
            wr = _split_pairs(bt) if wsplit else bt.reshape(-1)
            extra.update(
                wr=_c_literals(wr),
                wr_len=int(wr.size),
                wsplit=wsplit,
                folded=_simd_bias(node, graph),
                xoff=128 if graph.tensor(node.inputs[0]).dtype == "uint8" else 0,
                KS=int(wr.size) // N,
            )
        uniform = len(set(zip(at["multiplier"], at["shift"]))) == 1
        lo, hi = _clamp(at)
        shifts = [int(v) for v in at["shift"]]
        if simd == "mve":
            extra.update(_mve_requant(at, N, shifts, lo, hi, graph.tensor(node.outputs[0]).dtype == "int8"))
        return dict(
            variant="tiled",
            batch=batch,
            bsa=bsa,
            bsb=bsb,
            M=M,
            K=K,
            N=N,
            n_tile=min(int(sched.get("n_tile", 1)), N),
            m_tile=min(int(sched.get("m_tile", 1)), M),
            mac=sched["mac"],
            uniform=uniform,
            has_bzp=any(at["b_zp"]),
            uniform_bzp=len(set(at["b_zp"])) == 1,
            has_bias=len(node.inputs) > 2 and bool(node.inputs[2]),
            LO=lo - at["y_zp"],
            HI=hi - at["y_zp"],
            rshifts=[max(-v, 0) for v in shifts],
            lshift=any(v > 0 for v in shifts),
            lmuls=[1 << max(v, 0) for v in shifts],
            **extra,
            **arith.rounding_context(at),
        )

    def _grid_context(self, node: Node, graph: Graph, sched: dict[str, Any]) -> dict[str, Any]:
        """Template variables of the "grid" kernel: int32 products of (a - a_zp) and b, the bias
        and the b_zp row-sum correction as in "tiled", the same requantization tables."""
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        batch, M, K, N, _ = self._dims(a, b)
        at = node.attrs
        bsa = [s * M * K for s in broadcast_strides(tuple(a[:-2]), batch)] if batch else []
        bsb = [s * K * N for s in broadcast_strides(tuple(b[:-2]), batch)] if batch else []
        lo, hi = _clamp(at)
        shifts = [int(v) for v in at["shift"]]
        ctx = dict(
            variant="grid",
            batch=batch,
            M=M,
            K=K,
            N=N,
            nbat=int(np.prod(batch, dtype=np.int64)),
            aoff=grid_batches(batch, bsa),
            boff=grid_batches(batch, bsb),
            uniform=len(set(zip(at["multiplier"], at["shift"]))) == 1,
            has_bzp=any(at["b_zp"]),
            uniform_bzp=len(set(at["b_zp"])) == 1,
            has_bias=len(node.inputs) > 2 and bool(node.inputs[2]),
            LO=lo - at["y_zp"],
            HI=hi - at["y_zp"],
            rshifts=[max(-v, 0) for v in shifts],
            lshift=any(v > 0 for v in shifts),
            lmuls=[1 << max(v, 0) for v in shifts],
            mac="i32",
            simd=None,
            **arith.rounding_context(at),
        )
        ctx.update(grid_matmul_context(M, K, N, sched, np.dtype(graph.tensor(node.inputs[1]).dtype).itemsize))
        return ctx


#: Register blocks (n_tile columns, m_tile rows) of the SIMD forms, measured in QEMU.
SIMD_BLOCK = {"dsp": (4, 1), "mve": (8, 1)}


def _mve_requant(at: dict[str, Any], N: int, shifts: list[int], lo: int, hi: int, int8_out: bool) -> dict[str, Any]:
    """The MVE fully connected requantization of 4 output columns at a time (lanes = columns):
    per-column multiplier / -shift tables (3 entries of padding), VQRDMULH + VRSHL (TFLite
    rounding, any r in [0, 31]) or tinyc_vmbqm_even_r_v (half-even, r >= 1; a column with
    multiplier 0 counts as r = 1, ``_qconv_mve.table_shifts``), the output stage of the Helium
    conv kernel, one VSTRB.32. "scalar" (tinyc_q.h per output) with a b zero point, left shifts,
    or a half-even column with r == 0."""
    mult = [int(v) for v in at["multiplier"]] * (N if len(at["multiplier"]) == 1 else 1)
    rs = [max(-v, 0) for v in shifts] * (N if len(shifts) == 1 else 1)
    rs = _qconv_mve.table_shifts(rs, mult)
    half_even = arith.rounding_of(at) == "half_even"
    if any(at["b_zp"]) or any(v > 0 for v in shifts) or (half_even and not all(1 <= r <= 31 for r in rs)):
        return {"mvq": "scalar"}
    pad = 3  # a vector load at any column < N stays inside (tiles start at multiples of n_tile)
    return {
        "mvq": "even_v" if half_even else "tflite_v",
        "mvq_out": _qconv_mve.out_stage(int8_out, lo, hi),
        "mvq_mul": ", ".join(str(v) for v in mult + [0] * pad),
        "mvq_nrsh": ", ".join(str(-r) for r in rs + [1] * pad),
        "mvq_len": N + pad,
    }


def _simd_bias(node: Node, graph: Graph) -> list[int] | None:
    """The folded int32 start value per column for the "dsp" / "mve" forms, or None when they are
    not exact / not available: a 2-D int8 b in [-127, 127] with b_zp = 0 and a int8 / uint8 read as
    a' = a - xoff (xoff = 128 for uint8, so a' is int8); the accumulator starts at
    bias[n] - (a_zp - xoff) * sum_k b[k, n] and every partial sum stays inside int32:
    |start| + 128 * sum_k |b[k, n]| <= 2^31 - 1 (the bound of qconv's "i16x2")."""
    at = node.attrs
    bt, a_t = graph.tensor(node.inputs[1]), graph.tensor(node.inputs[0])
    if bt.dtype != "int8" or bt.data is None or len(bt.shape) != 2 or any(at["b_zp"]) or a_t.dtype not in QTYPES:
        return None
    b = np.asarray(bt.data, np.int64)
    if not b.size or int(np.abs(b).max()) > 127:
        return None
    bias = np.zeros(b.shape[1], np.int64)
    if len(node.inputs) > 2 and node.inputs[2]:
        bias_t = graph.tensor(node.inputs[2])
        if bias_t.data is None:
            return None
        bias = np.asarray(bias_t.data, np.int64).reshape(-1)
    xoff = 128 if a_t.dtype == "uint8" else 0
    start = bias - (int(at["a_zp"]) - xoff) * b.sum(axis=0)
    if int(np.max(np.abs(start) + 128 * np.abs(b).sum(axis=0))) > INT32_MAX:
        return None
    return [int(v) for v in start]


def _clamp(at: dict[str, Any]) -> tuple[int, int]:
    """The output clamp: the type's range narrowed by a fused activation's [act_min, act_max]."""
    return max(at["qmin"], at.get("act_min", at["qmin"])), min(at["qmax"], at.get("act_max", at["qmax"]))


# -- the registered implementations -------------------------------------------------------
def _simd_exact(node: Node, graph: Graph) -> bool:
    """The SIMD dot products are exact here (``_simd_bias``: int8 b in [-127, 127], b_zp 0, the
    folded bias and every partial sum inside int32)."""
    return _simd_bias(node, graph) is not None


_TILED_KNOBS = ("n_tile", "m_tile", "mac", "wide_weights")

QMatMul.implementations = (
    Implementation("tiled", "qmatmul/tiled.c.j2", knobs=_TILED_KNOBS, priority=10),
    Implementation("grid", "qmatmul/grid.c.j2", needs="opencl", knobs=GRID_MATMUL_KNOBS, priority=-10),
    Implementation("dsp", "qmatmul/tiled.c.j2", _simd_exact, "dsp", _TILED_KNOBS, selected_by="mac"),
    Implementation("mve", "qmatmul/tiled.c.j2", _simd_exact, "mve", _TILED_KNOBS, selected_by="mac"),
)


# -- com.microsoft QGemm -----------------------------------------------------------------------------
def _import_qgemm(ctx: Any) -> list[Node]:
    """QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp; transA, transB, alpha) ->
    [QRequantize] [Transpose] QMatMul [QRequantize].

    onnxruntime: acc = C + (A' - a_zp) @ (B' - b_zp) in int32 (C int32, broadcast), output
    y_zp + acc * (alpha * a_scale * b_scale[n] / y_scale) rounded. Here the multiplier is
    quantize_multiplier(alpha * a_scale * b_scale[n] / y_scale) (float64 from the float32 values)
    and the rest is QMatMul's integer arithmetic; uint8 A / y go through exact QRequantize shifts to
    int8 (q - 128, zp - 128), uint8 B becomes int8 B - 128 with b_zp - 128 (b - b_zp unchanged)."""
    from tinyc.ops.qelementwise import build_qrequantize

    g = ctx.graph
    if not ctx.has_input(7):
        ctx.unsupported("y_scale is absent: QGemm with a float output is not supported (quantized output only)")
    if not ctx.has_input(8):
        ctx.unsupported("y_zero_point is absent: onnxruntime then writes a float output, which tinyc does not support")
    at, bt, yt = ctx.dtype(0), ctx.dtype(3), ctx.dtype(8)
    for dt, what in ((at, "A"), (bt, "B"), (yt, "y_zero_point")):
        if dt not in QTYPES:
            ctx.unsupported(f"{what} of type {dt} (int8/uint8 only)")
    for zi, ti, what in ((2, 0, "a_zero_point"), (5, 3, "b_zero_point")):
        if ctx.has_input(zi) and ctx.dtype(zi) != ctx.dtype(ti):
            ctx.unsupported(f"{what} type {ctx.dtype(zi)} differs from its tensor's type {ctx.dtype(ti)}")
    for si, what in ((1, "a_scale"), (4, "b_scale"), (7, "y_scale")):
        if ctx.dtype(si) not in ("float32", "float16"):
            ctx.unsupported(f"{what} of type {ctx.dtype(si)} (float32/float16 only)")
    ta, tb = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    alpha = float(np.float32(ctx.attr("alpha", 1.0)))
    if not np.isfinite(alpha) or alpha <= 0:
        ctx.unsupported(f"alpha = {alpha} (only alpha > 0 is supported)")
    a_shape = ctx.shape(0)
    b = np.asarray(ctx.require_const(3, "B"))
    if len(a_shape) != 2 or b.ndim != 2:
        ctx.unsupported(f"A {list(a_shape)} and B {list(b.shape)} must be matrices")
    M, K = (a_shape[1], a_shape[0]) if ta else (a_shape[0], a_shape[1])
    bkn = b.T if tb else b
    if bkn.shape[0] != K:
        ctx.unsupported(f"inner dimensions differ: A {list(a_shape)} (transA={ta}) vs B {list(b.shape)} (transB={tb})")
    N = int(bkn.shape[1])
    if K > MAX_K:
        ctx.unsupported(f"K = {K} could overflow the int32 accumulator (max {MAX_K})")
    a_scale = float(_scalar(ctx, 1, "a_scale").astype(np.float32))
    y_scale = float(_scalar(ctx, 7, "y_scale").astype(np.float32))
    b_scale = _per_col(ctx, 4, "b_scale", N).astype(np.float32)
    a_zp = int(_scalar(ctx, 2, "a_zero_point")) if ctx.has_input(2) else 0
    y_zp = int(_scalar(ctx, 8, "y_zero_point"))
    b_zp = _per_col(ctx, 5, "b_zero_point", N).astype(np.int64) if ctx.has_input(5) else np.zeros(N, np.int64)
    if not (
        np.isfinite(a_scale)
        and a_scale > 0
        and np.isfinite(y_scale)
        and y_scale > 0
        and np.all(np.isfinite(b_scale))
        and np.all(b_scale >= 0)
    ):
        ctx.unsupported("scales must be finite, a_scale and y_scale > 0, b_scale >= 0")
    if ctx.has_input(6):
        if ctx.dtype(6) != "int32":
            ctx.unsupported(f"C of type {ctx.dtype(6)} (int32 only)")
        c = np.asarray(ctx.require_const(6, "C")).astype(np.int64)
        if c.size == 1:
            c = np.full(N, int(c.reshape(-1)[0]), np.int64)
        elif c.size == N and c.shape[-1] == N and c.ndim <= 2:
            c = c.reshape(N)
        else:
            ctx.unsupported(f"C of shape {list(c.shape)}: only a scalar or a per-column [N] / [1, N] bias")
    else:
        c = None
    try:
        real = float(alpha) * float(a_scale) * b_scale.astype(np.float64) / float(y_scale)
        mult, shift = arith.quantize_multiplier(real)
    except ValueError as e:
        ctx.unsupported(f"requantization multiplier: {e}")
    # B as int8 [K, N]: b - b_zp itself when it fits int8 (no run-time correction), else b - 128
    # with b_zp - 128 (uint8 B), corrected at run time by b_zp * row sums.
    d = bkn.astype(np.int64) - b_zp.reshape(1, N)
    if d.min(initial=0) >= -128 and d.max(initial=0) <= 127:
        b_i8, b_zp = d.astype(np.int8), np.zeros(N, np.int64)
    elif bt == "uint8":
        b_i8, b_zp = (bkn.astype(np.int64) - 128).astype(np.int8), b_zp - 128
    else:
        b_i8 = bkn.astype(np.int8)
    try:
        _check_bias_acc(f"node '{ctx.name}' (QGemm)", np.zeros(N) if c is None else c, b_i8, b_zp)
    except UnsupportedError as e:
        ctx.unsupported(str(e).split(": ", 1)[-1])
    if c is not None and (c.min() < -(2**31) or c.max() > INT32_MAX):
        ctx.unsupported("C outside int32")
    # A: its grid, int8 (uint8 through an exact QRequantize), transposed if transA
    nodes: list[Node] = []
    a_name = ctx.inputs[0]
    ta_t = g.tensor(a_name)
    if at == "uint8" and ta_t.is_constant:
        ctx.unsupported("a constant uint8 A is not supported")
    if ta_t.quant is None:
        ta_t.quant = per_tensor(a_scale, a_zp)
    elif qparams_of(g, a_name) != (float(np.float32(a_scale)), a_zp):
        ctx.unsupported(
            f"A '{a_name}' is already quantized as {qparams_of(g, a_name)}, this node reads it as {(a_scale, a_zp)}"
        )
    a_zp_i8 = a_zp - (128 if at == "uint8" else 0)
    if at == "uint8":
        mid = g.unique_name(f"{a_name}_i8")
        add_qtensor(g, mid, tuple(a_shape), a_scale, a_zp_i8)
        nodes.append(build_qrequantize(g, g.unique_name(f"{ctx.name}_{mid}"), a_name, mid, source=ctx.name))
        a_name = mid
    if ta:
        at_name = g.unique_name(f"{ctx.name}_a_t")
        add_qtensor(g, at_name, (M, K), a_scale, a_zp_i8)
        nodes.append(
            Node(
                g.unique_name(f"{ctx.name}_transA"), "Transpose", [a_name], [at_name], {"perm": [1, 0]}, source=ctx.name
            )
        )
        a_name = at_name
    out = ctx.outputs[0]
    add_qtensor(g, out, (M, N), y_scale, y_zp, yt)
    y_name = out
    if yt == "uint8":
        y_name = g.unique_name(f"{out}_i8")
        add_qtensor(g, y_name, (M, N), y_scale, y_zp - 128)
    ins = [a_name, ctx.add_constant("b_kn", np.ascontiguousarray(b_i8))]
    if c is not None:
        ins.append(ctx.add_constant("bias", c.astype(np.int32)))
    nodes.append(
        Node(
            ctx.name,
            "QMatMul",
            ins,
            [y_name],
            dict(
                multiplier=[int(v) for v in np.asarray(mult).reshape(N)],
                shift=[int(v) for v in np.asarray(shift).reshape(N)],
                a_zp=a_zp_i8,
                b_zp=[int(v) for v in b_zp],
                y_zp=y_zp - (128 if yt == "uint8" else 0),
                qmin=-128,
                qmax=127,
                ydtype="int8",
            ),
            source=ctx.name,
        )
    )
    if yt == "uint8":
        nodes.append(build_qrequantize(g, g.unique_name(f"{ctx.name}_{out}_u8"), y_name, out, source=ctx.name))
    return nodes
