"""Compile the bundled digits CNN with tinyc and run it: by default int8 on the emulated Cortex-M4
board (mps2-an386 under QEMU, over the serial harness), else float on this computer. Prints test
accuracy next to onnxruntime's, and for the board instructions, RAM and flash. The README's first
command runs this.

    python examples/digits/run.py [--board mps2-an386 | --target host] [--out out/digits]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import tinyc  # noqa: E402
from data import load_split  # noqa: E402

MODEL = HERE / "digits_cnn.onnx"


def onnxruntime_outputs(x: np.ndarray) -> np.ndarray | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    sess = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, {"input": xi[None]})[0] for xi in x])


def on_board(args: argparse.Namespace) -> int:
    """int8 (calibrated on 300 training images) on an emulated board, validated over the serial link."""
    from tinyc.device.runner import profile_table, validation_table
    x_train, _, x_test, y_test = load_split()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    calib = out.parent / "digits_calib.npz"
    np.savez(calib, input=x_train[:300])
    t0 = time.perf_counter()
    res = tinyc.compile(MODEL, out, board=args.board, quantize="int8", calib=calib, build=True)
    r = res.report
    print(f"compiled {MODEL.name} (int8) for {args.board} -> {out} in {time.perf_counter() - t0:.1f} s")
    print(f"  {len(r['layers'])} layers, {r['macs']:,} MACs, int8 weights {r['weights_bytes']:,} B")
    print(f"  flash {r['flash_bytes']:,} B, RAM {r['ram_bytes']:,} B (arena {r['arena_bytes']:,} B, lower bound "
          f"{r['arena_lower_bound_bytes']:,} B; worst-case stack {r['stack_bytes']:,} B)")
    t0 = time.perf_counter()
    v = tinyc.validate(out, {"input": x_test, "labels": y_test})
    print(validation_table(v) + f"  [{time.perf_counter() - t0:.1f} s]")
    p = tinyc.profile(out, {"input": x_test[:1]})
    print(profile_table(p))
    ref = onnxruntime_outputs(x_test)
    if ref is not None:
        print(f"onnxruntime (float model): test accuracy {float((ref.argmax(1) == y_test).mean()):.2%}")
    e = v["outputs"]["logits"]
    if not v["golden_ok"] or e.get("top1_agreement_vs_onnxruntime", 1.0) < 0.97:
        print("ERROR: the device disagrees with the golden model or onnxruntime", file=sys.stderr)
        return 1
    return 0


def on_host(args: argparse.Namespace) -> int:
    _, _, x_test, y_test = load_split()
    t0 = time.perf_counter()
    res = tinyc.compile(MODEL, args.out, target=args.target, build=True)
    r = res.report
    print(f"compiled {MODEL.name} -> {args.out} in {time.perf_counter() - t0:.1f} s")
    print(f"  {len(r['layers'])} layers, {r['macs']:,} MACs, {r['params']:,} params, weights {r['weights_bytes']:,} B")
    print(f"  arena {r['arena_bytes']:,} B (lower bound {r['arena_lower_bound_bytes']:,} B)")

    t0 = time.perf_counter()
    logits = tinyc.run(args.out, {"input": x_test})["logits"]
    dt = time.perf_counter() - t0
    acc = float((logits.argmax(1) == y_test).mean())
    print(f"tinyc C ({args.target}): test accuracy {acc:.2%} on {len(y_test)} images ({dt * 1e3 / len(y_test):.3f} ms/image incl. Python)")

    ref = onnxruntime_outputs(x_test)
    if ref is not None:
        ref_acc = float((ref.argmax(1) == y_test).mean())
        agree = float((ref.argmax(1) == logits.argmax(1)).mean())
        print(f"onnxruntime:        test accuracy {ref_acc:.2%}; top-1 agreement {agree:.2%}; "
              f"max |logit diff| {np.abs(ref - logits).max():.2e}")
        if agree < 0.99:
            print("ERROR: tinyc disagrees with onnxruntime", file=sys.stderr)
            return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", default="mps2-an386", help="emulated board to run on (default mps2-an386, Cortex-M4)")
    ap.add_argument("--target", help="run on this computer instead: --target host (float)")
    ap.add_argument("--out", help="output project folder (default out/digits_<board or target>)")
    args = ap.parse_args()
    where = args.target or args.board
    args.out = args.out or str(HERE.parent.parent / "out" / f"digits_{where}")
    return on_host(args) if args.target else on_board(args)


if __name__ == "__main__":
    sys.exit(main())
