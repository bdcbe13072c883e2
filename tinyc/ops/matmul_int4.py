"""MatMulInt4W: a float matrix product whose constant right-hand side stays 4-bit in flash.

Weight-only quantization (``DequantizeLinear(W_int4, scale, zero_point)`` feeding MatMul's or
Gemm's B) would otherwise fold to a float32 weight at import, eight times the flash. Here the
4-bit codes are kept packed two per byte, the scales (float32) and zero points (4-bit, packed
like the weights, absent when all are 0) as small arrays, and the kernel dequantizes each weight on the fly in the matrix loop
exactly as DequantizeLinear does (``float32(q - zp) * scale``), accumulating in float.

Layout: the weight is taken as B[K][N] and stored transposed, column n's K codes contiguous
(element ``n * K + k``; even elements in a byte's low nibble, odd in its high nibble). Scales form a
[KB][NB] grid of blocks of ``bk`` rows x ``bn`` columns of B: per tensor (bk=K, bn=N), per column
(bk=K, bn=1), per row (bk=1, bn=N), or blocked (``block_size`` along K or N). The frontend records
which DequantizeLinear a folded constant came from (``Graph.folded_from``); the MatMul and Gemm
importers (tinyc/ops/gemm.py) ask ``int4_weight_node`` before they take the float constant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.numerics import dtypes as nd
from tinyc.ops.base import OpDef, OutputType, register
from tinyc.ops.conv import apply_activation

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext

#: The 4-bit weight types kept packed.
INT4_TYPES = ("int4", "uint4")


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """Flat 4-bit codes (0..15) packed two per byte, element 2i in the low nibble of byte i."""
    flat = np.asarray(codes, np.uint8).reshape(-1) & 0xF
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, np.uint8)])
    return np.ascontiguousarray(flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)


def unpack_nibbles(packed: np.ndarray, count: int, signed: bool) -> np.ndarray:
    """The inverse of `pack_nibbles`: `count` values (int64; two's complement when `signed`)."""
    p = np.asarray(packed, np.uint8).reshape(-1)
    flat = np.stack([p & 0xF, p >> 4], axis=1).reshape(-1)[:count].astype(np.int64)
    return (flat ^ 8) - 8 if signed else flat


def _block_grid(dq: Node, graph: Graph, trans_b: bool) -> tuple[int, int, np.ndarray, np.ndarray]:
    """(bk, bn, scale[KB][NB], zp[KB][NB]) of the DequantizeLinear `dq` in B[K][N] terms, or None."""
    a = dq.attrs
    q = graph.tensor(dq.inputs[0])
    rows, cols = q.shape  # the DQ input: [K, N], or [N, K] when Gemm transposes it
    scale: np.ndarray
    zp: np.ndarray
    if a["axis"] is None:
        scale = np.full((1, 1), a["scale"], np.float32)
        zp = np.full((1, 1), a["zp"], np.int64)
        br, bc = rows, cols
    else:
        s = np.asarray(graph.tensor(dq.inputs[1]).data, np.float32)
        z = np.asarray(graph.tensor(dq.inputs[2]).data).astype(np.int64)
        block = int(a.get("block_size") or 0)
        axis = int(a["axis"])
        if block:
            scale, zp = s, z.reshape(s.shape)  # already the block grid of the 2-D input
            br, bc = (block, 1) if axis == 0 else (1, block)
        else:
            shape = (rows, 1) if axis == 0 else (1, cols)
            scale, zp = s.reshape(shape), z.reshape(shape)
            br, bc = (1, cols) if axis == 0 else (rows, 1)
    if trans_b:
        return bc, br, np.ascontiguousarray(scale.T), np.ascontiguousarray(zp.T)
    return br, bc, scale, zp


def int4_weight_node(
    ctx: ImportContext, a_in: str, out: str, trans_b: bool, alpha: float = 1.0, bias: np.ndarray | None = None
) -> Node | None:
    """A MatMulInt4W node computing ``a_in @ B (+ bias)`` into `out` when ONNX input 1 (B) is a
    constant folded from a DequantizeLinear of a 2-D int4/uint4 constant; None otherwise (the caller
    then compiles the float constant as before)."""
    g = ctx.graph
    dq = g.folded_from.get(ctx.inputs[1]) if ctx.has_input(1) else None
    if dq is None or dq.op != "DequantizeLinear" or alpha != 1.0:
        return None
    q = g.tensor(dq.inputs[0])
    if q.dtype not in INT4_TYPES or q.data is None or len(q.shape) != 2 or g.tensor(dq.outputs[0]).dtype != "float32":
        return None
    bk, bn, scale, zp = _block_grid(dq, g, trans_b)
    codes = q.data.astype(np.int64)
    kn = codes.T if trans_b else codes  # B[K][N]
    K, N = kn.shape
    b = None if bias is None else np.asarray(bias, np.float32)
    if b is not None and (b.size not in (1, N) or (b.ndim == 2 and b.shape[0] != 1)):
        return None  # a bias per row: the float Gemm handles it
    inputs = [a_in, ctx.add_constant("w_int4", pack_nibbles(kn.T)), ctx.add_constant("w_scale", scale)]
    if np.any(zp != 0):
        inputs.append(ctx.add_constant("w_zero_point", pack_nibbles(zp)))  # 4-bit too, packed
    if b is not None:
        inputs.append(ctx.add_constant("bias", np.ascontiguousarray(np.broadcast_to(b.reshape(-1), (N,)))))
    return Node(
        ctx.name,
        "MatMulInt4W",
        inputs,
        [out],
        {
            "K": K,
            "N": N,
            "qdtype": q.dtype,
            "bk": bk,
            "bn": bn,
            "has_zp": bool(np.any(zp != 0)),
            "has_bias": bias is not None,
        },
        source=ctx.name,
    )


@register
class MatMulInt4W(OpDef):
    """y[M][N] = x[M][K] @ dequantize(W4)[K][N] (+ bias[N]); inputs x, packed codes, scale grid,
    zero point grid packed like the codes (when ``has_zp``), bias (when ``has_bias``)."""

    op = "MatMulInt4W"
    template = "matmul_int4.c.j2"
    absorbs_activation = True

    def params(self, node: Node, graph: Graph) -> int:
        """Weights, scales, zero points and bias counted as values (not as the bytes packing them)."""
        a = node.attrs
        grid = graph.tensor(node.inputs[2]).size
        return a["K"] * a["N"] + grid * (2 if a["has_zp"] else 1) + (a["N"] if a["has_bias"] else 0)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        m = graph.tensor(node.inputs[0]).shape[0]
        return [((int(m), int(node.attrs["N"])), "float32")]

    def macs(self, node: Node, graph: Graph) -> int:
        return int(graph.tensor(node.inputs[0]).shape[0]) * int(node.attrs["K"]) * int(node.attrs["N"])

    def weights(self, node: Node, inputs: list[np.ndarray]) -> np.ndarray:
        """The dequantized float32 B[K][N], as DequantizeLinear computes it (float32(q - zp) * scale)."""
        a = node.attrs
        K, N, bk, bn = a["K"], a["N"], a["bk"], a["bn"]
        codes = unpack_nibbles(inputs[1], K * N, nd.INTN[a["qdtype"]][1]).reshape(N, K).T
        ki, ni = np.arange(K) // bk, np.arange(N) // bn
        scale = inputs[2].astype(np.float32)[np.ix_(ki, ni)]
        signed = nd.INTN[a["qdtype"]][1]
        zp = np.zeros((K, N), np.int64)
        if a["has_zp"]:
            zp = unpack_nibbles(inputs[3], inputs[2].size, signed).reshape(inputs[2].shape)[np.ix_(ki, ni)]
        return (codes - zp).astype(np.float32) * scale

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The float path's result: Gemm's reference on the dequantized weight (float64, one rounding)."""
        y = inputs[0].astype(np.float64) @ self.weights(node, inputs).astype(np.float64)
        if node.attrs["has_bias"]:
            y = y + inputs[-1].astype(np.float64)
        return [apply_activation(node, y.astype(np.float32))]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a = node.attrs
        K, N, bk, bn = a["K"], a["N"], a["bk"], a["bn"]
        return {
            "M": int(graph.tensor(node.inputs[0]).shape[0]),
            "K": K,
            "N": N,
            "BK": bk,
            "BN": bn,
            "NB": -(-N // bn),
            "signed": nd.INTN[a["qdtype"]][1],
            "has_zp": a["has_zp"],
            "has_bias": a["has_bias"],
            "bias_in": len(node.inputs) - 1,
        }
