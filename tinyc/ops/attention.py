"""ONNX Attention (opsets 23-25) as one fused kernel that never holds the whole score matrix.

For each (batch, query head, block of query rows) the kernel computes the block's scores against
every key into a scratch of ``rows x kv_len`` values, applies scale, softcap and the additive bias
(attn_mask, causal, sliding window, padding), a softmax, and multiplies by V straight into Y. The
arena therefore holds one row block of scores (``scratch_bytes``), not ``B x H x Sq x Skv`` of them,
which is what makes a sequence model fit a microcontroller. GQA maps query head h to key/value head
``h // (Hq / Hkv)`` (ONNX repeats each kv head). 3-D inputs ``[B, S, H*D]`` are read through strides,
so no transpose is materialised either. past_key/past_value are read in place (keys ``j < P`` come
from the cache) and copied to present_key/present_value only when those outputs are used.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, Int8Lowering, OpDef, OutputType, broadcast_strides, register

FLOATS = ("float32", "float64")
ROW_BLOCK = 4  # query rows per score block: K rows are reused across them, scratch stays small
Q_IN, K_IN, V_IN, MASK_IN, PK_IN, PV_IN, NONPAD_IN = range(7)


def _dims(node: Node, graph: Graph) -> dict[str, int]:
    """Batch, heads, lengths and head sizes of a node, whatever the input rank."""
    q = graph.tensor(node.inputs[Q_IN]).shape
    k = graph.tensor(node.inputs[K_IN]).shape
    v = graph.tensor(node.inputs[V_IN]).shape
    hq, hkv = node.attrs["q_heads"], node.attrs["kv_heads"]
    if len(q) == 3:
        sq, sn, d, dv = q[1], k[1], q[2] // hq, v[2] // hkv
    else:
        sq, sn, d, dv = q[2], k[2], q[3], v[3]
    past = node.inputs[PK_IN] if len(node.inputs) > PK_IN else ""
    p = graph.tensor(past).shape[2] if past else 0
    return {"B": int(q[0]), "Hq": hq, "Hkv": hkv, "Sq": int(sq), "Sn": int(sn), "P": int(p), "D": int(d), "Dv": int(dv)}


def _inp(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


def _out(node: Node, i: int) -> str:
    return node.outputs[i] if len(node.outputs) > i else ""


def _bias(node: Node, mask: np.ndarray | None, nonpad: np.ndarray | None, dm: dict[str, int], dt: Any) -> np.ndarray:
    """The additive bias [B or 1, Hq or 1, Sq, Skv] of ONNX Attention (0 where a key may be seen, -inf not)."""
    sq, skv = dm["Sq"], dm["Sn"] + dm["P"]
    neg = dt.type(-np.inf)
    bias = np.zeros((1, 1, sq, skv), dt)
    if mask is not None:
        m = mask
        if m.shape[-1] < skv:
            pad = [(0, 0)] * (m.ndim - 1) + [(0, skv - m.shape[-1])]
            m = np.pad(m, pad, constant_values=False if m.dtype == np.bool_ else -np.inf)
        m = np.where(m, dt.type(0), neg) if m.dtype == np.bool_ else m.astype(dt)
        bias = bias + m.reshape((1,) * (4 - m.ndim) + m.shape)
    i = np.arange(sq).reshape(sq, 1)
    j = np.arange(skv).reshape(1, skv)
    if nonpad is not None and not dm["P"]:
        off: Any = (nonpad.reshape(-1).astype(np.int64) - sq).reshape(-1, 1, 1, 1)
    else:
        off = dm["P"]
    allowed = np.ones((1, 1, sq, skv), bool)
    if node.attrs["is_causal"]:
        allowed = allowed & (j <= i + off)
    left, right = node.attrs["left_window"], node.attrs["right_window"]
    diff = (i + off) - j
    if left >= 0:
        allowed = allowed & (diff <= left)
    if right >= 0:
        allowed = allowed & (-diff <= right)
    if nonpad is not None:
        allowed = allowed & (j < nonpad.reshape(-1, 1, 1, 1))
    return np.where(allowed, bias, neg)


def attention_reference(node: Node, graph: Graph, inputs: list[Any]) -> list[np.ndarray]:
    """numpy golden model of the fused kernel (onnx/reference/ops/op_attention.py semantics)."""
    dm = _dims(node, graph)
    q, k, v = inputs[Q_IN], inputs[K_IN], inputs[V_IN]
    dt = q.dtype
    at = node.attrs
    b, hq, hkv = dm["B"], dm["Hq"], dm["Hkv"]
    if q.ndim == 3:
        q = q.reshape(b, dm["Sq"], hq, dm["D"]).transpose(0, 2, 1, 3)
        k = k.reshape(b, dm["Sn"], hkv, dm["D"]).transpose(0, 2, 1, 3)
        v = v.reshape(b, dm["Sn"], hkv, dm["Dv"]).transpose(0, 2, 1, 3)
    get = lambda i: inputs[i] if len(inputs) > i else None  # noqa: E731
    if get(PK_IN) is not None:
        k = np.concatenate([get(PK_IN), k], axis=2)
        v = np.concatenate([get(PV_IN), v], axis=2)
    present_k, present_v = k, v
    rep = hq // hkv
    kr, vr = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = dt.type(at["scale_sqrt"])
    with np.errstate(all="ignore"):
        qk = np.matmul(q * s, np.swapaxes(kr * s, 2, 3))
        if at["softcap"] > 0:
            qk = (np.tanh(qk / dt.type(at["softcap"])) * dt.type(at["softcap"])).astype(dt)
        bias = _bias(node, get(MASK_IN), get(NONPAD_IN), dm, dt)
        sc = qk + bias
        mx = np.max(sc, axis=-1, keepdims=True)
        mx = np.where(np.isneginf(mx), dt.type(0), mx)
        e = np.exp(sc - mx)
        tot = np.sum(e, axis=-1, keepdims=True)
        p = e / np.where(tot == 0, dt.type(1), tot)
        dead = np.isneginf(np.max(bias, axis=-1, keepdims=True))
        p = np.where(dead, dt.type(0), p).astype(dt)
        y = np.matmul(p, vr).astype(dt)
    if inputs[Q_IN].ndim == 3:
        y = y.transpose(0, 2, 1, 3).reshape(b, dm["Sq"], hq * dm["Dv"])
    mode = at["qk_mode"]
    qk_out = {0: qk, 1: qk, 2: np.broadcast_to(sc, qk.shape), 3: p}[mode].astype(dt)
    outs = [y, present_k.astype(dt), present_v.astype(dt), np.ascontiguousarray(qk_out)]
    return [np.ascontiguousarray(o) for o in outs[: len(node.outputs)]]


def _import_heads(ctx: Any, q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]) -> tuple[int, int]:
    """(q heads, kv heads), checking the shapes agree with them."""
    if len(q) == 3:
        if not (ctx.has_attr("q_num_heads") and ctx.has_attr("kv_num_heads")):
            ctx.invalid("3-D inputs need the q_num_heads and kv_num_heads attributes")
        hq, hkv = int(ctx.attr("q_num_heads")), int(ctx.attr("kv_num_heads"))
        if hq <= 0 or hkv <= 0 or q[2] % hq or k[2] % hkv or v[2] % hkv:
            ctx.invalid(f"hidden sizes Q {q[2]}, K {k[2]}, V {v[2]} do not split into {hq} / {hkv} heads")
        if q[2] // hq != k[2] // hkv:
            ctx.invalid(f"query head size {q[2] // hq} differs from key head size {k[2] // hkv}")
        if k[1] != v[1] or q[0] != k[0] or k[0] != v[0]:
            ctx.invalid(f"batch / sequence lengths of Q {q}, K {k}, V {v} disagree")
    else:
        hq, hkv = int(q[1]), int(k[1])
        if v[1] != hkv or q[3] != k[3] or k[2] != v[2] or not q[0] == k[0] == v[0]:
            ctx.invalid(f"shapes Q {q}, K {k}, V {v} disagree")
    if hq % hkv:
        ctx.invalid(f"q heads {hq} are not a multiple of kv heads {hkv}")
    return hq, hkv


def _check_mask(ctx: Any, b: int, hq: int, sq: int, skv: int) -> None:
    """attn_mask: bool or the input type, broadcasting (right-aligned) to [B, Hq, Sq, <= Skv]."""
    mshape = tuple(int(d) for d in ctx.shape(MASK_IN))
    if ctx.dtype(MASK_IN) not in ("bool", ctx.dtype(0)):
        ctx.unsupported(f"attn_mask of type {ctx.dtype(MASK_IN)} (bool or {ctx.dtype(0)})")
    if not 1 <= len(mshape) <= 4 or mshape[-1] > skv:
        ctx.invalid(f"attn_mask of shape {mshape} for {skv} keys")
    try:
        fits = np.broadcast_shapes(mshape[:-1], (b, hq, sq)) == (b, hq, sq)
    except ValueError:
        fits = False
    if not fits:
        ctx.invalid(f"attn_mask of shape {mshape} does not broadcast to {(b, hq, sq, skv)}")


@register
class Attention(OpDef):
    """attrs: q_heads, kv_heads, scale_sqrt (applied to Q and to K), is_causal, softcap, qk_mode,
    left_window, right_window. Inputs keep the ONNX positions (Q, K, V, attn_mask, past_key,
    past_value, nonpad_kv_seqlen; "" when absent); outputs Y, present_key, present_value,
    qk_matmul_output."""

    op = "Attention"
    onnx_ops = ("Attention",)
    template = "attention.c.j2"
    dtypes = FLOATS
    int8_kernel = True

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        q, k, v = (tuple(int(d) for d in ctx.shape(i)) for i in (Q_IN, K_IN, V_IN))
        if not (len(q) == len(k) == len(v) and len(q) in (3, 4)):
            ctx.invalid(f"Q, K, V must all be 3-D or all 4-D, got ranks {len(q)}, {len(k)}, {len(v)}")
        if any(ctx.dtype(i) != ctx.dtype(0) for i in (K_IN, V_IN)):
            ctx.unsupported("Q, K and V of different element types")
        if any(d == 0 for d in q + k + v):
            ctx.unsupported("zero-size inputs")
        hq, hkv = _import_heads(ctx, q, k, v)
        b, sq = q[0], (q[1] if len(q) == 3 else q[2])
        d = q[2] // hq if len(q) == 3 else q[3]
        dv = v[2] // hkv if len(q) == 3 else v[3]
        past = ctx.has_input(PK_IN)
        if past != ctx.has_input(PV_IN):
            ctx.invalid("past_key and past_value must be given together")
        p = 0
        if past:
            pk, pv = tuple(ctx.shape(PK_IN)), tuple(ctx.shape(PV_IN))
            if pk[:2] != (b, hkv) or pk[3] != d or pv[:3] != pk[:3] or pv[3] != dv:
                ctx.invalid(f"past_key {pk} / past_value {pv} do not match {(b, hkv, '*', d)} / {(b, hkv, '*', dv)}")
            p = int(pk[2])
        skv = p + (k[1] if len(k) == 3 else k[2])
        if ctx.has_input(NONPAD_IN):
            if past:
                ctx.invalid("nonpad_kv_seqlen cannot be combined with past_key/past_value")
            if ctx.dtype(NONPAD_IN) != "int64" or tuple(ctx.shape(NONPAD_IN)) != (b,):
                ctx.invalid(f"nonpad_kv_seqlen must be int64 of shape ({b},)")
        if ctx.has_input(MASK_IN):
            _check_mask(ctx, b, hq, sq, skv)
        mode = int(ctx.attr("qk_matmul_output_mode", 0))
        if mode not in (0, 1, 2, 3):
            ctx.invalid(f"qk_matmul_output_mode {mode}")
        left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
        if left < -1 or right < -1:
            ctx.invalid(f"window sizes {left}, {right} (must be -1 or >= 0)")
        scale = ctx.attr("scale")
        scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
        ins = [ctx.inputs[i] if ctx.has_input(i) else "" for i in range(NONPAD_IN + 1)]
        while ins and not ins[-1]:
            ins.pop()
        outs = list(ctx.outputs[:4])
        return ctx.make_node(
            "Attention",
            inputs=ins,
            outputs=outs,
            q_heads=hq,
            kv_heads=hkv,
            scale_sqrt=float(np.sqrt(np.float64(scale))),
            is_causal=bool(int(ctx.attr("is_causal", 0))),
            softcap=float(ctx.attr("softcap", 0.0)),
            qk_mode=mode,
            left_window=left,
            right_window=right,
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        dm = _dims(node, graph)
        dt = graph.tensor(node.inputs[Q_IN]).dtype
        b, hq, hkv, sq, skv = dm["B"], dm["Hq"], dm["Hkv"], dm["Sq"], dm["Sn"] + dm["P"]
        rank3 = len(graph.tensor(node.inputs[Q_IN]).shape) == 3
        y: tuple[int, ...] = (b, sq, hq * dm["Dv"]) if rank3 else (b, hq, sq, dm["Dv"])
        types: list[OutputType] = [
            (y, dt),
            ((b, hkv, skv, dm["D"]), dt),
            ((b, hkv, skv, dm["Dv"]), dt),
            ((b, hq, sq, skv), dt),
        ]
        return types[: len(node.outputs)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return attention_reference(node, graph, inputs)

    def macs(self, node: Node, graph: Graph) -> int:
        dm = _dims(node, graph)
        return dm["B"] * dm["Hq"] * dm["Sq"] * (dm["Sn"] + dm["P"]) * (dm["D"] + dm["Dv"])

    def row_block(self, node: Node, graph: Graph) -> int:
        return min(ROW_BLOCK, _dims(node, graph)["Sq"])

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        """One block of score rows plus the block's scaled query rows: independent of the head count
        and of the number of query rows."""
        dm = _dims(node, graph)
        size = 8 if graph.tensor(node.inputs[Q_IN]).dtype == "float64" else 4
        return self.row_block(node, graph) * (dm["Sn"] + dm["P"] + dm["D"]) * size

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        return get_float_context(node, graph)

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """QAttention (tinyc/ops/attention_int8.py) when the variant has an integer form."""
        from tinyc.ops.attention_int8 import build_qattention, qattention_refusal

        why = qattention_refusal(node, low.g) or low.needs_output(node)
        if why:
            return why
        q, k, v = (low.as_int8(node.inputs[i]) for i in (Q_IN, K_IN, V_IN))
        out = node.outputs[0]
        y = low.int8_output(out)
        low.emit(build_qattention(low.g, node, q, k, v, y), out, y)
        return None


def get_float_context(node: Node, graph: Graph) -> dict[str, Any]:
    """Template variables shared by the float and the int8 kernel: sizes, strides, masking."""
    dm = _dims(node, graph)
    q_t = graph.tensor(node.inputs[Q_IN])
    ct = CTYPES[q_t.dtype]
    b, hq, hkv, sq, sn, p, d, dv = (dm[x] for x in ("B", "Hq", "Hkv", "Sq", "Sn", "P", "D", "Dv"))
    skv = sn + p
    rank3 = len(q_t.shape) == 3

    def strides(heads: int, seq: int, size: int) -> tuple[int, int, int]:
        """(batch, head, position) element strides of a [B, H, S, size] view of a 3-D or 4-D tensor."""
        if rank3:
            return seq * heads * size, size, heads * size
        return heads * seq * size, seq * size, size

    mask = _inp(node, MASK_IN)
    mctx: dict[str, Any] = {"has_mask": bool(mask)}
    if mask:
        mt = graph.tensor(mask)
        lm = int(mt.shape[-1])
        mst = broadcast_strides(mt.shape, (b, hq, sq, lm))
        mctx.update(mask_len=lm, mask_bool=mt.dtype == "bool", mst=mst)
    return {
        **dm,
        **mctx,
        "Skv": skv,
        "R": min(ROW_BLOCK, dm["Sq"]),
        "rep": hq // hkv,
        "T": ct,
        "fexp": "expf" if ct == "float" else "exp",
        "ftanh": "tanhf" if ct == "float" else "tanh",
        "qst": strides(hq, sq, d),
        "kst": strides(hkv, sn, d),
        "vst": strides(hkv, sn, dv),
        "yst": strides(hq, sq, dv),
        "scale": node.attrs["scale_sqrt"],
        "softcap": node.attrs["softcap"],
        "causal": node.attrs["is_causal"],
        "left": node.attrs["left_window"],
        "right": node.attrs["right_window"],
        "has_nonpad": bool(_inp(node, NONPAD_IN)),
        "has_pk": bool(_out(node, 1)),
        "has_pv": bool(_out(node, 2)),
        "has_qk": bool(_out(node, 3)),
        "qk_mode": node.attrs["qk_mode"],
    }
