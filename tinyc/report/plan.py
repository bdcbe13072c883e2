"""The data behind the arena plot, kept in report.json ("arena_plan") so that the reports can be
re-rendered after build/profile/validate without the MemoryLayout; and the one layer numbering."""

from __future__ import annotations

from typing import Any

from tinyc.memory import MemoryLayout

SCRATCH_SUFFIX = "::scratch"  # tinyc.memory.liveness names a node's scratch buffer so


def arena_plan(layout: MemoryLayout, report: dict[str, Any]) -> dict[str, Any]:
    """Every planned buffer: name, offset, size, first/last step and what it is ("input",
    "activation", "output", "scratch") with the step of the layer that writes it. Step s is the
    s-th entry of report["layers"] (the graph's node order, views included)."""
    inputs = set(report.get("inputs", {}))
    n_steps = max(1, len(report.get("layers", [])))
    buffers = []
    for b in sorted(layout.buffers, key=lambda b: (layout.offsets[b.name], b.first, b.name)):
        if b.name.endswith(SCRATCH_SUFFIX):
            kind = "scratch"
        elif b.name in inputs and b.first == 0:
            kind = "input"
        elif b.last >= n_steps:
            kind = "output"
        else:
            kind = "activation"
        buffers.append(
            {
                "name": b.name,
                "offset": int(layout.offsets[b.name]),
                "size": int(b.size),
                "first": int(b.first),
                "last": int(b.last),
                "kind": kind,
                "layer_step": None if kind == "input" else int(b.first),
            }
        )
    return {
        "arena_bytes": int(layout.arena_bytes),
        "lower_bound_bytes": int(layout.lower_bound_bytes),
        "steps": n_steps,
        "buffers": buffers,
    }


def layer_number(layer: dict[str, Any]) -> int | None:
    """A layer's number: its code-layer index (`<prefix>_run_layer(i)`, the header's NUM_LAYERS,
    `tinyc profile`); a view (alias) node runs no code and has none."""
    k = layer.get("kernel")
    return None if k is None or layer.get("alias") else int(k)


def number_text(layer: dict[str, Any]) -> str:
    n = layer_number(layer)
    return "\u2014" if n is None else str(n)
