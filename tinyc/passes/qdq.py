"""QDQ models: QuantizeLinear -> DequantizeLinear pairs become int8 annotations on float tensors.

A QDQ model (what onnxruntime's ``quantize_static`` writes) says "this float tensor lives on this
int8 grid" by routing it through a Quantize/Dequantize pair. tinyc reads the pair as exactly that:
the pair is removed and the tensor gets ``Tensor.quant`` (per-tensor, converted to int8: a uint8
grid with zero point z is the int8 grid with zero point z - 128, value for value). The float
passes then run on a plain float graph (folding, layout, fusion keep annotations), and
``tinyc.quantize.lower`` turns annotated regions into integer kernels with the model's own
scales. Constant weights went through DequantizeLinear at import already: they are float
constants that remember their int8 grid (``Tensor.quant`` with an axis).
"""

from __future__ import annotations

from typing import cast

import numpy as np

from tinyc.ir import Graph, QuantParams
from tinyc.numerics.qparams import per_tensor
from tinyc.ops import get_op

#: Quantized types a pair may use, with the zero point shift that maps them onto int8.
_TO_INT8 = {"int8": 0, "uint8": -128}


def _pair_params(q, dq) -> QuantParams | None:  # noqa: ANN001  (IR nodes)
    a, b = q.attrs, dq.attrs
    if a.get("axis") is not None or b.get("axis") is not None or a.get("qdtype") not in _TO_INT8:
        return None
    if np.float32(a["scale"]) != np.float32(b["scale"]) or int(a["zp"]) != int(b["zp"]):
        return None
    zp = int(a["zp"]) + _TO_INT8[a["qdtype"]]
    if np.float32(a["scale"]) <= 0 or not np.isfinite(np.float32(a["scale"])):
        return None
    return per_tensor(float(a["scale"]), zp)


def has_int8_annotations(graph: Graph) -> bool:
    """Whether any float activation carries an int8 grid (a QDQ model, or a calibrated one)."""
    return any(t.quant is not None and t.dtype == "float32" and not t.is_constant for t in graph.tensors.values())


def strip_qdq_pairs(graph: Graph) -> int:
    """Replace every QuantizeLinear -> DequantizeLinear pair on a float tensor by an annotation
    on that tensor; returns how many pairs were removed. Pairs that do not describe a per-tensor
    int8/uint8 grid (per-axis, int16, mismatched parameters) stay as float Q/DQ ops."""
    removed = 0
    consumers = graph.consumers()
    for q in list(graph.nodes):
        if q.op != "QuantizeLinear" or q not in graph.nodes:
            continue
        x, xq = q.inputs[0], q.outputs[0]
        src = graph.tensor(x)
        if src.dtype != "float32" or src.is_constant or xq in graph.outputs:
            continue
        users = consumers.get(xq, [])
        if not users or any(u.op != "DequantizeLinear" for u in users):
            continue
        params = [_pair_params(q, u) for u in users]
        if any(p is None for p in params):
            continue
        p0 = cast(QuantParams, params[0])  # none is None: checked above
        if src.quant is not None and (src.quant.scale != p0.scale or src.quant.zero_point != p0.zero_point):
            continue  # the tensor is already on another grid: keep this pair as real ops
        src.quant = p0
        for u in users:
            graph.nodes.remove(u)
            graph.replace_uses(u.outputs[0], x)
        graph.nodes.remove(q)
        removed += 1
    if removed:
        # Graph outputs that pointed at a removed DequantizeLinear now point at x: their public
        # names are kept in graph.output_names, so callers still see the model's names.
        graph.remove_unused_tensors()
    return removed


def propagate_through_moves(graph: Graph) -> None:
    """Data-movement nodes (``OpDef.grid_crosses_both_ways``: Transpose, Reshape) leave values
    unchanged: give an unannotated side the annotation of the other (the layout pass can leave
    fresh names on either side)."""
    for _ in range(2):
        for node in graph.nodes:
            if not get_op(node.op).grid_crosses_both_ways or not node.outputs or not node.inputs:
                continue
            a, b = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
            if a.dtype != "float32" or b.dtype != "float32" or a.is_constant:
                continue
            if a.quant is None and b.quant is not None:
                a.quant = b.quant
            elif b.quant is None and a.quant is not None:
                b.quant = a.quant
