"""Channels-last layout.

1. Every convolution-like node (``OpDef.channels_last_capable``: Conv, Pool, ...) switches to
   NHWC; a Transpose is put on its input and its output so the graph means the same thing.
2. Transposes are then pushed down through layout-agnostic ops (``OpDef.layout_agnostic``:
   elementwise, per-channel) and ops whose ``OpDef.can_permute`` agrees to ``permute``, composed
   with each other, cancelled when they undo each other, turned into free reshapes when they only
   move size-1 dims, and folded into the weights of a following Flatten → Gemm. What is left sits
   at the model's boundary.

Convention for `OpDef.permute(node, graph, perm)`: the node used to read T_perm(u) and now reads
u directly; axis `a` of its old input is axis `perm[a]` of the new one. Its output becomes
untransposed as well, and the pass puts T_perm after it.
"""

from __future__ import annotations

import numpy as np

from tinyc.ir import Graph, Node, Tensor
from tinyc.ops import get_op


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _compose(first: list[int], second: list[int]) -> list[int]:
    """T_second(T_first(x)) == T_result(x)."""
    return [first[s] for s in second]


def _is_identity(perm: list[int]) -> bool:
    return all(i == p for i, p in enumerate(perm))


def _insert_transpose(graph: Graph, src: str, dst: str, perm: list[int], source: str, index: int) -> Node:
    node = Node(
        graph.unique_name(f"{source}_transpose"), "Transpose", [src], [dst], {"perm": list(perm)}, source=source
    )
    t = graph.tensor(src)
    # A transpose moves values without changing them: both sides share one int8 annotation.
    old = graph.tensors.get(dst)
    quant = old.quant if old is not None and old.quant is not None else t.quant
    if t.quant is None and not t.is_constant:
        t.quant = quant
    graph.tensors[dst] = Tensor(dst, tuple(t.shape[p] for p in perm), t.dtype, None, quant)
    graph.nodes.insert(index, node)
    return node


def _reinfer(graph: Graph, node: Node) -> None:
    for out, (shape, dtype) in zip(node.outputs, get_op(node.op).infer(node, graph)):
        if out:
            old = graph.tensors.get(out)
            graph.tensors[out] = Tensor(out, tuple(shape), dtype, None, old.quant if old is not None else None)


