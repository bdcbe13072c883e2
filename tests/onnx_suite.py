"""ONNX conformance harness: run the onnx package's backend tests through tinyc and classify each case.

Cases: the node tests of `onnx.backend.test.case.node.collect_testcases(None)` and the data suites shipped
with the onnx package (pytorch-converted, pytorch-operator, simple, light). Each case is imported with
`tinyc.api.load`, rendered with `tinyc.codegen.generate`, compiled together with many other cases into one
shared library per chunk (one gcc call: CMake per case would take an hour), run through ctypes in a
subprocess (a crashing kernel must not take the harness down) and compared like onnx's own runner does.

Statuses: pass, fail (wrong output), error (a bug: an unexpected exception, a C compiler error, a crash),
unsupported (tinyc refused with a clear UnsupportedError/ShapeError/ModelLoadError), unsupported-op (an op
type tinyc neither registers nor can expand from a function body; not attempted), skipped (model too large for the harness: --max-weights).

    python tests/onnx_suite.py --write docs/ops.md [--jobs N] [--filter REGEX] [--json out.json]
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

STATUSES = ("pass", "fail", "error", "unsupported", "unsupported-op", "skipped")
DATA_SUITES = ("pytorch-converted", "pytorch-operator", "simple", "light")
SUITES = ("node",) + DATA_SUITES
CHUNK_MODELS = 100                 # models per shared library
CHUNK_SOURCE_BYTES = 16 << 20      # ... or this much C source, whichever comes first
DEFAULT_MAX_WEIGHTS = 2_000_000    # constant elements; bigger models (most `light` ones) are skipped
RUN_TIMEOUT_S = 180                # one runner subprocess (a chunk); a hang marks the running case `error`
CFLAGS = ["-std=c99", "-O1", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-pedantic"]
# "must be a constant" (ImportContext.require_const) and "weights must be constant" (Conv) both mean:
# retry with the configuring inputs frozen.
_CONST_RE = re.compile(r"must be (a )?constant")
_EXPANDED_RE = re.compile(r"_expanded(_ver\d+)?$")
EMX_NOTE = ("emx-onnx-cgen, an ONNX->C generator on PyPI, passes 91.0% (1851 of 2033) of the node tests "
            "plus the shipped suites, measured on this kind of machine.")


# --------------------------------------------------------------------------------------------
# cases
@dataclass
class Case:
    """One backend test. Node cases carry their model and data; data-suite cases load lazily from `path`."""

    name: str
    suite: str
    op: str
    rtol: float
    atol: float
    model: Any = None
    data_sets: list[tuple[list[Any], list[Any]]] | None = None
    path: str | None = None

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.name}"


@dataclass
class Result:
    key: str
    name: str
    suite: str
    op: str
    status: str
    reason: str = ""
    bound: list[str] = field(default_factory=list)
    max_abs: float | None = None
    max_rel: float | None = None


def onnx_data_dir() -> Path:
    import onnx
    return Path(onnx.__file__).resolve().parent / "backend" / "test" / "data"


def _node_op(model: Any) -> str:
    ops = [n.op_type for n in model.graph.node if n.op_type != "Constant"]
    return ops[0] if ops else (model.graph.node[0].op_type if model.graph.node else "")


def collect_cases(filter: str | None = None, suites: Sequence[str] = SUITES) -> list[Case]:
    """All cases (node cases in onnx's order, then data suites sorted by name), `filter` searched in
    'suite/name'."""
    pattern = re.compile(filter) if filter else None
    cases: list[Case] = []
    if "node" in suites:
        import onnx.backend.test.case.node as node_cases
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = node_cases.collect_testcases(None)
        ops = {c.name: _node_op(c.model) for c in raw if not _EXPANDED_RE.search(c.name)}
        for c in raw:
            base = _EXPANDED_RE.sub("", c.name)
            op = ops.get(base) or _node_op(c.model)  # an expanded case is grouped with the op it expands
            cases.append(Case(c.name, "node", op, float(c.rtol), float(c.atol), c.model, c.data_sets))
    data = onnx_data_dir()
    for suite in DATA_SUITES:
        if suite not in suites:
            continue
        if suite == "light":
            # onnx's runner: data/real/test_X/data.json points at data/light/light_X.onnx (+ _output_0.pb)
            for d in sorted((data / "real").iterdir()):
                meta_file = d / "data.json"
                if not meta_file.is_file():
                    continue
                meta = json.loads(meta_file.read_text())
                url = str(meta.get("url", ""))
                if not url.startswith("onnx/backend/test/data/light/"):
                    continue
                path = data / "light" / Path(url).name
                if path.is_file():
                    cases.append(Case(d.name, suite, "", float(meta.get("rtol", 1e-3)),
                                      float(meta.get("atol", 1e-7)), path=str(path)))
            continue
        for d in sorted((data / suite).iterdir()):
            if not (d / "model.onnx").is_file():
                continue
            rtol, atol = 1e-3, 1e-7
            if (d / "data.json").is_file():
                meta = json.loads((d / "data.json").read_text())
                rtol, atol = float(meta.get("rtol", rtol)), float(meta.get("atol", atol))
            cases.append(Case(d.name, suite, "", rtol, atol, path=str(d)))
    if pattern is not None:
        cases = [c for c in cases if pattern.search(c.key)]
    return cases


class NonTensor:
    """A value from a test's data that tinyc cannot compile (a map, a nested sequence)."""


def _to_value(item: Any) -> Any:
    """An array; a sequence as a list of arrays and an absent optional as None (tinyc compiles them
    with that structure fixed: tinyc/frontend/sequence_io.py); NonTensor otherwise."""
    import onnx
    from onnx import numpy_helper
    if isinstance(item, onnx.TensorProto):
        return numpy_helper.to_array(item)
    if isinstance(item, np.ndarray):
        return item
    if isinstance(item, np.generic):
        return np.asarray(item)
    if item is None:
        return None
    if isinstance(item, list) and all(isinstance(_to_value(v), np.ndarray) for v in item):
        return [_to_value(v) for v in item]
    return NonTensor()


def _read_pb(path: Path, type_proto: Any) -> Any:
    import onnx
    from onnx import numpy_helper
    if type_proto is not None and type_proto.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(path.read_bytes())
        return _to_value(numpy_helper.to_list(seq))
    if type_proto is not None and not type_proto.HasField("tensor_type"):
        return NonTensor()
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


def _runtime_inputs(model: Any) -> list[Any]:
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def load_case(case: Case) -> tuple[Any, list[tuple[list[Any], list[Any]]]]:
    """(model, data_sets) with every value a numpy array or NonTensor."""
    import onnx
    if case.suite == "node":
        sets = [([_to_value(x) for x in ins], [_to_value(y) for y in outs]) for ins, outs in case.data_sets or []]
        return case.model, sets
    assert case.path is not None
    if case.suite == "light":
        # onnx's runner feeds arange(n).reshape(shape) / n (missing dims = 1) and compares with _output_i.pb
        model = onnx.load(case.path)
        ins = []
        for vi in _runtime_inputs(model):
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            ins.append((np.arange(n).reshape(shape) / n).astype(np.float32))
        stem = case.path[:-len(".onnx")]
        outs = [_read_pb(Path(f"{stem}_output_{i}.pb"), vi.type) for i, vi in enumerate(model.graph.output)]
        return model, [(ins, outs)]
    d = Path(case.path)
    model = onnx.load(str(d / "model.onnx"))
    in_vis, out_vis = _runtime_inputs(model), list(model.graph.output)
    sets = []
    for ds in sorted(d.glob("test_data_set_*"), key=lambda p: int(p.name.rsplit("_", 1)[1])):
        n_in, n_out = len(list(ds.glob("input_*.pb"))), len(list(ds.glob("output_*.pb")))
        ins = [_read_pb(ds / f"input_{i}.pb", in_vis[i].type if i < len(in_vis) else None) for i in range(n_in)]
        outs = [_read_pb(ds / f"output_{i}.pb", out_vis[i].type if i < len(out_vis) else None)
                for i in range(n_out)]
        sets.append((ins, outs))
    return model, sets


def unregistered_ops(model: Any) -> list[str]:
    """Op types of top-level nodes that tinyc does not register (other domains count as unregistered)."""
    from tinyc.frontend.functions import has_function_body
    from tinyc.ops import onnx_op
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    bad = set()
    for n in model.graph.node:
        dom = "" if n.domain == "ai.onnx" else n.domain
        if onnx_op(n.op_type, n.domain) is None and not has_function_body(n.op_type, dom, opsets.get(dom, 1)):
            bad.add(f"{dom}.{n.op_type}" if dom else n.op_type)
    return sorted(bad)


# --------------------------------------------------------------------------------------------
# phase 1: import + generate (worker processes, forked: they inherit the collected cases)
_CASES: list[Case] = []


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if "/tinyc/" in f.filename] or frames
    if not inside:
        return ""
    f = inside[-1]
    return f" (at {Path(f.filename).relative_to(REPO) if f.filename.startswith(str(REPO)) else f.filename}:{f.lineno})"


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _classify_tinyc_error(exc: BaseException) -> tuple[str, str]:
    """A clear tinyc refusal is `unsupported`; one that only wraps a Python exception (a handler crash,
    a template crash) is a bug: `error`."""
    from tinyc.errors import ModelLoadError, ShapeError, TinycError, UnsupportedError
    cause = exc.__cause__
    if isinstance(exc, (UnsupportedError, ShapeError, ModelLoadError)):
        if cause is not None and not isinstance(cause, TinycError):
            return "error", _one_line(f"{type(exc).__name__} wrapping {type(cause).__name__}: {exc}") + _where(cause)
        return "unsupported", _one_line(str(exc))
    return "error", _one_line(f"{type(exc).__name__}: {exc}") + _where(exc)


