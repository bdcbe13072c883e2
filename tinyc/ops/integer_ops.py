"""MatMulInteger and ConvInteger: 8-bit integer products accumulated exactly in int32.

Both subtract the zero points before multiplying: y = sum (a - a_zp) * (b - b_zp). Zero points
are inputs read at run time (constants too): A's per tensor or per row (shape [M, 1], which
numpy broadcasting reads as per row too), B's / the weights' per tensor or per output column /
channel. ConvInteger pads with the input's zero point
(a padded position contributes nothing), as onnx's reference does by subtracting first. Every
operand may be a run-time tensor, so these are plain direct loops (no weight packing).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, register
from tinyc.ops.conv import check_conv_weights, conv_nchw_reference, conv_out_size, resolve_pads

Q8 = ("int8", "uint8")


def _zp_kind(ctx: Any, i: int, shapes: tuple[tuple[int, ...], ...], what: str) -> str:
    """'none', 'scalar' or 'vector' (one per row/column/channel: one of `shapes`, which numpy
    broadcasting against the operand reads that way too) for optional zero point input i."""
    if not ctx.has_input(i):
        return "none"
    if ctx.dtype(i) not in Q8:
        ctx.unsupported(f"{what} of type {ctx.dtype(i)} (int8/uint8 only)")
    if int(np.prod(ctx.shape(i), dtype=np.int64)) == 1:
        return "scalar"
    if tuple(ctx.shape(i)) not in shapes:
        ctx.unsupported(f"{what} of shape {list(ctx.shape(i))}: one value or of shape {' / '.join(map(str, shapes))}")
    return "vector"


def _zp_array(inputs: list[np.ndarray], i: int, kind: str) -> np.ndarray:
    return np.zeros(1, np.int64) if kind == "none" else np.asarray(inputs[i]).astype(np.int64).reshape(-1)


def _batch_stride(shape: tuple[int, ...], batch: tuple[int, ...], mat: int) -> int | None:
    """Element stride between batches of one operand over the flattened broadcast batch: its
    matrix size when it has every batch dim, 0 when it has none; None: a partial broadcast."""
    own = tuple(shape[:-2])
    if all(d == 1 for d in own):
        return 0 if int(np.prod(batch, dtype=np.int64)) > 1 or not own else mat
    pad = (1,) * (len(batch) - len(own)) + own
    return mat if pad == tuple(batch) else None


@register
class MatMulInteger(OpDef):
    """inputs: A, B, a_zero_point, b_zero_point (may be ""). attrs: `a_zp`, `b_zp` (their kinds)."""

    op = "MatMulInteger"
    onnx_ops = ("MatMulInteger",)
    template = "matmul_integer.c.j2"
    dtypes = Q8

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        a, b = ctx.shape(0), ctx.shape(1)
        if ctx.dtype(1) not in Q8:
            ctx.unsupported(f"B of type {ctx.dtype(1)} (int8/uint8 only)")
        if len(a) < 2 or len(b) < 2:
            ctx.unsupported("1-D operands (rank 2 or more only)")
        if a[-1] != b[-2]:
            ctx.invalid(f"inner dims differ: A {a}, B {b}")
        try:
            batch = tuple(int(d) for d in np.broadcast_shapes(a[:-2], b[:-2]))
        except ValueError:
            ctx.invalid(f"batch dims of A {a} and B {b} do not broadcast")
        if _batch_stride(a, batch, 1) is None or _batch_stride(b, batch, 1) is None:
            ctx.unsupported(f"batch dims of A {a} and B {b} broadcast only in part")
        M, N = int(a[-2]), int(b[-1])
        kinds = (_zp_kind(ctx, 2, ((M, 1),), "a_zero_point"), _zp_kind(ctx, 3, ((N,), (1, N)), "b_zero_point"))
        ins = [ctx.inputs[i] if ctx.has_input(i) else "" for i in range(4)]
        return ctx.make_node("MatMulInteger", inputs=ins, outputs=ctx.outputs[:1], a_zp=kinds[0], b_zp=kinds[1])

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        batch = tuple(int(d) for d in np.broadcast_shapes(a[:-2], b[:-2]))
        return [(batch + (int(a[-2]), int(b[-1])), "int32")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = np.asarray(inputs[0]).astype(np.int64)
        b = np.asarray(inputs[1]).astype(np.int64)
        azp = _zp_array(inputs, 2, node.attrs["a_zp"])
        bzp = _zp_array(inputs, 3, node.attrs["b_zp"])
        a = a - (azp.reshape(-1, 1) if node.attrs["a_zp"] == "vector" else azp[0])
        b = b - bzp.reshape(1, -1) if node.attrs["b_zp"] == "vector" else b - bzp[0]
        return [np.matmul(a, b).astype(np.int32)]

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.outputs[0]).size * int(graph.tensor(node.inputs[0]).shape[-1])

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        y = graph.tensor(node.outputs[0]).shape
        M, K, N = int(a[-2]), int(a[-1]), int(b[-1])
        batch = tuple(y[:-2])
        return {
            "nb": int(np.prod(batch, dtype=np.int64)),
            "M": M,
            "K": K,
            "N": N,
            "sa": _batch_stride(a, batch, M * K),
            "sb": _batch_stride(b, batch, K * N),
            "a_zp": node.attrs["a_zp"],
            "b_zp": node.attrs["b_zp"],
        }


@register
class ConvInteger(OpDef):
    """inputs: x, w, x_zero_point, w_zero_point (may be ""). attrs: kernel, strides, pads,
    dilations, group, `x_zp`, `w_zp` (zero point kinds). 1-D convolutions are 2-D with H = 1."""

    op = "ConvInteger"
    onnx_ops = ("ConvInteger",)
    template = "conv_integer.c.j2"
    dtypes = Q8

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        xs, ws = ctx.shape(0), ctx.shape(1)
        if len(xs) not in (3, 4):
            ctx.unsupported(f"only 1-D and 2-D integer convolutions (input rank {len(xs)})")
        if ctx.dtype(1) not in Q8:
            ctx.unsupported(f"weights of type {ctx.dtype(1)} (int8/uint8 only)")
        check_conv_weights(ctx, xs, ws)
        n = len(xs) - 2
        kernel = [int(k) for k in ws[2:]]
        strides = [int(s) for s in (ctx.attr("strides") or [1] * n)]
        dil = [int(d) for d in (ctx.attr("dilations") or [1] * n)]
        pads = resolve_pads(ctx, xs[2:], kernel, strides, dil)
        x_zp = _zp_kind(ctx, 2, (), "x_zero_point")
        w_zp = _zp_kind(ctx, 3, ((int(ws[0]),),), "w_zero_point")
        ins = [ctx.inputs[i] if ctx.has_input(i) else "" for i in range(4)]
        return ctx.make_node(
            "ConvInteger",
            inputs=ins,
            outputs=ctx.outputs[:1],
            kernel=kernel,
            strides=strides,
            pads=pads,
            dilations=dil,
            group=int(ctx.attr("group", 1)),
            x_zp=x_zp,
            w_zp=w_zp,
        )

    def _geometry(self, node: Node, graph: Graph) -> dict[str, int]:
        """The 2-D view: N, C, H, W, M, kh, kw, strides, dilations, pads and the output size."""
        xs = graph.tensor(node.inputs[0]).shape
        a = node.attrs
        two = len(xs) == 4
        k, s, d = ([1] + v if not two else v for v in (a["kernel"], a["strides"], a["dilations"]))
        p = a["pads"] if two else [0, a["pads"][0], 0, a["pads"][1]]
        H, W = (int(xs[2]), int(xs[3])) if two else (1, int(xs[2]))
        g = {"N": int(xs[0]), "C": int(xs[1]), "H": H, "W": W, "M": int(graph.tensor(node.inputs[1]).shape[0])}
        g.update(kh=k[0], kw=k[1], sh=s[0], sw=s[1], dh=d[0], dw=d[1], ph=p[0], pw=p[1], group=int(a["group"]))
        g["OH"] = conv_out_size(H, k[0], s[0], d[0], p[0], p[2])
        g["OW"] = conv_out_size(W, k[1], s[1], d[1], p[1], p[3])
        return g

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        g = self._geometry(node, graph)
        rank = len(graph.tensor(node.inputs[0]).shape)
        return [((g["N"], g["M"], g["OH"], g["OW"]) if rank == 4 else (g["N"], g["M"], g["OW"]), "int32")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        xzp = _zp_array(inputs, 2, a["x_zp"])[0]
        wzp = _zp_array(inputs, 3, a["w_zp"])
        x = np.asarray(inputs[0]).astype(np.float64) - xzp
        w = np.asarray(inputs[1]).astype(np.float64)
        w = w - (wzp.reshape((-1,) + (1,) * (w.ndim - 1)) if a["w_zp"] == "vector" else wzp[0])
        y = conv_nchw_reference(x, w, None, a["strides"], a["pads"], a["dilations"], a["group"])
        return [np.rint(y).astype(np.int32)]  # exact: integer sums far below 2**53

    def macs(self, node: Node, graph: Graph) -> int:
        w = graph.tensor(node.inputs[1])
        return graph.tensor(node.outputs[0]).size * int(np.prod(w.shape[1:], dtype=np.int64))

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        g = self._geometry(node, graph)
        return dict(g, x_zp=node.attrs["x_zp"], w_zp=node.attrs["w_zp"], XT=CTYPES[graph.tensor(node.inputs[0]).dtype])