def convert_to_channels_last(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        opdef = get_op(node.op)
        if not opdef.channels_last_capable or node.attrs.get("layout") != "NCHW":
            continue
        x = graph.tensor(node.inputs[0])
        r = len(x.shape)
        if r not in (3, 4):
            continue
        to_last = [0] + list(range(2, r)) + [1]
        to_first = _inverse(to_last)
        idx = graph.nodes.index(node)
        nhwc_in = graph.unique_name(f"{node.inputs[0]}_nhwc")
        _insert_transpose(graph, node.inputs[0], nhwc_in, to_last, node.source or node.name, idx)
        node.inputs[0] = nhwc_in
        opdef.to_channels_last(node, graph)
        old_out = node.outputs[0]
        new_out = graph.unique_name(f"{old_out}_nhwc")
        node.outputs[0] = new_out
        _reinfer(graph, node)
        _insert_transpose(graph, new_out, old_out, to_first, node.source or node.name, graph.nodes.index(node) + 1)
        changed = True
    return changed


# -- transpose optimisation ------------------------------------------------------------------
def _can_push(graph: Graph, node: Node, t_out: str, perm: list[int]) -> bool:
    """Whether `node` (a consumer of T_perm's output) can take the untransposed tensor."""
    opdef = get_op(node.op)
    if node.op == "Transpose":
        return True
    data_inputs = [i for i in node.inputs if i and not graph.tensor(i).is_constant]
    out_rank = len(graph.tensor(node.outputs[0]).shape) if node.outputs and node.outputs[0] else -1
    if out_rank != len(perm):
        return False
    if opdef.layout_agnostic:
        producers = graph.producers()
        for i in data_inputs:
            p = producers.get(i)
            if i != t_out and not (p is not None and p.op == "Transpose" and p.attrs["perm"] == perm):
                return False
        for i in node.inputs:
            if i and graph.tensor(i).is_constant and len(graph.tensor(i).shape) > len(perm):
                return False
        return len(node.outputs) == 1
    # every data input must arrive through the same T_perm (multi-input ops like Concat)
    producers = graph.producers()
    for i in data_inputs:
        p = producers.get(i)
        if i != t_out and not (p is not None and p.op == "Transpose" and p.attrs["perm"] == perm):
            return False
    # _push_through ignores permute's return value, so ask first (OpDef.can_permute: default no)
    return bool(opdef.can_permute(node, graph, perm))


def _push_through(graph: Graph, node: Node, perm: list[int]) -> None:
    """Make `node` read untransposed inputs; put T_perm on its outputs."""
    producers = graph.producers()
    opdef = get_op(node.op)
    inv = _inverse(perm)
    rank = len(perm)
    new_inputs: list[str] = []
    for i in node.inputs:
        if not i:
            new_inputs.append(i)
            continue
        t = graph.tensor(i)
        if t.data is not None:  # a constant
            if opdef.layout_agnostic:
                data = t.data.reshape((1,) * (rank - t.data.ndim) + t.data.shape)
                new_inputs.append(
                    graph.add_constant(graph.unique_name(f"{i}_perm"), np.ascontiguousarray(np.transpose(data, inv)))
                )
            else:
                new_inputs.append(i)
            continue
        p = producers[i]
        assert p.op == "Transpose" and p.attrs["perm"] == perm
        new_inputs.append(p.inputs[0])
    node.inputs = new_inputs
    if not opdef.layout_agnostic:
        opdef.permute(node, graph, perm)
    idx = graph.nodes.index(node)
    for k, out in enumerate(node.outputs):
        if not out:
            continue
        inner = graph.unique_name(f"{out}_raw")
        node.outputs[k] = inner
        _reinfer(graph, node)
        _insert_transpose(graph, inner, out, perm, node.source or node.name, idx + 1)
        idx += 1
    _reinfer(graph, node)


def optimize_transposes(graph: Graph) -> bool:
    any_change = False
    for _ in range(10000):
        changed = False
        consumers = graph.consumers()
        for t in list(graph.nodes):
            if t.op != "Transpose" or t not in graph.nodes:
                continue
            perm = t.attrs["perm"]
            src, out = t.inputs[0], t.outputs[0]
            if _is_identity(perm):
                if out in graph.outputs and src in graph.inputs:
                    continue
                graph.nodes.remove(t)
                graph.replace_uses(out, src)
                changed = True
                break
            users = consumers.get(out, [])
            # compose with following transposes
            tusers = [u for u in users if u.op == "Transpose"]
            if tusers:
                for u in tusers:
                    u.inputs[0] = src
                    u.attrs["perm"] = _compose(perm, u.attrs["perm"])
                changed = True
                break
            if out in graph.outputs or not users:
                continue
            if all(_can_push(graph, u, out, perm) for u in users):
                for u in users:
                    if t.outputs[0] in u.inputs:
                        _push_through(graph, u, perm)
                changed = True
                break
        if changed:
            from tinyc.passes.cleanup import eliminate_dead_code

            eliminate_dead_code(graph)
            any_change = True
            continue
        break
    return any_change


def transposes_to_reshapes(graph: Graph) -> bool:
    """A transpose that keeps the order of all non-1 dims moves no data: make it a free reshape."""
    changed = False
    for t in graph.nodes:
        if t.op != "Transpose":
            continue
        shape = graph.tensor(t.inputs[0]).shape
        moved = [p for p in t.attrs["perm"] if shape[p] != 1]
        if moved == sorted(moved):
            t.op = "Reshape"
            t.attrs = {"shape": list(graph.tensor(t.outputs[0]).shape)}
            changed = True
    return changed


def fold_transpose_into_gemm(graph: Graph) -> bool:
    """T_perm → Reshape[N, K] → Gemm(constant B): permute B's rows instead of moving the data."""
    changed = False
    consumers = graph.consumers()
    for t in list(graph.nodes):
        if t.op != "Transpose" or t.attrs["perm"][0] != 0:
            continue
        users = consumers.get(t.outputs[0], [])
        if len(users) != 1 or users[0].op != "Reshape" or t.outputs[0] in graph.outputs:
            continue
        rs = users[0]
        rs_shape = tuple(rs.attrs["shape"])
        in_shape = graph.tensor(t.inputs[0]).shape
        if len(rs_shape) != 2 or rs_shape[0] != in_shape[0]:
            continue
        gemms = consumers.get(rs.outputs[0], [])
        if (
            not gemms
            or rs.outputs[0] in graph.outputs
            or any(
                g.op != "Gemm"
                or g.inputs[0] != rs.outputs[0]
                or g.attrs["transA"]
                or g.attrs["transB"]
                or not graph.tensor(g.inputs[1]).is_constant
                for g in gemms
            )
        ):
            continue
        inner = tuple(in_shape[1:])
        k = int(np.prod(inner))
        idx = np.arange(k).reshape(inner)
        order = np.transpose(idx, [p - 1 for p in t.attrs["perm"][1:]]).reshape(-1)
        for g in gemms:
            b = graph.tensor(g.inputs[1]).data
            nb = np.empty_like(b)
            nb[order] = b
            g.inputs[1] = graph.add_constant(graph.unique_name(g.inputs[1] + "_rows"), nb)
        rs.inputs[0] = t.inputs[0]
        changed = True
    if changed:
        from tinyc.passes.cleanup import eliminate_dead_code

        eliminate_dead_code(graph)
    return changed


def channels_last_io(graph: Graph) -> None:
    """`--io-layout nhwc`: absorb the boundary transposes into the model's inputs and outputs."""
    consumers = graph.consumers()
    producers = graph.producers()
    for name in list(graph.inputs):
        users = consumers.get(name, [])
        rank = len(graph.tensor(name).shape)
        to_last = [0] + list(range(2, rank)) + [1]
        if rank < 3 or not users or any(u.op != "Transpose" or u.attrs["perm"] != to_last for u in users):
            continue
        t = graph.tensor(name)
        t.shape = tuple(t.shape[p] for p in to_last)
        for u in users:
            graph.nodes.remove(u)
            graph.replace_uses(u.outputs[0], name)
        graph.io_layout[name] = "NHWC"
    for k, name in enumerate(list(graph.outputs)):
        p = producers.get(name)
        rank = len(graph.tensor(name).shape)
        to_first = [0, rank - 1] + list(range(1, rank - 1))
        if p is None or p.op != "Transpose" or p.attrs["perm"] != to_first or rank < 3:
            continue
        if len(consumers.get(name, [])) > 0:
            continue
        graph.outputs[k] = p.inputs[0]
        graph.io_layout[graph.public_outputs()[k][0]] = "NHWC"
    from tinyc.passes.cleanup import eliminate_dead_code

    eliminate_dead_code(graph)


__all__ = [
    "channels_last_io",
    "convert_to_channels_last",
    "fold_transpose_into_gemm",
    "optimize_transposes",
    "transposes_to_reshapes",
]
