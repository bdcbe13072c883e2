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
    arena_section: str | None = None,
    weights_section: str | None = None,
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
    (streaming) instead of starting from the reset state each time, as TFLite Micro does after reset().
    arena_section / weights_section: the linker section the static arena / the weights go to by
    default (the <M>_ARENA_SECTION / <M>_WEIGHTS_SECTION macros, docs/c-api.md); a firmware
    project's linker script gets a rule for each.
    The folder is written through a staging folder (tinyc.targets.output_dir): a failed compile
    leaves nothing behind, and only what tinyc wrote before is replaced."""
    from tinyc.codegen.emitter import Placement
    from tinyc.pipeline import choose_schedules, source_path, write_outputs
    from tinyc.targets.output_dir import staged_output
    from tinyc.targets.registry import get_target

    tgt = get_target(target, board, board_dir, format, cflags)
    placement = Placement(
        False, _section(arena_section, "--arena-section"), _section(weights_section, "--weights-section")
    )
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
    with staged_output(out) as stage:
        report, files = write_outputs(stage, graph, tgt, chosen, name, quant, source_path(model), extra, placement)
    if build:
        report.update(build_project(out))
    return CompileResult(out, graph, report, files)


def _section(name: str | None, flag: str) -> str | None:
    """A linker section name as given to --arena-section/--weights-section: it is written into C
    strings and linker scripts, so only the characters section names use are taken."""
    import re

    if name is None:
        return None
    if not re.fullmatch(r"[A-Za-z_.][A-Za-z0-9_.$]{0,63}", name):
        raise UsageError(f"{flag} {name!r} is not a section name (letters, digits, '_', '.', '$'; e.g. .sram2)")
    return name


def compile_models(
    models: Sequence[Any],
    output_dir: str | os.PathLike,
    *,
    shared_arena: bool = False,
    names: Sequence[str] | None = None,
    **options: Any,
) -> CompileResult:
    """Compile several models into one folder (host, or `board=` with `format="library"`), each
    with its own C prefix: from its file name (de-duplicated: `kws`, `kws_2`), or `names`.
    shared_arena: every model's one-call API runs on one static arena of the largest plan
    (tinyc_shared_arena.h, TINYC_SHARED_ARENA_BYTES) — for models that never run at the same
    time; the context API takes one buffer of that size for all of them either way. Without it
    each model keeps its own arena. `options` are `compile`'s (except `name`).
    Returns one CompileResult: the first model's graph and report at the top level, every model's
    report under report["models"] (the same list report.json holds), all generated files.
    A firmware `project` (the serial harness serves one model) refuses several models."""
    from tinyc.numerics.text import c_prefix
    from tinyc.pipeline import choose_schedules, source_path, write_model_set
    from tinyc.targets.output_dir import staged_output
    from tinyc.targets.registry import get_target

    models = list(models)
    if not models:
        raise UsageError("compile_models needs at least one model")
    if "name" in options:
        raise UsageError("compile_models takes names=[...] (one per model), not name=")
    if names is not None and len(names) != len(models):
        raise UsageError(f"names= gives {len(names)} names for {len(models)} models")
    if len(models) == 1 and not shared_arena:
        return compile(models[0], output_dir, name=names[0] if names else None, **options)
    build = bool(options.pop("build", False))
    tgt = get_target(
        options.get("target", "host"),
        options.get("board"),
        options.get("board_dir"),
        options.get("format", "project"),
        options.get("cflags"),
    )
    if tgt.board is not None and getattr(tgt, "format", "") == "project" and len(models) > 1:
        raise UsageError(
            "a firmware project (--format project) serves one model over its serial harness: compile "
            "several models with --board B --format library, or one model per folder"
        )
    if tgt.selects_device and len(models) > 1:
        raise UsageError("--target opencl compiles one model per folder: compile each model into its own folder")
    prefixes = _model_prefixes(models, names, c_prefix)
    arena_section = _section(options.pop("arena_section", None), "--arena-section")
    weights_section = _section(options.pop("weights_section", None), "--weights-section")
    prep_keys = ("input_shapes", "io_layout", "bind", "quantize", "calib", "calib_method", "io_dtype")
    prep = {k: options[k] for k in prep_keys if k in options}
    known = set(prep_keys) | {"target", "board", "board_dir", "format", "cflags", "schedules", "tuning_log"}
    known |= {"device", "keep_state"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(f"compile_models: unknown option(s) {', '.join(unknown)}")
    items = []
    first_graph: Graph | None = None
    for model, prefix in zip(models, prefixes):
        graph, quant = (model, None) if isinstance(model, Graph) else prepare(model, name=prefix, **prep)
        if options.get("keep_state"):
            from tinyc.ops.state import set_keep_state

            if not set_keep_state(graph, True):
                raise UsageError(f"--keep-state: model {prefix} has no layer with a state (LSTM, SVDF) to keep")
        tuned: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        if options.get("tuning_log") is not None:
            from tinyc.tune.apply import log_board, schedules_from_log

            log = options["tuning_log"]
            tuned = schedules_from_log(graph, log, log_board(tgt, log, options.get("device")), tgt.schedule_target)
            extra["tuned_layers"] = sorted(tuned)
        chosen = choose_schedules(graph, tgt, tuned, options.get("schedules"))
        first_graph = first_graph or graph
        items.append(
            dict(
                graph=graph, schedules=chosen, prefix=prefix, quant=quant, source_model=source_path(model), extra=extra
            )
        )
    out = Path(output_dir)
    with staged_output(out) as stage:
        report, files = write_model_set(stage, items, tgt, shared_arena, arena_section, weights_section)
    if build:
        report.update(build_project(out))
    assert first_graph is not None
    return CompileResult(out, first_graph, report, files)


def _model_prefixes(models: Sequence[Any], names: Sequence[str] | None, c_prefix: Any) -> list[str]:
    """One C prefix per model: `names`, else the file name's stem (a graph's name), made an
    identifier and de-duplicated (`a`, `a_2`, ...)."""
    out: list[str] = []
    for k, model in enumerate(models):
        if names is not None:
            base = str(names[k])
        elif isinstance(model, Graph):
            base = model.name or f"model{k}"
        elif isinstance(model, (str, os.PathLike)):
            base = Path(model).stem
        else:  # an onnx.ModelProto: its graph's name
            base = str(getattr(getattr(model, "graph", None), "name", "") or f"model{k}")
        prefix = c_prefix(base)
        if names is not None and prefix.lower() in {p.lower() for p in out}:
            raise UsageError(f"names= gives the C prefix {prefix!r} twice: give each model its own name")
        candidate, n = prefix, 2
        while candidate.lower() in {p.lower() for p in out}:
            candidate, n = f"{prefix}_{n}", n + 1
        out.append(candidate)
    return out


def analyze(
    model: Any,
    board: str | None = None,
    target: str = "host",
    input_shapes: Sequence[str] | Mapping[str, Sequence[int]] | None = None,
    io_layout: str = "onnx",
    bind: Mapping[str, Any] | None = None,
    quantize: str = "auto",
    calib: Any = None,
    calib_method: str = "minmax",
    io_dtype: str = "float",
    board_dir: str | os.PathLike | None = None,
    tuning_log: str | os.PathLike | None = None,
    device: str | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """What `compile` would produce, without writing anything (as `stedgeai analyze`): the code is
    generated in memory only. Returns MACs, params, weights and arena bytes, the per-layer table
    and, for a board, the fit against its flash and RAM — `fit["fits"]`, the needed and available
    bytes and, when it does not fit, the compile's error with its remedy (never raised here)."""
    from tinyc.codegen import generate
    from tinyc.errors import BuildError
    from tinyc.pipeline import choose_schedules
    from tinyc.targets.registry import get_target

    tgt = get_target(target, board, board_dir, "project", None)
    graph, quant = prepare(model, input_shapes, name, io_layout, bind, quantize, calib, calib_method, io_dtype=io_dtype)
    tuned: dict[str, Any] = {}
    if tuning_log is not None:
        from tinyc.tune.apply import log_board, schedules_from_log

        tuned = schedules_from_log(graph, tuning_log, log_board(tgt, tuning_log, device), tgt.schedule_target)
    gen = generate(graph, prefix=name, target=tgt.schedule_target, schedules=choose_schedules(graph, tgt, tuned))
    report: dict[str, Any] = dict(gen.report, target=tgt.name)
    report.update(tgt.report_fields())
    if quant is not None:
        from tinyc.quantize.report import quantization_summary

        report["quantization"] = quantization_summary(quant)
    report.pop("format", None)
    specs = list(gen.manifest.get("inputs", [])) + list(gen.manifest.get("outputs", []))
    io = sum(
        max(int(np.prod(s["shape"], dtype=np.int64)) if s["shape"] else 1, 1) * np.dtype(s["dtype"]).itemsize
        for s in specs
    )
    report["io_bytes"] = io
    report["tuned_layers"] = sorted(tuned)
    mem = (tgt.board or {}).get("memory") if tgt.board else None
    if mem:
        ram_need = int(report["arena_bytes"]) + io + int(mem["stack_size"])
        fit: dict[str, Any] = {
            "board": tgt.name,
            "flash": {"need": int(report["weights_bytes"]), "available": int(mem["flash_size"]), "what": "weights"},
            "ram": {
                "need": ram_need,
                "available": int(mem["ram_size"]),
                "what": f"arena {report['arena_bytes']} + inputs/outputs {io} + stack {mem['stack_size']}",
            },
            "fits": True,
            "message": None,
        }
        try:
            tgt.check(report, gen.manifest)
        except BuildError as exc:
            fit["fits"] = False
            fit["message"] = str(exc)
        report["fit"] = fit
    return report