def _bind_attempts(in_vis: list[Any], values: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Bindings to try after a 'must be a constant' refusal: non-float inputs, then all but the first."""
    attempts: list[dict[str, np.ndarray]] = []
    non_float = {vi.name: v for vi, v in zip(in_vis, values) if v.dtype.kind != "f"}
    if non_float:
        attempts.append(non_float)
    all_but_first = {vi.name: v for vi, v in zip(in_vis[1:], values[1:])}
    if all_but_first and all_but_first.keys() != non_float.keys():
        attempts.append(all_but_first)
    return attempts


def prepare(index: int, workdir: str, max_weights: int, target: str = "host") -> dict[str, Any]:
    """Import and generate case `index`; write its sources and data. Returns the result so far
    (status set when the case ended here) plus what the runner needs."""
    case = _CASES[index]
    res = Result(case.key, case.name, case.suite, case.op, "")
    out: dict[str, Any] = {"result": res}
    try:
        _prepare(case, index, Path(workdir), max_weights, res, out, target)
    except Exception as exc:  # a harness-side surprise must not lose the case
        res.status, res.reason = "error", _one_line(f"harness: {type(exc).__name__}: {exc}") + _where(exc)
    return out


def _prepare(case: Case, index: int, workdir: Path, max_weights: int, res: Result, out: dict[str, Any],
             target: str = "host") -> None:
    from tinyc.api import load
    from tinyc.codegen import generate
    from tinyc.errors import TinycError
    model, sets = load_case(case)
    bad = unregistered_ops(model)
    if bad:
        res.status, res.reason = "unsupported-op", "not registered: " + ", ".join(bad)
        return
    in_vis = _runtime_inputs(model)
    out_names = [vi.name for vi in model.graph.output]
    if not sets:
        res.status, res.reason = "error", "harness: the case has no data sets"
        return
    if any(isinstance(v, NonTensor) for ins, outs in sets for v in list(ins) + list(outs)) or any(
            vi.type.WhichOneof("value") not in ("tensor_type", "sequence_type", "optional_type")
            for vi in list(in_vis) + list(model.graph.output)):
        res.status, res.reason = "unsupported", "map- or nested-sequence-typed inputs or outputs"
        return
    for ins, outs in sets:
        if len(ins) != len(in_vis) or len(outs) != len(out_names):
            res.status = "error"
            res.reason = (f"harness: data set has {len(ins)} inputs/{len(outs)} outputs, the model "
                          f"{len(in_vis)}/{len(out_names)}")
            return
    from tinyc.frontend.sequence_io import flatten_values, structure_of
    if any(structure_of(a) != structure_of(b) for ins, _ in sets[1:] for a, b in zip(ins, sets[0][0])):
        res.status, res.reason = "unsupported", "data sets differ in input shapes (tinyc compiles static shapes)"
        return
    first = list(sets[0][0])
    prefix = f"tc{index:05d}"
    attempts: list[dict[str, np.ndarray]] = [{}]
    # only plain tensor inputs are bound; a sequence/optional input is compiled with its structure
    t_vis = [(vi, v) for vi, v in zip(in_vis, first) if isinstance(v, np.ndarray) and vi.type.HasField("tensor_type")]
    t_in, t_first = [vi for vi, _ in t_vis], [v for _, v in t_vis]
    if case.suite == "node":
        attempts += _bind_attempts(t_in, t_first)
    else:  # data suites: bind only configuring (non-float) inputs, e.g. Expand's shape
        attempts += [b for b in _bind_attempts(t_in, t_first)[:1] if all(v.dtype.kind != "f" for v in b.values())]
    gen = graph = None
    for k, bind in enumerate(attempts):
        shapes = {vi.name: structure_of(v) for vi, v in zip(in_vis, first) if vi.name not in bind}
        try:
            graph = load(model, input_shapes=shapes, bind=bind or None)
            weights = sum(t.size for t in graph.tensors.values() if t.is_constant)
            if weights > max_weights:
                res.status = "skipped"
                res.reason = f"{weights} constant elements > harness limit {max_weights} (--max-weights)"
                return
            gen = generate(graph, prefix=prefix, target=target)
            res.bound = sorted(bind)
            break
        except TinycError as exc:
            status, reason = _classify_tinyc_error(exc)
            if status == "unsupported" and _CONST_RE.search(str(exc)) and k + 1 < len(attempts):
                continue
            res.status, res.reason, res.bound = status, reason, sorted(bind)
            return
        except Exception as exc:
            res.status, res.reason, res.bound = "error", _one_line(f"{type(exc).__name__}: {exc}") + _where(exc), sorted(bind)
            return
    assert gen is not None
    manifest = gen.manifest
    # sequence/optional values flattened to their element tensors (x -> x.0, x.1, ...; None -> none)
    flat_in = [dict(p for vi, v in zip(in_vis, ins) if vi.name not in res.bound
                    for p in flatten_values(vi.name, v)) for ins, _ in sets]
    flat_out = [dict(p for n, v in zip(out_names, outs) for p in flatten_values(n, v)) for _, outs in sets]
    pos = flat_in[0]
    m_in = [s["name"] for s in manifest["inputs"]]
    m_out = [s["name"] for s in manifest["outputs"]]
    if any(n not in pos or n in res.bound for n in m_in) or sorted(m_out) != sorted(flat_out[0]):
        res.status = "error"
        res.reason = f"manifest I/O {m_in} -> {m_out} does not match the model's {list(pos)} -> {list(flat_out[0])}"
        return
    src = workdir / "src"
    size = 0
    if target == "opencl":  # a folder per case, run by run_opencl
        from tinyc.targets.opencl import write_project
        src = workdir / prefix
        write_project(src, gen.files, gen.blobs, gen.manifest)
    for name, text in gen.files.items():
        (src / name).write_text(text)
        size += len(text)
    from tinyc.numerics.dtypes import storage_view
    arrays = {}
    exp_dtypes = [str(flat_out[0][n].dtype) for n in m_out]
    for s in range(len(sets)):
        # narrow types (bfloat16, float8, int4...) travel as their raw bits: npz keeps no ml_dtypes type
        for j, n in enumerate(m_in):
            arrays[f"s{s}_i{j}"] = storage_view(np.asarray(flat_in[s][n]))
        for j, n in enumerate(m_out):
            arrays[f"s{s}_o{j}"] = storage_view(np.asarray(flat_out[s][n]))
    npz = workdir / "data" / f"{prefix}.npz"
    np.savez(npz, **arrays)
    out["run"] = {"key": case.key, "prefix": prefix, "npz": str(npz), "nsets": len(sets),
                  "rtol": case.rtol, "atol": case.atol, "source_bytes": size, "exp_dtypes": exp_dtypes,
                  "inputs": [{"name": s["name"], "shape": s["shape"], "dtype": s["dtype"]} for s in manifest["inputs"]],
                  "outputs": [{"name": s["name"], "shape": s["shape"], "dtype": s["dtype"]} for s in manifest["outputs"]]}


def _cache_jinja_env() -> None:
    """tinyc.codegen.emitter builds a fresh Jinja environment per model, so every kernel template is
    recompiled each time (~95% of generation time). Output is identical with one cached environment."""
    import functools
    from tinyc.codegen import emitter
    env = getattr(emitter, "_env", None)
    if callable(env) and not hasattr(env, "cache_info"):
        emitter._env = functools.lru_cache(maxsize=1)(env)  # type: ignore[attr-defined]


def _prepare_many(indices: list[int], workdir: str, max_weights: int) -> list[dict[str, Any]]:
    warnings.simplefilter("ignore")
    _cache_jinja_env()
    return [prepare(i, workdir, max_weights) for i in indices]


# --------------------------------------------------------------------------------------------
# phase 2: compile chunks (bisecting compile failures) and run them in subprocesses
_FILE_RE = re.compile(r"\b(tc\d{5})(?:_weights)?\.[ch]:\d+")


def _gcc(models: list[str], lib: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    from tinyc.resources import runtime_dir
    rt = runtime_dir()
    srcs = [str(workdir / "src" / f"{p}{suffix}.c") for p in models for suffix in ("", "_weights")]
    cmd = [os.environ.get("CC", "gcc"), *CFLAGS, f"-I{rt / 'include'}", f"-I{workdir / 'src'}", *srcs,
           str(rt / "src" / "tinyc_rt.c"), "-o", str(lib), "-lm"]
    return subprocess.run(cmd, capture_output=True, text=True)


def _check_toolchain(workdir: Path) -> None:
    """Fail once and clearly when gcc itself is broken, instead of bisecting every chunk down to one model."""
    proc = _gcc([], workdir / "lib" / "probe.so", workdir)
    if proc.returncode != 0:
        raise RuntimeError(f"the C toolchain cannot build the tinyc runtime: {_one_line(proc.stderr, 800)}")


def build_chunk(models: list[str], lib: Path, workdir: Path) -> tuple[list[tuple[Path, list[str]]], dict[str, str]]:
    """Compile `models` into `lib`; on failure, drop the models gcc names (or bisect) and build the rest.
    Returns [(library, models in it)] and {model: compiler message}."""
    if not models:
        return [], {}
    proc = _gcc(models, lib, workdir)
    if proc.returncode == 0:
        return [(lib, models)], {}
    text = proc.stdout + proc.stderr
    named = sorted({m for m in _FILE_RE.findall(text) if m in models})
    errors: dict[str, str] = {}
    if named:
        for m in named:
            lines = [ln for ln in text.splitlines() if m in ln and ("error" in ln or "warning" in ln)]
            errors[m] = "C compiler: " + _one_line(" | ".join(lines[:3]) or text, 600)
        rest = [m for m in models if m not in errors]
        libs, more = build_chunk(rest, lib, workdir)
        errors.update(more)
        return libs, errors
    if len(models) == 1:
        return [], {models[0]: "C compiler: " + _one_line(text[-1500:], 600)}
    half = len(models) // 2
    a, ea = build_chunk(models[:half], lib.with_name(lib.stem + "a.so"), workdir)
    b, eb = build_chunk(models[half:], lib.with_name(lib.stem + "b.so"), workdir)
    return a + b, {**ea, **eb}


def run_library(lib: Path, runs: list[dict[str, Any]], workdir: Path) -> dict[str, dict[str, Any]]:
    """Run every case of `lib` in a runner subprocess; a crash or hang marks the running case `error`
    and the runner restarts after it."""
    results: dict[str, dict[str, Any]] = {}
    todo = list(runs)
    n = 0
    while todo:
        n += 1
        spec = workdir / f"{lib.stem}_run{n}.json"
        log = workdir / f"{lib.stem}_run{n}.jsonl"
        spec.write_text(json.dumps({"lib": str(lib), "cases": todo, "log": str(log)}))
        note = ""
        try:
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--run-chunk", str(spec)],
                                  capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
            if proc.returncode < 0:
                note = f"crashed ({signal.Signals(-proc.returncode).name})"
            elif proc.returncode != 0:
                note = f"runner exited {proc.returncode}: {_one_line(proc.stderr[-600:])}"
        except subprocess.TimeoutExpired:
            note = f"timed out (runner took over {RUN_TIMEOUT_S} s)"
        started = None
        if log.exists():
            for line in log.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if "start" in rec:
                    started = rec["start"]
                else:
                    results[rec["prefix"]] = rec
        if started is not None and started not in results:
            results[started] = {"prefix": started, "status": "error", "reason": f"running the compiled model {note or 'died'}"}
        remaining = [r for r in todo if r["prefix"] not in results]
        if remaining and len(remaining) == len(todo):  # no progress at all: do not loop forever
            for r in remaining:
                results[r["prefix"]] = {"prefix": r["prefix"], "status": "error", "reason": f"runner failed: {note}"}
            remaining = []
        todo = remaining
    return results


def compare(got: np.ndarray, exp: np.ndarray, rtol: float, atol: float) -> tuple[bool, str, float, float]:
    """onnx's runner check (shape, dtype, allclose with NaN == NaN); integer/bool outputs must match exactly."""
    if tuple(got.shape) != tuple(exp.shape):
        return False, f"shape {tuple(got.shape)} != expected {tuple(exp.shape)}", float("nan"), float("nan")
    if got.dtype != exp.dtype:
        return False, f"dtype {got.dtype} != expected {exp.dtype}", float("nan"), float("nan")
    if got.size == 0:
        return True, "", 0.0, 0.0
    from tinyc.numerics.dtypes import is_narrow_float
    if exp.dtype.kind == "f" or is_narrow_float(str(exp.dtype)):
        g, e = got.astype(np.float64), exp.astype(np.float64)
        ok = np.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    else:
        g, e = got.astype(np.float64), exp.astype(np.float64)
        ok = got.astype(np.int64) == exp.astype(np.int64) if exp.dtype.kind == "V" else got == exp
    both = np.isfinite(g) & np.isfinite(e)
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite: masked out below
        diff = np.abs(g - e)[both]
        max_abs = float(diff.max()) if diff.size else 0.0
        nz = both & (e != 0)
        max_rel = float((np.abs(g - e)[nz] / np.abs(e[nz])).max()) if nz.any() else 0.0
    bad = int((~ok).sum())
    if bad:
        idx = np.unravel_index(int(np.argmax(~ok)), got.shape) if got.ndim else ()
        return (False, f"{bad}/{got.size} elements differ (max abs {max_abs:.3g}, max rel {max_rel:.3g}; "
                       f"first at {tuple(int(i) for i in idx)}: got {float(g[idx]):.7g} expected {float(e[idx]):.7g})",
                max_abs, max_rel)
    return True, "", max_abs, max_rel


def _runner_main(spec_path: str) -> int:
    """Subprocess entry: load one library, run its cases, append one JSON line per case."""
    import ctypes
    spec = json.loads(Path(spec_path).read_text())
    lib = ctypes.CDLL(spec["lib"])
    with open(spec["log"], "a") as log:
        for case in spec["cases"]:
            log.write(json.dumps({"start": case["prefix"]}) + "\n")
            log.flush()
            rec = _run_case(lib, case)
            rec["prefix"] = case["prefix"]
            log.write(json.dumps(rec) + "\n")
            log.flush()
    return 0


def _run_case(lib: Any, case: dict[str, Any]) -> dict[str, Any]:
    import ctypes
    from tinyc.numerics.dtypes import from_storage
    fn = getattr(lib, f"{case['prefix']}_run")
    fn.restype = ctypes.c_int
    max_abs = max_rel = 0.0
    with np.load(case["npz"], allow_pickle=False) as data:
        for s in range(case["nsets"]):
            args, keep, outs = [], [], []
            for j, spec in enumerate(case["inputs"]):
                arr = np.require(from_storage(data[f"s{s}_i{j}"], spec["dtype"]), requirements="C")  # keeps 0-d
                if list(arr.shape) != list(spec["shape"]):
                    return {"status": "error", "reason": f"input '{spec['name']}' data shape {arr.shape} != "
                                                           f"compiled {tuple(spec['shape'])}"}
                keep.append(arr)
                args.append(arr.ctypes.data_as(ctypes.c_void_p))
            for spec in case["outputs"]:
                arr = np.zeros(spec["shape"], dtype=spec["dtype"])
                outs.append(arr)
                args.append(arr.ctypes.data_as(ctypes.c_void_p))
            status = fn(*args)
            if status != 0:
                return {"status": "error", "reason": f"{case['prefix']}_run returned {status}"}
            for j, (spec, got) in enumerate(zip(case["outputs"], outs)):
                exp = from_storage(data[f"s{s}_o{j}"], case.get("exp_dtypes", [spec["dtype"]] * len(outs))[j])
                ok, why, a, r = compare(got, exp, case["rtol"], case["atol"])
                if not ok:
                    where = f"set {s} " if case["nsets"] > 1 else ""
                    return {"status": "fail", "reason": f"{where}output '{spec['name']}': {why}",
                            "max_abs": a, "max_rel": r}
                max_abs, max_rel = max(max_abs, a), max(max_rel, r)
    return {"status": "pass", "max_abs": max_abs, "max_rel": max_rel}


# --------------------------------------------------------------------------------------------
# the OpenCL target (tinyc.targets.opencl): a deterministic sample of the node cases
def opencl_sample(every: int = 12) -> list[Case]:
    """Every `every`-th node case (sorted by name): a fixed spread over the ops (1: all of them)."""
    cases = sorted((c for c in collect_cases(suites=("node",))), key=lambda c: c.name)
    return cases[::every]


def run_opencl(cases: list[Case], device: str | None = None, max_weights: int = DEFAULT_MAX_WEIGHTS) -> SuiteRun:
    """Prepare each case for the OpenCL target and run it in this process on `device` (PoCL in CI):
    the same statuses and comparison as the C runs."""
    global _CASES
    from tinyc.errors import TinycError
    from tinyc.targets.opencl import OpenCLModel
    _CASES = list(cases)
    results = []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="tinyc-ocl-suite-") as tmp:
        work = Path(tmp)
        (work / "data").mkdir()
        for i in range(len(_CASES)):
            prep = prepare(i, tmp, max_weights, target="opencl")
            res: Result = prep["result"]
            run = prep.get("run")
            if run is not None and not res.status:
                try:
                    model = OpenCLModel(work / run["prefix"], device=device)
                    rec = _run_opencl_case(model, run)
                except TinycError as exc:
                    rec = {"status": "error", "reason": _one_line(str(exc), 2000)}
                res.status, res.reason = rec["status"], rec.get("reason", "")
            results.append(res)
    secs = time.time() - t0
    return SuiteRun(results, secs, {"opencl": secs}, 1, None, max_weights)


