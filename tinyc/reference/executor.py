"""Runs a tinyc Graph with each op's numpy reference.

Used as the oracle the C code is tested against, and to collect intermediate tensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import numpy as np

from tinyc.errors import RunError
from tinyc.ir import Graph
from tinyc.ops import get_op


def run_graph(graph: Graph, feeds: Mapping[str, np.ndarray], keep_all: bool = False) -> dict[str, np.ndarray]:
    """Execute `graph` on `feeds` (one inference, exact input shapes). Returns the graph outputs
    under their internal names and, where passes renamed them, also under the model's public names
    (what the manifest and the runners use); every tensor when `keep_all` is set."""
    env: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        if name not in feeds:
            raise RunError(f"missing input '{name}' (model inputs: {', '.join(graph.inputs)})")
        t = graph.tensor(name)
        value = np.asarray(feeds[name])
        if tuple(value.shape) != t.shape:
            raise RunError(f"input '{name}' has shape {tuple(value.shape)}, the model expects {t.shape}")
        env[name] = value.astype(t.dtype, copy=False)
    for name, t in graph.tensors.items():
        if t.data is not None:  # a constant
            env[name] = t.data
    for node in graph.nodes:
        opdef = get_op(node.op)
        args = [env[i] if i else None for i in node.inputs]
        # None stands for an absent optional input; an op reads an input only where the node has it
        outs = opdef.reference(node, graph, cast("list[np.ndarray]", args))
        for name, value in zip(node.outputs, outs):
            if name:
                t = graph.tensor(name)
                env[name] = np.asarray(value).astype(t.dtype, copy=False).reshape(t.shape)
    if keep_all:
        return env
    result = {o: env[o] for o in graph.outputs}
    for public, internal in graph.public_outputs():
        result.setdefault(public, env[internal])
    return result
