"""`tinyc` command line: thin wrappers over the public API; user errors exit 2 with one message."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from collections.abc import Sequence

from typing import Any

from tinyc.version import __version__
from tinyc.errors import TinycError
from tinyc.progress import note, set_verbosity, verbosity
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


def _json_default(obj: Any) -> Any:
    """What json cannot write by itself: numpy values and arrays, paths, dataclasses, sets."""
    import dataclasses

    import numpy as np

    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def _json_to_stdout(args: argparse.Namespace) -> bool:
    """`--json` without a FILE: stdout carries the JSON only (tables and notes are left out)."""
    return getattr(args, "json", None) == "-"


def _info(args: argparse.Namespace, message: str) -> None:
    """A line about what was done (`wrote ...`): stdout, or stderr while stdout carries JSON; none with -q."""
    if verbosity() < 0:
        return
    print(message, file=sys.stderr if _json_to_stdout(args) else sys.stdout)


def _table(args: argparse.Namespace, text: str) -> None:
    """A verb's table on stdout, unless stdout carries the JSON instead."""
    if not _json_to_stdout(args):
        print(text.rstrip("\n"))


def _emit_json(args: argparse.Namespace, obj: Any) -> None:
    """`--json`: the JSON on stdout (no FILE) or into FILE (the table is printed as well)."""
    dest = getattr(args, "json", None)
    if dest is None:
        return
    text = json.dumps(obj, indent=2, default=_json_default) + "\n"
    if dest == "-":
        sys.stdout.write(text)
        return
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    Path(dest).write_text(text)
    _info(args, f"wrote {dest}")


def _cmd_inspect(args: argparse.Namespace) -> int:
    from tinyc.api import load
    from tinyc.ops.dump import dump_graph, layer_stats

    graph = load(args.model, args.input_shape, io_layout=args.io_layout)
    _table(args, dump_graph(graph))
    if args.json:
        rows = layer_stats(graph)
        _emit_json(
            args,
            {
                "model": graph.name,
                "inputs": [
                    {"name": n, "dtype": graph.tensor(n).dtype, "shape": list(graph.tensor(n).shape)}
                    for n in graph.inputs
                ],
                "outputs": [
                    {"name": pub, "dtype": graph.tensor(n).dtype, "shape": list(graph.tensor(n).shape)}
                    for pub, n in graph.public_outputs()
                ],
                "layers": [dict(r, index=i) for i, r in enumerate(rows)],
                "params": sum(t.size for t in graph.tensors.values() if t.is_constant),
                "macs": sum(r["macs"] for r in rows),
            },
        )
    return 0