def _run_opencl_case(model: Any, case: dict[str, Any]) -> dict[str, Any]:
    from tinyc.numerics.dtypes import from_storage
    with np.load(case["npz"], allow_pickle=False) as data:
        for s in range(case["nsets"]):
            feeds = {spec["name"]: from_storage(data[f"s{s}_i{j}"], spec["dtype"])
                     for j, spec in enumerate(case["inputs"])}
            outs = model(feeds)
            for j, spec in enumerate(case["outputs"]):
                exp = from_storage(data[f"s{s}_o{j}"], case.get("exp_dtypes", [spec["dtype"]] * len(case["outputs"]))[j])
                ok, why, _, _ = compare(outs[spec["name"]], exp, case["rtol"], case["atol"])
                if not ok:
                    return {"status": "fail", "reason": f"set {s} output '{spec['name']}': {why}"}
    return {"status": "pass"}


def _chunks(runs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    chunks: list[list[dict[str, Any]]] = []
    cur: list[dict[str, Any]] = []
    size = 0
    for r in runs:
        if cur and (len(cur) >= CHUNK_MODELS or size + r["source_bytes"] > CHUNK_SOURCE_BYTES):
            chunks.append(cur)
            cur, size = [], 0
        cur.append(r)
        size += r["source_bytes"]
    if cur:
        chunks.append(cur)
    return chunks


def _build_and_run(k: int, chunk: list[dict[str, Any]], workdir: Path) -> dict[str, dict[str, Any]]:
    by_prefix = {r["prefix"]: r for r in chunk}
    libs, errors = build_chunk(list(by_prefix), workdir / "lib" / f"chunk{k:03d}.so", workdir)
    results = {p: {"prefix": p, "status": "error", "reason": msg} for p, msg in errors.items()}
    for lib, models in libs:
        results.update(run_library(lib, [by_prefix[m] for m in models], workdir / "lib"))
    return results


# --------------------------------------------------------------------------------------------
# the suite
@dataclass
class SuiteRun:
    results: list[Result]
    seconds: float
    phases: dict[str, float]
    jobs: int
    filter: str | None
    max_weights: int

    def counts(self) -> dict[str, int]:
        c = collections.Counter(r.status for r in self.results)
        return {s: c.get(s, 0) for s in STATUSES}

    def by_status(self, *statuses: str) -> list[Result]:
        return [r for r in self.results if r.status in statuses]


def run_suite(filter: str | None = None, jobs: int | None = None, suites: Sequence[str] = SUITES,
              max_weights: int = DEFAULT_MAX_WEIGHTS, workdir: str | os.PathLike | None = None,
              keep: bool = False, cases: list[Case] | None = None, progress: bool = False) -> SuiteRun:
    """Collect, prepare (parallel processes), compile and run (parallel chunks) every case."""
    global _CASES
    t0 = time.perf_counter()
    jobs = max(1, jobs or os.cpu_count() or 1)
    import tinyc.ops
    tinyc.ops.load_all()  # before forking: workers inherit the registry
    _CASES = list(cases) if cases is not None else collect_cases(filter, suites)
    if cases is not None and filter:
        _CASES = [c for c in _CASES if re.search(filter, c.key)]
    t_collect = time.perf_counter()
    wd = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="tinyc_onnx_suite_"))
    for sub in ("src", "data", "lib"):
        (wd / sub).mkdir(parents=True, exist_ok=True)
    try:
        prepared: list[dict[str, Any]] = []
        step = 16
        batches = [list(range(i, min(i + step, len(_CASES)))) for i in range(0, len(_CASES), step)]
        if jobs > 1 and len(batches) > 1:
            ctx = multiprocessing.get_context("fork")
            with cf.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
                for out in pool.map(_prepare_many, batches, [str(wd)] * len(batches),
                                    [max_weights] * len(batches)):
                    prepared.extend(out)
        else:
            for b in batches:
                prepared.extend(_prepare_many(b, str(wd), max_weights))
        t_prep = time.perf_counter()
        if progress:
            print(f"prepared {len(prepared)} cases in {t_prep - t_collect:.1f} s", file=sys.stderr)
        runs = [p["run"] for p in prepared if "run" in p and not p["result"].status]
        if runs:
            _check_toolchain(wd)
        outcomes: dict[str, dict[str, Any]] = {}
        chunks = _chunks(runs)
        with cf.ThreadPoolExecutor(jobs) as pool:
            futs = [pool.submit(_build_and_run, k, ch, wd) for k, ch in enumerate(chunks)]
            for f in cf.as_completed(futs):
                outcomes.update(f.result())
        t_run = time.perf_counter()
        results = []
        for p in prepared:
            res: Result = p["result"]
            if not res.status:
                o = outcomes.get(p["run"]["prefix"], {"status": "error", "reason": "harness: no outcome"})
                res.status, res.reason = o["status"], o.get("reason", "")
                res.max_abs, res.max_rel = o.get("max_abs"), o.get("max_rel")
            results.append(res)
    finally:
        if not keep:
            shutil.rmtree(wd, ignore_errors=True)
    return SuiteRun(results, time.perf_counter() - t0,
                    {"collect": t_collect - t0, "prepare": t_prep - t_collect, "build+run": t_run - t_prep},
                    jobs, filter, max_weights)


