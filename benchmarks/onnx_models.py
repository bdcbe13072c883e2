#!/usr/bin/env python3
"""Recurrent, attention and TopK models through tinyc: float vs onnxruntime, int8 vs float, Cortex-M4.

The six models of the ONNX-reach tests (built by the test modules, so the benchmark measures exactly
what the tests check): a GRU keyword spotter, a 2-layer LSTM regressor, a bidirectional GRU, a
transformer encoder written with the Attention op and the same encoder written with Einsum, and the
digits CNN with Softmax -> TopK outputs. For each:

1. float: host C vs onnxruntime on `--n` inputs, largest error relative to the largest reference value;
2. int8: calibrated PTQ on other inputs, host C vs the float model (top-1 agreement for classifiers,
   correlation for the regressor), and which float ops are left in the int8 graph;
3. Cortex-M4: int8 firmware for the emulated mps2-an386, run through the serial harness on the first
   input: bit-exact with the golden model, QEMU instructions per inference (deterministic, not cycles),
   arena and flash bytes; for the Attention encoder also the attention layers' scratch beside the bytes
   of one whole score matrix (the fused kernel never holds the matrix).

    python benchmarks/onnx_models.py [--models gru_kws attention] [--n 300] [--no-board]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
OUT = HERE / "results" / "onnx_models.json"

class Spec:
    """One benchmark model: how to build it, make inputs and score the int8 outputs."""

    def __init__(self, build: Callable[[Path], Path], data: Callable[[int, int], dict[str, np.ndarray]],
                 output: str, classifies: bool) -> None:
        self.build, self.data, self.output, self.classifies = build, data, output, classifies


def _save(model: Any, path: Path) -> Path:
    import onnx

    onnx.save(model, path)
    return path


def _recurrent(name: str) -> Spec:
    import test_onnx_recurrent as rec

    builder, inp, classifies = rec.MODELS[name]
    model = builder()
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    return Spec(lambda p: _save(model, p / f"{name}.onnx"),
                lambda n, seed: {inp: rec._structured(shape, n, seed)}, model.graph.output[0].name, classifies)


def _encoder(einsum: bool) -> Spec:
    import test_onnx_attention as att

    def build(p: Path) -> Path:
        features = att._encoder(einsum)
        x, y = att._data(200, 1)
        f = att._ort_batch(features, x).astype(np.float64)
        a = np.concatenate([f, np.ones((len(f), 1))], axis=1)
        sol = np.linalg.solve(a.T @ a + 0.1 * len(a) * np.eye(a.shape[1]), a.T @ (4.0 * np.eye(att.CLASSES)[y]))
        sol = sol.astype(np.float32)
        return _save(att._encoder(einsum, (sol[:-1], sol[-1])), p / f"encoder_{'einsum' if einsum else 'attention'}.onnx")

    return Spec(build, lambda n, seed: {"x": att._data(n, seed)[0]}, "logits", True)


def _topk() -> Spec:
    import test_onnx_index_ops as idx
    from data import load_split

    x_train, _, x_test, _ = load_split()
    pools = {0: x_train, 1: x_test}

    def data(n: int, seed: int) -> dict[str, np.ndarray]:
        pool = pools[0] if seed == 0 else pools[1]
        return {"input": pool[:n].astype(np.float32)}

    return Spec(lambda p: idx._topk_classifier(p / "topk.onnx"), data, "top_i", True)


MODELS: dict[str, Callable[[], Spec]] = {
    "gru_kws": lambda: _recurrent("gru_kws"),
    "lstm_regressor": lambda: _recurrent("lstm_regressor"),
    "bigru": lambda: _recurrent("bigru"),
    "attention": lambda: _encoder(False),
    "einsum": lambda: _encoder(True),
    "topk": _topk,
}


def _ort(path: Path, feeds: dict[str, np.ndarray], output: str) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    (name, x), = feeds.items()
    return np.stack([sess.run(None, {name: xi[None] if xi.ndim < len(sess.get_inputs()[0].shape) else xi})
                     [names.index(output)] for xi in x])


def _tinyc(project: Path, feeds: dict[str, np.ndarray], output: str, n: int) -> np.ndarray:
    import tinyc

    (name, x), = feeds.items()
    return np.asarray(tinyc.run(project, {name: x})[output]).reshape((n, -1))


def measure(name: str, n: int, board: bool, work: Path) -> dict[str, Any]:
    import tinyc

    spec = MODELS[name]()
    d = work / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    path = spec.build(d)
    feeds, calib = spec.data(n, 4), spec.data(100, 0)
    (inp, x), = feeds.items()
    np.savez(d / "calib.npz", **{inp: calib[inp]})
    ref = _ort(path, feeds, spec.output).reshape((n, -1))
    fl = tinyc.compile(str(path), d / "float", build=True)
    got = _tinyc(d / "float", feeds, spec.output, n)
    row: dict[str, Any] = {"model": name, "inputs": n}
    if spec.output == "top_i":  # TopK indices: exact agreement, and the values' error
        row["float_error"] = float((got != ref).any(axis=1).mean())
        row["float_metric"] = "indices differ (fraction of inputs)"
    else:
        row["float_error"] = float(np.abs(got - ref).max() / np.abs(ref).max())
        row["float_metric"] = "max |C - ort| / max |ort|"
    q = tinyc.compile(str(path), d / "int8", quantize="int8", calib=d / "calib.npz", build=True)
    gq = _tinyc(d / "int8", feeds, spec.output, n)
    if spec.classifies:
        top = gq[:, 0] if spec.output == "top_i" else gq.argmax(1)
        want = ref[:, 0] if spec.output == "top_i" else ref.argmax(1)
        row["int8_vs_float"] = float((top == want).mean())
        row["int8_metric"] = "top-1 agreement"
    else:
        row["int8_vs_float"] = float(np.corrcoef(gq.reshape(-1), ref.reshape(-1))[0, 1])
        row["int8_metric"] = "correlation"
    # a float island: a node computing float32 in the int8 graph (the output DequantizeLinear aside)
    row["float_islands"] = sorted({nd.op for nd in q.graph.nodes if nd.op != "DequantizeLinear"
                                   and any(o and q.graph.tensor(o).dtype == "float32" for o in nd.outputs)})
    row["host_float_arena"] = fl.report["arena_bytes"]
    row["host_int8_arena"] = q.report["arena_bytes"]
    layers = json.loads((d / "int8" / "report.json").read_text())["layers"]
    att = [layer for layer in layers if layer["op"] in ("Attention", "QAttention")]
    if att:
        import test_onnx_attention as a

        row["attention_scratch_bytes"] = max(layer["scratch_bytes"] for layer in att)
        row["score_matrix_bytes_int8"] = a.HEADS * a.SEQ * a.SEQ
        fl_layers = json.loads((d / "float" / "report.json").read_text())["layers"]
        row["float_attention_scratch_bytes"] = max(x["scratch_bytes"] for x in fl_layers if x["op"] == "Attention")
        row["score_matrix_bytes_float"] = a.HEADS * a.SEQ * a.SEQ * 4
    if board:
        fw = tinyc.compile(str(path), d / "m4", board="mps2-an386", quantize="int8", calib=d / "calib.npz",
                           build=True)
        v = tinyc.validate(d / "m4", {inp: x[:1]}, against="none")
        row.update(m4_instructions=round(v["per_inference"]), m4_arena_bytes=fw.report["arena_bytes"],
                   m4_flash_bytes=fw.report["flash_bytes"],
                   m4_bit_exact=all(o.get("bit_exact_vs_golden", False) for o in v["outputs"].values()))
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'model':<15} {'float err':>9} {'int8 vs float':>17} {'float islands in int8':<24} "
            f"{'M4 instr':>10} {'M4 arena':>9} {'M4 flash':>9} {'exact':>5}")
    lines = [head, "-" * len(head)]
    for r in rows:
        m4 = (f"{r['m4_instructions']:>10,} {r['m4_arena_bytes']:>9,} {r['m4_flash_bytes']:>9,} "
              f"{'yes' if r['m4_bit_exact'] else 'NO':>5}") if "m4_instructions" in r else f"{'-':>10} {'-':>9} {'-':>9} {'-':>5}"
        metric = f"{r['int8_vs_float']:.4f} {'top1' if r['int8_metric'] == 'top-1 agreement' else 'corr'}"
        lines.append(f"{r['model']:<15} {r['float_error']:>9.1e} {metric:>17} "
                     f"{','.join(r['float_islands']) or '-':<24} {m4}")
        if "attention_scratch_bytes" in r:
            lines.append(f"{'':<15} attention scratch per layer: float {r['float_attention_scratch_bytes']:,} B "
                         f"(whole score matrix {r['score_matrix_bytes_float']:,} B), int8 "
                         f"{r['attention_scratch_bytes']:,} B (whole int8 matrix {r['score_matrix_bytes_int8']:,} B)")
    lines.append("float err: max |tinyc - onnxruntime| / max |onnxruntime| (topk: fraction of inputs whose "
                 "indices differ); M4: int8 on the emulated mps2-an386, QEMU instructions per inference (not "
                 "cycles); exact: board output == golden model")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--n", type=int, default=300, help="test inputs per model")
    ap.add_argument("--no-board", action="store_true", help="skip the Cortex-M4 firmware")
    ap.add_argument("--work", default=str(HERE / "results" / "build_onnx_models"))
    ap.add_argument("--json", default=str(OUT))
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows, t0 = [], time.perf_counter()
    for name in args.models:
        print(f"[onnx_models] {name} ...", flush=True)
        rows.append(measure(name, args.n, not args.no_board, work))
    print(table(rows))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"rows": rows, "seconds": time.perf_counter() - t0}, indent=1) + "\n")
    print(f"wrote {args.json} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
