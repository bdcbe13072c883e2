"""report.html: one self-contained page a person opens in any browser, offline and without
JavaScript — CSS inline, every plot an inline matplotlib SVG, no external URL. Rendered from
templates/report/report.html.j2 with Jinja autoescape: model-given names cannot add markup."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from tinyc.report import plots
from tinyc.report import sections as S
from tinyc.report.text import plain

TEMPLATE = "report/report.html.j2"


@lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2

    from tinyc.resources import templates_dir

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=True,  # every value is text unless wrapped in Markup (only matplotlib's SVG is)
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["plain"] = plain
    return env


def _cells(t: S.Table) -> dict[str, Any]:
    return {"header": t.header, "rows": t.rows, "right": t.right or [False] * len(t.header)}


def html_report(report: dict[str, Any], arena_svg: str | None) -> str:
    """The page for report.json's content; `arena_svg`: the arena plot (memory.svg), when planned."""
    from markupsafe import Markup

    r = report
    figs: dict[str, Any] = {"arena": Markup(plots.inline(arena_svg)) if arena_svg else None}
    budget = S.budget_rows(r)
    figs["budget"] = Markup(plots.inline(plots.budget_svg("budget", budget, "model on the board"))) if budget else None
    ctx: dict[str, Any] = {
        "model": r.get("model", ""),
        "target": r.get("target", "host"),
        "summary": S.summary_rows(r),
        "strategies": sorted((r.get("memory_strategies") or {}).items()),
        "layers": _cells(S.layer_table(r)),
        "models": r.get("models") or [],
        "quantization": None,
        "build": None,
        "profile": None,
        "validation": None,
        "figs": figs,
    }
    if "quantization" in r:
        from tinyc.quantize.report import summary_markdown

        ctx["quantization"] = summary_markdown(r["quantization"])
    if isinstance(r.get("build"), dict):
        regions, rows = S.build_rows(r["build"])
        fig = plots.budget_svg("build", regions, "firmware as built") if regions else None
        ctx["build"] = {"rows": rows, "fig": Markup(plots.inline(fig)) if fig else None}
    if isinstance(r.get("profile"), dict):
        p = r["profile"]
        labels, series = S.profile_series(p)
        fig = plots.hbar_svg("profile", labels, series, f"per-layer profile ({S.profile_unit(p)})") if labels else None
        ctx["profile"] = {
            "rows": S.profile_rows(p),
            "table": _cells(S.profile_table(p)),
            "fig": Markup(plots.inline(fig)) if fig else None,
        }
    if isinstance(r.get("validation"), dict):
        v = r["validation"]
        figs_v = [
            Markup(plots.inline(plots.hbar_svg(f"validation{k}", rows, [(title, values)], title)))
            for k, (title, rows, values) in enumerate(S.validation_series(v))
        ]
        outputs = S.output_table(v)
        ctx["validation"] = {
            "rows": S.validation_rows(v),
            "table": _cells(S.validation_table(v)),
            "outputs": _cells(outputs) if outputs is not None else None,
            "figs": figs_v,
        }
    return str(_environment().get_template(TEMPLATE).render(**ctx))
