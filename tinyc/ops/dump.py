"""Readable text dump of a graph (what `tinyc inspect` prints).

It lives with the ops, not the IR, because each line reports what the layer's op says about it
(parameters, MACs): the IR knows tensors and nodes, not what an op costs."""

from __future__ import annotations

from typing import Any

from tinyc.ir.graph import Graph
from tinyc.ops.base import get_op


def _fmt_attr(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict) and "op" in v:
        inner = ",".join(f"{k}={_fmt_attr(x)}" for k, x in sorted(v.get("attrs", {}).items()))
        return v["op"] + (f"({inner})" if inner else "")
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_fmt_attr(x) for x in v) + "]"
    return str(v)


def layer_stats(graph: Graph) -> list[dict[str, Any]]:
    """One row per node: its names, shapes, attributes and its op's parameter and MAC counts."""
    rows = []
    for node in graph.nodes:
        opdef = get_op(node.op)
        rows.append(
            {
                "name": node.name,
                "source": node.source or node.name,
                "op": node.op,
                "inputs": [
                    graph.tensor(i).shape if i else None for i in node.inputs if i and not graph.tensor(i).is_constant
                ],
                "output_shape": [list(graph.tensor(o).shape) for o in node.outputs if o],
                "params": opdef.params(node, graph),
                "macs": opdef.macs(node, graph),
                "attrs": {k: v for k, v in node.attrs.items()},
            }
        )
    return rows


def dump_graph(graph: Graph) -> str:
    """The graph's inputs, outputs and a table of its layers, with totals."""
    rows = layer_stats(graph)
    lines = [f"graph '{graph.name}'"]
    for name in graph.inputs:
        t = graph.tensor(name)
        lines.append(f"  input  {name}: {t.dtype}{list(t.shape)} {graph.io_layout.get(name, '')}".rstrip())
    for public, name in graph.public_outputs():
        t = graph.tensor(name)
        lines.append(f"  output {public}: {t.dtype}{list(t.shape)} {graph.io_layout.get(public, '')}".rstrip())
    header = f"{'#':>3}  {'op':<14} {'name':<28} {'output':<18} {'params':>9} {'MACs':>12}  attributes"
    lines += ["", header, "-" * len(header)]
    for i, r in enumerate(rows):
        out = "x".join(str(d) for d in r["output_shape"][0]) if r["output_shape"] else ""
        attrs = " ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(r["attrs"].items()))
        name = r["source"] if len(r["source"]) <= 28 else "…" + r["source"][-27:]
        lines.append(f"{i:>3}  {r['op']:<14} {name:<28} {out:<18} {r['params']:>9,} {r['macs']:>12,}  {attrs}")
    total_p = sum(t.size for t in graph.tensors.values() if t.is_constant)
    total_m = sum(r["macs"] for r in rows)
    lines += ["-" * len(header), f"{len(rows)} layers, {total_p:,} parameters, {total_m:,} MACs"]
    return "\n".join(lines) + "\n"
