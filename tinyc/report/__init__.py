"""Human-readable reports of a compiled folder: report.md, report.html (self-contained: inline CSS
and matplotlib SVG plots, no script) and memory.svg (the arena plan), all rendered from the data in
report.json; build/profile/validate add their sections later (`update_reports`)."""

from __future__ import annotations

from typing import Any

from tinyc.memory import MemoryLayout
from tinyc.report.files import update_reports, write_reports
from tinyc.report.markdown import markdown_report
from tinyc.report.plan import arena_plan, layer_number

__all__ = ["arena_plan", "layer_number", "markdown_report", "memory_svg", "update_reports", "write_reports"]


def memory_svg(layout: MemoryLayout, report: dict[str, Any] | None = None) -> str:
    """The arena plan plot (memory.svg) of `layout`; `report` (report.json's content) names the
    layers that write each buffer."""
    from tinyc.report.plan import number_text
    from tinyc.report.plots import arena_svg

    rep = report if report is not None else {}
    layers = rep.get("layers", [])
    plan = arena_plan(layout, rep)
    if not layers:
        plan["steps"] = max([b["last"] for b in plan["buffers"]] + [0]) + 1
    return arena_svg(plan, layers, [number_text(layer) for layer in layers])
