#!/usr/bin/env python3
"""Latency of tinyc's generated C vs onnxruntime (one thread) vs emx-onnx-cgen, on this machine.

For every model, in one run of this script:

1. tinyc: ``tinyc.compile(model, dir, target="host")`` with the default host flags, then the
   generated ``<prefix>_main`` runner (built by CMake in ``dir/build``) is run with a repeat
   count; it prints the mean time per inference measured in C (no Python in the loop). The
   outputs of one inference are checked against onnxruntime on the same input.
2. onnxruntime, one thread (intra/inter op threads = 1, sequential execution, default graph
   optimisations): ``session.run`` in a Python loop timed with ``time.perf_counter``.
3. emx-onnx-cgen (if installed): its C is compiled with the same flags as tinyc's plus a small
   timing ``main`` written here, and timed like tinyc's runner.

Each engine does ``--repeat`` timing runs (interleaved: tinyc, ort, emx, tinyc, ...); a run
repeats the inference enough times to last about ``--run-seconds``; the reported latency is the
median over runs of the per-run mean. See benchmarks/README.md.

    python benchmarks/host_vs_onnxruntime.py                       # all models
    python benchmarks/host_vs_onnxruntime.py --models digits mlperf_kws_dscnn --repeat 5
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MLPERF_DIR = ROOT.parent / "shared" / "models" / "mlperf_tiny"
MLPERF_MODELS = ("mlperf_kws_dscnn", "mlperf_vww_mobilenetv1_025", "mlperf_ic_resnet8", "mlperf_ad_fc_autoencoder")
LIGHT_MODELS = ("light_squeezenet", "light_shufflenet")
ALL_MODELS = ("digits",) + MLPERF_MODELS + LIGHT_MODELS
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "host_vs_onnxruntime.json"
DEFAULT_WORK = ROOT / "benchmarks" / "results" / "build"
TIMING_RE = re.compile(r"([0-9.eE+-]+) us/inference over (\d+) runs")
# A tinyc output "matches" onnxruntime when max|tinyc - ort| <= ATOL + RTOL * max|ort|.
ATOL, RTOL = 1e-4, 1e-3
NP_TO_C = {"float32": "float", "float64": "double", "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t",
           "uint16": "uint16_t", "int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t",
           "uint64": "uint64_t", "bool": "_Bool"}


# --------------------------------------------------------------------------------------------
# models and inputs


def light_dir() -> Path:
    import onnx
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def model_path(name: str) -> Path:
    if name == "digits":
        return ROOT / "examples" / "digits" / "digits_cnn.onnx"
    if name in MLPERF_MODELS:
        return MLPERF_DIR / name / "model.onnx"
    if name in LIGHT_MODELS:
        return light_dir() / f"{name}.onnx"
    raise ValueError(f"unknown model {name}")


def graph_inputs(path: Path) -> list[tuple[str, list[int], str]]:
    """(name, static shape, numpy dtype) of the model's real inputs (initializers excluded;
    old models list their weights as inputs too). Symbolic dimensions become 1."""
    import onnx
    from onnx import helper
    m = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    res = []
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim]
        res.append((vi.name, shape, np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).name))
    return res


def model_inputs(name: str, path: Path, seed: int) -> dict[str, np.ndarray]:
    """One sample: the digits test set, the MLPerf Tiny test.npz, or random data for the rest."""
    ins = graph_inputs(path)
    if name == "digits":
        spec = importlib.util.spec_from_file_location("tinyc_digits_data", ROOT / "examples" / "digits" / "data.py")
        mod = importlib.util.module_from_spec(spec)
        assert spec.loader is not None
        spec.loader.exec_module(mod)
        x_test = mod.load_split()[2]
        (iname, shape, dtype), = ins
        return {iname: x_test[0].reshape(shape).astype(dtype)}
    if name in MLPERF_MODELS:
        with np.load(MLPERF_DIR / name / "test.npz") as data:
            x = data["x"]
        (iname, shape, dtype), = ins
        return {iname: np.ascontiguousarray(x[0].reshape(shape).astype(dtype))}
    rng = np.random.default_rng(seed)
    return {iname: rng.random(shape, dtype=np.float64).astype(dtype) for iname, shape, dtype in ins}


# --------------------------------------------------------------------------------------------
# timing helpers


def run_cmd(cmd: list[str], cwd: Path | None = None, timeout: float = 600) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise RuntimeError(f"`{' '.join(map(str, cmd[:3]))} ...` exited {proc.returncode}:\n{tail}")
    return proc.stdout


def runner_timing(cmd: list[str], repeat: int, cwd: Path | None = None) -> float:
    """Runs a C runner whose last argument is the repeat count; returns its us/inference."""
    out = run_cmd(cmd + [str(repeat)], cwd=cwd, timeout=900)
    m = TIMING_RE.search(out)
    if not m:
        raise RuntimeError(f"no timing line in runner output: {out.strip()[:300]!r}")
    return float(m.group(1))


def calibrate(measure: Callable[[int], float], run_seconds: float, max_repeat: int = 10_000_000) -> int:
    """The repeat count that makes one timing run last about `run_seconds` (at least 2)."""
    n = 2
    while True:
        us = measure(n)
        total = us * n / 1e6
        if total >= run_seconds * 0.25 or n >= max_repeat:
            return int(min(max_repeat, max(2, math.ceil(run_seconds / max(us / 1e6, 1e-9)))))
        n = min(max_repeat, n * 10)


def summary(samples: list[float]) -> dict[str, Any]:
    s = sorted(samples)
    return {"median_us": statistics.median(s), "min_us": s[0], "max_us": s[-1],
            "runs_us": samples, "spread": (s[-1] - s[0]) / statistics.median(s) if s[0] > 0 else None}


def max_abs_diff(ours: list[np.ndarray], ref: list[np.ndarray]) -> tuple[float, bool]:
    worst, ok = 0.0, True
    for a, b in zip(ours, ref):
        a = np.asarray(a, dtype=np.float64).reshape(-1)
        b = np.asarray(b, dtype=np.float64).reshape(-1)
        if a.size != b.size:
            return float("inf"), False
        d = float(np.max(np.abs(a - b))) if a.size else 0.0
        if not np.isfinite(d):
            return float("inf"), False
        worst = max(worst, d)
        ok &= d <= ATOL + RTOL * float(np.max(np.abs(b)) if b.size else 0.0)
    return worst, bool(ok)


# --------------------------------------------------------------------------------------------
# engines


class Ort:
    def __init__(self, path: Path, feeds: dict[str, np.ndarray]) -> None:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        src = path if isinstance(path, bytes) else str(path)
        self.sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
        self.out_names = [o.name for o in self.sess.get_outputs()]
        self.feeds = feeds

    def outputs(self) -> list[np.ndarray]:
        return self.sess.run(self.out_names, self.feeds)

    def measure(self, n: int) -> float:
        run, names, feeds = self.sess.run, self.out_names, self.feeds
        t0 = time.perf_counter()
        for _ in range(n):
            run(names, feeds)
        return (time.perf_counter() - t0) / n * 1e6


class Tinyc:
    def __init__(self, path: Path, feeds: dict[str, np.ndarray], work: Path, info: dict[str, Any]) -> None:
        import tinyc
        from tinyc.targets import host
        self.dir = work
        if work.exists():
            shutil.rmtree(work)
        t0 = time.perf_counter()
        res = tinyc.compile(str(path), work, target="host")
        info["compile_s"] = time.perf_counter() - t0
        self.report = res.report
        for k in ("macs", "params", "weights_bytes", "arena_bytes", "arena_lower_bound_bytes"):
            info[k] = res.report.get(k)
        t0 = time.perf_counter()
        host.build(work)
        info["build_s"] = time.perf_counter() - t0
        self.manifest = host.load_manifest(work)
        prefix = self.manifest["prefix"]
        self.exe = work / "build" / f"{prefix}_main"
        if not self.exe.exists():
            raise RuntimeError(f"runner {self.exe} was not built")
        io = work / "io"
        io.mkdir(exist_ok=True)
        self.in_files, self.out_files = [], []
        for k, spec in enumerate(self.manifest["inputs"]):
            arr = np.ascontiguousarray(np.asarray(feeds[spec["name"]]).astype(spec["dtype"]).reshape(spec["shape"]))
            f = io / f"in{k}.bin"
            arr.tofile(f)
            self.in_files.append(f)
        self.out_files = [io / f"out{k}.bin" for k in range(len(self.manifest["outputs"]))]
        self.cmd = [str(self.exe)] + [str(f) for f in self.in_files + self.out_files]

    def outputs(self) -> dict[str, np.ndarray]:
        run_cmd(self.cmd, timeout=600)
        return {spec["name"]: np.fromfile(f, dtype=spec["dtype"]).reshape(spec["shape"])
                for spec, f in zip(self.manifest["outputs"], self.out_files)}

    def measure(self, n: int) -> float:
        return runner_timing(self.cmd, n)


EMX_MAIN = r"""/* Timing main for emx-onnx-cgen's C, written by benchmarks/host_vs_onnxruntime.py. */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

