"""The public Python API; the CLI is a thin layer over these functions."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from tinyc.errors import RunError, UsageError
from tinyc.ir import Graph

TARGETS = ("host", "opencl")


@dataclass
class CompileResult:
    """What `compile` produced: where, and the numbers that went into report.json."""

    output_dir: Path
    graph: Graph
    report: dict[str, Any]
    files: list[str]


def load(
    model: Any,
    input_shapes: Sequence[str] | Mapping[str, Sequence[int]] | None = None,
    name: str | None = None,
    io_layout: str = "onnx",
    bind: Mapping[str, Any] | None = None,
    quantize: str = "auto",
    calib: Any = None,
    calib_method: str = "minmax",
) -> Graph:
    """Import an ONNX model (path or ModelProto) and run the optimisation passes.
    `bind` freezes named inputs to constants (e.g. a Reshape's shape fed as an input).
    quantize: 'auto' runs a QDQ model in int8 with its own scales (float models stay float),
    'int8' quantizes (a float model needs `calib`), 'none' keeps everything float."""
    return prepare(model, input_shapes, name, io_layout, bind, quantize, calib, calib_method)[0]


def prepare(
    model: Any,
    input_shapes: Sequence[str] | Mapping[str, Sequence[int]] | None = None,
    name: str | None = None,
    io_layout: str = "onnx",
    bind: Mapping[str, Any] | None = None,
    quantize: str = "auto",
    calib: Any = None,
    calib_method: str = "minmax",
    progress: bool = True,
    io_dtype: str = "float",
) -> tuple[Graph, Any]:
    """`load`, also returning the QuantizationResult (None for a float graph).
    io_dtype "int8": a quantized model takes and gives int8 on its boundary grids (no float copy
    of the input in the arena; see quantize.io)."""
    from tinyc.frontend import import_onnx
    from tinyc.passes import run_passes
    from tinyc.passes.qdq import has_int8_annotations
    from tinyc.quantize.flow import QUANTIZE_MODES, quantize_graph
    from tinyc.quantize.io import IO_DTYPES, make_io_int8

    if io_dtype not in IO_DTYPES:
        raise UsageError(f"--io-dtype must be one of {', '.join(IO_DTYPES)}, got {io_dtype!r}")
    if quantize not in QUANTIZE_MODES:
        raise UsageError(f"--quantize must be one of {', '.join(QUANTIZE_MODES)}, got {quantize!r}")
    if calib is not None and quantize == "none":
        raise UsageError("calibration data given but quantization is off (--quantize none)")
    if calib is not None:
        quantize = "int8"
    graph = import_onnx(model, input_shapes=input_shapes, name=name, bind=bind)
    run_passes(graph, io_layout=io_layout, int8={"auto": None, "int8": True, "none": False}[quantize])
    annotated = has_int8_annotations(graph)
    if quantize == "int8" and calib is None and not annotated:
        raise UsageError(
            "--quantize int8 needs calibration data (--calib calib.npz: one array per model "
            "input with a leading sample dimension)"
        )
    if quantize == "int8" or (quantize == "auto" and annotated):
        result = quantize_graph(graph, calib, method=calib_method, progress=progress)
        if io_dtype == "int8":
            make_io_int8(result.graph)
        return result.graph, result
    if io_dtype == "int8":
        raise UsageError("--io-dtype int8 needs an int8 model (--quantize int8 with --calib, or a QDQ model)")
    return graph, None


def inspect(
    model: Any, input_shapes: Sequence[str] | Mapping[str, Sequence[int]] | None = None, io_layout: str = "onnx"
) -> str:
    """The graph after import and passes, one line per layer with shapes, params and MACs."""
    from tinyc.ir.dump import dump_graph

    return dump_graph(load(model, input_shapes, io_layout=io_layout))


FORMATS = ("project", "library")


def compile(
    model: Any,
    output_dir: str | os.PathLike,
    target: str = "host",
    input_shapes: Sequence[str] | Mapping[str, Sequence[int]] | None = None,
    name: str | None = None,
    io_layout: str = "onnx",
    cflags: str | None = None,
    build: bool = False,
    bind: Mapping[str, Any] | None = None,
    quantize: str = "auto",
    calib: Any = None,
    calib_method: str = "minmax",
    board: str | None = None,
    board_dir: str | os.PathLike | None = None,
    format: str = "project",
    io_dtype: str = "float",
    schedules: Mapping[str, Mapping[str, Any]] | None = None,
    tuning_log: str | os.PathLike | None = None,
    device: str | None = None,
) -> CompileResult:
    """Compile `model` to C in `output_dir` (sources, CMake project, report.json).
    quantize/calib/calib_method: see `load` (int8 post-training quantization).
    board: a board definition (boards/*.toml, or `board_dir`) — writes a firmware project for it
    (format "project": harness, startup, linker script; "library": a static library + CMake target
    + Makefile fragment for an existing firmware build). A model that does not fit the board's
    flash/RAM is refused with the numbers.
    io_dtype: "float" (default) or "int8" — see `prepare`.
    tuning_log: a `tinyc tune` log; each layer takes the fastest exact schedule the log holds for
    this target (board) and layer, the default where it has none. schedules: explicit per-layer
    knob overrides (keyed by node or ONNX node name), applied last. device: with target "opencl"
    and a tuning log, whose records to take ("platform:device"; default: the log's one device)."""
    from tinyc.codegen import generate
    from tinyc.targets import host
    from tinyc.targets.boards import load_board

    if format not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    board_def = load_board(board, board_dir) if board else None
    if board_def is not None and board_def.get("kind") == "host":
        board_def = None
    if board_def is None:
        if target not in TARGETS:
            raise UsageError(f"unknown target '{target}' (available: {', '.join(TARGETS)}; or --board NAME)")
        if format != "project":
            raise UsageError("--format library needs --board (the library is built with the board's toolchain)")
    quant = None
    if isinstance(model, Graph):
        graph = model
    else:
        graph, quant = prepare(
            model, input_shapes, name, io_layout, bind, quantize, calib, calib_method, io_dtype=io_dtype
        )
    out = Path(output_dir)
    target_name = board_def["name"] if board_def else target
    from tinyc.schedule import apply_overrides, board_target, default_schedules

    sched_target = board_target(board_def) if board_def else target
    chosen = default_schedules(graph, sched_target)
    tuned: dict[str, Any] = {}
    if tuning_log is not None:
        from tinyc.tune.apply import schedules_from_log

        log_board = target_name
        if board_def is None and target == "opencl":
            from tinyc.tune.apply import opencl_log_board

            log_board = opencl_log_board(tuning_log, device)
        tuned = schedules_from_log(graph, tuning_log, log_board, sched_target)
        chosen = apply_overrides(graph, chosen, tuned)
    chosen = apply_overrides(graph, chosen, schedules, sched_target)
    gen = generate(graph, prefix=name, target=sched_target, schedules=chosen)
    if board_def is None and target == "opencl":
        from tinyc.targets import opencl

        opencl.write_project(out, gen.files, gen.blobs, gen.manifest)
    elif board_def is None:
        host.write_project(out, gen.files, gen.manifest, cflags if cflags is not None else host.default_cflags())
    elif format == "library":
        from tinyc.targets.library import write_library_project

        write_library_project(out, gen.files, gen.manifest, board_def)
    else:
        from tinyc.device.runner import save_golden_graph
        from tinyc.targets.board import write_board_project

        write_board_project(out, gen.files, gen.manifest, board_def)
        source = str(Path(model).resolve()) if isinstance(model, (str, os.PathLike)) else None
        save_golden_graph(out, graph, source)
    report = dict(gen.report, target=target_name)
    if tuning_log is not None:
        report["tuned_layers"] = sorted(tuned)
    if board_def is not None:
        report.update(board=board_def["name"], format=format)
    if quant is not None:
        from tinyc.quantize.report import quantization_summary

        report["quantization"] = quantization_summary(quant)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    from tinyc.report import markdown_report, memory_svg

    (out / "report.md").write_text(markdown_report(report))
    (out / "memory.svg").write_text(memory_svg(gen.layout))
    if board_def is not None and format == "project":
        from tinyc.targets.board import check_fit

        check_fit(report, gen.manifest, board_def)
    if build:
        report.update(build_project(out))
    return CompileResult(out, graph, report, sorted(gen.files))


def build_project(project_dir: str | os.PathLike, force: bool = False) -> dict[str, Any]:
    """Build a compiled folder with its toolchain: host (shared library + runner), firmware
    (ELF; flash/RAM/stack sizes measured and written into report.json) or library (lib<prefix>.a)."""
    from tinyc.targets import host

    out = Path(project_dir)
    manifest = host.load_manifest(out)
    if manifest.get("target") == "opencl":
        from tinyc.targets.opencl import OpenCLModel

        model = OpenCLModel(out)  # builds the program on the default device: its errors surface here
        return {"device": model.device.name.strip(), "kernels": len(model.kernels)}
    if _is_firmware(out):
        from tinyc.targets.board import build_board_project

        return build_board_project(out, force=force)
    if manifest.get("format") == "library":
        from tinyc.targets.library import build_library

        return {"library": str(build_library(out, force=force))}
    return {"library": str(host.build(out, force=force))}


@dataclass
class QuantizeResult:
    """What `quantize` produced: the QDQ model (when written), the comparison, the report text."""

    model_path: Path | None
    comparison: Any
    summary: dict[str, Any]
    report_markdown: str


def _split_labels(calib: Any, labels: Any, input_names: Sequence[str]) -> tuple[Any, np.ndarray | None]:
    """Calibration data may carry labels under 'y' (when 'y' is not a model input)."""
    from tinyc.quantize.calibrate import _load_calib

    data = dict(_load_calib(calib))
    if labels is None and "y" in data and "y" not in input_names:
        labels = data.pop("y")
    elif "y" in data and "y" not in input_names:
        data.pop("y")
    if isinstance(labels, (str, os.PathLike)):
        from tinyc.quantize.feeds import load_one_array

        labels = load_one_array(labels, "--labels", UsageError)
    return data, None if labels is None else np.asarray(labels)


def quantize(
    model: Any,
    calib: Any,
    output: str | os.PathLike | None = None,
    report: str | os.PathLike | None = None,
    calib_method: str = "minmax",
    labels: Any = None,
    input_shapes: Sequence[str] | Mapping[str, Sequence[int]] | None = None,
    progress: bool = True,
) -> QuantizeResult:
    """Post-training int8 quantization of a float model without compiling it: optionally write a
    QDQ ONNX model (the same grids, for onnxruntime or other tools) and a Markdown report of
    float vs int8 per layer (SNR, max error), top-1, weights and arena bytes."""
    import onnx

    from tinyc.frontend import import_onnx, load_onnx
    from tinyc.quantize.calibrate import calibration_samples, collect_ranges
    from tinyc.quantize.report import compare_float_int8, comparison_markdown, quantization_summary

    proto = model if isinstance(model, onnx.ModelProto) else load_onnx(model)
    names = [i.name for i in proto.graph.input]
    data, lab = _split_labels(calib, labels, names)
    graph, quant = prepare(
        proto, input_shapes, quantize="int8", calib=data, calib_method=calib_method, progress=progress
    )
    path = None
    if output is not None:
        from tinyc.quantize.export import export_qdq

        imported = import_onnx(proto, input_shapes=input_shapes)
        ranges = collect_ranges(imported, data, method=calib_method, progress=progress)
        qdq = export_qdq(proto, {k: (r.min, r.max) for k, r in ranges.items()})
        path = Path(output)
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(qdq, str(path))
    n, feeds = calibration_samples(quant.float_graph, data)
    cmp = compare_float_int8(quant, feeds, n, lab, progress=progress)
    summary = quantization_summary(quant)
    title = proto.graph.name or "model"
    text = comparison_markdown(cmp, summary, title)
    if report is not None:
        Path(report).parent.mkdir(parents=True, exist_ok=True)
        Path(report).write_text(text)
    return QuantizeResult(path, cmp, summary, text)


def _load_inputs(inputs: Any, what: str = "input file") -> Mapping[str, Any]:
    """Input data as given: an .npz/.npy path (read without unpickling), a mapping name -> array,
    or one array for a one-input model. Checked against the model by every runner through
    tinyc.quantize.feeds.prepare_feeds (names, dtype, shape, N >= 1, values)."""
    from tinyc.quantize.feeds import load_arrays

    if isinstance(inputs, (str, os.PathLike)):
        return load_arrays(inputs, what, RunError)
    if isinstance(inputs, Mapping):
        return dict(inputs)
    if isinstance(inputs, np.ndarray):
        return {"x": inputs}
    raise UsageError(
        "inputs must be a path to an .npz/.npy file, a mapping of name -> array, or one array (one-input models)"
    )


def run(
    output_dir: str | os.PathLike,
    inputs: Any,
    output: str | os.PathLike | None = None,
    port: str | None = None,
    device: str | None = None,
) -> dict[str, np.ndarray]:
    """Build (if needed) and run compiled C on `inputs` (npz path, npy path or one array for a
    one-input model, or dict); optionally save an npz. Arrays either have the model's exact input
    shape, or one extra leading dim N for N runs. The data is checked first (names, dtype, shape,
    N >= 1, integer ranges, NaN/Inf for int8 inputs: tinyc.quantize.feeds); bad data is a RunError.
    A firmware project runs on its board (flashed/emulated as needed; `port` for real boards); an
    OpenCL folder on `device` ("platform:device" as `devices()` lists; default the first GPU, else
    the first device)."""
    from tinyc.targets import host

    manifest = host.load_manifest(Path(output_dir))
    if manifest.get("target") == "opencl":
        from tinyc.targets import opencl

        results = opencl.run_batch(output_dir, _load_inputs(inputs), device=device)
        if output is not None:
            np.savez(output, **results)
        return results
    if device is not None:
        raise UsageError("--device is for folders compiled with --target opencl")
    if manifest.get("format") == "library":
        raise UsageError(
            f"{output_dir} is a library for your own firmware build (--format library); it has no "
            "runner: compile with --format project to run it on the board"
        )
    feeds = _load_inputs(inputs)
    if _is_firmware(output_dir):
        results = run_on_board(output_dir, feeds, port=port).outputs
    else:
        results = host.run_batch(output_dir, feeds)
    if output is not None:
        np.savez(output, **results)
    return results


def _is_firmware(project_dir: str | os.PathLike) -> bool:
    from tinyc.targets import host

    return bool(host.load_manifest(Path(project_dir)).get("board")) and (Path(project_dir) / "board.json").is_file()


def run_on_board(project_dir: str | os.PathLike, inputs: Any, port: str | None = None, **options: Any) -> Any:
    """Run a firmware project on its board over the serial harness: outputs plus the count of
    each inference (`DeviceRun`: instructions under QEMU, cycles on hardware)."""
    from tinyc.device.runner import run_on_device

    return run_on_device(project_dir, _load_inputs(inputs), port=port, **options)


def profile(
    project_dir: str | os.PathLike,
    inputs: Any = None,
    port: str | None = None,
    device: str | None = None,
    repeat: int = 10,
    **options: Any,
) -> dict[str, Any]:
    """Per-layer counts, MACs, MACs per count and share on the board (one inference), or for an
    OpenCL folder per-kernel device nanoseconds on `device` (median of `repeat` inferences)."""
    from tinyc.device.runner import profile_on_device
    from tinyc.targets import host

    if host.load_manifest(Path(project_dir)).get("target") == "opencl":
        from tinyc.quantize.feeds import prepare_feeds
        from tinyc.targets.opencl_profile import profile_opencl

        feeds = None
        if inputs is not None:
            feeds = prepare_feeds(host.load_manifest(Path(project_dir)), _load_inputs(inputs)).model(0)
        return profile_opencl(project_dir, feeds, device=device, repeat=repeat)
    if device is not None:
        raise UsageError("--device is for folders compiled with --target opencl")
    return profile_on_device(project_dir, _load_inputs(inputs) if inputs is not None else None, port=port, **options)


def validate(
    project_dir: str | os.PathLike, data: Any, port: str | None = None, labels: Any = None, **options: Any
) -> dict[str, Any]:
    """Device outputs vs the golden model (bit for bit for int8) and onnxruntime; accuracy with labels."""
    from tinyc.device.runner import validate_on_device
    from tinyc.quantize.feeds import as_numeric, load_one_array

    lab = None
    if labels is not None:
        lab = (
            load_one_array(labels, "--labels", RunError)
            if isinstance(labels, (str, os.PathLike))
            else as_numeric("labels", labels)
        )
    return validate_on_device(project_dir, _load_inputs(data, "data file"), port=port, labels=lab, **options)


def flash(project_dir: str | os.PathLike, port: str | None = None, **options: Any) -> dict[str, Any]:
    """Build if needed and flash the firmware (emulated boards: start QEMU); returns the board's
    HELLO (board, model, hash, versions, arena, layers, I/O bytes)."""
    from tinyc.device.runner import connect

    with connect(project_dir, port, **options) as dev:
        return dict(dev.info, units=dev.units.name)


def devices() -> list[Any]:
    """The OpenCL devices found (`tinyc devices`): id "platform:device", kind, name, memory."""
    from tinyc.targets.opencl import list_devices

    return list_devices()
