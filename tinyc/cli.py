"""`tinyc` command line: thin wrappers over the public API; user errors exit 2 with one message."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from tinyc import __version__
from tinyc.errors import TinycError


def _bindings(specs: list[str] | None) -> dict[str, object] | None:
    """--bind NAME=FILE.npy freezes a model input to a constant."""
    if not specs:
        return None
    import numpy as np

    from tinyc.errors import UsageError
    out: dict[str, object] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            raise UsageError(f"--bind '{spec}': expected NAME=FILE.npy")
        try:
            out[name] = np.load(path, allow_pickle=False)
        except Exception as exc:
            raise UsageError(f"--bind {name}: cannot read {path}: {exc}") from None
    return out


def _cmd_inspect(args: argparse.Namespace) -> int:
    from tinyc.api import inspect
    sys.stdout.write(inspect(args.model, args.input_shape, io_layout=args.io_layout))
    return 0


def _cmd_compile(args: argparse.Namespace) -> int:
    from tinyc.api import compile
    res = compile(args.model, args.output, target=args.target, input_shapes=args.input_shape, name=args.name,
                  io_layout=args.io_layout, cflags=args.cflags, build=args.build, bind=_bindings(args.bind),
                  quantize=args.quantize, calib=args.calib, calib_method=args.calib_method)
    r = res.report
    print(f"compiled '{r['model']}' for {args.target} -> {res.output_dir}")
    print(f"  layers {len(r['layers'])}, MACs {r['macs']:,}, params {r['params']:,}, weights {r['weights_bytes']:,} B")
    print(f"  arena {r['arena_bytes']:,} B (lower bound {r['arena_lower_bound_bytes']:,} B, {r['memory_strategy']})")
    q = r.get("quantization")
    if q:
        print(f"  int8: {q['int8_nodes']} integer kernels, {len(q['float_nodes'])} ops left in float"
              + (f" ({', '.join(sorted({f['op'] for f in q['float_nodes']}))})" if q["float_nodes"] else ""))
    return 0


def _cmd_quantize(args: argparse.Namespace) -> int:
    from tinyc.api import quantize
    res = quantize(args.model, args.calib, output=args.output, report=args.report, calib_method=args.calib_method,
                   labels=args.labels, input_shapes=args.input_shape)
    c = res.comparison
    if res.model_path:
        print(f"wrote {res.model_path}")
    if args.report:
        print(f"wrote {args.report}")
    agree = "n/a" if c.top1_agreement is None else f"{100 * c.top1_agreement:.2f}%"
    print(f"  int8 kernels {res.summary['int8_nodes']}, float ops {len(res.summary['float_nodes'])}, "
          f"top-1 agreement float vs int8 {agree}")
    print(f"  weights {c.weights_bytes[0]:,} -> {c.weights_bytes[1]:,} B, arena {c.arena_bytes[0]:,} -> "
          f"{c.arena_bytes[1]:,} B")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from tinyc.api import run
    outs = run(args.project, args.input, args.output)
    for name, value in outs.items():
        flat = np.asarray(value).reshape(-1)
        preview = ", ".join(f"{v:.6g}" for v in flat[:8]) + (", ..." if flat.size > 8 else "")
        print(f"{name}: {value.dtype}{list(value.shape)} [{preview}]")
    if args.output:
        print(f"wrote {args.output}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tinyc", description="Compile ONNX models to static C for MCUs and desktops.")
    p.add_argument("--version", action="version", version=f"tinyc {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def model_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("model", help="ONNX model file")
        sp.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...",
                        help="fix a symbolic input shape (repeatable)")
        sp.add_argument("--io-layout", choices=["onnx", "nhwc"], default="onnx",
                        help="keep the model's I/O layout (default) or take/give channels-last tensors")

    def calib_args(sp: argparse.ArgumentParser, required: bool = False) -> None:
        sp.add_argument("--calib", required=required, metavar="CALIB.npz",
                        help="calibration inputs: one array per model input, leading sample dimension")
        sp.add_argument("--calib-method", choices=["minmax", "percentile", "mse"], default="minmax",
                        help="activation range: observed min/max (default), 99.99th percentile, or MSE-optimal")

    sp = sub.add_parser("inspect", help="show the graph after import and passes")
    model_args(sp)
    sp.set_defaults(func=_cmd_inspect)

    sp = sub.add_parser("compile", help="compile a model to a C project")
    model_args(sp)
    sp.add_argument("-o", "--output", required=True, help="output folder")
    sp.add_argument("--target", default="host", help="target (host)")
    sp.add_argument("--name", help="C symbol prefix (default: model file name)")
    sp.add_argument("--cflags", help="C flags for the host build (default: -O3 -march=native -fno-math-errno)")
    sp.add_argument("--build", action="store_true", help="also build it now")
    sp.add_argument("--bind", action="append", metavar="NAME=FILE.npy",
                    help="freeze a model input to a constant value (repeatable)")
    sp.add_argument("--quantize", choices=["auto", "int8", "none"], default="auto",
                    help="int8: post-training quantization (needs --calib); auto (default): QDQ models run in "
                         "int8 with their own scales; none: all float")
    calib_args(sp)
    sp.set_defaults(func=_cmd_compile)

    sp = sub.add_parser("quantize", help="int8-quantize a float model: QDQ ONNX export and accuracy report")
    sp.add_argument("model", help="ONNX model file")
    sp.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...",
                    help="fix a symbolic input shape (repeatable)")
    calib_args(sp, required=True)
    sp.add_argument("-o", "--output", help="write the QDQ ONNX model here")
    sp.add_argument("--report", help="write the Markdown report here")
    sp.add_argument("--labels", help=".npy of labels for top-1 accuracy (or a 'y' key in the calibration file)")
    sp.set_defaults(func=_cmd_quantize)

    sp = sub.add_parser("run", help="build (if needed) and run a compiled project on inputs from an .npz")
    sp.add_argument("project", help="folder written by `tinyc compile`")
    sp.add_argument("--input", required=True, help=".npz whose keys are the model's input names")
    sp.add_argument("--output", help="write outputs to this .npz")
    sp.set_defaults(func=_cmd_run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TinycError as exc:
        print(f"tinyc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("tinyc: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
