"""The host target: a CMake project building a shared library (loaded with ctypes) and a CLI runner.

A sanitizer build (--cflags "-fsanitize=address,undefined") cannot be loaded into Python, so it
runs through the CLI runner on raw .bin files instead (`load_model`, `ExecutableModel`)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import numpy as np

from tinyc.version import __version__
from tinyc.errors import BuildError, RunError
from tinyc.quantize.feeds import (
    prepare_feeds,
    sample,  # noqa: F401
    stack_outputs,
    to_model_input,
)  # (re-exported: their home is feeds)
from tinyc.codegen.manifest import MANIFEST, load_manifest
from tinyc.resources import runtime_dir


def default_cflags() -> str:
    """The host board's flags (boards/host.toml), so one place says how host code is built."""
    from tinyc.targets.boards import load_board

    return str(load_board("host").get("toolchain", {}).get("cflags", "-O3"))


def write_sources(out_dir: Path, files: Mapping[str, str]) -> Path:
    """The generated model files plus runtime_c's include/ and src/ under out_dir/runtime (returned):
    what every project kind (host, firmware) starts from."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        _write_if_changed(out_dir / name, text)
    rt = out_dir / "runtime"
    for sub in ("include", "src"):
        (rt / sub).mkdir(parents=True, exist_ok=True)
        for f in sorted((runtime_dir() / sub).glob("*.[ch]")):
            _write_if_changed(rt / sub / f.name, f.read_text())
    return rt


def write_project(out_dir: Path, files: Mapping[str, str], manifest: dict[str, Any], cflags: str) -> None:
    from tinyc.codegen.emitter import template_env

    write_sources(out_dir, files)
    env = template_env()
    ctx = dict(manifest["render"], version=__version__, cflags=cflags)
    cmake = env.get_template("project/host/CMakeLists.txt.j2").render(**ctx)
    _write_if_changed(out_dir / "CMakeLists.txt", cmake + _other_models_cmake(files, manifest["prefix"]))
    _write_if_changed(out_dir / "main.c", env.get_template("project/host/main.c.j2").render(**ctx))
    public = {k: v for k, v in manifest.items() if k != "render"}
    _write_if_changed(out_dir / MANIFEST, json.dumps(public, indent=2) + "\n")


def _other_models_cmake(files: Mapping[str, str], prefix: str) -> str:
    """Several models in one folder (tinyc.api.compile_models): the library and the runner are
    the first model's; the other models' sources (and the shared arena) are linked into both."""
    others = sorted(f for f in files if f.endswith(".c") and f not in (f"{prefix}.c", f"{prefix}_weights.c"))
    if not others:
        return ""
    srcs = " ".join(others)
    return (
        "\n# The other models compiled into this folder (tinyc compile a.onnx b.onnx): linked into both.\n"
        f"target_sources({prefix} PRIVATE {srcs})\n"
        f"target_sources({prefix}_main PRIVATE {srcs})\n"
    )


def _write_if_changed(path: Path, text: str) -> None:
    """Keeps mtimes of unchanged files, so rebuilding an unchanged model is a no-op."""
    if path.exists() and path.read_text() == text:
        return
    path.write_text(text)


def _source_digest(out_dir: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(list(out_dir.glob("*.[ch]")) + list(out_dir.glob("runtime/*/*")) + [out_dir / "CMakeLists.txt"]):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def library_path(out_dir: Path, manifest: dict[str, Any]) -> Path:
    return out_dir / "build" / f"lib{manifest['prefix']}.so"


def build(out_dir: str | os.PathLike, force: bool = False, quiet: bool = True) -> Path:
    """Configure and build with CMake (skipped when sources are unchanged since the last build)."""
    out = Path(out_dir)
    manifest = load_manifest(out)
    lib = library_path(out, manifest)
    stamp = out / "build" / ".tinyc-sources"
    digest = _source_digest(out)
    if not force and lib.exists() and stamp.exists() and stamp.read_text() == digest:
        return lib
    if shutil.which("cmake") is None:
        raise BuildError("cmake is not installed (apt-get install cmake, or pip install cmake)")
    build_dir = out / "build"
    cmds = [
        ["cmake", "-S", str(out), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release"],
        ["cmake", "--build", str(build_dir), "-j", str(max(1, os.cpu_count() or 1))],
    ]
    for cmd in cmds:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
            raise BuildError(f"building {out} failed ({' '.join(cmd[:2])}):\n{tail}")
    stamp.write_text(digest)
    return lib


class HostModel:
    """The compiled model loaded in-process through ctypes."""

    def __init__(self, lib_path: Path, manifest: dict[str, Any]) -> None:
        self.manifest = manifest
        self.lib = ctypes.CDLL(str(lib_path))
        self.fn = getattr(self.lib, f"{manifest['prefix']}_run")
        self.fn.restype = ctypes.c_int
        self.inputs = manifest["inputs"]
        self.outputs = manifest["outputs"]

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        args, outs = [], {}
        keep = []
        for spec in self.inputs:
            arr = np.ascontiguousarray(to_model_input(spec, feeds[spec["name"]]))
            keep.append(arr)
            args.append(arr.ctypes.data_as(ctypes.c_void_p))
        for spec in self.outputs:
            arr = np.empty(spec["shape"], dtype=spec["dtype"])
            outs[spec["name"]] = arr
            args.append(arr.ctypes.data_as(ctypes.c_void_p))
        status = self.fn(*args)
        if status != 0:
            raise RunError(f"{self.manifest['prefix']}_run returned status {status}")
        return outs


def run_batch(out_dir: str | os.PathLike, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the compiled model on `inputs`: exact shapes (one inference), or N samples given as an
    extra leading dim (N, *shape) or, for models with batch 1, as (N, *shape[1:]). The data is
    checked (tinyc.quantize.feeds) before the library is built or loaded."""
    return run_measured(out_dir, inputs)[0]