%(decls)s
%(buffers)s
static int read_file(const char *path, void *dst, size_t bytes)
{
    FILE *f = fopen(path, "rb");
    size_t got;
    if (!f) { fprintf(stderr, "cannot open %%s\n", path); return 1; }
    got = fread(dst, 1, bytes, f);
    fclose(f);
    return got != bytes;
}

static int write_file(const char *path, const void *src, size_t bytes)
{
    FILE *f = fopen(path, "wb");
    if (!f) { return 1; }
    if (fwrite(src, 1, bytes, f) != bytes) { fclose(f); return 1; }
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    long repeat = 1, i;
    struct timespec t0, t1;
    double us;
    if (argc < %(nargs)d) { fprintf(stderr, "usage: %%s inputs... outputs... [repeat]\n", argv[0]); return 2; }
%(reads)s
    if (argc > %(nargs)d) { repeat = strtol(argv[%(nargs)d], 0, 10); }
    if (repeat < 1) { repeat = 1; }
%(load)s
    %(call)s
%(writes)s
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 0; i < repeat; ++i) {
        %(call)s
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / (double)repeat;
    printf("%%.3f us/inference over %%ld runs\n", us, repeat);
    return 0;
}
"""


def emx_available() -> bool:
    return importlib.util.find_spec("emx_onnx_cgen") is not None


def emx_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("emx-onnx-cgen")
    except Exception:
        return None


class Emx:
    """emx-onnx-cgen: `python -m emx_onnx_cgen compile --model-name NAME --large-weight-threshold 0
    model.onnx NAME.c` (all weights as C arrays, like tinyc), built with tinyc's host flags."""

    def __init__(self, path: Path, feeds: dict[str, np.ndarray], work: Path, cc: str, cflags: str,
                 ins: list[tuple[str, list[int], str]], outs: list[tuple[str, list[int], str]],
                 info: dict[str, Any]) -> None:
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        name = "emx_model"
        src = work / f"{name}.c"
        cmd = [sys.executable, "-m", "emx_onnx_cgen", "compile", "--color", "never", "--model-name", name,
               "--large-weight-threshold", "0", str(path), str(src)]
        info["generate_cmd"] = " ".join(cmd[1:])
        t0 = time.perf_counter()
        run_cmd(cmd, cwd=work, timeout=900)
        info["generate_s"] = time.perf_counter() - t0
        text = src.read_text()
        m = re.search(rf"^void {name}\((.*)\)\s*\{{", text, re.M)
        if not m:
            raise RuntimeError(f"cannot find the entry point `void {name}(...)` in the generated C")
        decls = [f"void {name}({m.group(1)});"]
        has_load = re.search(rf"^_Bool {name}_load\(const char \*path\)", text, re.M) is not None
        if has_load:
            decls.insert(0, f"_Bool {name}_load(const char *path);")
        bufs, reads, writes, args = [], [], [], []
        for k, (_, shape, dtype) in enumerate(ins):
            count = int(np.prod(shape)) if shape else 1
            bufs.append(f"static {NP_TO_C[dtype]} in{k}[{count}];")
            reads.append(f"    if (read_file(argv[{k + 1}], in{k}, sizeof in{k})) {{ return 1; }}")
            args.append(f"(void *)in{k}")
        for k, (_, shape, dtype) in enumerate(outs):
            count = int(np.prod(shape)) if shape else 1
            bufs.append(f"static {NP_TO_C[dtype]} out{k}[{count}];")
            writes.append(f"    if (write_file(argv[{len(ins) + k + 1}], out{k}, sizeof out{k})) {{ return 1; }}")
            args.append(f"(void *)out{k}")
        load = f'    if (!{name}_load("{name}.bin")) {{ return 1; }}' if has_load else ""
        main_c = EMX_MAIN % dict(decls="\n".join(decls), buffers="\n".join(bufs) + "\n", nargs=len(ins) + len(outs) + 1,
                                 reads="\n".join(reads), writes="\n".join(writes), load=load,
                                 call=f"{name}({', '.join(args)});")
        (work / "bench_main.c").write_text(main_c)
        exe = work / "bench"
        flags = cflags.split()
        t0 = time.perf_counter()
        try:
            run_cmd([cc, "-std=c99", *flags, "-o", exe, src, work / "bench_main.c", "-lm"], cwd=work, timeout=1800)
            info["std"] = "c99"
        except RuntimeError:
            # Not strict C99: fall back to the compiler's default dialect (recorded in the JSON).
            run_cmd([cc, *flags, "-o", exe, src, work / "bench_main.c", "-lm"], cwd=work, timeout=1800)
            info["std"] = "compiler default"
        info["build_s"] = time.perf_counter() - t0
        info["build_cmd"] = f"{cc} -std={info['std']} {cflags} -o bench {src.name} bench_main.c -lm"
        io = work / "io"
        io.mkdir()
        self.work = work
        self.outs = outs
        in_files = []
        for k, (iname, shape, dtype) in enumerate(ins):
            f = io / f"in{k}.bin"
            np.ascontiguousarray(np.asarray(feeds[iname]).astype(dtype).reshape(shape)).tofile(f)
            in_files.append(f)
        self.out_files = [io / f"out{k}.bin" for k in range(len(outs))]
        self.cmd = [str(exe)] + [str(f) for f in in_files + self.out_files]

    def outputs(self) -> list[np.ndarray]:
        run_cmd(self.cmd + ["1"], cwd=self.work, timeout=600)
        return [np.fromfile(f, dtype=dtype).reshape(shape) for f, (_, shape, dtype) in zip(self.out_files, self.outs)]

    def measure(self, n: int) -> float:
        return runner_timing(self.cmd, n, cwd=self.work)


