#!/usr/bin/env python3
"""The OpenCL target: default vs tuned OpenCL latency, tinyc's host C and onnxruntime, in one run.

Per model (the four MLPerf Tiny models in float and as their int8 QDQ versions, and the onnx
package's light_squeezenet and light_shufflenet), on one OpenCL device (`--device`, default the
first GPU else the first device — on a machine without a GPU that is PoCL on the CPU):

1. OpenCL default: ``tinyc.compile(model, target="opencl")``; latency = median wall time of one
   inference from Python (inputs written, every kernel enqueued, outputs read back, queue
   finished) and the device time (first kernel's start to last kernel's end, event profiling).
   Default and tuned are timed in alternating rounds, so machine noise hits both alike.
2. OpenCL tuned: ``tinyc.tune(model, target="opencl", trials=--trials)`` into
   ``results/opencl_logs/<model>.jsonl`` (appended; a rerun resumes), then compiled with the log.
3. Host C: ``tinyc.compile(model, target="host")`` (default flags, one thread), called through
   ctypes, median wall time.
4. onnxruntime: default session options (all graph optimisations, its default thread pool),
   median wall time of ``session.run``.

Every engine's output is compared with onnxruntime's (max |diff|; int8 models in ORT's own QDQ
arithmetic, so a difference of one quantization step can be rounding, not a bug). Ratios are
against the OpenCL default in the same run. Run on a GPU machine, the script is unchanged.

    python benchmarks/opencl.py [--models light_squeezenet mlperf_kws_dscnn_int8] [--trials 32] [--device 0:0]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
from host_vs_onnxruntime import LIGHT_MODELS, MLPERF_DIR, MLPERF_MODELS, model_inputs, model_path  # noqa: E402

MODELS = MLPERF_MODELS + tuple(f"{m}_int8" for m in MLPERF_MODELS) + LIGHT_MODELS
OUT = HERE / "results" / "opencl.json"
LOGS = HERE / "results" / "opencl_logs"
WORK = HERE / "results" / "opencl_build"


def source(name: str) -> tuple[Path, str]:
    """(ONNX file, the name its inputs are drawn under)."""
    if name.endswith("_int8"):
        base = name[:-5]
        return MLPERF_DIR / base / "model_int8_qdq.onnx", base
    return model_path(name), name


def timed(fn: Callable[[], Any], seconds: float, min_runs: int = 5) -> list[float]:
    """Wall seconds of each call of `fn`, after one warm-up, for about `seconds` (at least min_runs)."""
    fn()
    runs: list[float] = []
    t_end = time.perf_counter() + seconds
    while len(runs) < min_runs or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
        if len(runs) >= 10_000:
            break
    return runs


def max_diff(got: dict[str, np.ndarray], want: list[np.ndarray], names: list[str]) -> float:
    worst = 0.0
    for name, ref in zip(names, want):
        a = np.asarray(got[name], dtype=np.float64).reshape(-1)
        worst = max(worst, float(np.max(np.abs(a - np.asarray(ref, dtype=np.float64).reshape(-1)))) if a.size else 0.0)
    return worst


def opencl_pair(outs: dict[str, Path], feeds: dict[str, np.ndarray], device: str | None, seconds: float,
                rounds: int = 5) -> dict[str, dict[str, Any]]:
    """Default and tuned folders timed in alternating rounds (each round about seconds / rounds
    per folder), so that a busy moment of the shared machine hits both alike; per folder the
    median wall time of an inference and the median device span (event profiling)."""
    from tinyc.targets.opencl import OpenCLModel
    models = {k: OpenCLModel(out, device=device, profile=True) for k, out in outs.items()}
    res: dict[str, dict[str, Any]] = {k: {"outputs": m(feeds), "wall": [], "span": [], "kernels": len(m.kernels)}
                                      for k, m in models.items()}
    for _ in range(rounds):
        for k, model in models.items():
            spans = res[k]["span"]

            def once(model: Any = model, spans: list[float] = spans) -> None:
                model(feeds)
                spans.append(model.last_span_ns / 1e3)

            res[k]["wall"] += timed(once, seconds / rounds, min_runs=3)
    for r in res.values():
        r["wall_us"] = statistics.median(r["wall"]) * 1e6
        r["device_us"] = statistics.median(r["span"])
        r["runs"] = len(r["wall"])
    return res


def bench(name: str, args: argparse.Namespace) -> dict[str, Any]:
    import onnxruntime as ort

    import tinyc
    from tinyc.targets import host
    from tinyc.targets.opencl_profile import device_name
    from tinyc.tune.tuner import tune
    path, data_name = source(name)
    feeds = model_inputs(data_name, model_path(data_name), seed=0)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ref = sess.run(None, feeds)
    ort_runs = timed(lambda: sess.run(None, feeds), args.seconds)
    row: dict[str, Any] = {"model": name, "device": device_name(args.device), "ort_us": statistics.median(ort_runs) * 1e6}

    work = WORK / name
    t0 = time.perf_counter()
    res = tinyc.compile(path, work / "cl_default", target="opencl")
    row["macs"] = res.report["macs"]
    row["compile_s"] = time.perf_counter() - t0

    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{name}.jsonl"
    t0 = time.perf_counter()
    tr = tune(path, target="opencl", device=args.device, trials=args.trials, log=log, batch_size=args.batch_size,
              work_dir=work / "tune", progress=sys.stderr.isatty())
    row.update(tune_s=time.perf_counter() - t0, trials=tr.trials, builds=tr.builds, failures=tr.failures,
               tasks=len(tr.tasks), tuned_layers_default_us=tr.default_total / 1e3,
               tuned_layers_tuned_us=tr.tuned_total / 1e3)
    tinyc.compile(path, work / "cl_tuned", target="opencl", tuning_log=log, device=args.device)
    pair = opencl_pair({"default": work / "cl_default", "tuned": work / "cl_tuned"}, feeds, args.device,
                       2 * args.seconds)
    d, t = pair["default"], pair["tuned"]
    row.update(default_wall_us=d["wall_us"], default_device_us=d["device_us"], kernels=d["kernels"],
               default_diff=max_diff(d["outputs"], ref, names), tuned_wall_us=t["wall_us"],
               tuned_device_us=t["device_us"], tuned_diff=max_diff(t["outputs"], ref, names))

    tinyc.compile(path, work / "host", target="host", build=True)
    hm = host.HostModel(host.library_path(work / "host", host.load_manifest(work / "host")),
                        host.load_manifest(work / "host"))
    y = hm(feeds)
    host_runs = timed(lambda: hm(feeds), args.seconds)
    row.update(host_us=statistics.median(host_runs) * 1e6, host_diff=max_diff(y, ref, names))
    base = row["default_wall_us"]
    row.update(tuned_over_default=row["tuned_wall_us"] / base, host_over_default=row["host_us"] / base,
               ort_over_default=row["ort_us"] / base)
    return row


def fmt_us(v: float) -> str:
    return f"{v / 1e3:,.2f} ms" if v >= 1e4 else f"{v:,.0f} us"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| model | MACs | OpenCL default (device) | OpenCL tuned (device) | tuned / default | host C (1 thread) "
            "| host / default | onnxruntime | ORT / default | max diff vs ORT (default, tuned, host) | trials |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | error: {r['error'][:120]} |")
            continue
        lines.append(
            f"| {r['model']} | {r['macs']:,} | {fmt_us(r['default_wall_us'])} ({fmt_us(r['default_device_us'])}) "
            f"| {fmt_us(r['tuned_wall_us'])} ({fmt_us(r['tuned_device_us'])}) | {r['tuned_over_default']:.2f} "
            f"| {fmt_us(r['host_us'])} | {r['host_over_default']:.2f} | {fmt_us(r['ort_us'])} "
            f"| {r['ort_over_default']:.2f} | {r['default_diff']:.2g}, {r['tuned_diff']:.2g}, {r['host_diff']:.2g} "
            f"| {r['trials']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--trials", type=int, default=32, help="new candidates per model (default 32)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", help="OpenCL PLATFORM:DEVICE (default: the first GPU, else the first device)")
    p.add_argument("--seconds", type=float, default=1.0, help="timing time per engine and model (default 1 s)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    from tinyc.targets.opencl import list_devices
    dev = next(d for d in list_devices() if (d.id == args.device if args.device else d.default))
    print(f"OpenCL device {dev.id}: {dev.name} ({dev.kind}, {dev.compute_units} compute units, {dev.platform})")
    rows = []
    for name in args.models:
        print(f"--- {name}", flush=True)
        try:
            rows.append(bench(name, args))
        except Exception as exc:  # noqa: BLE001  (one model's failure is reported, the others still run)
            rows.append({"model": name, "error": f"{type(exc).__name__}: {exc}"})
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": {"id": dev.id, "name": dev.name, "kind": dev.kind, "compute_units": dev.compute_units,
                       "platform": dev.platform, "version": dev.version},
            "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
            "trials": args.trials, "date": time.strftime("%Y-%m-%d")}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
