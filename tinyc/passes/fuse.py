"""Fuse elementwise activations into the kernel that produces their input (saves a pass over memory).

Which producers take an activation (``OpDef.absorbs_activation``), which ops are activations
(``OpDef.fusable_activation``) and which of those are clamps (``OpDef.activation_clamp``) are
declared by the ops."""

from __future__ import annotations

from tinyc.ir import Graph
from tinyc.ops import get_op


def fuse_activations(graph: Graph, clamps_only: bool = False) -> bool:
    """clamps_only: an int8 graph keeps non-clamp activations separate (they need their own grid);
    an int8 kernel folds a clamp into its output clamp."""
    changed = False
    consumers = graph.consumers()
    for node in list(graph.nodes):
        if not get_op(node.op).absorbs_activation or node.attrs.get("activation"):
            continue
        out = node.outputs[0]
        if graph.tensor(out).dtype != "float32" or out in graph.outputs:
            continue
        users = consumers.get(out, [])
        if len(users) != 1:
            continue
        act = users[0]
        activation = get_op(act.op)
        if not activation.fusable_activation or act.inputs[0] != out:
            continue
        if clamps_only and activation.activation_clamp(act.attrs) is None:
            continue
        node.attrs["activation"] = {"op": act.op, "attrs": {k: v for k, v in act.attrs.items()}}
        graph.nodes.remove(act)
        node.outputs[0] = act.outputs[0]
        t = graph.tensor(act.outputs[0])
        t.shape = graph.tensor(out).shape
        consumers = graph.consumers()
        changed = True
    return changed
