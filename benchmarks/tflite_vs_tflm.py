#!/usr/bin/env python3
"""The MLPerf Tiny int8 .tflite files through tinyc beside TFLite Micro + CMSIS-NN on the same files.

For every model x board (mps2-an386 Cortex-M4, mps3-an547 Cortex-M55): compile the original
``tflm_int8.tflite`` with tinyc's default schedules, build, run the first test input (quantized with
the model's input grid) on the emulated board through the serial harness, and check the output
against TFLite Micro's own interpreter (the tflite-micro package) bit for bit; then tune
(``--trials`` measured candidates on the board), compile with the log and measure again.

Counts are QEMU instruction counts (``-icount shift=7,sleep=off``), deterministic, not cycles — the
counting of the TFLite Micro + CMSIS-NN figures in ../shared/NOTES.md, printed beside ours (ratio
tinyc / TFLM: below 1 is better). Flash: whole firmware (model, weights, runtime, harness, startup)
against the whole TFLite Micro firmware (NOTES gives it for the M4 only).

    python benchmarks/tflite_vs_tflm.py [--models mlperf_kws_dscnn] [--boards mps2-an386] [--trials 60]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
MLPERF_DIR = ROOT.parent / "shared" / "models" / "mlperf_tiny"
MODELS = ("mlperf_kws_dscnn", "mlperf_vww_mobilenetv1_025", "mlperf_ic_resnet8", "mlperf_ad_fc_autoencoder")
BOARDS = ("mps2-an386", "mps3-an547")
OUT = HERE / "results" / "tflite_vs_tflm.json"

#: TFLite Micro + CMSIS-NN, same QEMU counting (../shared/NOTES.md): (instructions, arena bytes,
#: whole-firmware flash bytes or None)
TFLM = {
    "mps2-an386": {
        "mlperf_kws_dscnn": (7.85e6, 22.8e3, 167e3),
        "mlperf_vww_mobilenetv1_025": (24.7e6, 100.7e3, 447e3),
        "mlperf_ic_resnet8": (29.9e6, 55.0e3, 211e3),
        "mlperf_ad_fc_autoencoder": (0.58e6, 2.6e3, 330e3),
    },
    "mps3-an547": {
        "mlperf_kws_dscnn": (1.79e6, 27.3e3, None),
        "mlperf_vww_mobilenetv1_025": (6.44e6, 100.8e3, None),
        "mlperf_ic_resnet8": (4.81e6, 55.0e3, None),
        "mlperf_ad_fc_autoencoder": (0.150e6, 9.3e3, None),
    },
}


def first_input(path: Path, name: str) -> tuple[str, np.ndarray]:
    import tinyc

    graph = tinyc.load(str(path))
    t = graph.tensor(graph.inputs[0])
    s, zp = float(np.asarray(t.quant.scale).reshape(-1)[0]), int(np.asarray(t.quant.zero_point).reshape(-1)[0])
    x = np.load(MLPERF_DIR / name / "test.npz")["x"][:1]
    return graph.inputs[0], np.clip(np.round(x / s) + zp, -128, 127).astype(np.int8).reshape(t.shape)


def tflm_output(path: Path, q: np.ndarray) -> np.ndarray:
    from tflite_micro.python.tflite_micro import runtime

    interp = runtime.Interpreter.from_bytes(path.read_bytes())
    interp.set_input(q, 0)
    interp.invoke()
    return np.array(interp.get_output(0), copy=True)


def measure(name: str, board: str, work: Path, tuning_log: Path | None) -> dict:
    import tinyc
    from tinyc.device.runner import run_on_device

    path = MLPERF_DIR / name / "tflm_int8.tflite"
    inp, q = first_input(path, name)
    out = work / f"{name}_{board}{'_tuned' if tuning_log else ''}"
    res = tinyc.compile(str(path), out, board=board, build=True, tuning_log=tuning_log)
    dev = run_on_device(out, {inp: q[None]}, progress=False)
    got = np.asarray(next(iter(dev.outputs.values())))
    ref = tflm_output(path, q)
    r = res.report
    row = {
        "model": name,
        "board": board,
        "schedule": "tuned" if tuning_log else "default",
        "instructions": round(dev.per_inference),
        "macs": r["macs"],
        "arena_bytes": r["arena_bytes"],
        "flash_bytes": r["flash_bytes"],
        "bit_exact_vs_tflm": bool(np.array_equal(got.reshape(ref.shape), ref)),
    }
    ti, ta, tf = TFLM[board][name]
    row.update(tflm_instructions=ti, tflm_arena_bytes=ta, tflm_flash_bytes=tf)
    row["instructions_ratio"] = row["instructions"] / ti
    row["arena_ratio"] = row["arena_bytes"] / ta
    row["flash_ratio"] = row["flash_bytes"] / tf if tf else None
    return row


def table(rows: list[dict]) -> str:
    head = (
        f"{'model':<28} {'board':<11} {'sched':<7} {'instr':>11} {'TFLM instr':>11} {'ratio':>6} "
        f"{'arena':>8} {'TFLM':>8} {'ratio':>6} {'flash':>8} {'TFLM':>8} {'ratio':>6} {'exact':>5}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        tf = f"{r['tflm_flash_bytes']:>8,.0f}" if r["tflm_flash_bytes"] else f"{'-':>8}"
        fr = f"{r['flash_ratio']:>6.2f}" if r["flash_ratio"] else f"{'-':>6}"
        lines.append(
            f"{r['model']:<28} {r['board']:<11} {r['schedule']:<7} {r['instructions']:>11,} "
            f"{r['tflm_instructions']:>11,.0f} {r['instructions_ratio']:>6.2f} {r['arena_bytes']:>8,} "
            f"{r['tflm_arena_bytes']:>8,.0f} {r['arena_ratio']:>6.2f} {r['flash_bytes']:>8,} {tf} {fr} "
            f"{'yes' if r['bit_exact_vs_tflm'] else 'NO':>5}"
        )
    lines.append(
        "instr: QEMU icount instructions per inference (not cycles); TFLM = TFLite Micro + CMSIS-NN on the same "
        ".tflite (../shared/NOTES.md); ratio = tinyc / TFLM; exact = output == TFLite Micro's interpreter"
    )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--boards", nargs="+", default=list(BOARDS), choices=BOARDS)
    ap.add_argument("--trials", type=int, default=60, help="tuning trials per model and board (0: default only)")
    ap.add_argument("--work", default=str(HERE / "results" / "build_tflite"))
    ap.add_argument("--json", default=str(OUT))
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    from tqdm import tqdm

    from tinyc.tune.tuner import tune

    rows = []
    t0 = time.perf_counter()
    for name in args.models:
        for board in tqdm(args.boards, desc=name, leave=False, disable=not sys.stderr.isatty()):
            rows.append(measure(name, board, work, None))
            if args.trials:
                log = work / f"{name}_{board}.jsonl"
                log.unlink(missing_ok=True)
                path = MLPERF_DIR / name / "tflm_int8.tflite"
                tune(str(path), board=board, trials=args.trials, log=log, work_dir=work / "tune", progress=False)
                rows.append(measure(name, board, work, log))
    print(table(rows))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"trials": args.trials, "rows": rows, "seconds": time.perf_counter() - t0}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0 if all(r["bit_exact_vs_tflm"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