# --------------------------------------------------------------------------------------------
# reports
def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summarize_reason(reason: str) -> str:
    """Drop node names so equal refusals of different cases group together."""
    r = re.sub(r"node '[^']*' \(([\w.]+)\): ", "", reason)
    r = re.sub(r"'[^']*'", "'…'", r)
    return _one_line(r, 160)


def supported_rate(counts: dict[str, int]) -> float:
    run = counts["pass"] + counts["fail"] + counts["error"] + counts["unsupported"] + counts["skipped"]
    return counts["pass"] / run if run else 0.0


def render_markdown(suite: SuiteRun) -> str:
    """docs/ops.md: deterministic (sorted, no timings)."""
    res = sorted(suite.results, key=lambda r: (r.suite != "node", r.suite, r.name))
    counts = suite.counts()
    total = len(res)
    out = [
        "# ONNX conformance of tinyc",
        "",
        "<!-- generated by tests/onnx_suite.py; do not edit by hand -->",
        "",
        "Generated by `python tests/onnx_suite.py --write docs/ops.md` (regenerate with the same command after "
        "changing an op). It runs the onnx package's backend tests through tinyc: the node tests "
        "(`onnx.backend.test.case.node.collect_testcases`) and the model suites shipped in "
        "`onnx/backend/test/data/` (pytorch-converted, pytorch-operator, simple, light). Each case is imported "
        "with `tinyc.api.load`, generated with `tinyc.codegen.generate`, compiled with "
        f"`gcc {' '.join(CFLAGS)}` and run through ctypes; outputs are compared like onnx's runner does "
        "(same shape and dtype, `allclose` with the case's rtol/atol, NaN equal to NaN; integer and bool "
        "outputs exactly).",
        "",
        "Inputs that configure an op (shape, axes, pads, indices, weights...) are graph inputs in many node "
        "tests. When tinyc refuses with \"must be a constant\", the case is retried with those inputs bound "
        "to the test's values as compile-time constants (first the non-float inputs, then all inputs but the "
        "first), as an ahead-of-time compiler would be used; in the shipped model suites only non-float "
        "inputs are bound. Sequence- and optional-typed inputs are compiled with the structure of the test's "
        "own data (a sequence of N tensors becomes inputs `x.0` ... `x.N-1`; an absent optional, no input) and "
        "fed flattened; sequence outputs are compared element by element.",
        "",
        "An op without a tinyc kernel that has an ONNX function body is compiled through that body (expanded "
        "at import, `docs/onnx.md`); its cases count under the op.",
        "",
        f"onnx {_onnx_version()}; {total} cases" + (f"; filter `{suite.filter}`" if suite.filter else "") + ".",
        "",
        "Statuses: **pass**; **fail** (ran, wrong output); **error** (a bug: unexpected exception, "
        "an UnsupportedError/ShapeError that only wraps a Python exception, C compiler error, crash); "
        "**unsupported** (tinyc refused with a clear UnsupportedError/ShapeError/ModelLoadError); "
        "**unsupported-op** (an op type tinyc neither registers nor can expand from an ONNX function body: "
        "not attempted); **skipped** (more than "
        f"{suite.max_weights:,} constant elements: too large for this harness, the `light` ImageNet models).",
        "",
        "## Summary",
        "",
        "| | cases |",
        "|---|---:|",
        f"| total | {total} |",
    ]
    for s in STATUSES:
        out.append(f"| {s} | {counts[s]} |")
    supported = total - counts["unsupported-op"]
    out += [
        f"| pass rate over all cases | {_pct(counts['pass'], total)} |",
        f"| pass rate over cases whose ops tinyc supports (pass / (pass+fail+error+unsupported+skipped)) | "
        f"{_pct(counts['pass'], supported)} ({counts['pass']} / {supported}) |",
        f"| cases that passed with bound (constant) inputs | {sum(1 for r in res if r.status == 'pass' and r.bound)} |",
        "",
        f"For scale: {EMX_NOTE} That figure is over all cases: compare it with tinyc's pass rate over all "
        "cases above.",
        "",
    ]
    # per op
    node = [r for r in res if r.suite == "node"]
    if node:
        out += ["## Node tests by operator", "",
                "Cases are grouped by the op under test (an `_expanded` case, which runs the op's function body, "
                "is grouped with its op). *run* = cases whose ops are all registered.", "",
                "| op | passed / run | fail | error | unsupported | unsupported-op | notes |",
                "|---|---:|---:|---:|---:|---:|---|"]
        groups: dict[str, list[Result]] = collections.defaultdict(list)
        for r in node:
            groups[r.op].append(r)
        for op in sorted(groups, key=str.lower):
            rs = groups[op]
            c = collections.Counter(r.status for r in rs)
            run = len(rs) - c["unsupported-op"]
            reasons = collections.Counter(summarize_reason(r.reason) for r in rs
                                          if r.status in ("unsupported", "skipped"))
            notes = [f"{_md(t)} ({n})" for t, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:3]]
            if len(reasons) > 3:
                notes.append(f"+{len(reasons) - 3} more")
            if c["unsupported-op"] and c["unsupported-op"] == len(rs):
                regs = sorted({o for r in rs for o in r.reason.removeprefix("not registered: ").split(", ")})
                notes = [f"not registered: {', '.join(regs)}"]
            elif c["unsupported-op"]:
                regs = sorted({o for r in rs if r.status == "unsupported-op"
                               for o in r.reason.removeprefix("not registered: ").split(", ")})
                notes.append(f"unsupported-op: {', '.join(regs)}")
            out.append(f"| {op} | {c['pass']} / {run} | {c['fail']} | {c['error']} | {c['unsupported'] + c['skipped']} "
                       f"| {c['unsupported-op']} | {'; '.join(notes)} |")
        out.append("")
    # data suites
    data = [r for r in res if r.suite != "node"]
    if data:
        out += ["## Shipped model suites", "",
                "| suite | passed / run | cases | unsupported-op |", "|---|---:|---:|---:|"]
        for s in DATA_SUITES:
            rs = [r for r in data if r.suite == s]
            if rs:
                run = [r for r in rs if r.status != "unsupported-op"]
                out.append(f"| {s} | {sum(r.status == 'pass' for r in rs)} / {len(run)} | {len(rs)} "
                           f"| {len(rs) - len(run)} |")
        out.append("")
        bad_data = [r for r in data if r.status not in ("pass", "unsupported-op")]
        if bad_data:
            out += ["Run but not passing:", "", "| case | status | reason |", "|---|---|---|"]
            out += [f"| {r.key} | {r.status} | {_md(summarize_reason(r.reason))} |" for r in bad_data]
            out.append("")
        out += ["Ops missing in the data suites (cases that need each op):", ""]
        miss = collections.Counter(o for r in data if r.status == "unsupported-op"
                                   for o in r.reason.removeprefix("not registered: ").split(", "))
        out.append(", ".join(f"{o} ({n})" for o, n in sorted(miss.items(), key=lambda kv: (-kv[1], kv[0]))) or "none")
        out.append("")
    bad = [r for r in res if r.status in ("fail", "error")]
    out += ["## Failures and errors", ""]
    if bad:
        out += ["| case | status | reason |", "|---|---|---|"]
        out += [f"| {r.key} | {r.status} | {_md(r.reason)} |" for r in bad]
    else:
        out.append("None.")
    out.append("")
    return "\n".join(out)


