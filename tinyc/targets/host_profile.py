"""Per-layer time of a host folder (`tinyc profile`): the generated `<prefix>_run_layer(i)`, called
in-process through ctypes, layer by layer in inference order on real data.

Each repeat sets the inputs (`<prefix>_set_inputs`) and runs layers 0 .. NUM_LAYERS-1, each timed
alone with the monotonic clock; a layer's time is the median over repeats, less the least cost
of an empty call through the same path (`_run_layer(-1)`, which returns at once), so a tiny layer
is not mostly ctypes. The whole inference (`<prefix>_run` on prepared buffers, so its input and
output copies count) is timed the same way. The numbering is
the code-layer index, as a board's profile, report.md and the header's NUM_LAYERS use.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tinyc.errors import RunError


def profile_host(
    out_dir: str | os.PathLike, feeds: Mapping[str, np.ndarray] | None = None, repeat: int = 10
) -> dict[str, Any]:
    """Median nanoseconds per layer and per inference, MACs (report.json), MACs per ns and share:
    the shape of a board's profile (tinyc.device.runner.profile_on_device)."""
    from tinyc.codegen.manifest import load_manifest
    from tinyc.device.runner import layer_macs
    from tinyc.quantize.feeds import to_model_input
    from tinyc.targets.host import HostModel, build, is_sanitized

    out = Path(out_dir)
    manifest = load_manifest(out)
    lib = build(out)
    if is_sanitized(lib):
        raise RunError(
            f"{out} is a sanitizer build: per-layer timing loads the library in-process, which a "
            "sanitizer runtime does not allow (compile without -fsanitize to profile)"
        )
    if feeds is None:
        feeds = {s["name"]: np.zeros(s["shape"], s["dtype"]) for s in manifest["inputs"]}
    model = HostModel(lib, manifest)
    model(feeds)  # warm-up (page faults, caches), and a failing model stops here
    prefix = manifest["prefix"]
    run_layer = getattr(model.lib, f"{prefix}_run_layer")
    run_layer.argtypes = [ctypes.c_int32]
    run_layer.restype = ctypes.c_int
    name_of = getattr(model.lib, f"{prefix}_layer_name")
    name_of.argtypes = [ctypes.c_int32]
    name_of.restype = ctypes.c_char_p
    set_inputs = getattr(model.lib, f"{prefix}_set_inputs")
    keep = [np.ascontiguousarray(to_model_input(s, feeds[s["name"]])) for s in manifest["inputs"]]
    keep += [np.empty(s["shape"], dtype=s["dtype"]) for s in manifest["outputs"]]
    args = [a.ctypes.data_as(ctypes.c_void_p) for a in keep]
    in_args = args[: len(manifest["inputs"])]
    names: list[str] = []
    while (raw_name := name_of(len(names))) is not None:
        names.append(raw_name.decode("utf-8", "replace"))
    reps = max(1, int(repeat))
    clock = time.perf_counter_ns
    empty: list[int] = []
    per_layer: list[list[int]] = [[] for _ in names]
    whole: list[int] = []
    for _ in range(reps):
        for _k in range(8):
            t0 = clock()
            run_layer(-1)
            empty.append(clock() - t0)
        set_inputs(*in_args)
        for i in range(len(names)):
            t0 = clock()
            status = run_layer(i)
            per_layer[i].append(clock() - t0)
            if status != 0:
                raise RunError(f"{prefix}_run_layer({i}) returned status {status}")
        t0 = clock()
        status = model.fn(*args)  # `<prefix>_run` on prepared buffers: no Python conversion timed
        whole.append(clock() - t0)
        if status != 0:
            raise RunError(f"{prefix}_run returned status {status}")
    overhead = float(min(empty))  # the least any call costs: a layer's median is always above it
    med = [max(0.0, float(statistics.median(t)) - overhead) for t in per_layer]
    total = sum(med)
    macs = layer_macs(out)
    layers = [
        {
            "index": i,
            "name": name,
            "ns": round(t, 1),
            "macs": macs.get(i, 0),
            "macs_per_n": macs.get(i, 0) / t if t else 0.0,
            "share": t / total if total else 0.0,
        }
        for i, (name, t) in enumerate(zip(names, med))
    ]
    total_macs = sum(macs.values())
    run = max(0.0, float(statistics.median(whole)) - overhead)
    return {
        "board": "host",
        "model": manifest["model"],
        "units": "ns",
        "units_note": f"wall-clock ns on this machine, median of {reps} runs; layers less the "
        f"{overhead:.0f} ns of the fastest empty ctypes call; RUN is one `_run` call (input and output copies included), less the same",
        "layers": layers,
        "layers_total": total,
        "run_total": run,
        "macs": total_macs,
        "macs_per_n": total_macs / run if run else 0.0,
        "repeat": reps,
        "call_overhead_ns": overhead,
    }
