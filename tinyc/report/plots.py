"""The reports' plots, drawn with matplotlib to SVG: the arena plan, the per-layer profile, the
validation error per output, the build's memory against the board's budget.

Text stays text (`svg.fonttype: none`) and is never parsed as mathtext (`text.parse_math`), so a
model-given '$x$' shows as typed; matplotlib's SVG writer escapes markup. Output is deterministic
(a fixed hash salt per plot, no date). matplotlib is imported on first use, once per process, and
only its object API is used (no pyplot: no global figure state, no GUI backend)."""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from typing import Any

from tinyc.report.text import plain

KIND_COLORS = {"input": "#4e79a7", "activation": "#f28e2b", "output": "#59a14f", "scratch": "#bab0ac"}
KIND_LABELS = {
    "input": "model input",
    "activation": "activation",
    "output": "model output",
    "scratch": "kernel scratch",
}
BAR_COLOR = "#4e79a7"
SECOND_COLOR = "#e15759"
_RC: Any = {  # (Any: matplotlib types its keys as a Literal union)
    "svg.fonttype": "none",
    "text.parse_math": False,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 9,
}
#: buffers labelled with their layer's name in the arena plot (the largest ones: beyond this many
#: the labels would hide the boxes)
MAX_BOX_LABELS = 40
MAX_TICK_LABELS = 48


