#!/usr/bin/env python3
"""int8 on the host: tinyc's integer C vs onnxruntime running the same QDQ model (one thread).

For every model, in one run: the QDQ model (MLPerf Tiny: the shipped ``model_int8_qdq.onnx``;
digits: made here by onnxruntime's ``quantize_static`` on 300 training images) is compiled by tinyc
(int8 kernels with the model's own scales) and run by onnxruntime with its default graph
optimisations (its fused QLinear* kernels); the float model is run by both as the baseline. Timing
is the same as benchmarks/host_vs_onnxruntime.py (C runner loop for tinyc, ``session.run`` loop
for onnxruntime, interleaved runs, median of per-run means). Also reported: arena and weight bytes
of tinyc's float and int8 builds.

    python benchmarks/host_int8.py [--models digits mlperf_kws_dscnn] [--repeat 3] [--run-seconds 0.5]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import host_vs_onnxruntime as hb  # noqa: E402

MODELS = ("digits",) + hb.MLPERF_MODELS
OUT = HERE / "results" / "host_int8.json"


def digits_qdq(work: Path) -> Path:
    import importlib.util

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    spec = importlib.util.spec_from_file_location("digits_data", hb.ROOT / "examples" / "digits" / "data.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    x = mod.load_split()[0][:300]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{"input": xi[None]} for xi in x])

        def get_next(self):  # noqa: ANN201
            return next(self.it, None)

    out = work / "digits_qdq.onnx"
    work.mkdir(parents=True, exist_ok=True)
    quantize_static(str(hb.model_path("digits")), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return out


def qdq_path(name: str, work: Path) -> Path:
    return digits_qdq(work) if name == "digits" else hb.MLPERF_DIR / name / "model_int8_qdq.onnx"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--run-seconds", type=float, default=0.5)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    work = hb.DEFAULT_WORK.parent / "build_int8"
    rows = []
    for name in args.models:
        fpath, qpath = hb.model_path(name), qdq_path(name, work / name)
        feeds = hb.model_inputs(name, fpath, 0)
        info_f: dict = {}
        info_q: dict = {}
        engines = {"tinyc_float": hb.Tinyc(fpath, feeds, work / name / "tf", info_f),
                   "tinyc_int8": hb.Tinyc(qpath, feeds, work / name / "tq", info_q),
                   "ort_float": hb.Ort(fpath, feeds), "ort_int8": hb.Ort(qpath, feeds)}
        ref = engines["ort_int8"].outputs()
        ours = list(engines["tinyc_int8"].outputs().values())
        diff, _ = hb.max_abs_diff(ours, ref)
        reps = {k: hb.calibrate(e.measure, args.run_seconds) for k, e in engines.items()}
        times: dict[str, list[float]] = {k: [] for k in engines}
        for _ in range(args.repeat):
            for k, e in engines.items():
                times[k].append(e.measure(reps[k]))
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {"model": name, **{f"{k}_us": v for k, v in med.items()},
               "ort_int8_over_tinyc_int8": med["ort_int8"] / med["tinyc_int8"],
               "tinyc_float_over_tinyc_int8": med["tinyc_float"] / med["tinyc_int8"],
               "weights_float": info_f["weights_bytes"], "weights_int8": info_q["weights_bytes"],
               "arena_float": info_f["arena_bytes"], "arena_int8": info_q["arena_bytes"],
               "max_abs_diff_vs_ort_int8": diff, "runs_us": times}
        rows.append(row)
        print(f"{name}: done", file=sys.stderr)
    hdr = ("| model | tinyc int8 µs | ORT int8 µs | ORT/tinyc | tinyc float µs | float/int8 | weights f→i8 B | "
           "arena f→i8 B | max |Δ| vs ORT int8 |")
    print(hdr)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['tinyc_int8_us']:.1f} | {r['ort_int8_us']:.1f} | {r['ort_int8_over_tinyc_int8']:.2f} "
              f"| {r['tinyc_float_us']:.1f} | {r['tinyc_float_over_tinyc_int8']:.2f} | {r['weights_float']:,}→"
              f"{r['weights_int8']:,} | {r['arena_float']:,}→{r['arena_int8']:,} | {r['max_abs_diff_vs_ort_int8']:.3g} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "numpy": np.__version__}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