# --------------------------------------------------------------------------------------------
# machine info


def machine_info(cc: str, cflags: str) -> dict[str, Any]:
    import onnx
    import onnxruntime
    import tinyc
    cpu, simd = "unknown", []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu == "unknown":
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not simd:
                flags = set(line.split(":", 1)[1].split())
                simd = [f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512vl", "avx512_vnni",
                                    "avx512_bf16", "amx_tile", "asimd", "sve") if f in flags]
    except OSError:
        pass
    try:
        cc_version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except Exception as exc:  # noqa: BLE001
        cc_version = f"unknown ({exc})"
    try:
        git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        git += "+dirty" if dirty else ""
    except Exception:  # noqa: BLE001
        git = "unknown"
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": cpu,
        "cpu_simd_flags": simd,
        "nproc": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cc": cc,
        "cc_version": cc_version,
        "cflags": cflags,
        "tinyc_version": tinyc.__version__,
        "tinyc_git": git,
        "onnxruntime_version": onnxruntime.__version__,
        "onnx_version": onnx.__version__,
        "numpy_version": np.__version__,
        "emx_onnx_cgen_version": emx_version() if emx_available() else None,
    }


def ort_call_overhead_us(repeat: int, run_seconds: float) -> float:
    """Median time of session.run on a one-element Identity model: the per-call floor (Python +
    onnxruntime bookkeeping) included in every onnxruntime number."""
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "overhead",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = min(m.ir_version, 8)
    eng = Ort(m.SerializeToString(), {"x": np.zeros(1, np.float32)})  # type: ignore[arg-type]
    n = calibrate(eng.measure, run_seconds)
    return statistics.median(eng.measure(n) for _ in range(repeat))


