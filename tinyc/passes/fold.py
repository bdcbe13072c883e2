"""Fold per-channel affine work (BatchNorm, constant Mul/Add) into the producing Conv/Gemm."""

from __future__ import annotations

from typing import cast

import numpy as np

from tinyc.ir import Graph, Node


def _data(graph: Graph, name: str) -> np.ndarray:
    """The values of a tensor known to be constant (weights, biases, affine vectors being folded)."""
    return cast(np.ndarray, graph.tensor(name).data)


def _single_consumer(graph: Graph, tensor: str) -> Node | None:
    users = graph.consumers().get(tensor, [])
    if len(users) != 1 or tensor in graph.outputs:
        return None
    return users[0]


def _channel_axis(graph: Graph, node: Node) -> int | None:
    """Axis of the output channels of a Conv/Gemm output (None: not a foldable producer)."""
    if node.op == "Conv":
        return 1 if node.attrs["layout"] == "NCHW" else len(graph.tensor(node.outputs[0]).shape) - 1
    if node.op == "Gemm" and graph.tensor(node.inputs[1]).is_constant and not node.attrs["transB"]:
        return 1
    return None


def _per_channel(value: np.ndarray, out_shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """If `value` broadcast to out_shape varies only along `axis`, return it as a [C] vector."""
    rank = len(out_shape)
    if value.ndim > rank:
        return None
    full = value.reshape((1,) * (rank - value.ndim) + value.shape)
    if any(full.shape[i] != 1 for i in range(rank) if i != axis):
        return None
    return np.broadcast_to(full.reshape(-1), (out_shape[axis],)).astype(np.float32)


def _scale_output_channels(graph: Graph, node: Node, scale: np.ndarray) -> None:
    w = _data(graph, node.inputs[1]).astype(np.float32)
    if node.op == "Conv":
        w = w * (scale.reshape(-1, *([1] * (w.ndim - 1))) if node.attrs["layout"] == "NCHW" else scale)
    else:
        w = w * scale.reshape(1, -1)
    node.inputs[1] = graph.add_constant(graph.unique_name(node.inputs[1] + "_scaled"), w.astype(np.float32))
    if len(node.inputs) > 2 and node.inputs[2]:
        b = _data(graph, node.inputs[2])
        if node.op == "Gemm" and b.shape != (scale.shape[0],):
            b = np.broadcast_to(b, graph.tensor(node.outputs[0]).shape)
        node.inputs[2] = graph.add_constant(
            graph.unique_name(node.inputs[2] + "_scaled"), (b * scale).astype(np.float32)
        )


def _add_bias(graph: Graph, node: Node, shift: np.ndarray) -> None:
    n_out = shift.shape[0]
    if len(node.inputs) > 2 and node.inputs[2]:
        b = _data(graph, node.inputs[2]) + shift
    else:
        b = np.broadcast_to(shift, (n_out,))
        while len(node.inputs) < 2:
            node.inputs.append("")
        node.inputs = node.inputs[:2] + [""]
    name = graph.unique_name(f"{node.name}_bias")
    node.inputs[2] = graph.add_constant(name, np.ascontiguousarray(b, dtype=np.float32))
    if node.op == "Gemm":
        node.attrs["beta"] = 1.0


def fold_affine_into_producers(graph: Graph) -> bool:
    """Conv/Gemm → ChannelAffine | Mul(const) | Add(const) | Sub(const): absorb into weights/bias."""
    changed = True
    any_change = False
    while changed:
        changed = False
        for node in list(graph.nodes):
            axis = _channel_axis(graph, node)
            if axis is None or node.attrs.get("activation"):
                continue
            user = _single_consumer(graph, node.outputs[0])
            if user is None:
                continue
            out_shape = graph.tensor(node.outputs[0]).shape
            if user.op == "ChannelAffine" and user.attrs["axis"] == axis and not user.attrs.get("activation"):
                scale, shift = _data(graph, user.inputs[1]), _data(graph, user.inputs[2])
            elif user.op in ("Mul", "Add", "Sub") and not user.attrs.get("activation"):
                other = user.inputs[1] if user.inputs[0] == node.outputs[0] else user.inputs[0]
                if other == node.outputs[0] or not graph.tensor(other).is_constant:
                    continue
                if user.op == "Sub" and user.inputs[0] != node.outputs[0]:
                    continue
                if graph.tensor(user.outputs[0]).shape != out_shape:
                    continue
                vec = _per_channel(_data(graph, other), out_shape, axis)
                if vec is None:
                    continue
                c = out_shape[axis]
                scale = vec if user.op == "Mul" else np.ones(c, np.float32)
                shift = {"Mul": np.zeros(c, np.float32), "Add": vec, "Sub": -vec}[user.op]
            else:
                continue
            if not np.all(scale == 1):
                _scale_output_channels(graph, node, scale.astype(np.float32))
            if np.any(shift != 0) or len(node.inputs) < 3 or not node.inputs[2]:
                _add_bias(graph, node, shift.astype(np.float32))
            graph.nodes.remove(user)
            graph.replace_uses(user.outputs[0], node.outputs[0])
            # keep the consumer's tensor name so graph outputs keep theirs
            changed = any_change = True
    return any_change
