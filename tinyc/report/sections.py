"""What the reports show, as rows of display values, computed once from report.json for both
report.md and report.html (so the two always carry the same numbers). Values are plain strings;
model-given names are left raw here and escaped by each writer for its format."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tinyc.report.plan import number_text
from tinyc.report.text import plain

#: build keys that are paths or lists, not numbers a person compares
_BUILD_SKIP = {"elf", "stack_notes", "warnings", "board"}
#: per-layer count keys of a profile, by preference, when "units" does not name one
_COUNT_KEYS = ("cycles", "instructions", "ns", "us", "median_us", "ticks")
#: the build's measured bytes and the board region they are checked against
_REGIONS = (
    ("flash", "flash_bytes", "flash_size"),
    ("RAM", "ram_bytes", "ram_size"),
    ("stack", "stack_bytes", "stack_size"),
)


def fmt(v: Any) -> str:
    """A number as people read it (thousands separators, 4 significant digits for fractions)."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return str(v)
        return f"{v:,.0f}" if abs(v) >= 1e3 else f"{v:.6g}"
    return str(v)


def share(used: int, size: int | None) -> str:
    return f"{used:,} B" if not size else f"{used:,} B of {size:,} B ({100 * used / size:.1f}%)"


@dataclass
class Table:
    """A table: header cells and rows of cells; `right` marks the numeric columns."""

    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    right: list[bool] = field(default_factory=list)


def budget(report: dict[str, Any]) -> dict[str, int]:
    """The board's flash/RAM/stack sizes: measured at build, else from the board at compile."""
    out = {k: int(v) for k, v in (report.get("budget") or {}).items() if isinstance(v, int)}
    for key in ("flash_size", "ram_size", "stack_size"):
        v = (report.get("build") or {}).get(key)
        if isinstance(v, int):
            out[key] = v
    return out


def summary_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    b = budget(report)
    rows = [
        ("MACs per inference", fmt(int(report.get("macs", 0)))),
        ("parameters", fmt(int(report.get("params", 0)))),
        ("weights (flash)", share(int(report.get("weights_bytes", 0)), b.get("flash_size"))),
        ("arena (RAM)", share(int(report.get("arena_bytes", 0)), b.get("ram_size"))),
        ("arena lower bound", f"{int(report.get('arena_lower_bound_bytes', 0)):,} B"),
        ("memory strategy", str(report.get("memory_strategy", ""))),
        ("layers (code)", fmt(sum(1 for layer in report.get("layers", []) if number_text(layer) != "\u2014"))),
    ]
    if "shared_arena_bytes" in report:
        rows.append(("shared arena (RAM)", share(int(report["shared_arena_bytes"]), b.get("ram_size"))))
    return rows


