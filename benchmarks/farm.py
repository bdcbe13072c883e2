#!/usr/bin/env python3
"""The tuning farm's throughput: measurements per minute with 1, 2 and 4 emulated boards, on the
local executor (`tinyc tune --jobs N`) and on a Dask LocalCluster (`--cluster`), and the speed-up
over one board.

Every run is a fresh tuning job of the same model and board (random search, one seed, a fresh
log, fresh build folders): round 0's defaults plus `--trials` candidates, in batches of
`--batch-size`. Wall time is the `tune()` call (the cluster is started before it, not counted;
its workers' first imports and every build folder's first CMake configure are, for both
executors). Measurements per minute = records written / wall time. Also reported: the summed
build and QEMU time, which say where the time went — the builders (cross-compiling each batch)
or the boards.

On a machine with few cores the builds, not the boards, bound the rate: every emulated board is
a QEMU process and every build a compiler, all sharing the same cores. The cores are printed with
the table.

    python benchmarks/farm.py [--model digits] [--board mps2-an386] [--boards 1 2 4] [--trials 48] [--batch-size 8]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
from mcu_models import model_and_data  # noqa: E402

OUT = HERE / "results" / "farm.json"


def one_run(executor: str, boards: int, model: Path, opts: dict, board: str, trials: int, batch: int,
            work: Path) -> dict:
    """One tuning job on `boards` emulated boards: locally (`--jobs boards`) or on a LocalCluster
    of min(boards, 2) worker processes sharing the boards."""
    from tinyc.tune.tuner import tune
    log = work / f"{executor}{boards}.jsonl"
    common = dict(trials=trials, batch_size=batch, log=log, search="random", seed=0, progress=False, **opts)
    if executor == "local":
        t0 = time.perf_counter()
        res = tune(model, board, jobs=boards, work_dir=work / f"w{boards}", **common)
        wall = time.perf_counter() - t0
        workers = 1
    else:
        from distributed import LocalCluster
        workers = min(boards, 2)
        per = boards // workers
        with LocalCluster(n_workers=workers, threads_per_worker=per + 1, processes=True,
                          resources={f"board:{board}": per}, dashboard_address=":0",
                          silence_logs=logging.CRITICAL) as cluster:
            t0 = time.perf_counter()
            res = tune(model, board, cluster=cluster.scheduler_address, **common)
            wall = time.perf_counter() - t0
    records = sum(1 for line in log.read_text().splitlines() if line.strip())
    return {"load_1min": round(os.getloadavg()[0], 2), "executor": executor, "boards": boards, "workers": workers, "records": records, "trials": res.trials,
            "builds": res.builds, "wall_s": round(wall, 2), "per_minute": round(records * 60.0 / wall, 1),
            "build_s": round(res.build_s, 2), "measure_s": round(res.measure_s, 2),
            "failures": res.failures, "retried": res.retried}


def table(rows: list[dict], cores: int) -> str:
    head = (f"{'executor':<12} {'boards':>6} {'workers':>7} {'records':>7} {'builds':>6} {'wall s':>7} "
            f"{'meas/min':>8} {'speed-up':>8} {'vs local1':>9} {'build s':>8} {'QEMU s':>7} {'load':>5}")
    lines = [head, "-" * len(head)]
    base = {r["executor"]: r["per_minute"] for r in rows if r["boards"] == 1}
    for r in rows:
        speed = r["per_minute"] / base[r["executor"]] if base.get(r["executor"]) else float("nan")
        vs_local = r["per_minute"] / base["local"] if base.get("local") else float("nan")
        r["speedup"], r["vs_local_1"] = round(speed, 2), round(vs_local, 2)
        name = "local" if r["executor"] == "local" else "LocalCluster"
        lines.append(f"{name:<12} {r['boards']:>6} {r['workers']:>7} {r['records']:>7} {r['builds']:>6} "
                     f"{r['wall_s']:>7.1f} {r['per_minute']:>8.1f} {speed:>7.2f}x {vs_local:>8.2f}x "
                     f"{r['build_s']:>8.1f} {r['measure_s']:>7.1f} {r['load_1min']:>5.1f}")
    lines.append(f"this machine: {cores} cores. meas/min = records written per minute of tune(); speed-up: vs 1 board "
                 "of the same executor; vs local1: vs `--jobs 1`; build s / QEMU s: summed build and measurement "
                 "time (they overlap); load: the 1-minute load average after the run (other work on the machine "
                 "shows here).")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="digits")
    ap.add_argument("--board", default="mps2-an386")
    ap.add_argument("--boards", nargs="+", type=int, default=[1, 2, 4])
    ap.add_argument("--executors", nargs="+", choices=["local", "cluster"], default=["local", "cluster"])
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="tinyc-farm-bench-") as tmp:
        work = Path(tmp)
        model, opts, _ = model_and_data(args.model, work)
        for executor in args.executors:
            for n in args.boards:
                row = one_run(executor, n, model, opts, args.board, args.trials, args.batch_size, work / f"{executor}{n}")
                print(f"{executor} x{n}: {row['per_minute']} measurements/min ({row['wall_s']} s)", flush=True)
                rows.append(row)
    text = table(rows, cores)
    print(text)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"model": args.model, "board": args.board, "trials": args.trials,
                               "batch_size": args.batch_size, "cores": cores, "rows": rows}, indent=2) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
