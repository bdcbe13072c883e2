"""onnxruntime's contrib attention ops (domain com.microsoft), lowered at import onto the fused
Attention kernel (tinyc/ops/attention.py) and existing ops.

``MultiHeadAttention``: separate 3-D query / key / value ([B, S, H*D]), attr num_heads, optional
packed bias [Dq + Dk + Dv] (constant: three Adds), attention_bias ([B or 1, H or 1, S, L], additive)
and key_padding_mask ([B, L], 0 hides a key), attr unidirectional (causal), scale.
``Attention``: the packed-projection form onnxruntime's transformer tools export: input [B, S, Din],
constant weights [Din, Dq + Dk + Dv] and bias, optional mask_index [B, L] (1 attend / 0 hide) and
attention_bias, attrs num_heads, qkv_hidden_sizes, unidirectional, scale. The projections become
Gemm nodes (int8: quantized fully connected layers), the heads one Attention node.

A hidden key gets -inf where onnxruntime adds mask_filter_value (-10000 by default): the
probabilities agree to float precision unless a row hides every key (onnxruntime then averages all
values, tinyc gives 0). Past/present caches, 1-D / 3-D mask_index, rotary embeddings and the other
variants are refused by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ops.base import NodeEmitter, OpDef, register


def _mask_to_bool(em: NodeEmitter, ctx: Any, i: int, batch: int, what: str) -> str:
    """A [B, L] key mask (nonzero: attend) as a bool [B, 1, 1, L] attn_mask."""
    shape = tuple(int(d) for d in ctx.shape(i))
    if len(shape) != 2 or shape[0] != batch:
        ctx.unsupported(f"{what} of shape {shape} (only [batch, kv_length])")
    if ctx.dtype(i) not in ("int32", "int64", "bool"):
        ctx.unsupported(f"{what} of type {ctx.dtype(i)}")
    value = ctx.const(i)
    if value is not None:
        return ctx.add_constant(f"{what}_bool", (np.asarray(value) != 0).reshape(batch, 1, 1, shape[1]))
    src = ctx.inputs[i]
    if ctx.dtype(i) != "bool":
        src = em.node("Cast", [src], f"{what}_b", to="bool", saturate=True)
    return em.node("Reshape", [src], f"{what}_4d", shape=[batch, 1, 1, shape[1]])


def _combine_masks(em: NodeEmitter, ctx: Any, bool_mask: str | None, bias_i: int | None) -> str:
    """One attn_mask for the fused op: the boolean key mask and/or the additive attention_bias."""
    if bias_i is None:
        return bool_mask or ""
    bias = ctx.inputs[bias_i]
    if ctx.dtype(bias_i) != "float32":
        ctx.unsupported(f"attention_bias of type {ctx.dtype(bias_i)}")
    if bool_mask is None:
        return bias
    bm = em.ctx.graph.constant(bool_mask)
    if bm is None or ctx.const(bias_i) is None:
        ctx.unsupported("a key mask together with a runtime attention_bias (make one of them absent)")
    combined = np.where(bm, np.asarray(ctx.const(bias_i), np.float32), np.float32(-np.inf))
    return ctx.add_constant("mask_bias", combined.astype(np.float32))


def _attention_node(
    em: NodeEmitter, ctx: Any, q: str, k: str, v: str, mask: str, heads: int, head_size: int, out: str
) -> None:
    scale = ctx.attr("scale")
    scale = 1.0 / np.sqrt(head_size) if scale is None or float(scale) == 0.0 else float(scale)
    em.node(
        "Attention",
        [q, k, v, mask] if mask else [q, k, v],
        "attention",
        out=out,
        q_heads=heads,
        kv_heads=heads,
        scale_sqrt=float(np.sqrt(np.float64(scale))),
        is_causal=bool(int(ctx.attr("unidirectional", 0))),
        softcap=0.0,
        qk_mode=0,
        left_window=-1,
        right_window=-1,
    )


def _refuse_extra(ctx: Any, first_extra: int, names: str) -> None:
    if any(ctx.has_input(i) for i in range(first_extra, len(ctx.inputs))):
        ctx.unsupported(f"inputs {names} (key/value caches) are not supported")
    if any(o for o in ctx.outputs[1:]):
        ctx.unsupported("present / qk outputs are not supported (only the attention output)")


@register
class MsMultiHeadAttention(OpDef):
    """Import only (see the module docstring)."""

    op = "MsMultiHeadAttention"
    ms_ops = ("MultiHeadAttention",)

    def import_onnx(self, ctx):
        heads = int(ctx.attr("num_heads", 0))
        if heads <= 0:
            ctx.invalid("num_heads must be positive")
        if not (ctx.has_input(1) and ctx.has_input(2)):
            ctx.unsupported("packed QKV / packed KV forms (give query, key and value separately)")
        shapes = [tuple(int(d) for d in ctx.shape(i)) for i in range(3)]
        if any(len(s) != 3 for s in shapes) or any(ctx.dtype(i) != "float32" for i in range(3)):
            ctx.unsupported(f"query/key/value must be float32 [batch, seq, hidden], got {shapes}")
        (b, _, dq), (_, _, dk), (_, _, dv) = shapes
        if dq != dk or dq % heads or dv % heads:
            ctx.invalid(f"hidden sizes {dq}, {dk}, {dv} do not split into {heads} heads")
        _refuse_extra(ctx, 6, "past_key/past_value/past_sequence_length/cache_indirection")
        em = NodeEmitter(ctx)
        qkv = list(ctx.inputs[:3])
        if ctx.has_input(3):
            bias = np.asarray(ctx.require_const(3, "bias"), np.float32).reshape(-1)
            if bias.size != dq + dk + dv:
                ctx.invalid(f"bias of {bias.size} values for hidden sizes {dq} + {dk} + {dv}")
            parts = np.split(bias, [dq, dq + dk])
            for n, part in enumerate(parts):
                qkv[n] = em.node("Add", [qkv[n], ctx.add_constant(f"bias{n}", part)], f"{'qkv'[n]}_biased")
        key_mask = _mask_to_bool(em, ctx, 4, b, "key_padding_mask") if ctx.has_input(4) else None
        mask = _combine_masks(em, ctx, key_mask, 5 if ctx.has_input(5) else None)
        _attention_node(em, ctx, qkv[0], qkv[1], qkv[2], mask, heads, dq // heads, ctx.outputs[0])
        return em.nodes


@register
class MsAttention(OpDef):
    """Import only (see the module docstring)."""

    op = "MsAttention"
    ms_ops = ("Attention",)

    def import_onnx(self, ctx):
        heads = int(ctx.attr("num_heads", 0))
        if heads <= 0:
            ctx.invalid("num_heads must be positive")
        for a in ("do_rotary", "past_present_share_buffer"):
            if int(ctx.attr(a, 0)):
                ctx.unsupported(f"attribute {a}")
        x_shape = tuple(int(d) for d in ctx.shape(0))
        if len(x_shape) != 3 or ctx.dtype(0) != "float32":
            ctx.unsupported(f"input must be float32 [batch, seq, hidden], got {ctx.dtype(0)} {x_shape}")
        b, s, din = x_shape
        w = np.asarray(ctx.require_const(1, "weights"), np.float32)
        sizes = [int(v) for v in ctx.attr("qkv_hidden_sizes", [])] or [w.shape[-1] // 3] * 3
        if w.ndim != 2 or w.shape[0] != din or sum(sizes) != w.shape[1] or sizes[0] != sizes[1]:
            ctx.invalid(f"weights {w.shape} do not match input hidden {din} and qkv sizes {sizes}")
        if any(v % heads for v in sizes):
            ctx.invalid(f"qkv hidden sizes {sizes} do not split into {heads} heads")
        bias = np.asarray(ctx.require_const(2, "bias"), np.float32).reshape(-1) if ctx.has_input(2) else None
        if bias is not None and bias.size != sum(sizes):
            ctx.invalid(f"bias of {bias.size} values for qkv sizes {sizes}")
        _refuse_extra(ctx, 6, "past/past_sequence_length")
        if ctx.has_input(4):
            ctx.unsupported("past (a key/value cache) is not supported")
        em = NodeEmitter(ctx)
        rows = em.node("Reshape", [ctx.inputs[0]], "rows", shape=[b * s, din])
        cuts = np.cumsum([0] + sizes)
        proj = []
        for n in range(3):
            wn = ctx.add_constant(f"w{'qkv'[n]}", np.ascontiguousarray(w[:, cuts[n] : cuts[n + 1]]))
            bn = ctx.add_constant(
                f"b{'qkv'[n]}", bias[cuts[n] : cuts[n + 1]] if bias is not None else np.zeros(sizes[n], np.float32)
            )
            y2 = em.node("Gemm", [rows, wn, bn], f"{'qkv'[n]}_rows", transA=0, transB=0, alpha=1.0, beta=1.0)
            proj.append(em.node("Reshape", [y2], f"{'qkv'[n]}", shape=[b, s, sizes[n]]))
        key_mask = None
        if ctx.has_input(3):
            mshape = tuple(int(d) for d in ctx.shape(3))
            if len(mshape) != 2:
                ctx.unsupported(f"mask_index of shape {mshape} (only the 2-D [batch, total_length] form)")
            key_mask = _mask_to_bool(em, ctx, 3, b, "mask_index")
        mask = _combine_masks(em, ctx, key_mask, 5 if ctx.has_input(5) else None)
        _attention_node(em, ctx, proj[0], proj[1], proj[2], mask, heads, sizes[0] // heads, ctx.outputs[0])
        return em.nodes
