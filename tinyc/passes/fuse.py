"""Fuse elementwise activations into the kernel that produces their input (saves a pass over memory)."""

from __future__ import annotations

from tinyc.ir import Graph
from tinyc.ops import get_op

FUSE_INTO = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sub", "Mul", "ChannelAffine"}


#: Activations an int8 kernel folds into its output clamp; others run as their own (lookup table) op.
CLAMPS = ("Relu", "Clip")


def fuse_activations(graph: Graph, clamps_only: bool = False) -> bool:
    """clamps_only: an int8 graph keeps non-clamp activations separate (they need their own grid)."""
    changed = False
    consumers = graph.consumers()
    for node in list(graph.nodes):
        if node.op not in FUSE_INTO or node.attrs.get("activation"):
            continue
        out = node.outputs[0]
        if graph.tensor(out).dtype != "float32" or out in graph.outputs:
            continue
        users = consumers.get(out, [])
        if len(users) != 1:
            continue
        act = users[0]
        spec = getattr(get_op(act.op), "spec", None)
        if spec is None or not getattr(spec, "fusable", False) or act.inputs[0] != out:
            continue
        if clamps_only and act.op not in CLAMPS:
            continue
        node.attrs["activation"] = {"op": act.op, "attrs": {k: v for k, v in act.attrs.items()}}
        graph.nodes.remove(act)
        node.outputs[0] = act.outputs[0]
        t = graph.tensor(act.outputs[0])
        t.shape = graph.tensor(out).shape
        consumers = graph.consumers()
        changed = True
    return changed