def _pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f}%" if b else "n/a"


def _onnx_version() -> str:
    import onnx
    return onnx.__version__


def format_failures(suite: SuiteRun) -> str:
    """fail/error cases grouped by op (node) or suite (data), with reasons."""
    groups: dict[str, list[Result]] = collections.defaultdict(list)
    for r in suite.by_status("fail", "error"):
        groups[r.op if r.suite == "node" else f"[{r.suite}]"].append(r)
    lines = [f"# {sum(len(v) for v in groups.values())} fail/error cases in {len(groups)} groups"]
    for g in sorted(groups, key=lambda g: (-len(groups[g]), g)):
        lines.append(f"\n## {g} ({len(groups[g])})")
        for r in sorted(groups[g], key=lambda r: r.key):
            bound = f" [bound: {', '.join(r.bound)}]" if r.bound else ""
            lines.append(f"{r.status:5} {r.key}{bound}: {r.reason}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", metavar="MD", help="write the markdown report (docs/ops.md)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="parallel workers (default: all CPUs)")
    ap.add_argument("--filter", metavar="REGEX", help="only cases whose 'suite/name' matches")
    ap.add_argument("--suites", default=",".join(SUITES), help=f"comma-separated subset of {','.join(SUITES)}")
    ap.add_argument("--max-weights", type=int, default=DEFAULT_MAX_WEIGHTS,
                    help="skip models with more constant elements than this")
    ap.add_argument("--json", metavar="PATH", help="write every case's result as JSON")
    ap.add_argument("--failures", metavar="PATH", help="write fail/error cases grouped by op")
    ap.add_argument("--workdir", help="build folder (kept); default: a temporary folder, removed")
    ap.add_argument("--run-chunk", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_chunk:
        return _runner_main(args.run_chunk)
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = set(suites) - set(SUITES)
    if unknown:
        ap.error(f"unknown suites {sorted(unknown)}")
    suite = run_suite(args.filter, args.jobs, suites, args.max_weights, args.workdir, keep=bool(args.workdir),
                      progress=True)
    counts = suite.counts()
    print(" ".join(f"{k}={v}" for k, v in counts.items()) + f" total={len(suite.results)}")
    print(f"pass rate over supported-op cases: {_pct(counts['pass'], len(suite.results) - counts['unsupported-op'])}")
    print(f"time: {suite.seconds:.1f} s with {suite.jobs} jobs ("
          + ", ".join(f"{k} {v:.1f} s" for k, v in suite.phases.items()) + ")")
    if args.write:
        Path(args.write).write_text(render_markdown(suite))
        print(f"wrote {args.write}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in suite.results], indent=1) + "\n")
    if args.failures:
        Path(args.failures).write_text(format_failures(suite))
    return 0


if __name__ == "__main__":
    sys.exit(main())
