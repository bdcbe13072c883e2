"""The public Python API; the CLI is a thin layer over these functions."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from tinyc.errors import RunError, UsageError
from tinyc.ir import Graph

TARGETS = ("host",)


@dataclass
class CompileResult:
    """What `compile` produced: where, and the numbers that went into report.json."""

    output_dir: Path
    graph: Graph
    report: dict[str, Any]
    files: list[str]


def load(model: Any, input_shapes: Sequence[str] | Mapping[str, Sequence[int]] | None = None,
         name: str | None = None, io_layout: str = "onnx", bind: Mapping[str, Any] | None = None) -> Graph:
    """Import an ONNX model (path or ModelProto) and run the optimisation passes.
    `bind` freezes named inputs to constants (e.g. a Reshape's shape fed as an input)."""
    from tinyc.frontend import import_onnx
    from tinyc.passes import run_passes
    graph = import_onnx(model, input_shapes=input_shapes, name=name, bind=bind)
    return run_passes(graph, io_layout=io_layout)


def inspect(model: Any, input_shapes: Sequence[str] | Mapping[str, Sequence[int]] | None = None,
            io_layout: str = "onnx") -> str:
    """The graph after import and passes, one line per layer with shapes, params and MACs."""
    from tinyc.ir.dump import dump_graph
    return dump_graph(load(model, input_shapes, io_layout=io_layout))


def compile(model: Any, output_dir: str | os.PathLike, target: str = "host",
            input_shapes: Sequence[str] | Mapping[str, Sequence[int]] | None = None,
            name: str | None = None, io_layout: str = "onnx", cflags: str | None = None,
            build: bool = False, bind: Mapping[str, Any] | None = None) -> CompileResult:
    """Compile `model` to C in `output_dir` (sources, CMake project, report.json)."""
    from tinyc.codegen import generate
    from tinyc.targets import host
    if target not in TARGETS:
        raise UsageError(f"unknown target '{target}' (available: {', '.join(TARGETS)})")
    graph = model if isinstance(model, Graph) else load(model, input_shapes, name=name, io_layout=io_layout, bind=bind)
    out = Path(output_dir)
    gen = generate(graph, prefix=name)
    host.write_project(out, gen.files, gen.manifest, cflags if cflags is not None else host.default_cflags())
    report = dict(gen.report, target=target)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    from tinyc.report import markdown_report, memory_svg
    (out / "report.md").write_text(markdown_report(report))
    (out / "memory.svg").write_text(memory_svg(gen.layout))
    if build:
        host.build(out)
    return CompileResult(out, graph, report, sorted(gen.files))


def _load_inputs(inputs: Any) -> dict[str, np.ndarray]:
    if isinstance(inputs, (str, os.PathLike)):
        p = Path(inputs)
        if not p.exists():
            raise RunError(f"input file not found: {p}")
        try:
            with np.load(p, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        except Exception as exc:
            raise RunError(f"{p} is not a readable .npz file: {exc}") from None
    if isinstance(inputs, Mapping):
        return {k: np.asarray(v) for k, v in inputs.items()}
    raise UsageError("inputs must be a path to an .npz file or a mapping of name -> array")


def run(output_dir: str | os.PathLike, inputs: Any, output: str | os.PathLike | None = None) -> dict[str, np.ndarray]:
    """Build (if needed) and run compiled C on `inputs` (npz path or dict); optionally save an npz.
    Arrays either have the model's exact input shape, or one extra leading dim N for N runs."""
    from tinyc.targets import host
    feeds = _load_inputs(inputs)
    results = host.run_batch(output_dir, feeds)
    if output is not None:
        np.savez(output, **results)
    return results
