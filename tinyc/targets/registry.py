"""The four targets and the two ways to find one: from compile options (`get_target`) and from a
compiled folder (`project_target`). This is the one place target names are compared."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tinyc.errors import UsageError
from tinyc.ir import Graph
from tinyc.ir.isa import Isa
from tinyc.targets.base import Target, load_inputs, refuse_device
from tinyc.targets.packages.layout import PACKAGE_FORMATS

#: --format with --board: a firmware project (the serial harness as main), a library for your
#: firmware, or a package for its build system (tinyc.targets.packages)
FORMATS = ("project", "library", *PACKAGE_FORMATS)


def _first_sample(out: Path, inputs: Any) -> Any:
    """A profile's one input: the first sample of `inputs`, checked against the folder's manifest
    (None: the target profiles on zeros)."""
    from tinyc.codegen.manifest import load_manifest
    from tinyc.quantize.feeds import prepare_feeds

    if inputs is None:
        return None
    return prepare_feeds(load_manifest(Path(out)), load_inputs(inputs)).model(0)


class HostTarget(Target):
    """C for this machine: a CMake project building a shared library and a CLI runner."""

    name = schedule_target = "host"

    def __init__(self, cflags: str | None = None) -> None:
        self.cflags = cflags

    def write_project(self, out: Path, gen: Any, graph: Graph, source_model: str | None) -> None:
        from tinyc.device.runner import save_golden_graph
        from tinyc.targets import host

        host.write_project(
            out, gen.files, gen.manifest, self.cflags if self.cflags is not None else host.default_cflags()
        )
        save_golden_graph(out, graph, source_model)  # for `tinyc validate`

    def build(self, out: Path, force: bool = False) -> dict[str, Any]:
        from tinyc.targets import host

        return {"library": str(host.build(out, force=force))}

    def profile(
        self,
        out: Path,
        inputs: Any = None,
        port: str | None = None,
        device: str | None = None,
        repeat: int = 10,
        **options: Any,
    ) -> dict[str, Any]:
        """Median nanoseconds per code layer (`<prefix>_run_layer`) over `repeat` runs, in-process."""
        from tinyc.targets.host_profile import profile_host

        refuse_device(device)
        return profile_host(out, _first_sample(out, inputs), repeat=repeat)

    def validate(
        self,
        out: Path,
        data: Any,
        port: str | None = None,
        labels: Any = None,
        against: str = "auto",
        device: str | None = None,
        raw: bool = False,
        output: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """The library's outputs vs the golden model and onnxruntime or TFLite Micro."""
        from tinyc.targets.host import validate_host

        refuse_device(device)
        return validate_host(out, load_inputs(data, "data file"), labels, against, raw=raw, output=output)


