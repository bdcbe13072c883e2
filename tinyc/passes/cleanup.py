"""Graph clean-up: identity removal, dead-code elimination, constant folding."""

from __future__ import annotations

from typing import cast

import numpy as np

from tinyc.ir import Graph, Tensor
from tinyc.ops import get_op


def remove_identities(graph: Graph) -> bool:
    """Identity / inference Dropout and no-op reshapes: rewire consumers to the input."""
    changed = False
    for node in list(graph.nodes):
        is_noop_reshape = node.op == "Reshape" and graph.tensor(node.inputs[0]).shape == tuple(node.attrs["shape"])
        if node.op not in ("Identity",) and not is_noop_reshape:
            continue
        src, dst = node.inputs[0], node.outputs[0]
        if src in graph.inputs and dst in graph.outputs:
            continue  # an input passed straight through: keep one copy node
        graph.nodes.remove(node)
        graph.replace_uses(dst, src)
        changed = True
    return changed


def eliminate_dead_code(graph: Graph) -> bool:
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs if o):
            kept.append(node)
            live.update(i for i in node.inputs if i)
    kept.reverse()
    changed = len(kept) != len(graph.nodes)
    graph.nodes = kept
    graph.remove_unused_tensors()
    return changed


def fold_constants(graph: Graph) -> bool:
    """Evaluate nodes whose inputs are all constants (passes can create new ones)."""
    changed = False
    for node in list(graph.nodes):
        ins = [i for i in node.inputs if i]
        if not all(graph.tensor(i).is_constant for i in ins):
            continue
        if any(o in graph.outputs for o in node.outputs) and not ins:
            continue
        args = [graph.tensor(i).data if i else None for i in node.inputs]  # None: an absent optional input
        values = get_op(node.op).reference(node, graph, cast("list[np.ndarray]", args))
        for out, val in zip(node.outputs, values):
            if out:
                t = graph.tensor(out)
                graph.tensors[out] = Tensor(
                    out, t.shape, t.dtype, np.ascontiguousarray(np.asarray(val).astype(t.dtype).reshape(t.shape))
                )
        graph.nodes.remove(node)
        changed = True
    return changed