def _compile_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options `compile` and `compile_models` share (everything but the model and its name)."""
    opts: dict[str, Any] = dict(
        target=args.target,
        input_shapes=args.input_shape,
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
    # placement flags go to the API only when given (the API's defaults stand otherwise)
    if args.arena_section is not None:
        opts["arena_section"] = args.arena_section
    if args.weights_section is not None:
        opts["weights_section"] = args.weights_section
    return opts


def _cmd_compile(args: argparse.Namespace) -> int:
    import tinyc.api as api
    from tinyc.errors import UsageError

    models = list(args.model)
    opts = _compile_options(args)
    if len(models) > 1:
        if args.name:
            raise UsageError("--name sets one model's prefix; with several models each takes its file name")
        res = api.compile_models(models, args.output, shared_arena=args.shared_arena, **opts)
    else:
        if args.shared_arena:
            raise UsageError("--shared-arena shares one arena between several models: give two or more models")
        res = api.compile(models[0], args.output, name=args.name, **opts)
    r = res.report
    if len(models) > 1:  # compile_models: every model's report under report["models"]
        subs = [m for m in r.get("models", []) if isinstance(m, dict)]
        print(f"compiled {len(models)} models for {r.get('target', args.board or args.target)} -> {res.output_dir}")
        for sub in subs:
            print(
                f"  {sub.get('prefix', sub.get('model'))}: layers {len(sub.get('layers', []))}, "
                f"MACs {sub.get('macs', 0):,}, weights {sub.get('weights_bytes', 0):,} B, "
                f"arena {sub.get('arena_bytes', 0):,} B"
            )
            if args.tuning_log and "layers" in sub:
                print("\n".join(tuned_lines(sub, None)))  # the other models' graphs are not returned
        if args.shared_arena and subs:
            print(f"  one shared arena of {max(int(m.get('arena_bytes', 0)) for m in subs):,} B (the largest plan)")
        if "flash_bytes" in r:
            _print_sizes(r)
        if args.board:
            _board_notes(args.board, args.board_dir)
        return 0
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
    if args.tuning_log:
        print("\n".join(tuned_lines(r, _default_schedules(args, res.graph))))
    if "flash_bytes" in r:
        _print_sizes(r)
    if args.board:
        _board_notes(args.board, args.board_dir)
    return 0


def tuned_lines(report: dict[str, Any], defaults: dict[str, Any] | None) -> list[str]:
    """One line per layer whose schedule the tuning log changed (from its default; every layer it
    set when `defaults` is None): the code-layer index (as `profile` and the header's layer count
    number them), name and knobs."""
    tuned = set(report.get("tuned_layers", []))
    rows = [layer for layer in report["layers"] if layer.get("kernel") is not None and layer["name"] in tuned]
    changed = [
        layer
        for layer in rows
        if defaults is None or dict(layer.get("schedule") or {}) != dict(defaults.get(layer["name"]) or {})
    ]
    if not rows:
        return ["  tuning log: no record for this model on this target; every layer keeps its default schedule"]
    lines = [
        f"  tuning log: {len(changed)} layer(s) changed"
        + (f", {len(rows) - len(changed)} keep their default (the log's fastest)" if len(rows) > len(changed) else "")
    ]
    for layer in changed:
        knobs = ", ".join(f"{k}={v}" for k, v in layer.get("schedule", {}).items())
        lines.append(f"    layer {layer['kernel']} {layer['name']} ({layer['op']}): {knobs}")
    return lines


def _default_schedules(args: argparse.Namespace, graph: Any) -> dict[str, Any]:
    """The schedules the compile would have taken without the tuning log (what the log changed)."""
    from tinyc.schedule import default_schedules
    from tinyc.targets.registry import get_target

    tgt = get_target(args.target, args.board, args.board_dir, args.format, args.cflags)
    return default_schedules(graph, tgt.schedule_target)


def _board_notes(board: str, board_dir: str | None) -> None:
    """A board's notes (what its .toml says a user must know, e.g. rpi-pico's boot stage) at compile."""
    from tinyc.targets.boards import load_board

    notes = load_board(board, board_dir).get("notes")
    if notes and verbosity() >= 0:
        print(f"  note ({board}): " + " ".join(str(notes).split()))


def _print_sizes(r: dict) -> None:
    print(
        f"  firmware for {r['board']}: flash {r['flash_bytes']:,} B, RAM {r['ram_bytes']:,} B "
        f"(arena {r['arena_bytes']:,} B), worst-case stack {r['stack_bytes']:,} B"
    )


def _cmd_analyze(args: argparse.Namespace) -> int:
    from tinyc.api import analyze

    r = analyze(
        args.model,
        board=args.board,
        target=args.target,
        input_shapes=args.input_shape,
        io_layout=args.io_layout,
        bind=_bindings(args.bind),
        quantize=args.quantize,
        calib=args.calib,
        calib_method=args.calib_method,
        io_dtype=args.io_dtype,
        board_dir=args.board_dir,
        tuning_log=args.tuning_log,
        device=args.device,
    )
    _table(args, analysis_table(r))
    _emit_json(args, r)
    return 0


def analysis_table(r: dict[str, Any]) -> str:
    """`tinyc analyze` as text: summary, fit against the board, per-layer table."""
    lines = [
        f"analysis of '{r['model']}' for {r['target']} (nothing written)",
        f"  MACs {r['macs']:,}, params {r['params']:,}, weights {r['weights_bytes']:,} B, "
        f"arena {r['arena_bytes']:,} B (lower bound {r['arena_lower_bound_bytes']:,} B), I/O {r['io_bytes']:,} B",
    ]
    q = r.get("quantization")
    if q:
        lines.append(f"  int8: {q['int8_nodes']} integer kernels, {len(q['float_nodes'])} ops left in float")
    fit = r.get("fit")
    if fit:
        for key, label in (("flash", "flash"), ("ram", "RAM")):
            f = fit[key]
            pct = 100.0 * f["need"] / f["available"] if f["available"] else float("inf")
            lines.append(
                f"  {label:<5} {f['need']:>10,} B of {f['available']:>10,} B ({pct:5.1f}%)  [{f['what']}]"
                + ("" if f["need"] <= f["available"] else "  DOES NOT FIT")
            )
        lines.append(f"  fits {fit['board']}: {'yes' if fit['fits'] else 'no'}")
        if fit["message"]:
            lines.append(f"  {fit['message']}")
    header = f"{'#':>3}  {'op':<16} {'name':<28} {'output':<16} {'MACs':>12} {'params':>9} {'arena':>9}"
    lines += ["", header, "-" * len(header)]
    for layer in r["layers"]:
        if layer.get("kernel") is None:
            continue  # views and aliases carry no number (the code-layer index, as profile's)
        out = "x".join(str(d) for d in layer["output_shape"])
        name = layer["name"] if len(layer["name"]) <= 28 else "…" + layer["name"][-27:]
        lines.append(
            f"{layer['kernel']:>3}  {layer['op']:<16} {name:<28} {out:<16} {layer['macs']:>12,} "
            f"{layer['params']:>9,} {layer['arena_size']:>9,}"
        )
    return "\n".join(lines) + "\n"


def _cmd_boards(args: argparse.Namespace) -> int:
    from tinyc.targets.boards import boards_table, list_boards

    _table(args, boards_table(args.board_dir))
    if args.json:
        _emit_json(args, list_boards(args.board_dir))
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
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


def _raw_option(args: argparse.Namespace) -> dict[str, Any]:
    """--raw goes to the API only when given, so the API's default (dequantized outputs) stands."""
    return {"raw": True} if getattr(args, "raw", False) else {}