def build_project(project_dir: str | os.PathLike, force: bool = False) -> dict[str, Any]:
    """Build a compiled folder with its toolchain: host (shared library + runner), firmware
    (ELF; flash/RAM/stack sizes measured and written into report.json), library (lib<prefix>.a)
    or OpenCL (the program, built on the default device). The result becomes the reports' "build"
    section (report.json, report.md, report.html)."""
    from tinyc.report import update_reports
    from tinyc.targets.registry import project_target

    out = Path(project_dir)
    result = project_target(out).build(out, force=force)
    update_reports(out, "build", result)  # report.md/report.html gain the measured sizes
    return result


@dataclass
class QuantizeResult:
    """What `quantize` produced: the QDQ model (when written), the comparison, the report text."""

    model_path: Path | None
    comparison: Any
    summary: dict[str, Any]
    report_markdown: str


def _split_labels(calib: Any, labels: Any, input_names: Sequence[str]) -> tuple[Any, np.ndarray | None]:
    """Labels come from an explicit `labels` or from a key named 'labels' (when that is not a model
    input) — never guessed from another key: a stray 'y' is refused with the keys listed."""
    from tinyc.quantize.calibrate import _load_calib
    from tinyc.quantize.feeds import LABEL_KEYS

    data = dict(_load_calib(calib))
    for key in LABEL_KEYS:
        if key in data and key not in input_names:
            found = data.pop(key)
            labels = found if labels is None else labels
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
    raw: bool = False,
) -> dict[str, np.ndarray]:
    """Build (if needed) and run compiled C on `inputs` (npz path, npy path or one array for a
    one-input model, or dict); optionally save an npz. Arrays either have the model's exact input
    shape, or one extra leading dim N for N runs. The data is checked first (names, dtype, shape,
    N >= 1, integer ranges, NaN/Inf for int8 inputs: tinyc.quantize.feeds); bad data is a RunError.
    A firmware project runs on its board (flashed/emulated as needed; `port` for real boards); an
    OpenCL folder on `device` ("platform:device" as `devices()` lists; default the first GPU, else
    the first device). Outputs of an --io-dtype int8 model are returned (and saved) dequantized
    to float32 on their grids (the manifest's scale and zero point), unless `raw`: then the int8
    values themselves (tinyc.quantize.output_view)."""
    from tinyc.codegen.manifest import load_manifest
    from tinyc.quantize.output_view import present_outputs
    from tinyc.targets.registry import project_target

    out = Path(output_dir)
    results = project_target(out).run(out, inputs, port=port, device=device)
    results = present_outputs(out, load_manifest(out), results, raw=raw)
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
    """Per-layer counts, MACs, MACs per count and share on the board (one inference); for a host
    folder the median nanoseconds of each `<prefix>_run_layer` (in-process, `repeat` runs); for an
    OpenCL folder per-kernel device nanoseconds on `device` (median of `repeat` inferences). Every
    layer is numbered by its code-layer index, as report.md and the header's NUM_LAYERS; the
    result also goes into report.json/report.md/report.html ("profile")."""
    from tinyc.report import update_reports
    from tinyc.targets.registry import project_target

    out = Path(project_dir)
    result = project_target(out).profile(out, inputs, port=port, device=device, repeat=repeat, **options)
    update_reports(out, "profile", result)
    return result


