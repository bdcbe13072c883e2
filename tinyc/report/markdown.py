"""report.md: the compile report as Markdown (summary, per-layer table, the arena plan as
memory.svg) plus the build/profile/validation sections once those ran; the same numbers as
report.html, which it links. Model-given names are escaped with md_text (no markup, no cells)."""

from __future__ import annotations

from typing import Any

from tinyc.numerics.text import md_text
from tinyc.report import sections as S


def _table(t: S.Table, escape: list[bool] | None = None) -> list[str]:
    esc = escape or [True] * len(t.header)
    lines = [
        "| " + " | ".join(md_text(h) for h in t.header) + " |",
        "|" + "|".join("---:" if r else "---" for r in (t.right or [False] * len(t.header))) + "|",
    ]
    for row in t.rows:
        lines.append("| " + " | ".join(md_text(c, 400) if e else c for c, e in zip(row, esc)) + " |")
    return lines


def _pairs(rows: list[tuple[str, str]]) -> list[str]:
    return ["| | |", "|---|---:|", *[f"| {md_text(k)} | {md_text(v, 400)} |" for k, v in rows]]


def markdown_report(report: dict[str, Any]) -> str:
    """The whole report.md for report.json's content."""
    r = report
    lines = [
        f"# tinyc report: {md_text(r.get('model', ''))} ({md_text(r.get('target', 'host'))})",
        "",
        "The same report with plots: [report.html](report.html) (one self-contained file).",
        "",
        *_pairs(S.summary_rows(r)),
        "",
    ]
    if r.get("memory_strategies"):
        lines += [
            "Strategies tried (arena bytes): "
            + ", ".join(f"{md_text(k)} {v:,}" for k, v in sorted(r["memory_strategies"].items())),
            "",
        ]
    lines += ["![arena plan](memory.svg)", ""]
    if r.get("models"):
        lines += ["## Models", "", *_models(r["models"]), ""]
    lines += [
        "## Layers",
        "",
        "A layer's number is its code-layer index (`<prefix>_run_layer(i)`, the header's `NUM_LAYERS`, "
        "`tinyc profile`); a view (reshape-like) runs no code and has none (\u2014).",
        "",
        *_table(S.layer_table(r)),
    ]
    if "quantization" in r:
        from tinyc.quantize.report import summary_markdown

        lines += ["", summary_markdown(r["quantization"])]
    if isinstance(r.get("build"), dict):
        _, rows = S.build_rows(r["build"])
        lines += ["", "## Build", "", *_pairs(rows)]
    if isinstance(r.get("profile"), dict):
        p = r["profile"]
        lines += ["", "## Profile", "", *_pairs(S.profile_rows(p)), "", *_table(S.profile_table(p))]
    if isinstance(r.get("validation"), dict):
        v = r["validation"]
        lines += ["", "## Validation", "", *_pairs(S.validation_rows(v)), "", *_table(S.validation_table(v))]
        outputs = S.output_table(v)
        if outputs is not None:
            lines += ["", *_table(outputs)]
    return "\n".join(lines) + "\n"


def _models(models: list[dict[str, Any]]) -> list[str]:
    t = S.Table(["model", "prefix", "MACs", "weights (flash)", "arena (RAM)"], right=[False, False, True, True, True])
    for m in models:
        t.rows.append(
            [
                str(m.get("model", "")),
                str(m.get("prefix", "")),
                S.fmt(int(m.get("macs", 0))),
                f"{int(m.get('weights_bytes', 0)):,} B",
                f"{int(m.get('arena_bytes', 0)):,} B",
            ]
        )
    return _table(t)
