"""The two steps of measuring a batch, and what travels between them, wherever they run.

1. `build_image`: write and compile the batch's project in a build folder of this process (one
   folder per concurrent builder, reused so CMake's configuration and the runtime's objects stay
   built), then pack the project into a `Firmware` — the files the runner needs, as bytes.
2. `measure_image`: unpack the firmware into a fresh folder next to the board, measure every
   candidate, delete the folder.

The local executor runs them on threads and the farm's workers as Dask tasks
(``tinyc.tune.executor`` submits, ``tinyc.tune.farm`` runs them on a worker): both import this
module, and it imports neither, so the executor and the farm never import each other back.
`MeasureSpec` is what a farm task carries; it is here because the tuner builds one without Dask.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator, Mapping

from tinyc.errors import BuildError
from tinyc.tune.bench import Batch

#: CMake's own files and intermediate objects: rebuilt by CMake, never needed to run a firmware.
_SKIP_DIRS = frozenset({"CMakeFiles"})
_SKIP_NAMES = frozenset({"CMakeCache.txt", "Makefile", "cmake_install.cmake", "compile_commands.json"})
_SKIP_SUFFIXES = frozenset({".o", ".obj", ".d", ".map"})


@dataclass
class Firmware:
    """A built batch as it travels from its builder to the board that measures it: every file of
    the project but CMake's intermediates (the ELF/.bin/.hex or shared library, the manifest, the
    board definition, the sources with the build stamp, so the runner sees the image as built)."""

    name: str
    files: dict[str, bytes]
    build_s: float
    #: the builder's breakdown (tinyc.tune.objects.BuildStats.as_dict: generate/compile/link seconds)
    build_info: dict[str, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(len(v) for v in self.files.values())


@dataclass
class BuildFailed:
    """The batch did not build (or did not fit): the tuner halves it until the culprit is alone."""

    name: str
    message: str
    #: how many leading candidates would fit the flash (tinyc.tune.objects.BatchTooBig), 0: unknown
    fit: int = 0


@dataclass
class Measured:
    """A measured batch: one Measurement per candidate, and where and how long it took."""

    measurements: list[Any]
    measure_s: float
    where: str = ""  # on a farm: the worker (and port) that measured it
    build_s: float = 0.0
    #: seconds per step: generate_s, compile_s, link_s (the build), flash_s, run_s (the board),
    #: plus the objects compiled and found cached
    times: dict[str, float] = field(default_factory=dict)


def pack_project(folder: Path) -> dict[str, bytes]:
    """Every file of a built project a runner needs, relative path -> bytes."""
    folder = Path(folder)
    files: dict[str, bytes] = {}
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(names):
            if name in _SKIP_NAMES or Path(name).suffix in _SKIP_SUFFIXES:
                continue
            path = Path(root) / name
            if path.is_file():
                files[path.relative_to(folder).as_posix()] = path.read_bytes()
    return files


def unpack_project(files: Mapping[str, bytes], folder: Path) -> Path:
    """Write a packed project into `folder` (which must not exist yet)."""
    folder = Path(folder)
    folder.mkdir(parents=True)
    for rel, data in files.items():
        path = folder / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise ValueError(f"refusing to unpack {rel!r} outside {folder}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


class BuildFolders:
    """Project folders under `root` for concurrent builds: each builder takes a free one (the
    least recently freed, so a builder usually gets back the folder CMake already configured)
    and gives it back after packing the firmware. At most as many folders as builders ever ran
    at once."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()
        self._free: list[Path] = []
        self._count = 0

    @contextmanager
    def take(self) -> Iterator[Path]:
        with self._lock:
            if self._free:
                folder = self._free.pop(0)
            else:
                folder = self.root / f"build{self._count}"
                self._count += 1
        try:
            yield folder
        finally:
            with self._lock:
                self._free.append(folder)


def build_image(measurer: Any, batch: Batch, name: str, folders: BuildFolders) -> Firmware | BuildFailed:
    """Step 1: build the batch in a free folder and pack it (see the module docstring)."""
    t0 = time.perf_counter()
    with folders.take() as out:
        try:
            project = measurer.prepare(batch, name, out=out)
        except BuildError as exc:
            return BuildFailed(name, str(exc), int(getattr(exc, "fit", 0) or 0))
        files = pack_project(project)
    info: dict[str, Any] = {}
    raw = files.get("tune_build.json")  # (tinyc.tune.objects.BUILD_INFO)
    if raw is not None:
        try:
            info = dict(json.loads(raw))
        except (ValueError, TypeError):
            info = {}
    return Firmware(name, files, time.perf_counter() - t0, info)


def measure_image(
    measurer: Any, firmware: Firmware, batch: Batch, scratch: Path, on_result: Callable[[Any], None] | None = None
) -> Measured:
    """Step 2: unpack `firmware` into a fresh folder under `scratch`, measure every candidate of
    `batch` with `measurer` (its board, port or device; `on_result` gets each measurement as it
    exists), delete the folder."""
    scratch = Path(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{firmware.name}-", dir=scratch)) / "project"
    t0 = time.perf_counter()
    times: dict[str, float] = {}
    try:
        unpack_project(firmware.files, folder)
        if getattr(measurer, "reports_times", False):
            results = measurer.measure(batch, folder, on_result or (lambda m: None), times=times)
        else:
            results = measurer.measure(batch, folder, on_result or (lambda m: None))
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    measure_s = time.perf_counter() - t0
    info = firmware.build_info
    steps = {
        k: float(info.get(k, 0.0)) for k in ("generate_s", "compile_s", "link_s", "compile_cpu_s", "compiled", "cached")
    }
    if "flash_s" not in times:  # a measurer that does not tell: all of it is running candidates
        times = {"flash_s": 0.0, "run_s": measure_s}
    else:  # unpacking the firmware and stopping the emulator count as flashing
        times["flash_s"] = measure_s - times.get("run_s", 0.0)
    return Measured(list(results), measure_s, build_s=firmware.build_s, times={**steps, **times})


@dataclass(frozen=True)
class MeasureSpec:
    """What a farm worker needs to build and measure this run's batches (travels with each task):
    the board definition (workers need no board files), the schedule target, measuring options
    and the client's tinyc version (a worker running another version would generate other code)."""

    board: Mapping[str, Any]
    target: str
    repeat: int | None = None
    run_timeout: float = 10.0
    tinyc_version: str = ""

    @property
    def resource(self) -> str:
        """The Dask worker resource naming one attached board of this definition."""
        return board_resource(self.board["name"])


def board_resource(board_name: str) -> str:
    """``board:<name>``: named after the board definition, so several board types share a farm."""
    return f"board:{board_name}"
