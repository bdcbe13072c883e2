"""The compile pipeline: `prepare` (import, passes, quantization) and the steps that turn the
prepared graph into a target's folder (schedules, generate, write the project and its reports).

Layer: this module sits above `tinyc.targets` and `tinyc.device` and below `tinyc.tune`, so that
the tuner prepares a model exactly as `compile` does by importing the same function, and the API
and CLI sit on top of both. The one compile input that comes from the tuner, a tuning log, is
read by the API (tinyc.tune.apply) and handed in as per-layer overrides.

Import order of the packages (low -> high; a package imports only its own layer or lower ones):
ir -> numerics -> ops -> frontend, passes, quantize, schedule, memory, reference -> codegen,
report -> device -> targets -> pipeline -> tune -> api -> cli (the contract in pyproject.toml).
The device side (serial protocol, flashers) sits below the targets because a board target uses
it to run, profile and flash; it never imports a target back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tinyc.errors import UsageError
from tinyc.ir import Graph
from tinyc.targets.base import Target


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
    """Import an ONNX or .tflite model and run the passes and quantization; returns the graph and the
    QuantizationResult (None for a float graph). See `tinyc.api.load` for the options.
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
    from tinyc.frontend.tflite import is_tflite_model

    if is_tflite_model(model):
        graph = _import_tflite(model, input_shapes, name, bind)
        if graph.has_integer_activations():  # a full-integer .tflite keeps TFLite Micro's arithmetic as imported
            if quantize == "int8" and calib is not None:
                raise UsageError("the .tflite model is already quantized (int8): drop --quantize/--calib")
            run_passes(graph, io_layout="onnx", int8=None)
            return graph, None
        io_layout = "onnx"  # a .tflite declares its own (NHWC) layout
    else:
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


def _import_tflite(model: Any, input_shapes: Any, name: str | None, bind: Any) -> Graph:
    """A .tflite model's graph (shapes are fixed in the file: no --input-shape, no bind); a float one
    then goes through the same passes and, with calibration data, the same PTQ as an ONNX model."""
    from tinyc.frontend.tflite import import_tflite

    if input_shapes:
        raise UsageError("--input-shape does not apply to a .tflite model: its shapes are fixed in the file")
    if bind:
        raise UsageError("bind does not apply to a .tflite model")
    return import_tflite(model, name=name)


def choose_schedules(
    graph: Graph,
    target: Target,
    tuned: Mapping[str, Mapping[str, Any]] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Each layer's schedule for the target: its default, then what a tuning log chose (`tuned`),
    then explicit overrides (keyed by node or ONNX node name, checked against the target)."""
    from tinyc.schedule import apply_overrides, default_schedules

    chosen = default_schedules(graph, target.schedule_target)
    if tuned:
        chosen = apply_overrides(graph, chosen, tuned)
    return apply_overrides(graph, chosen, overrides, target.schedule_target)


def write_outputs(
    out: Path,
    graph: Graph,
    target: Target,
    schedules: dict[str, dict[str, Any]],
    prefix: str | None = None,
    quant: Any = None,
    source_model: str | None = None,
    extra_report: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Generate the code, write the target's folder with report.json, report.md and memory.svg,
    and let the target refuse what cannot work on it (a board's flash and RAM). Returns the
    report and the generated file names."""
    from tinyc.codegen import generate
    from tinyc.report import markdown_report, memory_svg

    gen = generate(graph, prefix=prefix, target=target.schedule_target, schedules=schedules)
    target.write_project(out, gen, graph, source_model)
    report = dict(gen.report, target=target.name)
    report.update(extra_report or {})
    report.update(target.report_fields())
    if quant is not None:
        from tinyc.quantize.report import quantization_summary

        report["quantization"] = quantization_summary(quant)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(markdown_report(report))
    (out / "memory.svg").write_text(memory_svg(gen.layout))
    target.check(report, gen.manifest)
    return report, sorted(gen.files)


def source_path(model: Any) -> str | None:
    """The model file's absolute path when `model` is one (a firmware's validate finds it there)."""
    return str(Path(model).resolve()) if isinstance(model, (str, os.PathLike)) else None
