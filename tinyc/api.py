"""The public Python API; the CLI is a thin layer over these functions.

Each function chooses a Target (tinyc.targets.registry: from the compile options, or from a
compiled folder's manifest) and asks it; the pipeline (tinyc.pipeline: `prepare`, schedules,
generate, write) is shared with the tuner. `prepare` is part of this API too."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from tinyc.errors import RunError, UsageError
from tinyc.ir import Graph
from tinyc.pipeline import prepare


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


def inspect(
    model: Any, input_shapes: Sequence[str] | Mapping[str, Sequence[int]] | None = None, io_layout: str = "onnx"
) -> str:
    """The graph after import and passes, one line per layer with shapes, params and MACs."""
    from tinyc.ops.dump import dump_graph

    return dump_graph(load(model, input_shapes, io_layout=io_layout))


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
    keep_state: bool = False,
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
    and a tuning log, whose records to take ("platform:device"; default: the log's one device).
    keep_state: recurrent layers (LSTM, SVDF) carry their state from one inference to the next
    (streaming) instead of starting from the reset state each time, as TFLite Micro does after reset()."""
    from tinyc.pipeline import choose_schedules, source_path, write_outputs
    from tinyc.targets.registry import get_target

    tgt = get_target(target, board, board_dir, format, cflags)
    quant = None
    if isinstance(model, Graph):
        graph = model
    else:
        graph, quant = prepare(
            model, input_shapes, name, io_layout, bind, quantize, calib, calib_method, io_dtype=io_dtype
        )
    if keep_state:
        from tinyc.ops.state import set_keep_state

        if not set_keep_state(graph, True):
            raise UsageError("--keep-state: the model has no layer with a state (LSTM, SVDF) to keep")
    out = Path(output_dir)
    tuned: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if tuning_log is not None:
        from tinyc.tune.apply import log_board, schedules_from_log

        tuned = schedules_from_log(graph, tuning_log, log_board(tgt, tuning_log, device), tgt.schedule_target)
        extra["tuned_layers"] = sorted(tuned)
    chosen = choose_schedules(graph, tgt, tuned, schedules)
    report, files = write_outputs(out, graph, tgt, chosen, name, quant, source_path(model), extra)
    if build:
        report.update(build_project(out))
    return CompileResult(out, graph, report, files)


def build_project(project_dir: str | os.PathLike, force: bool = False) -> dict[str, Any]:
    """Build a compiled folder with its toolchain: host (shared library + runner), firmware
    (ELF; flash/RAM/stack sizes measured and written into report.json), library (lib<prefix>.a)
    or OpenCL (the program, built on the default device)."""
    from tinyc.targets.registry import project_target

    out = Path(project_dir)
    return project_target(out).build(out, force=force)


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

    from tinyc.frontend.tflite import import_tflite, is_tflite_model

    tflite = is_tflite_model(model)
    if tflite:
        if output is not None:
            raise UsageError(
                "-o writes a QDQ ONNX model, which needs an ONNX source; for a float .tflite, compile it with "
                "--quantize int8 --calib (the same grids) or drop -o for the accuracy report"
            )
        float_graph = import_tflite(model)
        names = list(float_graph.inputs)
        if any(float_graph.tensor(n).dtype != "float32" for n in names):
            raise UsageError("the .tflite model is already quantized: tinyc quantize takes a float32 model")
        proto = None
    else:
        proto = model if isinstance(model, onnx.ModelProto) else load_onnx(model)
        names = [i.name for i in proto.graph.input]
    data, lab = _split_labels(calib, labels, names)
    graph, quant = prepare(
        model if tflite else proto,
        input_shapes,
        quantize="int8",
        calib=data,
        calib_method=calib_method,
        progress=progress,
    )
    path = None
    if output is not None and proto is not None:
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
    title = (proto.graph.name if proto is not None else "") or graph.name or "model"
    text = comparison_markdown(cmp, summary, title)
    if report is not None:
        Path(report).parent.mkdir(parents=True, exist_ok=True)
        Path(report).write_text(text)
    return QuantizeResult(path, cmp, summary, text)


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
    from tinyc.targets.registry import project_target

    out = Path(output_dir)
    results = project_target(out).run(out, inputs, port=port, device=device)
    if output is not None:
        np.savez(output, **results)  # type: ignore[arg-type]  # numpy's stubs match **kwds against allow_pickle
    return results


def run_on_board(project_dir: str | os.PathLike, inputs: Any, port: str | None = None, **options: Any) -> Any:
    """Run a firmware project on its board over the serial harness: outputs plus the count of
    each inference (`DeviceRun`: instructions under QEMU, cycles on hardware)."""
    from tinyc.targets.registry import project_target

    out = Path(project_dir)
    return project_target(out).run_on_board(out, inputs, port=port, **options)


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
    from tinyc.targets.registry import project_target

    out = Path(project_dir)
    return project_target(out).profile(out, inputs, port=port, device=device, repeat=repeat, **options)


def validate(
    project_dir: str | os.PathLike,
    data: Any,
    port: str | None = None,
    labels: Any = None,
    against: str = "auto",
    **options: Any,
) -> dict[str, Any]:
    """Device outputs vs the golden model (bit for bit for int8) and an independent reference on the
    source model — onnxruntime for ONNX, TFLite Micro's interpreter for .tflite (`against`: "auto",
    "onnxruntime", "tflm", "none"; an int8 .tflite must equal TFLite Micro bit for bit); accuracy with labels."""
    from tinyc.quantize.feeds import as_numeric, load_one_array
    from tinyc.targets.registry import project_target

    lab = None
    if labels is not None:
        lab = (
            load_one_array(labels, "--labels", RunError)
            if isinstance(labels, (str, os.PathLike))
            else as_numeric("labels", labels)
        )
    out = Path(project_dir)
    return project_target(out).validate(out, data, port=port, labels=lab, against=against, **options)


def flash(project_dir: str | os.PathLike, port: str | None = None, **options: Any) -> dict[str, Any]:
    """Build if needed and flash the firmware (emulated boards: start QEMU); returns the board's
    HELLO (board, model, hash, versions, arena, layers, I/O bytes)."""
    from tinyc.targets.registry import project_target

    out = Path(project_dir)
    return project_target(out).flash(out, port, **options)


def devices() -> list[Any]:
    """The OpenCL devices found (`tinyc devices`): id "platform:device", kind, name, memory."""
    from tinyc.targets.opencl import list_devices

    return list_devices()