def _figure(width: float, height: float, left: float, right: float = 0.97, bottom_in: float = 0.55) -> Any:
    """A figure with fixed margins (`bottom_in` in inches): a layout engine would draw every plot
    twice, and the reports are rendered on every compile."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=left, right=right, bottom=bottom_in / height, top=1 - 0.45 / height)
    return fig


def _label_margin(labels: Sequence[str], width: float) -> float:
    """The left margin (a fraction of `width` inches) that fits the longest row label."""
    longest = max((len(s) for s in labels), default=4)
    return min(0.5, (0.25 + 0.075 * longest) / width)


def _svg(fig: Any, salt: str) -> str:
    """The figure as an SVG document (deterministic: `salt` names the plot's clip-path ids, so several
    plots inlined into one HTML page never share an id)."""
    import matplotlib

    buf = io.StringIO()
    rc: Any = {**_RC, "svg.hashsalt": f"tinyc-{salt}"}
    with matplotlib.rc_context(rc), warnings.catch_warnings():
        # text stays text (the viewer's fonts draw it): a glyph matplotlib's font lacks only
        # changes its layout estimate, not worth a warning on every compile of such a model
        warnings.filterwarnings("ignore", message="Glyph .* missing from font", category=UserWarning)
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "tinyc", "Format": None, "Type": None})
    return buf.getvalue()


def _bytes_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{int(v):,} B")


def arena_svg(plan: dict[str, Any], layers: Sequence[dict[str, Any]], numbers: Sequence[str]) -> str:
    """Every buffer as a box: across, the steps it is live (the layers in execution order, numbered
    as everywhere else, "—" for views); down, its bytes in the arena. Boxes are coloured by kind (the
    legend), the largest labelled with the layer that writes them."""
    import matplotlib

    with matplotlib.rc_context(_RC):
        from matplotlib.patches import Patch, Rectangle

        steps = max(1, int(plan.get("steps", 1)))
        arena = max(1, int(plan.get("arena_bytes", 1)))
        fig = _figure(10, 4.6, left=0.1, right=0.82, bottom_in=0.6)
        ax = fig.subplots()
        buffers = plan.get("buffers", [])
        step_in, byte_in = _AXES_W_IN / (steps + 0.2), _AXES_H_IN / arena  # inches per step, per byte
        labelled = {
            id(b) for b in sorted(buffers, key=lambda b: -b["size"] * (b["last"] - b["first"] + 1))[:MAX_BOX_LABELS]
        }
        for k, b in enumerate(buffers):
            last = min(int(b["last"]), steps - 1) if b["kind"] != "output" else steps - 1
            x0, w = int(b["first"]) - 0.45, last - int(b["first"]) + 0.9
            rect = Rectangle(
                (x0, b["offset"]),
                w,
                b["size"],
                facecolor=KIND_COLORS.get(b["kind"], "#999999"),
                edgecolor="#333333",
                linewidth=0.5,
            )
            rect.set_gid(f"buffer-{k}")
            ax.add_patch(rect)
            if id(b) in labelled:
                step = b.get("layer_step")
                if step is not None and step < len(layers):
                    who = plain(layers[step]["name"], 60)
                else:
                    who = "input" if b["kind"] == "input" else plain(b["name"], 60)
                label = _fit(who, w * step_in, b["size"] * byte_in)
                if label:
                    ax.text(x0 + w / 2, b["offset"] + b["size"] / 2, label, ha="center", va="center", fontsize=7)
        ax.set_xlim(-0.6, steps - 0.4)
        ax.set_ylim(arena, 0)  # offset 0 at the top, as in a memory map
        lb = int(plan.get("lower_bound_bytes", 0))
        handles = [
            Patch(facecolor=KIND_COLORS[k], edgecolor="#333333", label=KIND_LABELS[k])
            for k in KIND_COLORS
            if any(b["kind"] == k for b in buffers)
        ]
        if 0 < lb < arena:
            handles.append(
                ax.axhline(lb, color="#333333", linestyle="--", linewidth=0.8, label=f"lower bound {lb:,} B")
            )
        ax.yaxis.set_major_formatter(_bytes_formatter())
        ax.set_ylabel("arena offset (bytes)")
        ax.set_xlabel("layer in execution order (its number; \u2014 = a view, no code)")
        if steps <= MAX_TICK_LABELS:
            ax.set_xticks(range(steps), [numbers[s] if s < len(numbers) else str(s) for s in range(steps)])
        ax.set_title(f"arena plan: {plan.get('arena_bytes', 0):,} B, {len(buffers)} buffers", y=1.01)
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="buffer")
        return _svg(fig, "arena")


#: the arena plot's axes in inches (figure 10 x 4.6 in, margins of `arena_svg`)
_AXES_W_IN, _AXES_H_IN = 10 * (0.82 - 0.1), 4.6 - 0.6 - 0.45
#: a 7 pt label's character width and line height, in inches (DejaVu Sans, roughly)
_CHAR_IN, _LINE_IN = 0.07, 0.12


def _fit(text: str, width_in: float, height_in: float) -> str:
    """`text` cut to fit a box of that size ("" when not even a few characters fit): labels never
    spill over their neighbours."""
    room = int(width_in / _CHAR_IN) - 1
    if height_in < _LINE_IN or room < 3:
        return ""
    return text if len(text) <= room else text[: room - 1] + "\u2026"


def hbar_svg(salt: str, labels: Sequence[str], series: Sequence[tuple[str, Sequence[float]]], title: str) -> str:
    """One horizontal bar chart per series, side by side and sharing the rows (`labels`, top to
    bottom): e.g. per-layer count and MACs per count."""
    import matplotlib

    with matplotlib.rc_context(_RC):
        n = max(1, len(labels))
        rows = [plain(s, 60) for s in labels]
        fig = _figure(10, 1.2 + 0.24 * n, left=_label_margin(rows, 10))
        axes = fig.subplots(1, len(series), sharey=True, squeeze=False)[0]
        ys = list(range(n))
        for k, (ax, (name, values)) in enumerate(zip(axes, series)):
            ax.barh(ys, list(values), color=BAR_COLOR if k == 0 else SECOND_COLOR, height=0.7, label=name)
            ax.set_xlabel(name)
            ax.grid(axis="x", linewidth=0.3)
        axes[0].set_yticks(ys, rows)
        axes[0].set_ylim(n - 0.5, -0.5)
        fig.suptitle(title)
        return _svg(fig, salt)


def budget_svg(salt: str, rows: Sequence[tuple[str, int, int]], title: str) -> str:
    """Used bytes against the budget, one bar per region (name, used, available), with the share."""
    import matplotlib

    with matplotlib.rc_context(_RC):
        fig = _figure(8, 1.2 + 0.45 * max(1, len(rows)), left=_label_margin([r[0] for r in rows], 8))
        ax = fig.subplots()
        ys = list(range(len(rows)))
        ax.barh(ys, [100.0] * len(rows), color="#e8e8e8", edgecolor="#999999", height=0.6)
        shares = [100.0 * used / size if size else 0.0 for _, used, size in rows]
        ax.barh(ys, [min(s, 100.0) for s in shares], color=BAR_COLOR, height=0.6)
        for y, (_name, used, size), s in zip(ys, rows, shares):
            ax.text(101, y, f"{used:,} of {size:,} B ({s:.1f}%)", va="center", fontsize=8)
        ax.set_yticks(ys, [r[0] for r in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(0, 175)
        ax.set_xticks([0, 25, 50, 75, 100], ["0%", "25%", "50%", "75%", "100%"])
        ax.set_xlabel("share of the board's memory (blue: used, grey: available)")
        ax.set_title(title, y=1.02)
        return _svg(fig, salt)


def inline(svg: str) -> str:
    """An SVG document as an element for an HTML page (no XML declaration or DOCTYPE)."""
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg
