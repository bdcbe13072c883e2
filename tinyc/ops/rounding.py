"""Which rounding an int8 node's requantization uses, set per graph by where its grids came from.

It sits with the ops, below every stage, because both the ONNX importer (QLinear* operators mean
ONNX's arithmetic) and the quantizer (tinyc's own grids follow TFLite) set it, and which ops
requantize is a fact about the ops.
"""

from __future__ import annotations

from tinyc.ir import Graph
from tinyc.ops.base import all_ops, get_op


def requantizing_ops() -> frozenset[str]:
    """Integer ops whose output is requantized from an int32 accumulator (``OpDef.requantizes``:
    attr ``rounding``, see ``tinyc.numerics.fixed_point.ROUNDINGS``)."""
    return frozenset(op for op, opdef in all_ops().items() if opdef.requantizes)


def __getattr__(name: str) -> frozenset[str]:
    # REQUANTIZING_OPS (the name tests import) is read from the declarations when first asked
    # for: while tinyc.ops.load_all imports this module the registry is not complete yet.
    if name == "REQUANTIZING_OPS":
        return requantizing_ops()
    raise AttributeError(name)


def set_requant_rounding(graph: Graph, mode: str, overwrite: bool = False) -> int:
    """Give every requantizing node the rounding `mode` (only those without one unless `overwrite`).

    Why two modes: a model tinyc quantizes follows TFLite/CMSIS-NN (double rounding); a model that
    arrives quantized (QDQ or QLinear* operators) means ONNX's arithmetic — a float product rounded
    once, half to even — and over a deep network the two drift apart by enough to flip a top-1
    (MLPerf ResNet-8: 98% agreement with onnxruntime in TFLite mode, 100% in half-even mode).
    Returns how many nodes were set."""
    n = 0
    for node in graph.nodes:
        if get_op(node.op).requantizes and (overwrite or "rounding" not in node.attrs):
            node.attrs["rounding"] = mode
            n += 1
    return n
