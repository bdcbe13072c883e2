"""int8 Attention (IR op ``QAttention``): both activation x activation products in integers.

Per (batch, query head, block of query rows), like the float kernel, one block of scores lives in
scratch (int32 here). The steps, all integer:

    acc[j]  = sum_d (q - zq)(k - zk)                      int32 (the QK^T product)
    idx[j]  = min(255, mbqm(max_j acc - acc[j], M_d))      the score difference on a fixed int8
                                                           grid of step DIFF_STEP (softmax only sees
                                                           differences, so no calibrated range)
    p[j]    = TFLite Micro's int8 softmax from idx         exp table, F12 sum, one reciprocal:
                                                           p on the int8 grid (1/256, -128)
    y[e]    = clamp(mbqm(sum_j (p[j] + 128)(v[j][e] - zv), M_y) + zy)      (the PV product)

M_d = sq * sk * scale / DIFF_STEP, M_y = sv / (256 * sy), in TFLite's (multiplier, shift) form and
TFLite's rounding (a model tinyc quantizes follows TFLite). A key the bias hides (causal, window,
constant boolean mask, padding) takes no part: its p is the grid's 0; a row that sees no key gives
y = zy (the real 0), as the float op. The golden model below is the C, integer for integer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.numerics import gemmlowp
from tinyc.numerics.fixed_point import multiply_by_quantized_multiplier, quantize_multiplier
from tinyc.numerics.qparams import qparams_of
from tinyc.ops.attention import MASK_IN, NONPAD_IN, PK_IN, Q_IN, ROW_BLOCK, _bias, _dims, _inp
from tinyc.ops.base import OpDef, OutputType, register
from tinyc.ops.tflm_softmax import ACCUMULATION_INTEGER_BITS, exp_table

#: real step of the score-difference grid: 255 steps cover differences up to 12, where exp(-12) ~ 6e-6
#: is far below the probability grid's 1/256.
DIFF_STEP = 12.0 / 255.0
TABLE_IN = 7  # the exp table follows the ONNX input positions


def qattention_refusal(node: Node, graph: Graph) -> str | None:
    """Why a float Attention node has no int8 form here (it then stays a float island), or None."""
    at = node.attrs
    if at["softcap"] > 0:
        return "softcap (tanh) has no int8 form"
    if _inp(node, PK_IN):
        return "past_key/past_value (a key/value cache) stays float"
    if len([o for o in node.outputs[1:] if o]):
        return "present_key/present_value/qk_matmul_output outputs stay float"
    mask = _inp(node, MASK_IN)
    if mask and (graph.tensor(mask).dtype != "bool" or not graph.tensor(mask).is_constant):
        return "only a constant boolean attn_mask has an int8 form"
    if _inp(node, NONPAD_IN) and not graph.tensor(node.inputs[NONPAD_IN]).is_constant:
        return "nonpad_kv_seqlen must be constant for the int8 form"
    dm = _dims(node, graph)
    if 2 * 255 * 255 * dm["D"] >= 1 << 31 or 255 * 255 * (dm["Sn"] + dm["P"]) >= 1 << 31:
        return "head size or key count too large for int32 accumulators"
    return None


def build_qattention(graph: Graph, node: Node, q: str, k: str, v: str, y: str) -> Node:
    """The QAttention node computing float `node` on the int8 tensors q, k, v -> y."""
    (sq, zq), (sk, zk), (sv, zv), (sy, zy) = (qparams_of(graph, t) for t in (q, k, v, y))
    scale = node.attrs["scale_sqrt"] ** 2
    d_mult, d_shift = quantize_multiplier(float(np.float32(sq)) * float(np.float32(sk)) * scale / DIFF_STEP)
    y_mult, y_shift = quantize_multiplier(float(np.float32(sv)) / (256.0 * float(np.float32(sy))))
    table = graph.add_constant(graph.unique_name(f"{node.name}_exp"), exp_table(1.0, DIFF_STEP))
    ins = [q, k, v] + [_inp(node, i) for i in range(MASK_IN, NONPAD_IN + 1)] + [table]
    attrs = dict(node.attrs, zq=zq, zk=zk, zv=zv, zy=zy)
    attrs.update(d_mult=int(d_mult), d_shift=int(d_shift), y_mult=int(y_mult), y_shift=int(y_shift))
    return Node(node.name, "QAttention", ins, [y], attrs, source=node.source)


def qattention_golden(node: Node, graph: Graph, inputs: list[Any]) -> np.ndarray:
    """The integer steps of the module docstring, vectorised over every row."""
    at = node.attrs
    dm = _dims(node, graph)
    b, hq, hkv, sq, skv = dm["B"], dm["Hq"], dm["Hkv"], dm["Sq"], dm["Sn"] + dm["P"]
    q = inputs[0].astype(np.int64) - at["zq"]
    k = inputs[1].astype(np.int64) - at["zk"]
    v = inputs[2].astype(np.int64) - at["zv"]
    if q.ndim == 3:
        q = q.reshape(b, sq, hq, dm["D"]).transpose(0, 2, 1, 3)
        k = k.reshape(b, skv, hkv, dm["D"]).transpose(0, 2, 1, 3)
        v = v.reshape(b, skv, hkv, dm["Dv"]).transpose(0, 2, 1, 3)
    rep = hq // hkv
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    acc = np.matmul(q, np.swapaxes(k, 2, 3))
    mask = inputs[MASK_IN] if len(inputs) > MASK_IN else None
    nonpad = inputs[NONPAD_IN] if len(inputs) > NONPAD_IN else None
    allowed = np.broadcast_to(_bias(node, mask, nonpad, dm, np.dtype(np.float32)) == 0, acc.shape)
    low = np.iinfo(np.int64).min
    mx = np.max(np.where(allowed, acc, low), axis=-1, keepdims=True)
    seen = np.any(allowed, axis=-1, keepdims=True)
    diff = np.where(allowed, mx - acc, 0)
    idx = np.minimum(np.asarray(multiply_by_quantized_multiplier(diff, at["d_mult"], at["d_shift"])), 255)
    e = np.where(allowed, np.asarray(inputs[TABLE_IN], np.int64)[idx], 0)
    total = gemmlowp.rdbpot(e, ACCUMULATION_INTEGER_BITS).sum(axis=-1, keepdims=True)
    rscale, bits = gemmlowp.get_reciprocal(np.where(seen, total, 1), ACCUMULATION_INTEGER_BITS)
    p = np.clip(gemmlowp.rdbpot(gemmlowp.srdhm(rscale, e), bits + 31 - 8) - 128, -128, 127)
    pv = np.matmul(p + 128, v)
    out = np.asarray(multiply_by_quantized_multiplier(pv, at["y_mult"], at["y_shift"])).astype(np.int64)
    yq = np.where(seen, np.clip(out + at["zy"], -128, 127), at["zy"])
    if inputs[0].ndim == 3:
        yq = yq.transpose(0, 2, 1, 3).reshape(b, sq, hq * dm["Dv"])
    return np.ascontiguousarray(yq.astype(np.int8))


@register
class QAttention(OpDef):
    """inputs: Q, K, V int8, attn_mask (constant bool) / "", "", "", nonpad_kv_seqlen / "", the exp
    table int32 [256]; attrs: the float op's, zero points zq zk zv zy, (d_mult, d_shift) and
    (y_mult, y_shift)."""

    op = "QAttention"
    template = "attention_int8.c.j2"
    dtypes = ("int8",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        dm = _dims(node, graph)
        rank3 = len(graph.tensor(node.inputs[Q_IN]).shape) == 3
        y = (dm["B"], dm["Sq"], dm["Hq"] * dm["Dv"]) if rank3 else (dm["B"], dm["Hq"], dm["Sq"], dm["Dv"])
        return [(y, "int8")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [qattention_golden(node, graph, inputs)]

    def macs(self, node: Node, graph: Graph) -> int:
        dm = _dims(node, graph)
        return dm["B"] * dm["Hq"] * dm["Sq"] * (dm["Sn"] + dm["P"]) * (dm["D"] + dm["Dv"])

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        """int32 scores of one block of query rows, and one output row's int32 accumulators."""
        dm = _dims(node, graph)
        return (min(ROW_BLOCK, dm["Sq"]) * (dm["Sn"] + dm["P"]) + dm["Dv"]) * 4

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        from tinyc.ops.attention import get_float_context

        ctx = get_float_context(node, graph)
        ctx.update({k: node.attrs[k] for k in ("zq", "zk", "zv", "zy", "d_mult", "d_shift", "y_mult", "y_shift")})
        return ctx