def run_measured(
    out_dir: str | os.PathLike, inputs: Mapping[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """`run_batch`, plus what one inference took: the median wall-clock ns of a call (ctypes, or
    for a sanitizer build the runner process), as `validate` reports it."""
    import statistics
    import time

    out = Path(out_dir)
    manifest = load_manifest(out)
    feeds = prepare_feeds(manifest, inputs)
    model = load_model(out, manifest)
    results: dict[str, list[np.ndarray]] = {o["name"]: [] for o in manifest["outputs"]}
    from tinyc.progress import track

    n = feeds.n
    times: list[int] = []
    for k in track(range(n), "inferences", unit="inference", show=False if n < 200 else None):
        one = feeds.raw(k)
        t0 = time.perf_counter_ns()
        got = model(one)
        times.append(time.perf_counter_ns() - t0)
        for name, value in got.items():
            results[name].append(value)
    how = "the runner process (sanitizer build)" if isinstance(model, ExecutableModel) else "ctypes"
    measured = {
        "board": "host",
        "per_inference": float(statistics.median(times)),
        "units": "ns",
        "units_note": f"wall-clock ns of one inference through {how}, median of {n}",
    }
    return stack_outputs(results, feeds.mode), measured


def validate_host(
    out_dir: str | os.PathLike,
    data: Mapping[str, Any],
    labels: np.ndarray | None = None,
    against: str = "auto",
    raw: bool = False,
    output: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """`tinyc validate` on a host folder: the library's outputs vs the golden model vs onnxruntime
    or TFLite Micro (tinyc.device.validation; the same fields as a board's)."""
    from tinyc.device.runner import load_golden_graph
    from tinyc.device.validation import validate_outputs

    out = Path(out_dir)
    manifest = load_manifest(out)
    graph, source = load_golden_graph(out)
    build(out)  # before the timing: the first inference does not pay for the build
    return validate_outputs(
        out,
        manifest,
        data,
        lambda feeds: run_measured(out, feeds),
        graph,
        source,
        labels=labels,
        against=against,
        raw=raw,
        who="host",
        output=output,
    )


#: Symbols only a sanitizer-instrumented object references (gcc and clang alike).
_SANITIZER_MARKS = (
    b"__asan_init",
    b"__asan_report",
    b"__ubsan_handle_",
    b"__tsan_init",
    b"__msan_init",
    b"__hwasan_init",
)


def is_sanitized(lib_path: Path) -> bool:
    """Whether the built library is sanitizer-instrumented (-fsanitize=...): such a library cannot
    be loaded into Python with ctypes (ASan must come first in the process's library list and
    aborts the interpreter otherwise), so it runs through its runner executable instead."""
    try:
        data = Path(lib_path).read_bytes()
    except OSError:
        return False
    return any(mark in data for mark in _SANITIZER_MARKS)


def load_model(out_dir: str | os.PathLike, manifest: dict[str, Any] | None = None) -> Any:
    """Build if needed and load: in-process (`HostModel`), or for a sanitizer build the runner
    executable in a subprocess per inference (`ExecutableModel`); both are called the same way."""
    out = Path(out_dir)
    manifest = manifest if manifest is not None else load_manifest(out)
    lib = build(out)
    if is_sanitized(lib):
        return ExecutableModel(out / "build" / f"{manifest['prefix']}_main", manifest)
    return HostModel(lib, manifest)


class ExecutableModel:
    """The compiled model's runner (`<prefix>_main`, built beside the library) run once per call on
    raw little-endian .bin files: the way to run a sanitizer build, whose runtime then starts first
    as it requires. A sanitizer report (or any failure) is a RunError carrying the report."""

    #: Defaults where the user set none: UB stops the run (it is what the build is for), reports
    #: carry a stack trace.
    SANITIZER_ENV = {
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        "ASAN_OPTIONS": "abort_on_error=0:halt_on_error=1",
    }

    def __init__(self, exe: Path, manifest: dict[str, Any], timeout: float = 600.0) -> None:
        if not Path(exe).is_file():
            raise RunError(
                f"{exe} was not built: the sanitizer build runs through it (rebuild with `tinyc build "
                f"{Path(exe).parent.parent} --force`)"
            )
        self.exe = Path(exe)
        self.manifest = manifest
        self.inputs = manifest["inputs"]
        self.outputs = manifest["outputs"]
        self.timeout = timeout

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tempfile

        env = dict(os.environ)
        for key, value in self.SANITIZER_ENV.items():
            env.setdefault(key, value)
        with tempfile.TemporaryDirectory(prefix="tinyc-run-") as tmp:
            args = [str(self.exe)]
            for i, spec in enumerate(self.inputs):
                arr = np.ascontiguousarray(to_model_input(spec, feeds[spec["name"]]))
                data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
                path = Path(tmp) / f"in{i}.bin"
                path.write_bytes(data or bytes(arr.dtype.itemsize))  # main.c gives a zero-size tensor one element
                args.append(str(path))
            outs = [Path(tmp) / f"out{i}.bin" for i in range(len(self.outputs))]
            args += [str(p) for p in outs]
            try:
                proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=self.timeout)
            except subprocess.TimeoutExpired:
                raise RunError(f"{self.exe.name} did not finish within {self.timeout:g} s") from None
            report = (proc.stderr or "").strip()
            if proc.returncode != 0 or "runtime error:" in report:
                tail = "\n".join(report.splitlines()[-40:])
                raise RunError(f"{self.exe.name} failed (exit {proc.returncode})" + (f":\n{tail}" if tail else ""))
            results = {}
            for spec, path in zip(self.outputs, outs):
                dt = np.dtype(spec["dtype"]).newbyteorder("<")
                count = int(np.prod(spec["shape"], dtype=np.int64))
                raw = path.read_bytes()
                results[spec["name"]] = (
                    np.frombuffer(raw, dtype=dt, count=count).astype(dt.newbyteorder("=")).reshape(spec["shape"])
                )
            return results
