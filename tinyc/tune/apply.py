"""Using a tuning log at compile time: each layer takes the fastest exact schedule measured for
its task on this board (or host), the default where the log has none."""

from __future__ import annotations

import os
from typing import Any

from tinyc.ir import Graph
from tinyc.ops import get_op
from tinyc.schedule import knob_allowed
from tinyc.targets.base import Target


def schedules_from_log(graph: Graph, log_path: str | os.PathLike, board: str, target: str) -> dict[str, dict[str, Any]]:
    """{node name: knobs} for every layer whose task has an "ok" record for `board` in the log.
    Records whose knobs this tinyc cannot apply (an older log, another ISA) are ignored."""
    from tinyc.errors import UsageError
    from tinyc.tune.log import TuningLog, check_log_path
    from tinyc.tune.tasks import drop_unoffered_records, task_key

    check_log_path(log_path)
    if not os.path.isfile(log_path):
        raise UsageError(f"tuning log {log_path} does not exist")
    log = TuningLog(log_path)
    chosen: dict[str, dict[str, Any]] = {}
    checked: set[str] = set()
    for node in graph.nodes:
        opdef = get_op(node.op)
        if opdef.alias:
            continue
        legal = opdef.knobs(node, graph)
        if not legal:
            continue
        key = task_key(node, graph)
        if key not in checked:  # records whose knobs this op does not offer are skipped, with a warning
            checked.add(key)
            drop_unoffered_records(log, board, key, node, graph, target)
        best = log.best(board, key)
        if best is None:
            continue
        knobs = {k: v for k, v in best["knobs"].items() if not k.startswith("_")}
        if all(knob_allowed(opdef, k, v, target) for k, v in knobs.items()):
            chosen[node.name] = knobs
    return chosen


def log_board(target: Target, log_path: str | os.PathLike, device: str | None = None) -> str:
    """Whose records a compile for `target` (a tinyc.targets Target) takes: the target's own
    (a board's name, "host"), or for a target that runs on a chosen OpenCL device that device's."""
    return opencl_log_board(log_path, device) if target.selects_device else str(target.name)


def opencl_log_board(log_path: str | os.PathLike, device: str | None = None) -> str:
    """Which device's records an OpenCL compile takes: the log keys them "opencl:<device name>".
    `device` ("platform:device") names it; without it, the one OpenCL device the log has ok
    records for, and with several the default device's (the first GPU, else the first device)."""
    from tinyc.errors import UsageError
    from tinyc.tune.log import TuningLog

    if device is not None:
        from tinyc.targets.opencl_profile import device_name

        return f"opencl:{device_name(device)}"
    if not os.path.isfile(log_path):
        raise UsageError(f"tuning log {log_path} does not exist")
    boards = sorted(
        {
            r["board"]
            for r in TuningLog(log_path).records()
            if str(r.get("board", "")).startswith("opencl:") and r.get("status") == "ok"
        }
    )
    if len(boards) <= 1:
        return boards[0] if boards else "opencl:"
    from tinyc.targets.opencl_profile import device_name

    mine = f"opencl:{device_name(None)}"
    if mine in boards:
        return mine
    raise UsageError(
        f"tuning log {log_path} holds records for {len(boards)} OpenCL devices "
        f"({', '.join(b[7:] for b in boards)}): choose one with --device"
    )
