"""Timing on an OpenCL device: per-layer profiles of a compiled folder (`tinyc profile`) and the
tuner's measurement of candidate kernels, both from event profiling counters.

Event times are the device's own start/end stamps of each kernel, so they exclude Python and
driver overhead between launches; a median over repeats absorbs the noise of a shared machine.
Kept apart from the runner (tinyc.targets.opencl), which only loads and runs a folder.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np


def write_arena_inputs(model: Any, feeds: Mapping[str, np.ndarray]) -> None:
    """Each model input's bytes at its arena offset (values already in the input's dtype)."""
    import pyopencl as cl

    for spec, place in zip(model.inputs, model.manifest["opencl"]["inputs"]):
        arr = np.ascontiguousarray(np.asarray(feeds[spec["name"]], dtype=spec["dtype"]))
        if arr.nbytes:
            cl.enqueue_copy(model.queue, model.arena, arr, dst_offset=int(place["offset"]), is_blocking=True)


def read_arena(model: Any, offset: int, nbytes: int, buffer: str = "arena") -> bytes:
    import pyopencl as cl

    out = np.empty(max(0, nbytes), dtype=np.uint8)
    if nbytes:
        cl.enqueue_copy(
            model.queue,
            out,
            model.weights if buffer == "weights" else model.arena,
            src_offset=int(offset),
            is_blocking=True,
        )
    return out.tobytes()


def time_kernels(model: Any, positions: Sequence[int], warmup: int, repeat: int) -> list[float]:
    """Device nanoseconds of running the kernels at `positions` (in order) once, `repeat` times
    after `warmup` untimed runs: per run, first kernel's start to last kernel's end."""
    times: list[float] = []
    for r in range(warmup + repeat):
        events = [model.launch(p) for p in positions]
        model.queue.finish()
        if r >= warmup and events:
            times.append(float(events[-1].profile.end - events[0].profile.start))
    return times


def profile_opencl(
    out_dir: str | Path, feeds: Mapping[str, np.ndarray] | None, device: str | None = None, repeat: int = 10
) -> dict[str, Any]:
    """Per-kernel device time (median of `repeat` inferences after one warm-up), MACs from
    report.json, MACs per ns and share; plus the whole inference's median (first kernel's start
    to last kernel's end, launch gaps included) — the same shape as a board's profile."""
    from tinyc.device.runner import layer_macs
    from tinyc.targets.opencl import OpenCLModel

    out = Path(out_dir)
    model = OpenCLModel(out, device=device, profile=True)
    if feeds is None:
        feeds = {s["name"]: np.zeros(s["shape"], s["dtype"]) for s in model.inputs}
    macs_by_kernel = layer_macs(out)
    per_kernel: list[list[float]] = [[] for _ in model.kernels]
    whole: list[float] = []
    model(feeds)  # warm-up: first launches pay for the driver's lazy setup
    for _ in range(max(1, repeat)):
        model(feeds)
        times = model.last_times_ns
        for i, ns in enumerate(times):
            per_kernel[i].append(float(ns))
        whole.append(float(model.last_span_ns))
    med = [statistics.median(t) if t else 0.0 for t in per_kernel]
    total = sum(med)
    layers = []
    seen: set[int] = set()
    for entry, t in zip(model.manifest["opencl"]["kernels"], med):
        code = int(entry["index"])  # the code-layer index (report.json's "kernel", as a board's profile)
        macs = 0 if code in seen else macs_by_kernel.get(code, 0)  # a layer's MACs once, on its first kernel
        seen.add(code)
        layers.append(
            {
                "index": code,
                "name": entry["name"],
                "op": entry["op"],
                "ns": round(t, 1),
                "macs": macs,
                "macs_per_n": macs / t if t else 0.0,
                "share": t / total if total else 0.0,
                "global_size": int(entry["global_size"]),
                "local_size": int(entry.get("local_size", 0)),
            }
        )
    total_macs = sum(macs_by_kernel.values())
    run = statistics.median(whole)
    name = model.device.name.strip()
    return {
        "board": f"opencl:{name}",
        "model": model.manifest["model"],
        "units": "ns",
        "units_note": f"OpenCL event profiling on {name}; median of {max(1, repeat)} inferences; "
        "RUN spans the first kernel's start to the last one's end",
        "layers": layers,
        "layers_total": total,
        "run_total": run,
        "macs": total_macs,
        "macs_per_n": total_macs / run if run else 0.0,
        "repeat": max(1, repeat),
    }


def device_name(spec: str | None) -> str:
    """The name of the device `spec` selects (as the tuning log keys it: "opencl:<name>")."""
    from tinyc.targets.opencl import select_device

    return str(select_device(spec).name.strip())