def find_cc() -> str:
    """The C compiler CMake uses for tinyc's project ('cc' on PATH unless CC says otherwise)."""
    cc = os.environ.get("CC", "cc")
    return shutil.which(cc) or cc


# --------------------------------------------------------------------------------------------
# one model


def bench_model(name: str, args: argparse.Namespace, cc: str, cflags: str, log: Callable[[str], None]) -> dict[str, Any]:
    path = model_path(name)
    res: dict[str, Any] = {"model": name, "path": str(path)}
    if not path.exists():
        res["error"] = f"model file not found: {path}"
        return res
    feeds = model_inputs(name, path, args.seed)
    res["inputs"] = {k: list(v.shape) for k, v in feeds.items()}
    if name in LIGHT_MODELS:
        res["check_note"] = ("light_* models fill every weight with one constant (ConstantOfShape), so the "
                             "softmax output is uniform (0.001) whatever the input: the output check is weak")
    ins = graph_inputs(path)
    ort_eng = Ort(path, feeds)
    ref = ort_eng.outputs()
    outs = [(o.name, list(r.shape), r.dtype.name) for o, r in zip(ort_eng.sess.get_outputs(), ref)]
    res["outputs"] = {n: s for n, s, _ in outs}

    engines: dict[str, Any] = {"onnxruntime": ort_eng}
    res["onnxruntime"] = {"threads": 1, "execution_mode": "sequential", "graph_optimization": "default (ORT_ENABLE_ALL)"}

    info: dict[str, Any] = {}
    res["tinyc"] = info
    try:
        eng = Tinyc(path, feeds, args.work_dir / name / "tinyc", info)
        got = eng.outputs()
        d, ok = max_abs_diff([got[n] for n, _, _ in outs], ref)
        info["max_abs_diff_vs_ort"], info["matches_ort"] = d, ok
        log(f"{name}: tinyc max|tinyc - ort| = {d:.3g}{'' if ok else '  (MISMATCH)'}")
        engines["tinyc"] = eng
    except Exception as exc:  # noqa: BLE001
        info["error"] = f"{type(exc).__name__}: {exc}"
        info["traceback"] = traceback.format_exc()
        log(f"{name}: tinyc failed: {short_error(info['error'])}")

    emx: dict[str, Any] = {}
    res["emx_onnx_cgen"] = emx
    if not args.emx:
        emx["error"] = "skipped (--no-emx)"
    elif not emx_available():
        emx["error"] = "not installed (pip install emx-onnx-cgen)"
    else:
        try:
            eng = Emx(path, feeds, args.work_dir / name / "emx", cc, cflags, ins, outs, emx)
            d, ok = max_abs_diff(eng.outputs(), ref)
            emx["max_abs_diff_vs_ort"], emx["matches_ort"] = d, ok
            log(f"{name}: emx-onnx-cgen max|emx - ort| = {d:.3g}{'' if ok else '  (MISMATCH)'}")
            engines["emx_onnx_cgen"] = eng
        except Exception as exc:  # noqa: BLE001
            emx["error"] = f"{type(exc).__name__}: {exc}"
            log(f"{name}: emx-onnx-cgen failed: {short_error(emx['error'])}")

    # calibrate every engine, then interleave the timing runs so drifting machine load hits all alike
    loops: dict[str, int] = {}
    for key, eng in list(engines.items()):
        try:
            loops[key] = calibrate(eng.measure, args.run_seconds)
        except Exception as exc:  # noqa: BLE001
            res[key]["error"] = f"timing failed: {type(exc).__name__}: {exc}"
            del engines[key]
    samples: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(args.repeat):
        for key, eng in list(engines.items()):
            try:
                samples[key].append(eng.measure(loops[key]))
            except Exception as exc:  # noqa: BLE001
                res[key]["error"] = f"timing failed: {type(exc).__name__}: {exc}"
                del engines[key]
    for key, s in samples.items():
        if key in engines and s:
            res[key].update(summary(s), loop=loops[key], runs=len(s))
    t, o = res["tinyc"].get("median_us"), res["onnxruntime"].get("median_us")
    res["ratio_ort_over_tinyc"] = o / t if t and o else None
    e = res["emx_onnx_cgen"].get("median_us")
    res["ratio_emx_over_tinyc"] = e / t if t and e else None
    a, b = res["tinyc"].get("arena_bytes"), res["tinyc"].get("arena_lower_bound_bytes")
    res["arena_over_bound"] = a / b if a and b else None
    return res


