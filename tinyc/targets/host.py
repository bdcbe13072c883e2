"""The host target: a CMake project building a shared library (loaded with ctypes) and a CLI runner."""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tinyc import __version__
from tinyc.errors import BuildError, RunError
from tinyc.quantize.io import to_model_input
from tinyc.resources import runtime_dir, templates_dir



def default_cflags() -> str:
    """The host board's flags (boards/host.toml), so one place says how host code is built."""
    from tinyc.targets.boards import load_board
    return str(load_board("host").get("toolchain", {}).get("cflags", "-O3"))

MANIFEST = "tinyc.json"


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
    import jinja2
    write_sources(out_dir, files)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    ctx = dict(manifest["render"], version=__version__, cflags=cflags)
    _write_if_changed(out_dir / "CMakeLists.txt", env.get_template("project/host/CMakeLists.txt.j2").render(**ctx))
    _write_if_changed(out_dir / "main.c", env.get_template("project/host/main.c.j2").render(**ctx))
    public = {k: v for k, v in manifest.items() if k != "render"}
    _write_if_changed(out_dir / MANIFEST, json.dumps(public, indent=2) + "\n")


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
    cmds = [["cmake", "-S", str(out), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release"],
            ["cmake", "--build", str(build_dir), "-j", str(max(1, os.cpu_count() or 1))]]
    for cmd in cmds:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
            raise BuildError(f"building {out} failed ({' '.join(cmd[:2])}):\n{tail}")
    stamp.write_text(digest)
    return lib


def load_manifest(out_dir: Path) -> dict[str, Any]:
    path = Path(out_dir) / MANIFEST
    if not path.exists():
        raise RunError(f"{out_dir} is not a tinyc output folder (no {MANIFEST}); run `tinyc compile` first")
    return json.loads(path.read_text())


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
    extra leading dim (N, *shape) or, for models with batch 1, as (N, *shape[1:])."""
    out = Path(out_dir)
    manifest = load_manifest(out)
    lib = build(out)
    model = HostModel(lib, manifest)
    inputs = resolve_input_names(manifest, inputs)
    n, mode = batch_size(manifest, inputs)
    results: dict[str, list[np.ndarray]] = {o["name"]: [] for o in manifest["outputs"]}
    from tqdm import tqdm
    for k in tqdm(range(n), desc="inferences", unit="inf", leave=False, disable=n < 200 or not sys.stderr.isatty()):
        feeds = {s["name"]: sample(inputs[s["name"]], s["shape"], mode, k) for s in manifest["inputs"]}
        for name, value in model(feeds).items():
            results[name].append(value)
    return stack_outputs(results, mode)


def sample(arr: np.ndarray, shape: list[int], mode: str, k: int) -> np.ndarray:
    arr = np.asarray(arr)
    if mode == "exact":
        return arr
    if mode == "extra":
        return arr[k]
    return arr[k:k + 1].reshape(shape)


def stack_outputs(results: dict[str, list[np.ndarray]], mode: str) -> dict[str, np.ndarray]:
    if mode == "exact":
        return {name: v[0] for name, v in results.items()}
    if mode == "extra":
        return {name: np.stack(v) for name, v in results.items()}
    return {name: np.concatenate([x.reshape(1, *x.shape[1:]) if x.ndim else x.reshape(1) for x in v])
            for name, v in results.items()}


def resolve_input_names(manifest: dict[str, Any], inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A one-input model also accepts an npz whose data array is called 'x' (or is the only one)."""
    names = [s["name"] for s in manifest["inputs"]]
    inputs = dict(inputs)
    if len(names) == 1 and names[0] not in inputs:
        data_keys = [k for k in inputs if k not in ("y", "label", "labels")]
        if "x" in inputs or len(data_keys) == 1:
            inputs[names[0]] = inputs["x" if "x" in inputs else data_keys[0]]
    return inputs


def batch_size(manifest: dict[str, Any], inputs: Mapping[str, np.ndarray]) -> tuple[int, str]:
    """Validate input names/shapes; return (N, mode) with mode 'exact', 'extra' or 'batch1'."""
    names = [s["name"] for s in manifest["inputs"]]
    missing = [n for n in names if n not in inputs]
    if missing:
        raise RunError(f"input file lacks model input(s) {', '.join(missing)}; the model's inputs are "
                       f"{', '.join(names)} (npz keys must be these names)")
    modes: set[str] = set()
    counts: set[int] = set()
    for spec in manifest["inputs"]:
        arr = np.asarray(inputs[spec["name"]])
        shape = tuple(spec["shape"])
        if tuple(arr.shape) == shape:
            modes.add("exact")
            counts.add(1)
        elif tuple(arr.shape[1:]) == shape:
            modes.add("extra")
            counts.add(arr.shape[0])
        elif shape and shape[0] == 1 and arr.ndim == len(shape) and tuple(arr.shape[1:]) == shape[1:]:
            modes.add("batch1")
            counts.add(arr.shape[0])
        else:
            hint = f" or (N, {', '.join(map(str, shape[1:]))})" if shape and shape[0] == 1 else ""
            raise RunError(f"input '{spec['name']}' has shape {tuple(arr.shape)}; expected {shape}, "
                           f"(N, {', '.join(map(str, shape))}){hint} for N inferences")
    if len(modes) > 1:
        raise RunError("inputs disagree: either every input holds N samples or none does")
    if len(counts) > 1:
        raise RunError(f"inputs disagree on the number of inferences: {sorted(counts)}")
    return (counts.pop() if counts else 1), (modes.pop() if modes else "exact")


def profile_layers(out_dir: str | os.PathLike, feeds: Mapping[str, np.ndarray], repeat: int = 50) -> list[dict[str, Any]]:
    """Median wall time of each layer (run in order on real data through `<prefix>_run_layer`)."""
    import time
    out = Path(out_dir)
    manifest = load_manifest(out)
    model = HostModel(build(out), manifest)
    model(feeds)  # fills the arena with real intermediate values
    prefix = manifest["prefix"]
    run_layer = getattr(model.lib, f"{prefix}_run_layer")
    run_layer.argtypes = [ctypes.c_int32]
    name_of = getattr(model.lib, f"{prefix}_layer_name")
    name_of.argtypes = [ctypes.c_int32]
    name_of.restype = ctypes.c_char_p
    times: list[list[float]] = []
    k = 0
    while name_of(k) is not None:
        times.append([])
        k += 1
    for _ in range(repeat):
        for i in range(len(times)):
            t0 = time.perf_counter()
            run_layer(i)
            times[i].append(time.perf_counter() - t0)
    return [{"index": i, "name": name_of(i).decode("utf-8", "replace"), "median_us": float(np.median(t)) * 1e6}
            for i, t in enumerate(times)]
