"""Human-readable compile report: report.md (RAM, flash, MACs per layer) and memory.svg (the
arena plan: every buffer as a box, execution step across, byte offset down). Names come from the
model (untrusted): escaped for Markdown (md_text) and XML (xml_text), so they add no markup."""

from __future__ import annotations

from typing import Any

from tinyc.numerics.text import md_text, xml_text
from tinyc.memory import MemoryLayout

_COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"]


def memory_svg(layout: MemoryLayout, width: int = 900, height: int = 360) -> str:
    """Buffers as rectangles: x = live steps, y = arena bytes. Overlaps would be visible at once."""
    buffers = layout.buffers
    steps = max((b.last for b in buffers), default=0) + 1
    arena = max(layout.arena_bytes, 1)
    left, top, plot_w, plot_h = 70, 20, width - 90, height - 60
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#888"/>',
    ]
    for k, b in enumerate(sorted(buffers, key=lambda b: b.name)):
        off = layout.offsets[b.name]
        x = left + plot_w * b.first / steps
        w = max(1.0, plot_w * (b.last - b.first + 1) / steps)
        y = top + plot_h * off / arena
        h = max(1.0, plot_h * b.size / arena)
        title = f"{xml_text(b.name)}: {b.size} B at {off}, steps {b.first}-{b.last}"
        out.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{_COLORS[k % 10]}" '
            f'fill-opacity="0.75" stroke="#333" stroke-width="0.5"><title>{title}</title></rect>'
        )
    out.append(f'<text x="{left}" y="{height - 22}">step 0</text>')
    out.append(f'<text x="{left + plot_w}" y="{height - 22}" text-anchor="end">step {steps - 1}</text>')
    out.append(
        f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle">execution step '
        f"(arena {layout.arena_bytes:,} B, lower bound {layout.lower_bound_bytes:,} B)</text>"
    )
    out.append(f'<text x="{left - 6}" y="{top + 10}" text-anchor="end">0 B</text>')
    out.append(f'<text x="{left - 6}" y="{top + plot_h}" text-anchor="end">{layout.arena_bytes:,}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def markdown_report(report: dict[str, Any]) -> str:
    r = report
    lines = [
        f"# tinyc report: {md_text(r['model'])} ({md_text(r.get('target', 'host'))})",
        "",
        "| | |",
        "|---|---:|",
        f"| MACs per inference | {r['macs']:,} |",
        f"| parameters | {r['params']:,} |",
        f"| weights (flash) | {r['weights_bytes']:,} B |",
        f"| arena (RAM) | {r['arena_bytes']:,} B |",
        f"| arena lower bound | {r['arena_lower_bound_bytes']:,} B |",
        f"| memory strategy | {md_text(r['memory_strategy'])} |",
        "",
        "Strategies tried (arena bytes): " + ", ".join(f"{k} {v:,}" for k, v in sorted(r["memory_strategies"].items())),
        "",
        "![arena plan](memory.svg)",
        "",
        "## Layers",
        "",
        "| # | layer (ONNX node) | op | output | MACs | share | params | arena offset | bytes | schedule |",
        "|---:|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    total = max(1, r["macs"])
    for i, layer in enumerate(r["layers"]):
        shape = "x".join(map(str, layer["output_shape"]))
        kind = layer["op"] + (" (view)" if layer.get("alias") else "")
        sched = md_text(", ".join(f"{k}={v}" for k, v in sorted(layer.get("schedule", {}).items())), 400)
        name = md_text(layer["name"])
        lines.append(
            f"| {i} | {name} | {kind} | {shape} | {layer['macs']:,} | {100 * layer['macs'] / total:.1f}% "
            f"| {layer['params']:,} | {layer['arena_offset']:,} | {layer['arena_size']:,} | {sched} |"
        )
    if "quantization" in r:
        from tinyc.quantize.report import summary_markdown

        lines += ["", summary_markdown(r["quantization"])]
    return "\n".join(lines) + "\n"