def budget_rows(report: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(region, used, available) for the compile-time summary bar: weights and arena on the board."""
    b = budget(report)
    rows = []
    if b.get("flash_size"):
        rows.append(("weights / flash", int(report.get("weights_bytes", 0)), b["flash_size"]))
    if b.get("ram_size"):
        rows.append(("arena / RAM", int(report.get("arena_bytes", 0)), b["ram_size"]))
    return rows


def layer_table(report: dict[str, Any]) -> Table:
    total = max(1, int(report.get("macs", 0)))
    t = Table(
        ["#", "layer (model node)", "op", "output", "MACs", "share", "params", "arena offset", "bytes", "schedule"],
        right=[True, False, False, False, True, True, True, True, True, False],
    )
    for layer in report.get("layers", []):
        kind = str(layer.get("op", "")) + (" (view)" if layer.get("alias") else "")
        sched = ", ".join(f"{k}={v}" for k, v in sorted((layer.get("schedule") or {}).items()))
        t.rows.append(
            [
                number_text(layer),
                str(layer.get("name", "")),
                kind,
                "x".join(map(str, layer.get("output_shape", []))),
                fmt(int(layer.get("macs", 0))),
                f"{100 * int(layer.get('macs', 0)) / total:.1f}%",
                fmt(int(layer.get("params", 0))),
                fmt(int(layer.get("arena_offset", 0))),
                fmt(int(layer.get("arena_size", 0))),
                sched,
            ]
        )
    return t


def build_rows(build: dict[str, Any]) -> tuple[list[tuple[str, int, int]], list[tuple[str, str]]]:
    """The build's memory against the board (region, used, size) and its other numbers."""
    regions = [
        (name, int(build[used]), int(build[size]))
        for name, used, size in _REGIONS
        if isinstance(build.get(used), int) and isinstance(build.get(size), int)
    ]
    done = {k for _, used, size in _REGIONS for k in (used, size) if isinstance(build.get(used), int)}
    rows = [(name, share(used, size)) for name, used, size in regions]
    for k, v in build.items():
        if k in done or k in _BUILD_SKIP or isinstance(v, (dict, list)) or v is None:
            continue
        rows.append(
            (k.replace("_", " "), fmt(v) + (" B" if k.endswith("_bytes") or k in ("text", "data", "bss") else ""))
        )
    if build.get("warnings"):
        rows.append(("compiler warnings", fmt(len(build["warnings"]))))
    return regions, rows


def profile_unit(p: dict[str, Any]) -> str:
    units = p.get("units")
    layers = p.get("layers") or [{}]
    if isinstance(units, str) and units in layers[0]:
        return units
    return next((k for k in _COUNT_KEYS if k in layers[0]), str(units or "count"))


def singular(unit: str) -> str:
    """ "instructions" -> "instruction"; time units stay as they are ("ns")."""
    return unit[:-1] if unit.endswith("s") and len(unit) > 2 else unit


def _per_key(layer: dict[str, Any]) -> str | None:
    return next((k for k in layer if k.startswith("macs_per_")), None)


def profile_table(p: dict[str, Any]) -> Table:
    u = profile_unit(p)
    t = Table(
        ["#", "layer", u, "MACs", f"MACs per {singular(u)}", "share"], right=[True, False, True, True, True, True]
    )
    for layer in p.get("layers", []):
        per = _per_key(layer)
        t.rows.append(
            [
                str(layer.get("index", "")),
                str(layer.get("name", "")),
                fmt(layer.get(u, "")),
                fmt(layer.get("macs", "")),
                fmt(layer[per]) if per else "",
                f"{100 * float(layer['share']):.1f}%" if isinstance(layer.get("share"), (int, float)) else "",
            ]
        )
    return t


def profile_series(p: dict[str, Any]) -> tuple[list[str], list[tuple[str, list[float]]]]:
    """Rows ("#i name") and the series to plot: the per-layer count and MACs per count."""
    u = profile_unit(p)
    layers = p.get("layers", [])
    labels = [f"{layer.get('index', '')} {layer.get('name', '')}" for layer in layers]
    series = [(f"{u} per layer", [float(layer.get(u, 0) or 0) for layer in layers])]
    if layers and _per_key(layers[0]):
        series.append(
            (f"MACs per {singular(u)}", [float(layer.get(_per_key(layer) or "", 0) or 0) for layer in layers])
        )
    return labels, series


def profile_rows(p: dict[str, Any]) -> list[tuple[str, str]]:
    u = profile_unit(p)
    rows = [("units", u)]
    for key, label in (
        ("layers_total", f"layers total ({u})"),
        ("run_total", f"one inference ({u})"),
        ("macs", "MACs"),
    ):
        if key in p:
            rows.append((label, fmt(p[key])))
    per = next((k for k in p if k.startswith("macs_per_")), None)
    if per:
        rows.append((f"MACs per {singular(u)} (whole run)", fmt(p[per])))
    for key in ("board", "repeat", "units_note"):
        if key in p:
            rows.append((key.replace("_", " "), fmt(p[key])))
    return rows


def validation_rows(v: dict[str, Any]) -> list[tuple[str, str]]:
    return [(k.replace("_", " "), fmt(x)) for k, x in v.items() if k != "outputs" and not isinstance(x, (dict, list))]


#: per-output keys that describe the tensor, not how close it came
_NOT_METRICS = {"dtype", "shape", "values", "count"}


def _comparisons(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """An output's metrics per reference: nested {"vs_golden": {...}} tables, else one "" table of
    its scalar metrics."""
    nested = {k: x for k, x in entry.items() if isinstance(x, dict)}
    if nested:
        return {k.removeprefix("vs_"): x for k, x in nested.items()}
    return {"": {k: x for k, x in entry.items() if k not in _NOT_METRICS and not isinstance(x, (dict, list))}}


def validation_table(v: dict[str, Any]) -> Table:
    """One row per output and reference (golden model, onnxruntime, TFLite Micro), one column per
    metric (max/mean abs error, RMSE, cosine, top-1 agreement, ... whatever validate measured)."""
    outputs = v.get("outputs") or {}
    keys: list[str] = []
    for entry in outputs.values():
        for metrics in _comparisons(entry).values():
            keys += [k for k, x in metrics.items() if k not in keys and not isinstance(x, (dict, list))]
    t = Table(["output", "against", *[k.replace("_", " ") for k in keys]], right=[False, False, *[True] * len(keys)])
    for name, entry in outputs.items():
        for against, metrics in _comparisons(entry).items():
            t.rows.append([str(name), against, *[fmt(metrics[k]) if k in metrics else "" for k in keys]])
    return t


def output_table(v: dict[str, Any]) -> Table | None:
    """With nested comparisons: each output's own scalars (bit-exact, accuracy, ...), else None."""
    outputs = v.get("outputs") or {}
    if not any(isinstance(x, dict) for e in outputs.values() for x in e.values()):
        return None
    keys: list[str] = []
    for entry in outputs.values():
        keys += [k for k, x in entry.items() if k not in keys and not isinstance(x, (dict, list))]
    t = Table(["output", *[k.replace("_", " ") for k in keys]], right=[False, *[True] * len(keys)])
    for name, entry in outputs.items():
        t.rows.append([str(name), *[fmt(entry[k]) if k in entry else "" for k in keys]])
    return t


def _is_similarity(key: str) -> bool:
    return any(w in key for w in ("accuracy", "agreement", "cosine", "top1", "top_1"))


def validation_series(v: dict[str, Any]) -> list[tuple[str, list[str], list[float]]]:
    """What to plot, as (title, rows, values): the error metrics of each output (max/mean abs,
    RMSE) and, apart, the agreement metrics (top-1 agreement, accuracy, cosine: 0..1)."""
    errors: tuple[list[str], list[float]] = ([], [])
    agree: tuple[list[str], list[float]] = ([], [])
    for name, entry in (v.get("outputs") or {}).items():
        tables = _comparisons(entry)
        if "" not in tables and isinstance(entry.get("accuracy"), (int, float)):
            tables["labels"] = {"accuracy": entry["accuracy"]}
        for against, metrics in tables.items():
            for k, x in metrics.items():
                if k in _NOT_METRICS or isinstance(x, bool) or not isinstance(x, (int, float)):
                    continue
                if x != x or abs(x) == float("inf"):
                    continue
                rows, values = agree if _is_similarity(k) else errors
                vs = f" vs {against}" if against and against != "labels" else ""
                rows.append(f"{plain(name, 24)}{vs}: {k.replace('_', ' ')}")  # the metric stays readable
                values.append(float(x))
    out = []
    if errors[0]:
        out.append(("error per output", *errors))
    if agree[0]:
        out.append(("agreement per output (1 = all)", *agree))
    return out