def _cmd_validate(args: argparse.Namespace) -> int:
    from tinyc.api import validate
    from tinyc.device.runner import check_validation, validation_table

    _say_build(args.project, args.data)
    v = validate(args.project, args.data, port=args.port, labels=args.labels, against=args.against, **_raw_option(args))
    _table(args, validation_table(v))
    _emit_json(args, v)
    check_validation(v)
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    from tinyc.api import profile
    from tinyc.device.runner import profile_table

    _say_build(args.project, args.data)
    p = profile(args.project, args.data, port=args.port, device=args.device, repeat=args.repeat)
    _table(args, f"profile of '{p['model']}' on {p['board']}\n" + profile_table(p))
    _emit_json(args, p)
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
        _info(args, f"wrote {res.model_path}")
    if args.report:
        _info(args, f"wrote {args.report}")
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


def _say_build(project: str, data: Any = None) -> None:
    """One line when a host or firmware folder is about to be built for the first time (the step
    that takes a while before the first run), so the wait is explained. Bad data is refused before
    anything is built, so the line only comes once the data passed the runners' own checks."""
    from tinyc.codegen.manifest import MANIFEST

    out = Path(project)
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return  # the API names what is wrong with the folder
    if manifest.get("target") == "opencl" or (out / "build" / ".tinyc-sources").is_file():
        return
    if data is not None:
        from tinyc.quantize.feeds import prepare_feeds
        from tinyc.targets.base import load_inputs

        try:
            prepare_feeds(manifest, load_inputs(data))
        except (TinycError, KeyError, TypeError):
            return  # the API refuses the data with its own message, before building
    note(f"building {project} (first run) ...")


def _cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from tinyc.api import run

    _say_build(args.project, args.data)
    outs = run(args.project, args.data, args.output, port=args.port, device=args.device, **_raw_option(args))
    lines = []
    for name, value in outs.items():
        flat = np.asarray(value).reshape(-1)
        preview = ", ".join(f"{v:.6g}" for v in flat[:8]) + (", ..." if flat.size > 8 else "")
        lines.append(f"{name}: {value.dtype}{list(value.shape)} [{preview}]")
    _table(args, "\n".join(lines))
    if args.output:
        _info(args, f"wrote {args.output}")
    _emit_json(
        args,
        {
            name: {"dtype": str(np.asarray(v).dtype), "shape": list(np.shape(v)), "values": np.asarray(v).tolist()}
            for name, v in outs.items()
        },
    )
    return 0


