"""Features of one candidate schedule on one task and board, for the learned cost model.

The model must rank candidates of layers and boards it has never measured (records of other
models and boards prime it), so besides the raw knobs it sees what makes kernels fast or slow
independent of a particular layer: problem size in log scale, loop trip counts, tail tiles,
accumulators per register tile and how often operands are re-read. Everything is generic over
knob names, so a new op or knob still yields usable features without touching this module.
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Mapping

#: ISA extensions that get a 0/1 flag on every candidate (others get one only when present).
KNOWN_ISA = ("dsp", "mve")


def _log2(value: float) -> float:
    """log2(1 + |v|): sizes span orders of magnitude; the +1 keeps zero finite."""
    return math.log2(1.0 + abs(float(value)))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _ceil_div(a: float, b: float) -> int:
    return math.ceil(a / b) if b > 0 else 0


def _conv_loops(dims: Mapping[str, int], knobs: Mapping[str, Any], task: Mapping[str, Any]) -> dict[str, float]:
    """Tile loop shape of a conv kernel: channel tiles x pixel tiles, tails, operand re-reads."""
    g = int(dims.get("G", 1) or 1)
    oc = int(dims.get("OC", 0))
    icg = int(dims.get("ICG", 0))
    depthwise = g > 1 and icg == 1
    # the channel loop runs over one group's output channels, or all of them for depthwise
    ch = oc if depthwise else int(dims.get("OCG", oc))
    oc_tile = float(knobs["oc_tile"])
    oh, ow, n = int(dims.get("OH", 1)), int(dims.get("OW", 1)), int(dims.get("N", 1))
    pixels = n * oh * ow
    f: dict[str, float] = {}
    oc_trips = _ceil_div(ch, oc_tile)
    if _is_number(knobs.get("px_tile")):
        px_tile = float(knobs["px_tile"])
        px_trips = _ceil_div(pixels, px_tile)
        px_tail = pixels % px_tile != 0
    elif _is_number(knobs.get("ow_tile")):  # float kernels tile along one output row
        px_tile = float(knobs["ow_tile"])
        px_trips = n * oh * _ceil_div(ow, px_tile)
        px_tail = ow % px_tile != 0
    else:
        px_tile, px_trips, px_tail = 1.0, pixels, False
    groups = 1 if depthwise else g
    f["loop_oc_trips"] = _log2(oc_trips)
    f["loop_px_trips"] = _log2(px_trips)
    f["loop_tiles"] = _log2(groups * oc_trips * px_trips)
    f["loop_oc_tail"] = float(ch % oc_tile != 0) if oc_tile > 0 else 0.0
    f["loop_px_tail"] = float(px_tail)
    f["loop_accumulators"] = oc_tile * px_tile
    macs = float(task.get("macs", 0))
    tiles = groups * oc_trips * px_trips
    f["loop_macs_per_tile"] = _log2(macs / tiles) if tiles else 0.0
    # operand traffic: the inner tile loop re-reads the operand the outer loop does not hold
    if knobs.get("loop_order") == "channels_outer":
        reread = float(task.get("in_bytes", 0)) * oc_trips
    else:
        reread = float(task.get("weight_bytes", 0)) * px_trips
    f["loop_reread_bytes"] = _log2(reread)
    return f


def _matmul_loops(dims: Mapping[str, int], knobs: Mapping[str, Any], task: Mapping[str, Any]) -> dict[str, float]:
    """Tile loop shape of a matmul kernel: column tiles x row tiles, tails, accumulators."""
    m, n = int(dims.get("M", 1)), int(dims.get("N", 1))
    n_tile = float(knobs.get("n_tile", 1)) if _is_number(knobs.get("n_tile")) else 1.0
    m_tile = float(knobs.get("m_tile", 1)) if _is_number(knobs.get("m_tile")) else 1.0
    n_trips, m_trips = _ceil_div(n, n_tile), _ceil_div(m, m_tile)
    tiles = n_trips * m_trips
    macs = float(task.get("macs", 0))
    return {
        "loop_n_trips": _log2(n_trips),
        "loop_m_trips": _log2(m_trips),
        "loop_tiles": _log2(tiles),
        "loop_n_tail": float(n_tile > 0 and n % n_tile != 0),
        "loop_m_tail": float(m_tile > 0 and m % m_tile != 0),
        "loop_accumulators": n_tile * m_tile,
        "loop_macs_per_tile": _log2(macs / tiles) if tiles else 0.0,
        # each row tile re-reads the whole weight matrix
        "loop_reread_bytes": _log2(float(task.get("weight_bytes", 0)) * m_trips),
    }


def candidate_features(task: Mapping[str, Any], knobs: Mapping[str, Any], board: Mapping[str, Any]) -> dict[str, float]:
    """A flat, deterministic (sorted keys) name -> number map describing one candidate.

    task: "op", "macs", "dims", "in_bytes", "out_bytes", "weight_bytes" (optionally
    "scratch_bytes"); knobs: the schedule, where keys starting with "_" are derived numbers
    (e.g. "_scratch_bytes") rather than knobs; board: "name", "core", "isa", "clock_hz".
    """
    f: dict[str, float] = {}
    f[f"op={task.get('op', '?')}"] = 1.0
    macs = float(task.get("macs", 0) or 0)
    f["log2_macs"] = _log2(macs)
    moved = 0.0
    for name in ("in_bytes", "out_bytes", "weight_bytes", "scratch_bytes"):
        if _is_number(task.get(name)):
            f[f"log2_{name}"] = _log2(task[name])
            moved += float(task[name]) if name != "scratch_bytes" else 0.0
    f["log2_macs_per_byte"] = math.log2((macs + 1.0) / (moved + 1.0))
    dims = task.get("dims") or {}
    for name, value in dims.items():
        if _is_number(value):
            f[f"dim_{name}"] = _log2(value)

    for name, value in knobs.items():
        name = str(name)
        if name.startswith("_"):  # derived number riding along with the knobs
            if _is_number(value):
                f[f"log2_{name[1:]}"] = _log2(value)
            continue
        if isinstance(value, bool):
            f[f"knob_{name}"] = float(value)
        elif _is_number(value):
            f[f"knob_{name}"] = float(value)
            f[f"log2_knob_{name}"] = _log2(value)
        else:
            f[f"{name}={value}"] = 1.0

    if _is_number(knobs.get("oc_tile")) and "OC" in dims:
        f.update(_conv_loops(dims, knobs, task))
    elif (_is_number(knobs.get("n_tile")) or _is_number(knobs.get("m_tile"))) and "N" in dims and "M" in dims:
        f.update(_matmul_loops(dims, knobs, task))

    f[f"core={board.get('core', '?')}"] = 1.0
    isa = {str(x) for x in (board.get("isa") or ())}
    for ext in sorted(isa | set(KNOWN_ISA)):
        f[f"isa_{ext}"] = float(ext in isa)
    if _is_number(board.get("clock_hz")):
        f["log2_clock_hz"] = _log2(board["clock_hz"])
    return {k: float(f[k]) for k in sorted(f)}
