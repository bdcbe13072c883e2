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
    placement: Any = None,
) -> tuple[dict[str, Any], list[str]]:
    """Generate the code, write the target's folder with report.json, report.md, report.html and memory.svg,
    and let the target refuse what cannot work on it (a board's flash and RAM). Returns the
    report and the generated file names. `placement`: the sections baked into the C
    (tinyc.codegen.emitter.Placement)."""
    from tinyc.codegen import generate
    from tinyc.report import write_reports

    gen = generate(graph, prefix=prefix, target=target.schedule_target, schedules=schedules, placement=placement)
    target.write_project(out, gen, graph, source_model)
    report = dict(gen.report, target=target.name)
    report.update(extra_report or {})
    report.update(target.report_fields())
    if quant is not None:
        from tinyc.quantize.report import quantization_summary

        report["quantization"] = quantization_summary(quant)
    write_reports(out, report, gen.layout)  # report.json, report.md, report.html, memory.svg
    target.check(report, gen.manifest)
    return report, sorted(gen.files)


def source_path(model: Any) -> str | None:
    """The model file's absolute path when `model` is one (a firmware's validate finds it there)."""
    return str(Path(model).resolve()) if isinstance(model, (str, os.PathLike)) else None


def write_model_set(
    out: Path,
    items: Sequence[Mapping[str, Any]],
    target: Target,
    shared_arena: bool = False,
    arena_section: str | None = None,
    weights_section: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Several models into one folder (`tinyc.api.compile_models`): each item is {graph,
    schedules, prefix, quant, source_model, extra}. Every model keeps its own sources and
    prefix; with `shared_arena` their one-call APIs share one static arena of the largest plan
    (tinyc_shared_arena.h). The folder's manifest and report.json describe the first model at the
    top level (so `build` and `run` work as for one model) and list every model under "models".
    Returns the report and the generated file names."""
    from tinyc.codegen import generate
    from tinyc.codegen.emitter import Placement
    from tinyc.codegen.shared_arena import shared_arena_bytes, shared_arena_files
    from tinyc.report import write_reports

    placement = Placement(shared_arena, arena_section, weights_section)
    gens = [
        generate(
            it["graph"],
            prefix=it["prefix"],
            target=target.schedule_target,
            schedules=it["schedules"],
            placement=placement,
        )
        for it in items
    ]
    files: dict[str, str] = {}
    for gen in gens:
        files.update(gen.files)
    reports = []
    for it, gen in zip(items, gens):
        rep = dict(gen.report, target=target.name)
        rep.update(it.get("extra") or {})
        if it.get("quant") is not None:
            from tinyc.quantize.report import quantization_summary

            rep["quantization"] = quantization_summary(it["quant"])
        reports.append(rep)
    sizes = [{"prefix": g.manifest["prefix"], "arena_bytes": g.report["arena_bytes"]} for g in gens]
    if shared_arena:
        files.update(shared_arena_files(sizes, arena_section))
    models = [{k: v for k, v in g.manifest.items() if k != "render"} for g in gens]
    first = gens[0]
    manifest = dict(first.manifest, models=models)
    if shared_arena:
        manifest["shared_arena_bytes"] = shared_arena_bytes(sizes)
    merged = type(first)(files, manifest, first.report, first.layout, first.schedules, dict(first.blobs))
    target.write_project(out, merged, items[0]["graph"], items[0].get("source_model"))
    report = dict(reports[0])
    report.update(target.report_fields())
    report["models"] = reports
    if shared_arena:
        report["shared_arena_bytes"] = shared_arena_bytes(sizes)
    write_reports(out, report, first.layout)  # report.json, report.md, report.html, memory.svg
    for rep, gen in zip(reports, gens):
        target.check(rep, gen.manifest)
    if len(gens) > 1:  # each fits alone: do they fit together (weights summed, arenas summed or shared)?
        target.check(*_together(reports, [g.manifest for g in gens], shared_arena))
    return report, sorted(files)


def _together(
    reports: Sequence[Mapping[str, Any]], manifests: Sequence[Mapping[str, Any]], shared_arena: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The report and manifest a fit check sees for several models linked into one firmware:
    their weights add up, their arenas add up (one plan's size with a shared arena), their I/O
    buffers add up. `together` lists the models; the remedy suggests --shared-arena when it
    would help."""
    arenas = [int(r.get("arena_bytes", 0)) for r in reports]
    names = ", ".join(f"'{m.get('model', m.get('prefix'))}'" for m in manifests)
    report = {
        "weights_bytes": sum(int(r.get("weights_bytes", 0)) for r in reports),
        "arena_bytes": max(arenas) if shared_arena else sum(arenas),
        "quantization": all(r.get("quantization") for r in reports) or None,
        "together": {"arenas": arenas, "shared_arena": shared_arena},
    }
    manifest = {
        "model": f"the set of models {names}",
        "inputs": [s for m in manifests for s in m.get("inputs", [])],
        "outputs": [s for m in manifests for s in m.get("outputs", [])],
    }
    return report, manifest