def _cmd_devices(args: argparse.Namespace) -> int:
    from tinyc.api import devices
    from tinyc.targets.opencl import devices_table

    found = devices()
    _table(args, devices_table(found))
    _emit_json(args, found)
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    import dataclasses

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
        progress=False if verbosity() < 0 else None,
    )
    _table(args, result_table(res))
    _emit_json(
        args,
        {
            **{k: v for k, v in dataclasses.asdict(res).items() if k != "log"},
            "log": str(res.log),
            "default_total": res.default_total,
            "tuned_total": res.tuned_total,
        },
    )
    _info(args, f"log: {res.log} (compile with --tuning-log {res.log})")
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


#: `tinyc farm status` without an address asks the scheduler named here, else DEFAULT_SCHEDULER.
SCHEDULER_ENV = "TINYC_SCHEDULER"
DEFAULT_SCHEDULER = "tcp://127.0.0.1:8786"


def default_scheduler() -> str:
    import os

    return os.environ.get(SCHEDULER_ENV) or DEFAULT_SCHEDULER


def _cmd_farm(args: argparse.Namespace) -> int:
    from tinyc.tune.farm import farm_status, status_table

    status = farm_status(args.address or default_scheduler(), timeout=args.timeout)
    _table(args, status_table(status))
    _emit_json(args, status)
    return 0


def _host_cflags() -> str:
    """The host build's default flags, as boards/host.toml sets them (what the README quotes)."""
    try:
        from tinyc.targets.boards import load_board

        return str(load_board("host")["toolchain"]["cflags"])
    except (TinycError, KeyError, TypeError):
        return "see boards/host.toml"


def _verbosity_args(sp: argparse.ArgumentParser, top: bool = False) -> None:
    """-v/-q on the top parser and on every verb, so they work before or after the verb (a verb's
    own defaults are SUPPRESS: they do not undo one given before the verb)."""
    d: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    sp.add_argument(
        "-v",
        "--verbose",
        action="count",
        help="more detail on stderr: log messages, a line when each stage ends (repeat for debug)",
        **({"default": 0} if top else d),
    )
    sp.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="errors and results only: no progress, notes or 'wrote ...' lines",
        **({"default": False} if top else d),
    )


def _json_arg(sp: argparse.ArgumentParser, what: str) -> None:
    sp.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help=f"{what} as JSON: on stdout instead of the table (no FILE), or into FILE (the table is printed too)",
    )