# --------------------------------------------------------------------------------------------
# table


def short_error(err: str, limit: int = 300) -> str:
    """First line of an error plus the first compiler `error:` line, if any."""
    lines = err.strip().splitlines()
    first = lines[0] if lines else ""
    detail = next((ln.strip() for ln in lines[1:] if "error:" in ln or "Error:" in ln), "")
    text = f"{first} {detail}".strip()
    return text if len(text) <= limit else text[:limit] + "..."


def fmt_us(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:,.0f}"


def fmt_count(v: float | None) -> str:
    if v is None:
        return "n/a"
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:.2f}{suf}"
    return str(int(v))


def fmt_kb(v: float | None) -> str:
    return "n/a" if v is None else f"{v / 1024:.1f}"


def fmt_x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def markdown_table(results: list[dict[str, Any]]) -> str:
    head = ["model", "MACs", "tinyc us", "onnxruntime us", "ratio (ort/tinyc)", "emx-onnx-cgen us",
            "arena KB", "lower bound KB", "arena/bound", "max abs diff (tinyc, emx) vs ort"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"]
    for r in results:
        t, e, o = r.get("tinyc", {}), r.get("emx_onnx_cgen", {}), r.get("onnxruntime", {})
        tus = fmt_us(t.get("median_us"))
        if t.get("error"):
            tus = "failed"
        elif t.get("matches_ort") is False:
            tus += " (wrong)"
        eus = fmt_us(e.get("median_us"))
        if e.get("matches_ort") is False and e.get("median_us") is not None:
            eus += " (wrong)"

        def diff(d: dict[str, Any]) -> str:
            v = d.get("max_abs_diff_vs_ort")
            return "n/a" if v is None else f"{v:.1e}"
        lines.append("| " + " | ".join([
            r["model"], fmt_count(t.get("macs")), tus, fmt_us(o.get("median_us")), fmt_x(r.get("ratio_ort_over_tinyc")),
            eus, fmt_kb(t.get("arena_bytes")), fmt_kb(t.get("arena_lower_bound_bytes")), fmt_x(r.get("arena_over_bound")),
            f"{diff(t)}, {diff(e)}"]) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(ALL_MODELS), metavar="NAME",
                    help=f"subset of models (default: all): {', '.join(ALL_MODELS)}")
    ap.add_argument("--repeat", type=int, default=7, help="timing runs per engine; the median is reported (default 7)")
    ap.add_argument("--run-seconds", type=float, default=0.2,
                    help="target duration of one timing run; sets the inferences per run (default 0.2)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT.relative_to(ROOT)})")
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK,
                    help=f"where generated projects are built (default {DEFAULT_WORK.relative_to(ROOT)})")
    ap.add_argument("--no-emx", dest="emx", action="store_false", help="skip the emx-onnx-cgen column")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs (light_* models)")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 if tinyc fails on a model or disagrees with onnxruntime")
    args = ap.parse_args(argv)
    unknown = [m for m in args.models if m not in ALL_MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(ALL_MODELS)}")
    args.repeat = max(1, args.repeat)
    args.work_dir = args.work_dir.resolve()

    from tinyc.targets import host
    from tqdm import tqdm
    cflags = host.default_cflags()
    cc = find_cc()
    info = machine_info(cc, cflags)
    try:
        info["ort_call_overhead_us"] = ort_call_overhead_us(args.repeat, args.run_seconds)
    except Exception as exc:  # noqa: BLE001
        info["ort_call_overhead_us"] = None
        info["ort_call_overhead_error"] = str(exc)
    results: list[dict[str, Any]] = []
    bar = tqdm(args.models, desc="models", unit="model", file=sys.stderr)
    for name in bar:
        bar.set_postfix_str(name)
        t0 = time.perf_counter()
        try:
            r = bench_model(name, args, cc, cflags, tqdm.write)
        except Exception as exc:  # noqa: BLE001  (e.g. onnxruntime cannot load the model)
            r = {"model": name, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            tqdm.write(f"{name}: failed: {r['error']}")
        r["wall_s"] = time.perf_counter() - t0
        results.append(r)
    bar.close()
    info["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None

    table = markdown_table(results)
    print()
    print(f"{info['date']} | {info['cpu_model']} | {info['cpus_usable']} CPUs | {info['cc_version']} | "
          f"cflags {cflags} | onnxruntime {info['onnxruntime_version']} (1 thread) | "
          f"emx-onnx-cgen {info['emx_onnx_cgen_version'] or 'not installed'} | median of {args.repeat} runs | "
          f"session.run floor {fmt_us(info.get('ort_call_overhead_us'))} us")
    print()
    print(table)
    failed = [r["model"] for r in results if r.get("error") or r.get("tinyc", {}).get("error")]
    wrong = [r["model"] for r in results if r.get("tinyc", {}).get("matches_ort") is False]
    for r in results:
        err = r.get("error") or r.get("tinyc", {}).get("error")
        if err:
            print(f"\ntinyc failed on {r['model']}: {short_error(err)}")
    for r in results:
        err = r.get("emx_onnx_cgen", {}).get("error")
        if err and args.emx:
            print(f"emx-onnx-cgen n/a on {r['model']}: {short_error(err)}")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"machine": info, "settings": {"repeat": args.repeat, "run_seconds": args.run_seconds, "seed": args.seed,
                                          "atol": ATOL, "rtol": RTOL},
           "results": results, "table_markdown": table}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    if args.strict and (failed or wrong):
        print(f"--strict: tinyc failed on {failed or 'none'}, disagrees with onnxruntime on {wrong or 'none'}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
