#!/usr/bin/env python3
"""int8 models on the emulated Cortex-M boards: instructions, MACs per instruction, arena, flash, stack.

For every model x board: compile for the board (MLPerf Tiny: the shipped ``model_int8_qdq.onnx``,
its own scales — the same int8 models TFLite Micro runs, with int8 input and output as TFLite
Micro's are (``io_dtype="int8"``: the float input is quantized on the host); digits: tinyc's own
PTQ on 300 training images), build with arm-none-eabi-gcc, start the firmware in QEMU, send the first test input over
the serial harness, RUN once, and check the output equals the golden model bit for bit.

Counts are QEMU instruction counts (``-icount shift=7,sleep=off``: SysTick advances with executed
instructions, so they are deterministic), not cycles — the same counting as the TFLite Micro +
CMSIS-NN figures in ../shared/NOTES.md (Cortex-M4 mps2-an386 and Cortex-M55 mps3-an547), which this
prints as ratios (tinyc / TFLite Micro: below 1 is better) next to issue 19's goals (tuned <= 0.75x on
both boards; default schedules <= 0.9x on the M4, <= 1.0x on the M55). Their flash is the whole TFLite Micro firmware; ours is
the whole tinyc firmware (model, weights, runtime, harness, startup).

    python benchmarks/mcu_models.py [--models digits mlperf_kws_dscnn] [--boards mps2-an386 mps3-an547]
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
MLPERF_MODELS = ("mlperf_kws_dscnn", "mlperf_vww_mobilenetv1_025", "mlperf_ic_resnet8", "mlperf_ad_fc_autoencoder")
MODELS = ("digits",) + MLPERF_MODELS
BOARDS = ("mps2-an385", "mps2-an386", "mps2-an500", "mps3-an547")
OUT = HERE / "results" / "mcu_models.json"

#: TFLite Micro + CMSIS-NN on mps2-an386, same counting (../shared/NOTES.md): instructions, arena
#: bytes, whole-firmware flash bytes.
TFLM_M4 = {"mlperf_kws_dscnn": (7.85e6, 22.8e3, 167e3), "mlperf_vww_mobilenetv1_025": (24.7e6, 100.7e3, 447e3),
           "mlperf_ic_resnet8": (29.9e6, 55.0e3, 211e3), "mlperf_ad_fc_autoencoder": (0.58e6, 2.6e3, 330e3)}
#: TFLite Micro + CMSIS-NN (Helium kernels) on mps3-an547, same counting (../shared/NOTES.md):
#: instructions, arena bytes used (whole-firmware flash was not recorded there).
TFLM_M55 = {"mlperf_kws_dscnn": (1.79e6, 27.3e3), "mlperf_vww_mobilenetv1_025": (6.44e6, 100.8e3),
            "mlperf_ic_resnet8": (4.81e6, 55.0e3), "mlperf_ad_fc_autoencoder": (0.150e6, 9.3e3)}
#: the TFLite Micro reference per board
TFLM_BY_BOARD = {"mps2-an386": TFLM_M4, "mps3-an547": TFLM_M55}
#: issue 19's goals as ratios to TFLite Micro + CMSIS-NN: (default schedules, tuned)
GOALS = {"mps2-an386": (0.9, 0.75), "mps3-an547": (1.0, 0.75)}


def model_and_data(name: str, work: Path) -> tuple[Path, dict, dict]:
    """(ONNX path, compile options, one test input)."""
    if name == "digits":
        sys.path.insert(0, str(ROOT / "examples" / "digits"))
        from data import load_split
        x_train, _, x_test, _ = load_split()
        calib = work / "digits_calib.npz"
        np.savez(calib, input=x_train[:300])
        return ROOT / "examples" / "digits" / "digits_cnn.onnx", \
            {"quantize": "int8", "calib": calib, "io_dtype": "int8"}, {"input": x_test[:1]}
    with np.load(MLPERF_DIR / name / "test.npz") as data:
        x = data["x"][:1]
    return MLPERF_DIR / name / "model_int8_qdq.onnx", {"io_dtype": "int8"}, {"x": x}


def measure(name: str, board: str, work: Path, tuning_log: Path | None = None) -> dict:
    import tinyc
    import tinyc.reference
    import tinyc.targets.host
    from tinyc.device.runner import run_on_device
    from tinyc.quantize.io import to_model_input
    model, opts, feeds = model_and_data(name, work)
    out = work / f"{name}_{board}{'_tuned' if tuning_log else ''}"
    t0 = time.perf_counter()
    res = tinyc.compile(model, out, board=board, build=True, tuning_log=tuning_log, **opts)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    dev = run_on_device(out, feeds, progress=False)
    run_s = time.perf_counter() - t0
    graph = res.graph
    (key, x), = feeds.items()
    spec = tinyc.targets.host.load_manifest(out)["inputs"][0]
    x_model = to_model_input(spec, x.reshape(spec["shape"]))
    gold = tinyc.reference.run_graph(graph, {graph.inputs[0]: x_model})
    got = next(iter(dev.outputs.values()))
    want = np.asarray(next(iter(gold.values()))).reshape(np.shape(got))
    r = res.report
    instr = dev.per_inference
    row = {"model": name, "board": board, "schedule": "tuned" if tuning_log else "default",
           "instructions": round(instr), "macs": r["macs"],
           "macs_per_instruction": r["macs"] / instr if instr else 0.0, "arena_bytes": r["arena_bytes"],
           "flash_bytes": r["flash_bytes"], "ram_bytes": r["ram_bytes"], "stack_bytes": r["stack_bytes"],
           "weights_bytes": r["weights_bytes"], "bit_exact_vs_golden": bool(np.array_equal(got, want)),
           "build_s": round(build_s, 1), "device_s": round(run_s, 2)}
    if name in TFLM_M4:
        ti, ta, tf = TFLM_M4[name]
        row.update(tflm_m4_instructions=ti, tflm_arena_bytes=ta, tflm_flash_bytes=tf,
                   arena_ratio_vs_tflm=r["arena_bytes"] / ta, flash_ratio_vs_tflm=r["flash_bytes"] / tf)
    ref = TFLM_BY_BOARD.get(board, {}).get(name)
    if ref is not None:
        goal = GOALS[board][1 if tuning_log else 0]
        row.update(tflm_instructions=ref[0], instructions_ratio_vs_tflm_cmsis=instr / ref[0], goal_ratio=goal,
                   meets_goal=bool(instr / ref[0] <= goal))
        if board == "mps3-an547":
            row.update(tflm_arena_bytes=ref[1], arena_ratio_vs_tflm=r["arena_bytes"] / ref[1])
            row.pop("flash_ratio_vs_tflm", None)
    return row


def goal(row: dict) -> str:
    """'ok' / 'MISS' against the row's goal ratio, '-' where there is no TFLite Micro reference."""
    if "goal_ratio" not in row:
        return "-"
    return "ok" if row["meets_goal"] else "MISS"