def _data_arg(sp: argparse.ArgumentParser, help: str, required: bool = False, dest: str = "data") -> None:
    """The one data flag of every verb: --data, with the names older versions used as aliases."""
    sp.add_argument("--data", "--input", "--calib", dest=dest, required=required, metavar="DATA.npz", help=help)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tinyc", description="Compile ONNX models to static C for MCUs and desktops.")
    p.add_argument("--version", action="version", version=f"tinyc {__version__}")
    _verbosity_args(p, top=True)
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, **kw: Any) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, **kw)
        _verbosity_args(sp)
        return sp

    def model_args(sp: argparse.ArgumentParser, several: bool = False) -> None:
        if several:
            sp.add_argument("model", nargs="+", help="ONNX or .tflite model file(s); several: compiled together")
        else:
            sp.add_argument("model", help="ONNX or .tflite model file")
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

    def target_arg(sp: argparse.ArgumentParser, default: str | None) -> None:
        sp.add_argument(
            "--target",
            choices=list(TARGETS),
            default=default,
            help="host (C for this machine, default) or opencl (OpenCL C kernels for a GPU or CPU "
            "device); use --board for microcontrollers",
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
        _data_arg(
            sp,
            "calibration inputs: one array per model input (npz keys = input names), leading sample "
            "dimension (old names: --calib, --input)",
            required=required,
            dest="calib",
        )
        sp.add_argument(
            "--calib-method",
            choices=["minmax", "percentile", "mse"],
            default="minmax",
            help="activation range: observed min/max (default), 99.99th percentile, or MSE-optimal",
        )

    def prepare_args(sp: argparse.ArgumentParser) -> None:
        """How a model is prepared: the options compile, analyze and tune share."""
        sp.add_argument(
            "--bind",
            action="append",
            metavar="NAME=FILE.npy",
            help="freeze a model input to a constant value (repeatable)",
        )
        sp.add_argument(
            "--quantize",
            choices=["auto", "int8", "none"],
            default="auto",
            help="int8: post-training quantization (needs --data); auto (default): QDQ models run in "
            "int8 with their own scales; none: all float",
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

    def tuning_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--tuning-log",
            metavar="LOG.jsonl",
            help="use the fastest exact schedule per layer from a `tinyc tune` log for this board/target "
            "(compile prints one line per layer it sets)",
        )
        sp.add_argument(
            "--device",
            help="--target opencl with --tuning-log: whose records (PLATFORM:DEVICE; default the log's one "
            "OpenCL device)",
        )

    sp = add("inspect", help="show the graph after import and passes")
    model_args(sp)
    _json_arg(sp, "the graph (inputs, outputs, layers with shapes, params, MACs)")
    sp.set_defaults(func=_cmd_inspect)

    sp = add("compile", help="compile a model (or several, sharing an arena) to a C project")
    model_args(sp, several=True)
    sp.add_argument("-o", "--output", required=True, help="output folder")
    target_arg(sp, "host")
    sp.add_argument("--board", help="write a firmware project for this board (see `tinyc boards`)")
    sp.add_argument(
        "--format",
        choices=list(FORMATS),
        default="project",
        help="with --board: a standalone firmware project with the serial harness (default), or a "
        "static library + CMake target + Makefile fragment for your own firmware",
    )
    board_dir_arg(sp)
    sp.add_argument("--name", help="C symbol prefix (default: model file name; one model only)")
    sp.add_argument("--cflags", help=f"C flags for the host build (default from boards/host.toml: {_host_cflags()})")
    sp.add_argument("--build", action="store_true", help="also build it now")
    prepare_args(sp)
    sp.add_argument(
        "--keep-state",
        action="store_true",
        help="recurrent layers (LSTM, SVDF) keep their state from one inference to the next (streaming); "
        "default: every inference starts from the reset state, as TFLite Micro after reset()",
    )
    tuning_args(sp)
    sp.add_argument(
        "--shared-arena",
        action="store_true",
        help="several models: one arena (the larger plan) shared by models that never run at once",
    )
    sp.add_argument(
        "--arena-section",
        metavar="SECTION",
        help="place the arena in this linker section (as the <M>_ARENA_SECTION macro does)",
    )
    sp.add_argument(
        "--weights-section",
        metavar="SECTION",
        help="place the weights in this linker section (as the <M>_WEIGHTS_SECTION macro does)",
    )
    sp.set_defaults(func=_cmd_compile)

    sp = add(
        "analyze",
        help="fit on a board, RAM/flash/arena, MACs, weights and the per-layer table, without writing a project",
    )
    model_args(sp)
    sp.add_argument("--board", help="check the fit on this board (see `tinyc boards`)")
    target_arg(sp, "host")
    board_dir_arg(sp)
    prepare_args(sp)
    tuning_args(sp)
    _json_arg(sp, "the analysis (summary, fit, layers)")
    sp.set_defaults(func=_cmd_analyze)

    sp = add("tune", help="search kernel schedules per layer on the board (or host) and log them")
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
    sp.add_argument(
        "-o",
        "--output",
        "--log",
        dest="log",
        default="tune.jsonl",
        help="tuning log (JSON Lines, appended; resumed from)",
    )
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
    _json_arg(sp, "the per-layer results")
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

    sp = add("worker", help="join a tuning farm (a Dask scheduler) with the boards attached here")
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

    sp = add("farm", help="a tuning farm's state")
    farm_sub = sp.add_subparsers(dest="farm_command", required=True)
    fs = farm_sub.add_parser("status", help="workers, their boards, busy/idle, measurements per minute")
    _verbosity_args(fs)
    fs.add_argument(
        "address",
        nargs="?",
        help=f"the Dask scheduler, e.g. tcp://sched:8786 (default: ${SCHEDULER_ENV}, else {DEFAULT_SCHEDULER})",
    )
    _json_arg(fs, "the status")
    fs.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the scheduler (default 10)")
    fs.set_defaults(func=_cmd_farm)

    sp = add("quantize", help="int8-quantize a float model: QDQ ONNX export and accuracy report")
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
    sp.add_argument("--labels", help=".npy of labels for top-1 accuracy (or a 'labels' key in the data file)")
    sp.set_defaults(func=_cmd_quantize)

    sp = add("run", help="build (if needed) and run a compiled project on inputs from an .npz")
    sp.add_argument("project", help="folder written by `tinyc compile`")
    _data_arg(
        sp,
        ".npz whose keys are the model's input names (a one-input model also takes an .npy); old name: --input",
        required=True,
    )
    sp.add_argument("-o", "--output", help="write the outputs to this .npz")
    sp.add_argument(
        "--raw", action="store_true", help="int8 outputs as the int8 values (default: dequantized to float)"
    )
    port_arg(sp)
    sp.add_argument(
        "--device",
        metavar="PLATFORM:DEVICE",
        help="OpenCL folders: the device (see `tinyc devices`; default the first GPU, else the first device)",
    )
    _json_arg(sp, "the outputs (dtype, shape, values)")
    sp.set_defaults(func=_cmd_run)

    sp = add("devices", help="list the OpenCL platforms and devices")
    _json_arg(sp, "the devices")
    sp.set_defaults(func=_cmd_devices)

    sp = add("boards", help="list the board definitions")
    board_dir_arg(sp)
    _json_arg(sp, "the boards")
    sp.set_defaults(func=_cmd_boards)

    sp = add("build", help="build a compiled folder (firmware: prints flash/RAM/stack use)")
    sp.add_argument("project", help="folder written by `tinyc compile`")
    sp.add_argument("--force", action="store_true", help="rebuild even when nothing changed")
    sp.set_defaults(func=_cmd_build)

    sp = add("flash", help="build if needed and flash the firmware (emulated boards: start QEMU) and check it answers")
    sp.add_argument("project", help="firmware project written by `tinyc compile --board`")
    port_arg(sp)
    sp.set_defaults(func=_cmd_flash)

    sp = add("validate", help="compiled outputs vs golden model vs onnxruntime or TFLite Micro (and accuracy)")
    sp.add_argument("project", help="folder written by `tinyc compile`")
    _data_arg(
        sp,
        ".npz of inputs (keys = input names, leading sample dimension); labels under a 'labels' key "
        "or --labels; old name: --input",
        required=True,
    )
    sp.add_argument("--labels", help=".npy of labels for accuracy")
    sp.add_argument("-o", "--output", dest="json", metavar="FILE", help="write the comparison as JSON (= --json FILE)")
    _json_arg(sp, "the comparison")
    sp.add_argument(
        "--raw", action="store_true", help="compare int8 outputs as int8 values (default: dequantized to float)"
    )
    sp.add_argument(
        "--against",
        choices=("auto", "onnxruntime", "tflm", "none"),
        default="auto",
        help="the independent reference: onnxruntime for ONNX, TFLite Micro's interpreter for .tflite "
        "(tflm needs `pip install 'tinyc[tflite]'`); auto picks by the source model",
    )
    port_arg(sp)
    sp.set_defaults(func=_cmd_validate)

    sp = add("profile", help="per-layer counts (or OpenCL kernel times), MACs, MACs per count, share")
    sp.add_argument(
        "project",
        help="firmware project written by `tinyc compile --board`, or an OpenCL folder "
        "(`--target opencl`: per-kernel device times from event profiling)",
    )
    _data_arg(sp, ".npz to profile on (first sample; default zeros); old name: --input")
    sp.add_argument("-o", "--output", dest="json", metavar="FILE", help="write the profile as JSON (= --json FILE)")
    _json_arg(sp, "the profile")
    sp.add_argument("--device", help="OpenCL folders: PLATFORM:DEVICE (see `tinyc devices`)")
    sp.add_argument("--repeat", type=int, default=10, help="OpenCL folders: inferences, median taken (default 10)")
    port_arg(sp)
    sp.set_defaults(func=_cmd_profile)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.quiet and args.verbose:
        print("tinyc: error: -q and -v contradict each other; give one", file=sys.stderr)
        return 2
    set_verbosity(-1 if args.quiet else int(args.verbose or 0))
    try:
        return int(args.func(args) or 0)
    except TinycError as exc:
        print(f"tinyc: error: {exc.printable()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("tinyc: interrupted", file=sys.stderr)
        return 130
    finally:
        set_verbosity(0)  # main() called twice in one process (tests) starts from the default


if __name__ == "__main__":
    sys.exit(main())