def validate(
    project_dir: str | os.PathLike,
    data: Any,
    port: str | None = None,
    labels: Any = None,
    against: str = "auto",
    device: str | None = None,
    raw: bool = False,
    output: str | os.PathLike | None = None,
    **options: Any,
) -> dict[str, Any]:
    """A compiled folder's outputs — a board's, the host library's or an OpenCL device's
    (`device`) — vs the golden model (bit for bit for int8) and an independent reference on the
    source model — onnxruntime for ONNX, TFLite Micro's interpreter for .tflite (`against`: "auto",
    "onnxruntime", "tflm", "none"; an int8 .tflite must equal TFLite Micro bit for bit); accuracy with
    labels. Per output and comparison: RMSE, cosine similarity, max and mean absolute error, top-1
    agreement (docs/validation.md). Bit-exactness is judged on the integers; the metrics (and the
    outputs saved to `output`, an .npz) are on dequantized floats for --io-dtype int8 outputs unless
    `raw`. The result is JSON-serialisable and also goes into the reports ("validation")."""
    from tinyc.quantize.feeds import as_numeric, load_one_array
    from tinyc.report import update_reports
    from tinyc.targets.registry import project_target

    lab = None
    if labels is not None:
        lab = (
            load_one_array(labels, "--labels", RunError)
            if isinstance(labels, (str, os.PathLike))
            else as_numeric("labels", labels)
        )
    out = Path(project_dir)
    result = project_target(out).validate(
        out, data, port=port, labels=lab, against=against, device=device, raw=raw, output=output, **options
    )
    update_reports(out, "validation", result)
    return result


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
