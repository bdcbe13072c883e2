#!/usr/bin/env python3
"""The int8 kernel shapes of ../shared/NOTES.md ("Numbers to beat") on the emulated Cortex-M boards,
per product form (``mac``) and register block, beside the CMSIS-NN figures quoted there.

Each shape is a one-layer float ONNX model (random weights, fixed seed) quantized with tinyc's PTQ
on a few random calibration samples, compiled for the board with int8 input and output, built with
arm-none-eabi-gcc -O3 and run in QEMU. Counts are QEMU instruction counts (``-icount``: SysTick
advances with executed instructions, deterministic), not cycles — the same counting as the
CMSIS-NN figures. ``run`` is the harness RUN (set inputs + layers + get outputs); ``layer`` is the
conv / fully connected layer alone (``tinyc.profile``), which MACs/instruction use. Every
configuration's output is checked against the golden model bit for bit.

    python benchmarks/kernels.py [--shapes conv3x3 fc640] [--boards mps2-an386 mps3-an547] [--quick]

``measure(shape_name, board, schedule)`` is importable (a tuned column: pass the tuned knobs).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
OUT = HERE / "results" / "kernels.json"
WORK = HERE / "results" / "build_kernels"
BOARDS = ("mps2-an386", "mps3-an547")

#: name -> (kind, input shape NCHW / [1, K], output channels, conv attrs)
SHAPES: dict[str, tuple[str, tuple[int, ...], int, dict[str, Any]]] = {
    "conv3x3": ("conv", (1, 16, 32, 32), 16, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    "conv1x1": ("conv", (1, 32, 16, 16), 64, dict(kernel_shape=[1, 1])),
    "dw3x3": ("dwconv", (1, 64, 25, 5), 64, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=64)),
    "fc640": ("fc", (1, 640), 12, {}),
    "fc256": ("fc", (1, 256), 128, {}),
}
#: CMSIS-NN under QEMU icount, ../shared/NOTES.md: (MACs, M4 instructions, M55 instructions).
CMSIS = {"conv3x3": (2_359_296, 5.49e6, 0.91e6), "conv1x1": (524_288, 1.42e6, 0.32e6),
         "dw3x3": (72_000, 0.60e6, 0.17e6), "fc640": (7_680, 15.1e3, 3.9e3), "fc256": (32_768, 67.9e3, 17.1e3)}
#: The layer's name in the ONNX model (schedules are keyed by it).
LAYER = "layer"


def onnx_model(shape_name: str):
    """The float one-layer ONNX model of `shape_name` (weights / bias: seed 0)."""
    from onnx import TensorProto, helper, numpy_helper
    kind, xs, oc, attrs = SHAPES[shape_name]
    r = np.random.default_rng(0)
    if kind == "fc":
        k = xs[1]
        w = r.normal(0, 1 / np.sqrt(k), (k, oc)).astype(np.float32)
        node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], name=LAYER)
        ys = [1, oc]
    else:
        group = attrs.get("group", 1)
        kh, kw = attrs["kernel_shape"]
        fan = xs[1] // group * kh * kw
        w = r.normal(0, 1 / np.sqrt(fan), (oc, xs[1] // group, kh, kw)).astype(np.float32)
        node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name=LAYER, **attrs)
        ys = [1, oc, xs[2], xs[3]]
    b = r.normal(0, 0.1, oc).astype(np.float32)
    g = helper.make_graph([node], shape_name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ys)],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def calib_and_input(shape_name: str) -> tuple[np.ndarray, np.ndarray]:
    xs = SHAPES[shape_name][1]
    r = np.random.default_rng(1)
    return r.normal(0, 1, (8, *xs[1:])).astype(np.float32), r.normal(0, 1, xs).astype(np.float32)


def _tag(schedule: dict[str, Any] | None) -> str:
    if not schedule:
        return "default"
    return "_".join(f"{k}-{v}" for k, v in sorted(schedule.items()))


def measure(shape_name: str, board: str, schedule: dict[str, Any] | None = None,
            work: Path | None = None) -> dict[str, Any]:
    """Compile `shape_name` for `board` with `schedule` (knob overrides of the layer; None: the
    board's default schedule), run it in QEMU and return instructions of the whole RUN and of the
    layer alone, MACs/instruction (layer), the schedule used, bit-exactness vs the golden model,
    the CMSIS-NN figure and the ratio (tinyc layer / CMSIS-NN: below 1 is better)."""
    import tinyc
    work = Path(work or WORK)
    out = work / f"{shape_name}_{board}_{_tag(schedule)}"
    calib, x = calib_and_input(shape_name)
    work.mkdir(parents=True, exist_ok=True)
    cal = work / f"{shape_name}_calib.npz"
    np.savez(cal, x=calib)
    t0 = time.perf_counter()
    res = tinyc.compile(onnx_model(shape_name), out, board=board, build=True, quantize="int8", calib=cal,
                        io_dtype="int8", schedules={LAYER: schedule} if schedule else None)
    build_s = time.perf_counter() - t0
    v = tinyc.validate(out, {"x": x})
    exact = all(o["bit_exact_vs_golden"] for o in v["outputs"].values())
    run = tinyc.run_on_board(out, {"x": x})
    prof = tinyc.profile(out, {"x": x})
    units = prof["units"]
    main = max(prof["layers"], key=lambda lay: lay["macs"])
    layer_count = float(main[units])
    node = next(n for n in res.graph.nodes if n.op in ("QConv", "QMatMul"))
    used = json.loads((out / "report.json").read_text())
    sched = next((lay.get("schedule") for lay in used.get("layers", []) if lay.get("name") in (node.name, LAYER)
                  and lay.get("schedule")), None)
    macs, m4, m55 = CMSIS[shape_name]
    cmsis = m55 if board == "mps3-an547" else m4
    return {"shape": shape_name, "board": board, "requested": schedule or {}, "schedule": sched,
            "run_instructions": round(float(run.per_inference)), "layer_instructions": round(layer_count),
            "other_layers": [lay["name"] for lay in prof["layers"] if lay is not main],
            "macs": int(main["macs"]), "macs_per_instruction": main["macs"] / layer_count if layer_count else 0.0,
            "cmsis_nn_instructions": cmsis, "cmsis_nn_macs_per_instruction": macs / cmsis,
            "ratio_vs_cmsis_nn": layer_count / cmsis, "bit_exact_vs_golden": exact, "build_s": round(build_s, 1)}


def configs(shape_name: str, board: str, quick: bool = False) -> list[dict[str, Any] | None]:
    """The default schedule, then every exact mac form the board can run at its default block,
    then a small sweep of the SIMD form's oc_tile x px_tile."""
    kind = SHAPES[shape_name][0]
    simd = "mve" if board == "mps3-an547" else "dsp"
    if kind == "fc":
        out: list[dict[str, Any] | None] = [None, {"mac": "i16"}, {"mac": "i32"}, {"mac": simd}]
        if board == "mps3-an547":
            out.append({"mac": "dsp"})
        if not quick:
            out += [{"mac": simd, "n_tile": n} for n in (1, 2, 4, 8)]
        return out
    if kind == "dwconv":  # (no DSP depthwise micro-kernel)
        forms = ["i16x2", "i16"] + (["mve"] if board == "mps3-an547" else [])
    else:
        forms = ["i16x2", "i16", simd] + (["dsp"] if board == "mps3-an547" else [])
    variant = {"dwconv": "depthwise", "conv": "direct" if shape_name == "conv3x3" else "pointwise"}[kind]
    out = [None] + [{"mac": f, "variant": variant} for f in forms]
    if not quick:
        if kind == "conv":
            blocks = [(2, 1, False), (2, 2, False), (4, 1, False), (2, 2, True), (4, 2, True)] if simd == "dsp" \
                else [(2, 2, False), (4, 1, False), (4, 2, False), (8, 1, False), (8, 2, False)]
        else:
            blocks = [(4, 2, False), (8, 1, False), (8, 2, False), (16, 1, False)] if simd == "mve" else []
        out += [{"mac": simd, "variant": variant, "oc_tile": t, "px_tile": p, "wide_weights": w} for t, p, w in blocks]
    return out


def tuned(shape_name: str, board: str, trials: int, work: Path | None = None) -> dict[str, Any]:
    """Tune the layer with `trials` candidates (cost-model search, log under results/kernel_logs/,
    resumed when it exists), then `measure` the best schedule found: the tuned row."""
    from tinyc.tune.tuner import tune
    work = Path(work or WORK)
    work.mkdir(parents=True, exist_ok=True)
    calib, _ = calib_and_input(shape_name)
    cal = work / f"{shape_name}_calib.npz"
    np.savez(cal, x=calib)
    log = HERE / "results" / "kernel_logs" / f"{shape_name}_{board}.jsonl"
    res = tune(onnx_model(shape_name), board, trials=trials, log=log, quantize="int8", calib=cal, io_dtype="int8",
               batch_size=24, work_dir=work / f"tune_{shape_name}_{board}", progress=False)
    task = max(res.tasks, key=lambda t: t.macs)
    knobs = {k: v for k, v in (task.best_knobs or {}).items() if not k.startswith("_")}
    row = measure(shape_name, board, knobs or None, work)
    row.update(tuned=True, tuning={"trials": res.trials, "builds": res.builds, "wall_s": round(res.wall_s, 1),
                                   "measured": task.measured, "space": task.space,
                                   "default_layer": task.default_cycles, "tuned_layer": task.best_cycles})
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'shape':<8} {'board':<11} {'schedule':<58} {'run instr':>11} {'layer instr':>11} "
            f"{'MAC/instr':>9} {'CMSIS-NN':>9} {'MAC/instr':>9} {'ratio':>6} {'exact':>5}")
    lines = [head, "-" * len(head)]
    for r in rows:
        s = r["requested"] or {"default": ""}
        sd = ",".join(f"{k}={v}" if v != "" else k for k, v in s.items())
        if r.get("tuned"):
            sd = "TUNED: " + ",".join(f"{k}={v}" for k, v in sorted(r["requested"].items()))
        elif not r["requested"] and r["schedule"]:
            sd = "default: " + ",".join(f"{k}={r['schedule'][k]}" for k in ("mac", "variant", "oc_tile", "px_tile",
                                                                              "n_tile", "m_tile") if k in r["schedule"])
        lines.append(f"{r['shape']:<8} {r['board']:<11} {sd[:58]:<58} {r['run_instructions']:>11,} "
                     f"{r['layer_instructions']:>11,} {r['macs_per_instruction']:>9.3f} "
                     f"{r['cmsis_nn_instructions']:>9,.0f} {r['cmsis_nn_macs_per_instruction']:>9.2f} "
                     f"{r['ratio_vs_cmsis_nn']:>6.2f} {'yes' if r['bit_exact_vs_golden'] else 'NO':>5}")
    lines.append("QEMU icount instructions (not cycles); layer = the conv / FC layer alone (tinyc.profile); "
                 "ratio = tinyc layer / CMSIS-NN (../shared/NOTES.md), below 1 is better")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--boards", nargs="+", default=list(BOARDS), choices=list(BOARDS))
    ap.add_argument("--quick", action="store_true", help="no oc_tile / px_tile sweep")
    ap.add_argument("--json", default=str(OUT))
    ap.add_argument("--tune", type=int, metavar="TRIALS", help="also tune each kernel with TRIALS candidates "
                    "(tinyc.tune, cost-model search) and add the tuned row")
    ap.add_argument("--only-tuned", action="store_true", help="with --tune: the default and tuned rows only")
    args = ap.parse_args()
    rows = []
    for shape in args.shapes:
        for board in args.boards:
            for sched in ([None] if args.only_tuned else configs(shape, board, args.quick)):
                rows.append(measure(shape, board, sched))
                print(table(rows[-1:]).splitlines()[2], flush=True)
            if args.tune:
                rows.append(tuned(shape, board, args.tune))
                print(table(rows[-1:]).splitlines()[2], flush=True)
    print(table(rows))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"rows": rows, "cmsis_nn": CMSIS}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0 if all(r["bit_exact_vs_golden"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