class OpenCLTarget(Target):
    """OpenCL C kernels, a weights blob and launch metadata, run on a chosen OpenCL device."""

    name = schedule_target = "opencl"
    selects_device = True

    def write_project(self, out: Path, gen: Any, graph: Graph, source_model: str | None) -> None:
        from tinyc.device.runner import save_golden_graph
        from tinyc.targets import opencl

        opencl.write_project(out, gen.files, gen.blobs, gen.manifest)
        save_golden_graph(out, graph, source_model)  # for `tinyc validate`

    def build(self, out: Path, force: bool = False) -> dict[str, Any]:
        from tinyc.targets.opencl import OpenCLModel

        model = OpenCLModel(out)  # builds the program on the default device: its errors surface here
        return {"device": model.device.name.strip(), "kernels": len(model.kernels)}

    def run(self, out: Path, inputs: Any, port: str | None = None, device: str | None = None) -> dict[str, np.ndarray]:
        from tinyc.targets import opencl

        return opencl.run_batch(out, load_inputs(inputs), device=device)

    def profile(
        self,
        out: Path,
        inputs: Any = None,
        port: str | None = None,
        device: str | None = None,
        repeat: int = 10,
        **options: Any,
    ) -> dict[str, Any]:
        """Per-kernel device nanoseconds on `device` (median of `repeat` inferences)."""
        from tinyc.targets.opencl_profile import profile_opencl

        return profile_opencl(out, _first_sample(out, inputs), device=device, repeat=repeat)

    def validate(
        self,
        out: Path,
        data: Any,
        port: str | None = None,
        labels: Any = None,
        against: str = "auto",
        device: str | None = None,
        raw: bool = False,
        output: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """The program's outputs on `device` vs the golden model and onnxruntime or TFLite Micro."""
        from tinyc.targets.opencl import validate_opencl

        return validate_opencl(out, load_inputs(data, "data file"), device, labels, against, raw=raw, output=output)


class _BoardBased(Target):
    """A target built with a board's toolchain (boards/*.toml)."""

    format = "project"

    def __init__(self, board: Mapping[str, Any]) -> None:
        self.definition: dict[str, Any] = dict(board)  # the board file's tables
        self.board = self.definition
        self.name = self.definition["name"]
        self.schedule_target = Isa.of_board(self.definition).name

    def report_fields(self) -> dict[str, Any]:
        return {"board": self.name, "format": self.format}

    def check(self, report: Mapping[str, Any], manifest: Mapping[str, Any]) -> None:
        """The weights must fit the board's flash and the arena + I/O + stack its RAM: for a
        library too, since the firmware it goes into runs on that board."""
        from tinyc.targets.board import check_fit

        check_fit(report, manifest, self.definition)


class BoardTarget(_BoardBased):
    """A standalone firmware project for a microcontroller board, with the serial harness as main."""

    def write_project(self, out: Path, gen: Any, graph: Graph, source_model: str | None) -> None:
        from tinyc.device.runner import save_golden_graph
        from tinyc.targets.board import write_board_project

        write_board_project(out, gen.files, gen.manifest, self.definition)
        save_golden_graph(out, graph, source_model)

    def build(self, out: Path, force: bool = False) -> dict[str, Any]:
        from tinyc.targets.board import build_board_project

        return build_board_project(out, force=force)

    def run(self, out: Path, inputs: Any, port: str | None = None, device: str | None = None) -> dict[str, np.ndarray]:
        refuse_device(device)
        outputs: dict[str, np.ndarray] = self.run_on_board(out, inputs, port=port).outputs
        return outputs

    def device_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The firmware is built (when its sources changed) before it is flashed."""
        from tinyc.targets.board import build_board_project

        return dict(options, build=build_board_project)


class LibraryTarget(_BoardBased):
    """A static library + CMake target + Makefile fragment for an existing firmware build."""

    format = "library"

    def write_project(self, out: Path, gen: Any, graph: Graph, source_model: str | None) -> None:
        from tinyc.targets.library import write_library_project

        write_library_project(out, gen.files, gen.manifest, self.definition)

    def build(self, out: Path, force: bool = False) -> dict[str, Any]:
        from tinyc.targets.library import build_library

        return {"library": str(build_library(out, force=force))}

    def run(self, out: Path, inputs: Any, port: str | None = None, device: str | None = None) -> dict[str, np.ndarray]:
        refuse_device(device)
        raise UsageError(
            f"{out} is a library for your own firmware build (--format library); it has no "
            "runner: compile with --format project to run it on the board"
        )


#: targets chosen by name (--target); boards are chosen with --board
TARGETS: dict[str, type[Target]] = {"host": HostTarget, "opencl": OpenCLTarget}


def load_mcu_board(board: str | None, board_dir: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """The board definition named `board`, None for none or for the host board (boards/host.toml)."""
    from tinyc.targets.boards import load_board

    board_def = load_board(board, None if board_dir is None else Path(board_dir)) if board else None
    if board_def is not None and board_def.get("kind") == "host":
        return None
    return board_def


def get_target(
    target: str = "host",
    board: str | None = None,
    board_dir: str | os.PathLike | None = None,
    format: str = "project",
    cflags: str | None = None,
) -> Target:
    """The target of a compile: a board (firmware project or library) when `board` names a
    microcontroller, else the named target."""
    if format not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    board_def = load_mcu_board(board, board_dir)
    if board_def is not None:
        if format in PACKAGE_FORMATS:
            from tinyc.targets.packages import PackageTarget

            return PackageTarget(format, board_def)
        return LibraryTarget(board_def) if format == "library" else BoardTarget(board_def)
    if target not in TARGETS:
        raise UsageError(f"unknown target '{target}' (available: {', '.join(TARGETS)}; or --board NAME)")
    if format != "project":
        raise UsageError(f"--format {format} needs --board (it is built with the board's toolchain)")
    return HostTarget(cflags) if target == "host" else TARGETS[target]()


def target_for(board: Mapping[str, Any] | None, schedule_target: str) -> Target:
    """The target a measurement runs on: the board when given (a microcontroller), else the
    target named by its schedule target ("host", "opencl")."""
    if board is not None:
        return BoardTarget(board)
    return TARGETS[schedule_target]()


def project_target(project_dir: str | os.PathLike) -> Target:
    """The target a compiled folder was written for, read from its tinyc.json (and board.json)."""
    from tinyc.codegen.manifest import load_manifest
    from tinyc.device.project import BOARD_JSON, load_project_board

    out = Path(project_dir)
    manifest = load_manifest(out)
    if manifest.get("target") == "opencl":
        return OpenCLTarget()
    if manifest.get("board") and (out / BOARD_JSON).is_file():
        return BoardTarget(load_project_board(out))
    if manifest.get("format") == "library":
        return LibraryTarget({"name": str(manifest.get("board", ""))})  # its board only builds it
    if manifest.get("format") in PACKAGE_FORMATS:
        from tinyc.targets.packages import PackageTarget

        return PackageTarget(str(manifest["format"]), {"name": str(manifest.get("board", ""))})
    return HostTarget()
