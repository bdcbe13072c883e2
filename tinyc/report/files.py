"""Writing a folder's reports: report.json (the data), report.md, report.html and memory.svg —
at compile (`write_reports`) and again after build/profile/validate (`update_reports`), which add
their section to report.json and re-render both reports from it alone."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tinyc.memory import MemoryLayout
from tinyc.report.plan import arena_plan, number_text

REPORT_JSON = "report.json"
SECTIONS = ("build", "profile", "validation")
#: where a board target keeps its board definition in the folder (tinyc.device.project.BOARD_JSON)
_BOARD_JSON = "board.json"


def _jsonable(v: Any) -> Any:
    """numpy scalars and arrays (a profile's or validation's numbers) as plain JSON values."""
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def _board_budget(out_dir: Path) -> dict[str, int]:
    """The board's flash/RAM/stack sizes, from the board definition written into the folder."""
    try:
        memory = json.loads((out_dir / _BOARD_JSON).read_text()).get("memory", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {k: int(memory[k]) for k in ("flash_size", "ram_size", "stack_size") if isinstance(memory.get(k), int)}


def _arena_svg(report: dict[str, Any]) -> str | None:
    plan = report.get("arena_plan")
    if not isinstance(plan, dict):
        return None
    from tinyc.report.plots import arena_svg

    layers = report.get("layers", [])
    return arena_svg(plan, layers, [number_text(layer) for layer in layers])


def _render(out_dir: Path, report: dict[str, Any], svg: str | None) -> None:
    from tinyc.report.html import html_report
    from tinyc.report.markdown import markdown_report

    (out_dir / "report.md").write_text(markdown_report(report))
    (out_dir / "report.html").write_text(html_report(report, svg))


def write_reports(out_dir: Path, report: dict[str, Any], layout: MemoryLayout) -> None:
    """At compile: record the arena plan (report["arena_plan"]) and the board's budget
    (report["budget"], when the folder is a board's) in `report`, then write report.json,
    report.md, report.html and memory.svg."""
    out_dir = Path(out_dir)
    report["arena_plan"] = arena_plan(layout, report)
    budget = _board_budget(out_dir)
    if budget:
        report["budget"] = budget
    (out_dir / REPORT_JSON).write_text(json.dumps(report, indent=2, default=_jsonable) + "\n")
    svg = _arena_svg(report)
    if svg is not None:
        (out_dir / "memory.svg").write_text(svg)
    _render(out_dir, report, svg)


def update_reports(out_dir: Path, section: str, data: dict[str, Any]) -> None:
    """After build/profile/validate: `data` becomes report.json's `section` ("build", "profile" or
    "validation"; a later run replaces an earlier one), then report.md and report.html are
    re-rendered from report.json."""
    if section not in SECTIONS:
        raise ValueError(f"report section must be one of {', '.join(SECTIONS)}, got {section!r}")
    out_dir = Path(out_dir)
    path = out_dir / REPORT_JSON
    report = json.loads(path.read_text()) if path.is_file() else {}
    report[section] = json.loads(json.dumps(data, default=_jsonable))
    path.write_text(json.dumps(report, indent=2) + "\n")
    svg_path = out_dir / "memory.svg"  # the compile drew the plan: the same plot (not drawn again)
    _render(out_dir, report, svg_path.read_text() if svg_path.is_file() else _arena_svg(report))
