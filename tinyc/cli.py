"""`tinyc` command line: thin wrappers over the public API; user errors exit 2 with one message."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from collections.abc import Sequence

from tinyc.version import __version__
from tinyc.errors import TinycError
from tinyc.targets.registry import FORMATS, TARGETS


def _bindings(specs: list[str] | None) -> dict[str, object] | None:
    """--bind NAME=FILE.npy freezes a model input to a constant."""
    if not specs:
        return None
    from tinyc.errors import UsageError
    from tinyc.quantize.feeds import load_one_array

    out: dict[str, object] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise UsageError(f"--bind '{spec}': expected NAME=FILE.npy")
        out[name] = load_one_array(path, f"--bind {name}:", UsageError)
    return out


def _cmd_inspect(args: argparse.Namespace) -> int:
    from tinyc.api import inspect

    sys.stdout.write(inspect(args.model, args.input_shape, io_layout=args.io_layout))
    return 0


def _cmd_compile(args: argparse.Namespace) -> int:
    from tinyc.api import compile

    res = compile(
        args.model,
        args.output,
        target=args.target,
        input_shapes=args.input_shape,
        name=args.name,
        io_layout=args.io_layout,
        cflags=args.cflags,
        build=args.build,
        bind=_bindings(args.bind),
        quantize=args.quantize,
        calib=args.calib,
        calib_method=args.calib_method,
        keep_state=args.keep_state,
        board=args.board,
        board_dir=args.board_dir,
        format=args.format,
        io_dtype=args.io_dtype,
        tuning_log=args.tuning_log,
        device=args.device,
    )
    r = res.report
    print(
        f"compiled '{r['model']}' for {r['target']}{' (' + args.format + ')' if args.board else ''} -> {res.output_dir}"
    )
    print(f"  layers {len(r['layers'])}, MACs {r['macs']:,}, params {r['params']:,}, weights {r['weights_bytes']:,} B")
    print(f"  arena {r['arena_bytes']:,} B (lower bound {r['arena_lower_bound_bytes']:,} B, {r['memory_strategy']})")
    q = r.get("quantization")
    if q:
        print(
            f"  int8: {q['int8_nodes']} integer kernels, {len(q['float_nodes'])} ops left in float"
            + (f" ({', '.join(sorted({f['op'] for f in q['float_nodes']}))})" if q["float_nodes"] else "")
        )
    if "flash_bytes" in r:
        _print_sizes(r)
    return 0


def _print_sizes(r: dict) -> None:
    print(
        f"  firmware for {r['board']}: flash {r['flash_bytes']:,} B, RAM {r['ram_bytes']:,} B "
        f"(arena {r['arena_bytes']:,} B), worst-case stack {r['stack_bytes']:,} B"
    )


def _cmd_boards(args: argparse.Namespace) -> int:
    from tinyc.targets.boards import boards_table

    print(boards_table(args.board_dir))
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from tinyc.api import build_project

    res = build_project(args.project, force=args.force)
    if "flash_bytes" in res:
        report = json.loads((Path(args.project) / "report.json").read_text())
        _print_sizes(dict(report, **res))
        for w in res.get("warnings", []):
            print(f"  warning: {w}")
    elif "device" in res:
        print(f"built the OpenCL program ({res['kernels']} kernels) on {res['device']}")
    else:
        print(f"built {res['library']}")
    return 0


def _cmd_flash(args: argparse.Namespace) -> int:
    from tinyc.api import flash

    info = flash(args.project, port=args.port)
    print(
        f"{info['board']} runs '{info['model']}' (hash {info['model_hash']}, tinyc {info['tinyc_version']}, "
        f"protocol {info['protocol_version']}): arena {info['arena_bytes']:,} B, {info['num_layers']} layers, "
        f"inputs {info['input_bytes']:,} B, outputs {info['output_bytes']:,} B"
    )
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    import json

    from tinyc.api import validate
    from tinyc.device.runner import check_validation, validation_table

    v = validate(args.project, args.data, port=args.port, labels=args.labels, against=args.against)
    print(validation_table(v))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(v, f, indent=2)
        print(f"wrote {args.json}")
    check_validation(v)
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    import json

    from tinyc.api import profile
    from tinyc.device.runner import profile_table

    p = profile(args.project, args.input, port=args.port, device=args.device, repeat=args.repeat)
    print(f"profile of '{p['model']}' on {p['board']}")
    print(profile_table(p))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(p, f, indent=2)
        print(f"wrote {args.json}")
    return 0


def _cmd_quantize(args: argparse.Namespace) -> int:
    from tinyc.api import quantize

    res = quantize(
        args.model,
        args.calib,
        output=args.output,
        report=args.report,
        calib_method=args.calib_method,
        labels=args.labels,
        input_shapes=args.input_shape,
    )
    c = res.comparison
    if res.model_path:
        print(f"wrote {res.model_path}")
    if args.report:
        print(f"wrote {args.report}")
    agree = "n/a" if c.top1_agreement is None else f"{100 * c.top1_agreement:.2f}%"
    print(
        f"  int8 kernels {res.summary['int8_nodes']}, float ops {len(res.summary['float_nodes'])}, "
        f"top-1 agreement float vs int8 {agree}"
    )
    print(
        f"  weights {c.weights_bytes[0]:,} -> {c.weights_bytes[1]:,} B, arena {c.arena_bytes[0]:,} -> "
        f"{c.arena_bytes[1]:,} B"
    )
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from tinyc.api import run

    outs = run(args.project, args.input, args.output, port=args.port, device=args.device)
    for name, value in outs.items():
        flat = np.asarray(value).reshape(-1)
        preview = ", ".join(f"{v:.6g}" for v in flat[:8]) + (", ..." if flat.size > 8 else "")
        print(f"{name}: {value.dtype}{list(value.shape)} [{preview}]")
    if args.output:
        print(f"wrote {args.output}")
    return 0


def _cmd_devices(args: argparse.Namespace) -> int:
    from tinyc.api import devices
    from tinyc.targets.opencl import devices_table

    print(devices_table(devices()))
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from tinyc.tune.tuner import result_table, tune

    res = tune(
        args.model,
        board=args.board,
        trials=args.trials,
        log=args.log,
        input_shapes=args.input_shape,
        io_layout=args.io_layout,
        quantize=args.quantize,
        calib=args.calib,
        calib_method=args.calib_method,
        io_dtype=args.io_dtype,
        board_dir=args.board_dir,
        ram_budget=args.ram_budget,
        search=args.search,
        batch_size=args.batch_size,
        seed=args.seed,
        repeat=args.repeat,
        port=args.port,
        work_dir=args.work_dir,
        target=args.target,
        device=args.device,
        jobs=args.jobs if args.jobs is not None else 1,
        cluster=args.cluster,
        retries=args.retries,
        cluster_timeout=args.cluster_timeout,
    )
    print(result_table(res))
    if args.json:
        import dataclasses

        Path(args.json).write_text(
            json.dumps(
                {
                    **{k: v for k, v in dataclasses.asdict(res).items() if k != "log"},
                    "log": str(res.log),
                    "default_total": res.default_total,
                    "tuned_total": res.tuned_total,
                },
                indent=2,
            )
            + "\n"
        )
    print(f"log: {res.log} (compile with --tuning-log {res.log})")
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    from tinyc.tune.farm import parse_boards, run_worker

    ports, resources = parse_boards(args.board, args.emulated, args.board_dir)
    return run_worker(
        args.address,
        ports,
        resources,
        nthreads=args.nthreads,
        name=args.name,
        nanny=not args.no_nanny,
        timeout=args.timeout,
    )


def _cmd_farm(args: argparse.Namespace) -> int:
    from tinyc.tune.farm import farm_status, status_table

    status = farm_status(args.address, timeout=args.timeout)
    print(status_table(status))
    if args.json:
        Path(args.json).write_text(json.dumps(status, indent=2) + "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tinyc", description="Compile ONNX models to static C for MCUs and desktops.")
    p.add_argument("--version", action="version", version=f"tinyc {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def model_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("model", help="ONNX model file")
        sp.add_argument(
            "--input-shape",
            action="append",
            metavar="NAME=D0,D1,...",
            help="fix a symbolic input shape (repeatable); a sequence input: NAME=[D0,D1;D0,D1], "
            "an absent optional input: NAME=none",
        )
        sp.add_argument(
            "--io-layout",
            choices=["onnx", "nhwc"],
            default="onnx",
            help="keep the model's I/O layout (default) or take/give channels-last tensors",
        )

    def board_dir_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--board-dir", help="folder with your own board .toml files (searched first)")

    def port_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--port",
            help="real boards: the serial port (/dev/ttyACM0, socket://host:port, "
            "rfc2217://...); emulated boards start QEMU themselves",
        )

    def calib_args(sp: argparse.ArgumentParser, required: bool = False) -> None:
        sp.add_argument(
            "--calib",
            required=required,
            metavar="CALIB.npz",
            help="calibration inputs: one array per model input, leading sample dimension",
        )
        sp.add_argument(
            "--calib-method",
            choices=["minmax", "percentile", "mse"],
            default="minmax",
            help="activation range: observed min/max (default), 99.99th percentile, or MSE-optimal",
        )

    sp = sub.add_parser("inspect", help="show the graph after import and passes")
    model_args(sp)
    sp.set_defaults(func=_cmd_inspect)

    sp = sub.add_parser("compile", help="compile a model to a C project")
    model_args(sp)
    sp.add_argument("-o", "--output", required=True, help="output folder")
    sp.add_argument(
        "--target",
        default="host",
        help="host (C for this machine, default) or opencl (OpenCL C kernels for a GPU or CPU "
        "device); use --board for microcontrollers",
    )
    sp.add_argument("--board", help="write a firmware project for this board (see `tinyc boards`)")
    sp.add_argument(
        "--format",
        choices=list(FORMATS),
        default="project",
        help="with --board: a standalone firmware project with the serial harness (default), or a "
        "static library + CMake target + Makefile fragment for your own firmware",
    )
    board_dir_arg(sp)
    sp.add_argument("--name", help="C symbol prefix (default: model file name)")
    sp.add_argument("--cflags", help="C flags for the host build (default: -O3 -march=native -fno-math-errno)")
    sp.add_argument("--build", action="store_true", help="also build it now")
    sp.add_argument(
        "--bind", action="append", metavar="NAME=FILE.npy", help="freeze a model input to a constant value (repeatable)"
    )
    sp.add_argument(
        "--quantize",
        choices=["auto", "int8", "none"],
        default="auto",
        help="int8: post-training quantization (needs --calib); auto (default): QDQ models run in "
        "int8 with their own scales; none: all float",
    )
    sp.add_argument(
        "--keep-state",
        action="store_true",
        help="recurrent layers (LSTM, SVDF) keep their state from one inference to the next (streaming); "
        "default: every inference starts from the reset state, as TFLite Micro after reset()",
    )
    sp.add_argument(
        "--io-dtype",
        choices=["float", "int8"],
        default="float",
        help="int8 model's inputs/outputs: float (default; the model quantizes/dequantizes) or int8 "
        "(as TFLite Micro's int8 models: no float input copy in the arena; run/validate still "
        "take float data and quantize it on the host)",
    )
    calib_args(sp)
    sp.add_argument(
        "--tuning-log",
        metavar="LOG.jsonl",
        help="use the fastest exact schedule per layer from a `tinyc tune` log for this board/target",
    )
    sp.add_argument(
        "--device",
        help="--target opencl with --tuning-log: whose records (PLATFORM:DEVICE; default the log's one OpenCL device)",
    )
    sp.set_defaults(func=_cmd_compile)

    sp = sub.add_parser("tune", help="search kernel schedules per layer on the board (or host) and log them")
    model_args(sp)
    sp.add_argument("--board", help="tune on this board (see `tinyc boards`); default: the host")
    sp.add_argument(
        "--target",
        choices=list(TARGETS),
        help="without --board: host (C on this machine, default) or opencl (kernels on an OpenCL device)",
    )
    sp.add_argument(
        "--device",
        help="--target opencl: PLATFORM:DEVICE (see `tinyc devices`; default the first GPU, else the first device)",
    )
    board_dir_arg(sp)
    port_arg(sp)
    sp.add_argument(
        "--quantize",
        choices=["auto", "int8", "none"],
        default="auto",
        help="as for compile: the model is prepared exactly as `compile` would",
    )
    sp.add_argument("--io-dtype", choices=["float", "int8"], default="float", help="as for compile")
    calib_args(sp)
    sp.add_argument(
        "--trials",
        type=int,
        default=64,
        help="new candidates to measure (default 64; the default schedules are measured on top)",
    )
    sp.add_argument("--log", default="tune.jsonl", help="tuning log (JSON Lines, appended; resumed from)")
    sp.add_argument(
        "--search",
        choices=["model", "random"],
        default="model",
        help="cost-model guided (default) or plain random search",
    )
    sp.add_argument("--batch-size", type=int, default=16, help="candidates per firmware image (default 16)")
    sp.add_argument(
        "--ram-budget",
        type=int,
        metavar="BYTES",
        help="never build candidates whose scratch would push the arena above this",
    )
    sp.add_argument(
        "--repeat",
        type=int,
        help="runs per candidate, median taken (default: 3 on a board, 15 on the host, 10 on an OpenCL device)",
    )
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--work-dir", help="keep the candidate firmware projects here (default: a temporary folder)")
    sp.add_argument("--json", help="write the per-layer results here")
    sp.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="this machine: N parallel firmware builds and, for an emulated board, N QEMU boards "
        "measuring at once (default 1; a real board, the host and OpenCL measure one batch at a time)",
    )
    sp.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="a tuning farm: the Dask scheduler (tcp://host:8786) whose workers hold the board "
        "(`tinyc worker`); builds run on any worker, measurements on the board's workers",
    )
    sp.add_argument(
        "--retries",
        type=int,
        default=2,
        help="--cluster: times a batch whose worker was lost is tried again before its candidates "
        "are logged as crashes (default 2)",
    )
    sp.add_argument(
        "--cluster-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="--cluster: seconds to wait for the scheduler (default 10)",
    )
    sp.set_defaults(func=_cmd_tune)

    sp = sub.add_parser("worker", help="join a tuning farm (a Dask scheduler) with the boards attached here")
    sp.add_argument("address", help="the Dask scheduler, e.g. tcp://sched:8786 (start one with `dask scheduler`)")
    sp.add_argument(
        "--board",
        action="append",
        metavar="NAME=PORT",
        help="a real board on a serial port (repeatable: one per attached board)",
    )
    sp.add_argument(
        "--emulated",
        action="append",
        metavar="NAME:N",
        help="N emulated boards (QEMU processes) of an emulated board definition (repeatable)",
    )
    board_dir_arg(sp)
    sp.add_argument("--nthreads", type=int, help="task threads (default: boards + 1)")
    sp.add_argument("--name", help="worker name shown by `tinyc farm status`")
    sp.add_argument(
        "--no-nanny",
        action="store_true",
        help="run the worker in this process (default: a nanny process restarts it if it dies)",
    )
    sp.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the scheduler (default 30)")
    sp.set_defaults(func=_cmd_worker)

    sp = sub.add_parser("farm", help="a tuning farm's state")
    farm_sub = sp.add_subparsers(dest="farm_command", required=True)
    fs = farm_sub.add_parser("status", help="workers, their boards, busy/idle, measurements per minute")
    fs.add_argument("address", help="the Dask scheduler, e.g. tcp://sched:8786")
    fs.add_argument("--json", help="also write the status here")
    fs.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the scheduler (default 10)")
    fs.set_defaults(func=_cmd_farm)

    sp = sub.add_parser("quantize", help="int8-quantize a float model: QDQ ONNX export and accuracy report")
    sp.add_argument("model", help="ONNX model file")
    sp.add_argument(
        "--input-shape",
        action="append",
        metavar="NAME=D0,D1,...",
        help="fix a symbolic input shape (repeatable); a sequence input: NAME=[D0,D1;D0,D1], "
        "an absent optional input: NAME=none",
    )
    calib_args(sp, required=True)
    sp.add_argument("-o", "--output", help="write the QDQ ONNX model here")
    sp.add_argument("--report", help="write the Markdown report here")
    sp.add_argument("--labels", help=".npy of labels for top-1 accuracy (or a 'y' key in the calibration file)")
    sp.set_defaults(func=_cmd_quantize)

    sp = sub.add_parser("run", help="build (if needed) and run a compiled project on inputs from an .npz")
    sp.add_argument("project", help="folder written by `tinyc compile`")
    sp.add_argument(
        "--input",
        required=True,
        help=".npz whose keys are the model's input names (a one-input model also takes an .npy)",
    )
    sp.add_argument("--output", help="write outputs to this .npz")
    port_arg(sp)
    sp.add_argument(
        "--device",
        metavar="PLATFORM:DEVICE",
        help="OpenCL folders: the device (see `tinyc devices`; default the first GPU, else the first device)",
    )
    sp.set_defaults(func=_cmd_run)

    sp = sub.add_parser("devices", help="list the OpenCL platforms and devices")
    sp.set_defaults(func=_cmd_devices)

    sp = sub.add_parser("boards", help="list the board definitions")
    board_dir_arg(sp)
    sp.set_defaults(func=_cmd_boards)

    sp = sub.add_parser("build", help="build a compiled folder (firmware: prints flash/RAM/stack use)")
    sp.add_argument("project", help="folder written by `tinyc compile`")
    sp.add_argument("--force", action="store_true", help="rebuild even when nothing changed")
    sp.set_defaults(func=_cmd_build)

    sp = sub.add_parser(
        "flash", help="build if needed and flash the firmware (emulated boards: start QEMU) and check it answers"
    )
    sp.add_argument("project", help="firmware project written by `tinyc compile --board`")
    port_arg(sp)
    sp.set_defaults(func=_cmd_flash)

    sp = sub.add_parser(
        "validate", help="device vs golden model vs onnxruntime or TFLite Micro (and accuracy with labels)"
    )
    sp.add_argument("project", help="firmware project written by `tinyc compile --board`")
    sp.add_argument("--data", required=True, help=".npz of inputs (leading sample dimension); a 'y' key = labels")
    sp.add_argument("--labels", help=".npy of labels for accuracy")
    sp.add_argument("--json", help="write the comparison here")
    sp.add_argument(
        "--against",
        choices=("auto", "onnxruntime", "tflm", "none"),
        default="auto",
        help="the independent reference: onnxruntime for ONNX, TFLite Micro's interpreter for .tflite "
        "(tflm needs `pip install 'tinyc[tflite]'`); auto picks by the source model",
    )
    port_arg(sp)
    sp.set_defaults(func=_cmd_validate)

    sp = sub.add_parser("profile", help="per-layer counts (or OpenCL kernel times), MACs, MACs per count, share")
    sp.add_argument(
        "project",
        help="firmware project written by `tinyc compile --board`, or an OpenCL folder "
        "(`--target opencl`: per-kernel device times from event profiling)",
    )
    sp.add_argument("--input", help=".npz to profile on (first sample; default zeros)")
    sp.add_argument("--json", help="write the profile here")
    sp.add_argument("--device", help="OpenCL folders: PLATFORM:DEVICE (see `tinyc devices`)")
    sp.add_argument("--repeat", type=int, default=10, help="OpenCL folders: inferences, median taken (default 10)")
    port_arg(sp)
    sp.set_defaults(func=_cmd_profile)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TinycError as exc:
        print(f"tinyc: error: {exc.printable()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("tinyc: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
