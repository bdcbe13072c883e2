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
                  io_layout=args.io_layout, cflags=args.cflags, build=args.build, bind=_bindings(args.bind))
    r = res.report
    print(f"compiled '{r['model']}' for {args.target} -> {res.output_dir}")
    print(f"  layers {len(r['layers'])}, MACs {r['macs']:,}, params {r['params']:,}, weights {r['weights_bytes']:,} B")
    print(f"  arena {r['arena_bytes']:,} B (lower bound {r['arena_lower_bound_bytes']:,} B, {r['memory_strategy']})")
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
    sp.set_defaults(func=_cmd_compile)

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
