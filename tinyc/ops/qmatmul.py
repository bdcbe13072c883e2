"""ONNX QLinearMatMul as an int32-accumulating integer kernel (IR op ``QMatMul``).

The arithmetic is the project's one integer truth (``tinyc.quantize.arith`` / ``tinyc_q.h``):
``acc = sum_k (a - a_zp) * (b - b_zp)`` in int32, then TFLite's fixed-point requantization
``clamp(mbqm(acc, multiplier[n], shift[n]) + y_zp, qmin, qmax)`` with per-column parameters
``requant_params(a_scale, b_scale[n], y_scale)``. No floating point at run time.

``b`` and every scale / zero point must be constants. ``b`` is kept [.., K, N] (the inner loop
walks N contiguously). A 2-D ``b`` treats ``a`` as rows (leading dims flattened, no copy); an
N-D ``b`` is a batched product with numpy broadcasting of the batch dims. ``a_zp`` and ``y_zp`` are
per-tensor; ``b_scale``/``b_zp`` per-tensor or per-column (N). A non-zero ``b_zp`` costs one row
sum per output row (``acc -= b_zp[n] * sum_k (a - a_zp)``), not a subtraction per MAC.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import OpDef, OutputType, broadcast_strides, register
from tinyc.quantize import arith

QTYPES: dict[str, tuple[int, int]] = {"int8": (-128, 127), "uint8": (0, 255)}
#: |(a - a_zp) * (b - b_zp)| <= 255 * 255, so K terms stay inside int32 up to this K.
MAX_K = (2**31 - 1) // (255 * 255)


def _scalar(ctx: Any, i: int, what: str) -> np.ndarray:
    v = np.asarray(ctx.require_const(i, what))
    if v.size != 1:
        ctx.unsupported(f"{what} must be a scalar (per-tensor), got shape {v.shape}")
    return v.reshape(())


def _per_col(ctx: Any, i: int, what: str, n: int) -> np.ndarray:
    """A per-tensor (size 1) or per-column (size N, shape [N] or [..., 1, N]) constant, as [N]."""
    v = np.asarray(ctx.require_const(i, what))
    if v.size == 1:
        return np.broadcast_to(v.reshape(1), (n,))
    if v.size == n and v.shape[-1] == n:
        return v.reshape(n)
    ctx.unsupported(f"{what} of shape {v.shape}: only per-tensor or per-column (N={n}) is supported")


@register
class QMatMul(OpDef):
    """y = requantize((a - a_zp) @ (b - b_zp)) with a constant b (int8/uint8 in and out)."""

    op = "QMatMul"
    onnx_ops = ("QLinearMatMul",)
    template = "qmatmul.c.j2"
    dtypes = tuple(QTYPES)

    def import_onnx(self, ctx):  # type: ignore[override]
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
            self.op, inputs=[ctx.inputs[0], w], outputs=ctx.outputs[:1],
            multiplier=[int(v) for v in np.asarray(mult).reshape(N)],
            shift=[int(v) for v in np.asarray(shift).reshape(N)],
            a_zp=a_zp, b_zp=[int(v) for v in b_zp], y_zp=y_zp, qmin=qmin, qmax=qmax, ydtype=ctx.dtype(7))

    # -- shapes ------------------------------------------------------------------------------
    @staticmethod
    def _dims(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[list[int], int, int, int, tuple[int, ...]]:
        """(batch, M, K, N, out_shape); a 2-D b flattens a's leading dims into M rows."""
        K, N = int(b[-2]), int(b[-1])
        if len(b) == 2:
            return [], int(np.prod(a[:-1], dtype=np.int64)), K, N, (*a[:-1], N)
        batch = [int(d) for d in np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))]
        return batch, int(a[-2]), K, N, (*batch, int(a[-2]), N)

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
        x = np.asarray(arith.multiply_by_quantized_multiplier(
            acc, np.asarray(at["multiplier"], np.int32), np.asarray(at["shift"], np.int32))).astype(np.int64)
        y = np.clip(x + at["y_zp"], at["qmin"], at["qmax"])
        return [y.astype(at["ydtype"])]

    # -- code generation -------------------------------------------------------------------------
    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        _, M, _, N, _ = self._dims(a, b)
        n_tiles = [t for t in (32, 16, 8, 4, 2, 1) if t <= N]
        if N < 32 and N not in n_tiles:
            n_tiles.insert(0, N)
        return {"n_tile": n_tiles, "m_tile": [t for t in (4, 2, 1) if t <= M]}

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        """Widest column tile, then as many rows (<= 4) as keep <= 128 int32 accumulators."""
        ks = self.knobs(node, graph)
        s = {k: v[0] for k, v in ks.items()}
        fits = [r for r in ks["m_tile"] if r * s["n_tile"] <= 128]
        s["m_tile"] = max(fits) if fits else 1
        return s

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> dict[str, Any]:
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        batch, M, K, N, _ = self._dims(a, b)
        sched = schedule or self.default_schedule(node, graph, "host")
        at = node.attrs
        if batch:
            a2, b2 = tuple(a[:-2]), tuple(b[:-2])
            bsa = [s * M * K for s in broadcast_strides(a2, batch)]
            bsb = [s * K * N for s in broadcast_strides(b2, batch)]
        else:
            bsa, bsb = [], []
        uniform = len(set(zip(at["multiplier"], at["shift"]))) == 1
        return dict(batch=batch, bsa=bsa, bsb=bsb, M=M, K=K, N=N,
                    n_tile=min(int(sched.get("n_tile", 1)), N), m_tile=min(int(sched.get("m_tile", 1)), M),
                    uniform=uniform, has_bzp=any(at["b_zp"]), uniform_bzp=len(set(at["b_zp"])) == 1)
