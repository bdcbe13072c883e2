"""Compile the bundled digits CNN with tinyc, run the generated C on the test split, and compare
with onnxruntime: the README's first command runs this.

    python examples/digits/run.py [--out out/digits] [--target host]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE.parent.parent / "out" / "digits"), help="output project folder")
    ap.add_argument("--target", default="host")
    args = ap.parse_args()

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


if __name__ == "__main__":
    sys.exit(main())