def table(rows: list[dict]) -> str:
    head = (f"{'model':<28} {'board':<11} {'sched':<7} {'instr':>12} {'MAC/instr':>9} {'arena':>9} {'flash':>9} {'stack':>6} "
            f"{'exact':>5} {'instr/TFLM':>10} {'goal':>5} {'arena/TFLM':>10} {'flash/TFLM':>10}")
    lines = [head, "-" * len(head)]
    for r in rows:
        def ratio(k: str, r: dict = r) -> str:
            return f"{r[k]:.2f}" if k in r else "-"
        lines.append(f"{r['model']:<28} {r['board']:<11} {r.get('schedule', 'default'):<7} {r['instructions']:>12,} {r['macs_per_instruction']:>9.3f} "
                     f"{r['arena_bytes']:>9,} {r['flash_bytes']:>9,} {r['stack_bytes']:>6,} "
                     f"{'yes' if r['bit_exact_vs_golden'] else 'NO':>5} {ratio('instructions_ratio_vs_tflm_cmsis'):>10} "
                     f"{goal(r):>5} {ratio('arena_ratio_vs_tflm'):>10} {ratio('flash_ratio_vs_tflm'):>10}")
    lines.append("instructions: QEMU icount instruction counts (not cycles); TFLM = TFLite Micro + CMSIS-NN on the same "
                 "board (../shared/NOTES.md: mps2-an386 and mps3-an547), ratios tinyc / TFLM; goal: issue 19's "
                 "ratio for the row (met: 'ok', missed: 'MISS'); the M55 TFLM flash was not recorded")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--boards", nargs="+", default=list(BOARDS), choices=BOARDS)
    ap.add_argument("--work", default=str(HERE / "results" / "build_mcu"))
    ap.add_argument("--json", default=str(OUT))
    ap.add_argument("--tuning-logs", help="also compile with the logs <dir>/<model>_<board>_{model,random}.jsonl "
                                          "of benchmarks/tuning.py where they exist: the tuned rows")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    from tqdm import tqdm
    for name in args.models:
        for board in tqdm(args.boards, desc=name, leave=False):
            rows.append(measure(name, board, work))
            logs = [Path(args.tuning_logs) / f"{name}_{board}_{s}.jsonl" for s in ("model", "random")] \
                if args.tuning_logs else []
            logs = [p for p in logs if p.exists()]
            if logs:   # every measurement of both searches: compile takes the best per layer
                merged = work / f"{name}_{board}_tuning.jsonl"
                merged.write_text("".join(p.read_text() for p in logs))
                rows.append(measure(name, board, work, merged))
    print(table(rows))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"rows": rows, "tflm_m4": TFLM_M4, "tflm_m55": TFLM_M55, "goals": GOALS}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0 if all(r["bit_exact_vs_golden"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
