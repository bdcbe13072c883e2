"""Measuring a batch of candidates: on a board through the serial harness, or on the host.

Each candidate: its layer's real inputs are written, the candidate runs alone `repeat` times
(the median count is its cost), its output is read back and compared with the golden model.
A wrong output is recorded as "wrong", never as fast. A candidate that faults or hangs ends the
device session (fault report over the link, or the host's timeout): the board is restarted
(emulator) or reflashed, and the batch goes on with the next candidate. The host runner does the
same with a child process, so a crashing kernel cannot take the tuner down.
"""

from __future__ import annotations

import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping

import numpy as np

from tinyc.errors import BuildError, DeviceError
from tinyc.reference.compare import compare_float
from tinyc.targets.base import Target
from tinyc.tune.bench import Batch, Candidate, write_board_batch, write_host_batch, write_opencl_batch


@dataclass
class Measurement:
    candidate: Candidate
    status: str  # ok | wrong | crash | timeout | build_error
    cycles: float | None = None  # median, in `units`
    repeats: list[float] = field(default_factory=list)
    detail: str = ""


OnResult = Callable[[Measurement], None]


def _check(batch: Batch, j: int, data: bytes) -> str | None:
    """None when candidate j's outputs equal the golden outputs (integers bit for bit, floats within
    1e-4 of the output's scale), else what differs."""
    for (off, n, dtype, shape), want in zip(batch.output_slices[j], batch.expected[j]):
        got = np.frombuffer(data[off - batch.output_slices[j][0][0] :][:n], dtype=np.dtype(dtype).newbyteorder("<"))
        got = got.astype(np.dtype(dtype)).reshape(shape)
        if got.dtype.kind == "f":  # float kernels may sum in another order: onnxruntime-style tolerance
            close = compare_float(got, want)
            if close.ok:
                continue
            return (
                f"{close.mismatches} of {got.size} output values differ from the golden model beyond tolerance "
                f"(max |diff| {close.max_abs_diff:.3g})"
            )
        if not np.array_equal(got, want):
            bad = int(np.count_nonzero(got != want))
            diff = (
                int(np.max(np.abs(got.astype(np.int64) - want.astype(np.int64))))
                if got.dtype.kind in "iu"
                else float(np.max(np.abs(got - want)))
            )
            return f"{bad} of {got.size} output values differ from the golden model (max |diff| {diff})"
    return None


def _span(batch: Batch, j: int) -> tuple[int, int]:
    first, last = batch.output_slices[j][0], batch.output_slices[j][-1]
    return first[0], last[0] + last[1] - first[0]


def _failure_kind(exc: Exception) -> str:
    text = str(exc).lower()
    return "timeout" if ("timed out" in text or "timeout" in text or "no reply" in text) else "crash"


class _Restart(Exception):
    """A candidate ended the device session: start a fresh one for the rest of the batch."""


class BoardUnavailable(DeviceError):
    """Two sessions in a row could not even start on this board (port gone, board unplugged,
    emulator not starting). On a farm that is the worker's fault, not the batch's: the batch is
    given back to be measured on another board instead of being logged as crashes."""


class BoardMeasurer:
    """Candidates on a board (emulated or real) over the serial harness."""

    def __init__(
        self,
        board: Mapping[str, Any],
        target: str,
        work_dir: Path,
        repeat: int | None = None,
        run_timeout: float = 10.0,
        port: str | None = None,
        lost_board: str = "record",
        fast_build: bool = True,
    ) -> None:
        """`lost_board`: what two failed session starts in a row mean — "record" (one board: the
        rest of the batch is logged as crashes) or "raise" (a farm: BoardUnavailable, the batch
        goes to another board). `fast_build` (emulated boards): one object per candidate, cached,
        compiled on every core, one link, the inputs baked in (tinyc.tune.objects); else the
        CMake project of a normal compile."""
        from tinyc.device.runner import counter_units
        from tinyc.tune.objects import ObjectBuilder

        if lost_board not in ("record", "raise"):
            raise ValueError(f"lost_board must be 'record' or 'raise', got {lost_board!r}")
        self.board, self.target, self.work_dir = dict(board), target, Path(work_dir)
        # an emulated board's counts are deterministic (to a SysTick tick): one run says it all
        self.repeat = repeat if repeat is not None else (1 if self.board.get("emulated") else 3)
        self.run_timeout, self.port, self.lost_board = run_timeout, port, lost_board
        self.units = counter_units(self.board).name
        self.builds = 0
        self.fast_build = bool(fast_build and self.board.get("emulated"))
        self.objects = ObjectBuilder(self.work_dir / "objects")
        #: measure() fills the `times` it is given (flash / measure seconds)
        self.reports_times = True

    def prepare(self, batch: Batch, name: str, out: Path | None = None) -> Path:
        """Write and cross-compile the batch firmware into `out` (BuildError when it does not build
        or fit). By default every batch reuses one project folder, `work_dir/candidates`: CMake's
        configuration and the runtime's objects stay built, only the model sources are recompiled;
        parallel builds pass one folder per builder (tinyc.tune.executor.BuildFolders). The
        project's tune_build.json says how long each step took (and whether inputs are baked)."""
        from tinyc.targets.board import build_board_project
        from tinyc.tune.objects import BUILD_INFO, BuildStats, children_cpu

        out = Path(out) if out is not None else self.work_dir / "candidates"
        if self.fast_build:
            self._prepare_fast(batch, out)
        else:
            stats = BuildStats()
            t0 = time.perf_counter()
            write_board_batch(batch, out, self.board, self.target)
            t1 = time.perf_counter()
            cpu0 = children_cpu()
            build_board_project(out, progress=False)
            stats.generate_s, stats.compile_s = t1 - t0, time.perf_counter() - t1
            stats.compile_cpu_s = children_cpu() - cpu0
            (out / BUILD_INFO).write_text(json.dumps(stats.as_dict()) + "\n")
        self.builds += 1
        return out

    def _prepare_fast(self, batch: Batch, out: Path) -> None:
        """The batch as one object per candidate, its inputs baked in (tinyc.tune.objects); when
        the baked inputs do not fit in the flash, built again without them (uploaded instead)."""
        from tinyc.device.runner import pack_inputs
        from tinyc.targets.board import write_board_project
        from tinyc.tune.bench import generate_batch
        from tinyc.tune.objects import BUILD_INFO, INPUTS_SOURCE, BuildStats, bake_inputs, remove_stale, split_layers

        stats = BuildStats(fast=True)
        t0 = time.perf_counter()
        gen = generate_batch(batch, self.target)
        prefix = gen.manifest["prefix"]
        split = split_layers(gen.files, prefix)
        stats.split = split is not None
        files = split if split is not None else dict(gen.files)
        payload = pack_inputs(gen.manifest, {s["name"]: batch.inputs[s["name"]] for s in gen.manifest["inputs"]})
        stats.generate_s = time.perf_counter() - t0
        for bake in (True, False):
            t1 = time.perf_counter()
            write_board_project(out, files, gen.manifest, self.board)
            keep = list(files)
            baked = bake_inputs((out / "main.c").read_text(), payload) if bake else None
            if baked is not None:
                (out / "main.c").write_text(baked[0])
                (out / INPUTS_SOURCE).write_text(baked[1])
                keep.append(INPUTS_SOURCE)
            remove_stale(out, keep)
            stats.generate_s += time.perf_counter() - t1
            stats.baked = baked is not None
            try:
                self.objects.build(out, self.board, prefix, self.objects.sources(out, self.board, keep), stats)
            except BuildError:
                if baked is None:
                    raise
                continue  # (the flash is full: send the inputs over the link instead)
            break
        (out / BUILD_INFO).write_text(json.dumps(stats.as_dict()) + "\n")

    def measure(
        self, batch: Batch, project: Path, on_result: OnResult, times: dict[str, float] | None = None
    ) -> list[Measurement]:
        """Every candidate of the batch; `times` gets "flash_s" (starting sessions, uploading the
        inputs unless the image has them baked in) and "run_s" (running and checking candidates)."""
        from tinyc.device.runner import connect, pack_inputs, _project
        from tinyc.tune.objects import BUILD_INFO

        _, manifest, _ = _project(project)
        payload = pack_inputs(manifest, {s["name"]: batch.inputs[s["name"]] for s in manifest["inputs"]})
        info_path = Path(project) / BUILD_INFO
        baked = bool(json.loads(info_path.read_text()).get("baked_inputs")) if info_path.is_file() else False
        times = times if times is not None else {}
        times.setdefault("flash_s", 0.0)
        times.setdefault("run_s", 0.0)
        pending = list(range(len(batch.candidates)))
        results: list[Measurement] = []
        failed_sessions = 0
        expected_crc = [
            zlib.crc32(b"".join(np.ascontiguousarray(w.astype(w.dtype.newbyteorder("<"))).tobytes() for w in want))
            & 0xFFFFFFFF
            for want in batch.expected
        ]

        def done(m: Measurement) -> None:
            results.append(m)
            on_result(m)

        while pending:
            t_session = time.perf_counter()
            try:
                with connect(project, self.port, run_timeout=self.run_timeout, progress=False) as dev:
                    failed_sessions = 0
                    if not baked:
                        dev.client.write_input(payload)
                    t_run = time.perf_counter()
                    times["flash_s"] += t_run - t_session
                    while pending:
                        j = pending[0]
                        cand = batch.candidates[j]
                        try:
                            ticks = dev.client.run_layer(j, self.repeat)
                            off, n = _span(batch, j)
                            wrong = None
                            if dev.client.output_crc(off, n) != expected_crc[j]:  # then read it to say what differs
                                wrong = _check(batch, j, dev.client.read_output(off, n)) or "output CRC differs"
                        except DeviceError as exc:
                            pending.pop(0)
                            done(Measurement(cand, _failure_kind(exc), detail=str(exc).splitlines()[0][:300]))
                            raise _Restart() from None
                        pending.pop(0)
                        now = time.perf_counter()
                        times["run_s"] += now - t_run
                        t_run = now
                        counts = [dev.units.convert(t) for t in ticks]
                        done(
                            Measurement(
                                cand, "wrong" if wrong else "ok", statistics.median(counts), counts, wrong or ""
                            )
                        )
            except _Restart:
                continue
            except DeviceError as exc:
                failed_sessions += 1
                if failed_sessions >= 2 and self.lost_board == "raise":
                    raise BoardUnavailable(
                        f"{self.board['name']}"
                        f"{' on ' + self.port if self.port else ''}: two sessions in a row "
                        f"failed to start: {str(exc).splitlines()[0][:300]}"
                    ) from None
                if failed_sessions >= 2:  # the firmware itself cannot start: the rest of the batch fails
                    for j in pending:
                        done(Measurement(batch.candidates[j], "crash", detail=f"session failed: {exc}"[:300]))
                    pending = []
        return results


_HOST_WORKER = r"""
import ctypes, json, statistics, sys, time
import numpy as np
lib = ctypes.CDLL(sys.argv[1])
spec = json.loads(sys.stdin.readline())
ins = [np.ascontiguousarray(np.frombuffer(bytes.fromhex(h), dtype=d)) for h, d in spec["inputs"]]
outs = [np.zeros(n, dtype=np.uint8) for n in spec["output_bytes"]]
lib.tune_set_inputs(*[a.ctypes.data_as(ctypes.c_void_p) for a in ins])
for j in spec["candidates"]:
    run = lib.tune_run_layer
    for _ in range(spec["warmup"]):
        run(j)
    times = []
    for _ in range(spec["repeat"]):
        t0 = time.perf_counter_ns(); run(j); times.append(time.perf_counter_ns() - t0)
    lib.tune_get_outputs(*[a.ctypes.data_as(ctypes.c_void_p) for a in outs])
    print(json.dumps({"j": j, "ns": times, "out": [o.tobytes().hex() for o in outs[spec["first"][j]:spec["last"][j]]]}), flush=True)
"""


class HostMeasurer:
    """Candidates as a host shared library, timed in a child process (median of `repeat` runs)."""

    def __init__(
        self, work_dir: Path, repeat: int = 15, warmup: int = 2, cflags: str | None = None, timeout: float = 60.0
    ) -> None:
        self.work_dir, self.repeat, self.warmup, self.cflags, self.timeout = (
            Path(work_dir),
            repeat,
            warmup,
            cflags,
            timeout,
        )
        self.units = "ns"
        self.target = "host"
        self.board = {"name": "host", "cpu": {"core": "host"}}
        self.builds = 0

    def prepare(self, batch: Batch, name: str, out: Path | None = None) -> Path:
        """Write and build the batch's shared library into `out` (default `work_dir/candidates`)."""
        from tinyc.targets import host

        out = Path(out) if out is not None else self.work_dir / "candidates"
        write_host_batch(batch, out, self.cflags)
        host.build(out)
        self.builds += 1
        return out

    def measure(self, batch: Batch, project: Path, on_result: OnResult) -> list[Measurement]:
        from tinyc.targets import host

        manifest = host.load_manifest(project)
        lib = host.library_path(project, manifest)
        inputs = [
            (np.ascontiguousarray(batch.inputs[s["name"]]).tobytes().hex(), s["dtype"]) for s in manifest["inputs"]
        ]
        sizes = [int(np.prod(s["shape"], dtype=np.int64)) * np.dtype(s["dtype"]).itemsize for s in manifest["outputs"]]
        counts = [len(sl) for sl in batch.output_slices]
        first = [sum(counts[:j]) for j in range(len(counts))]
        base = {
            "inputs": inputs,
            "output_bytes": sizes,
            "repeat": self.repeat,
            "warmup": self.warmup,
            "first": first,
            "last": [f + c for f, c in zip(first, counts)],
        }
        return measure_in_child(
            [sys.executable, "-c", _HOST_WORKER, str(lib)],
            base,
            batch,
            on_result,
            self.timeout,
            lambda rec: b"".join(bytes.fromhex(h) for h in rec["out"]),
        )


def measure_in_child(
    argv: list[str],
    base_spec: Mapping[str, Any],
    batch: Batch,
    on_result: OnResult,
    timeout: float,
    output_of: Callable[[dict[str, Any]], bytes],
) -> list[Measurement]:
    """Run a worker process over the batch's candidates: it prints one JSON line per candidate
    ({"j", "ns", ...}; `output_of` gets the output bytes from it). A candidate that kills the
    worker is a crash, one that gives no line within `timeout` a timeout; a fresh worker goes
    on with the rest, so one bad kernel never takes the tuner (or the batch) down."""
    pending = list(range(len(batch.candidates)))
    results: list[Measurement] = []
    while pending:
        spec = dict(base_spec, candidates=pending)
        seen, timed_out = _run_worker(argv, spec, batch, results, on_result, timeout, output_of)
        pending = pending[seen:]
        if pending and not timed_out:  # the child died inside pending[0]
            j = pending.pop(0)
            m = Measurement(batch.candidates[j], "crash", detail="the process running it died")
            results.append(m)
            on_result(m)
    return results


def _run_worker(
    argv: list[str],
    spec: dict[str, Any],
    batch: Batch,
    results: list[Measurement],
    on_result: OnResult,
    timeout: float,
    output_of: Callable[[dict[str, Any]], bytes],
) -> tuple[int, bool]:
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(os.environ)
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(spec) + "\n")
    proc.stdin.close()
    seen = 0
    timed_out = False
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for text in proc.stdout:
            lines.put(text)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:  # a hung candidate: no result within the timeout
                proc.kill()
                j = spec["candidates"][seen]
                m = Measurement(batch.candidates[j], "timeout", detail=f"no result within {timeout:.0f} s")
                results.append(m)
                on_result(m)
                seen += 1
                timed_out = True
                break
            if line is None:
                break
            rec = json.loads(line)
            j = rec["j"]
            data = output_of(rec)
            wrong = _check(batch, j, data) if data else "no output"
            m = Measurement(
                batch.candidates[j],
                "wrong" if wrong else "ok",
                float(statistics.median(rec["ns"])),
                [float(t) for t in rec["ns"]],
                wrong or "",
            )
            results.append(m)
            on_result(m)
            seen += 1
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return seen, timed_out


_OPENCL_WORKER = r"""
import json, sys
import numpy as np
from tinyc.targets.opencl import OpenCLModel
from tinyc.targets.opencl_profile import read_arena, time_kernels, write_arena_inputs
spec = json.loads(sys.stdin.readline())
model = OpenCLModel(spec["dir"], device=spec["device"], profile=True)
with np.load(spec["inputs"]) as data:
    write_arena_inputs(model, {k: data[k] for k in data.files})
for j in spec["candidates"]:
    ns = time_kernels(model, spec["positions"][j], spec["warmup"], spec["repeat"])
    out = b"".join(read_arena(model, off, n, buf) for off, n, buf in spec["outputs"][j])
    path = spec["dir"] + f"/cand{j}.out"
    with open(path, "wb") as f:
        f.write(out)
    print(json.dumps({"j": j, "ns": ns, "out": path}), flush=True)
"""


class OpenCLMeasurer:
    """Candidates as kernels of one OpenCL program per batch, timed by event profiling (median of
    `repeat` after `warmup`) in a child process on the chosen device, outputs checked against the
    golden model like every other target (int8 bit for bit)."""

    def __init__(
        self, work_dir: Path, device: str | None = None, repeat: int = 10, warmup: int = 2, timeout: float = 120.0
    ) -> None:
        from tinyc.targets.opencl_profile import device_name

        self.work_dir, self.device, self.repeat, self.warmup, self.timeout = (
            Path(work_dir),
            device,
            repeat,
            warmup,
            timeout,
        )
        self.device_name = device_name(device)
        self.units = "ns"
        self.target = "opencl"
        self.board = {"name": f"opencl:{self.device_name}", "cpu": {"core": "opencl"}}
        self.builds = 0

    def prepare(self, batch: Batch, name: str, out: Path | None = None) -> Path:
        """Write the batch's OpenCL folder (`out`, default `work_dir/candidates`) and build its
        program once here, so a kernel that does not compile is a BuildError with the driver's log
        (the worker's build is then a cache hit for drivers that cache binaries, as PoCL does)."""
        from tinyc.targets.opencl import OpenCLModel

        out = Path(out) if out is not None else self.work_dir / "candidates"
        write_opencl_batch(batch, out)
        OpenCLModel(out, device=self.device)
        self.builds += 1
        return out

    def measure(self, batch: Batch, project: Path, on_result: OnResult) -> list[Measurement]:
        from tinyc.targets.host import load_manifest

        manifest = load_manifest(project)
        spec = manifest["opencl"]
        inputs = {s["name"]: np.asarray(batch.inputs[s["name"]]) for s in manifest["inputs"]}
        # the ignore: numpy's stubs match the arrays given as **kwds against `allow_pickle: bool`
        np.savez(project / "batch_inputs.npz", **inputs)  # type: ignore[arg-type]
        counts = [len(sl) for sl in batch.output_slices]
        first = [sum(counts[:j]) for j in range(len(counts))]
        n = len(batch.candidates)
        positions = [
            [p for p, k in enumerate(spec["kernels"]) if str(k["name"]).startswith(f"cand{j}:")] for j in range(n)
        ]
        places = spec["outputs"]
        outputs = [
            [
                (int(places[i]["offset"]), int(places[i]["bytes"]), places[i].get("buffer", "arena"))
                for i in range(first[j], first[j] + counts[j])
            ]
            for j in range(n)
        ]
        base = {
            "dir": str(project),
            "device": self.device,
            "inputs": str(project / "batch_inputs.npz"),
            "positions": positions,
            "outputs": outputs,
            "warmup": self.warmup,
            "repeat": self.repeat,
        }
        return measure_in_child(
            [sys.executable, "-c", _OPENCL_WORKER],
            base,
            batch,
            on_result,
            self.timeout,
            lambda rec: Path(rec["out"]).read_bytes(),
        )


def make_measurer(board: Mapping[str, Any] | None, target: str, work_dir: Path, **options: Any) -> Any:
    """The measurer for a board definition (serial harness), else for the target named by a
    schedule target ("host", "opencl"); a farm worker knows only these from its MeasureSpec."""
    from tinyc.targets.registry import target_for

    return measurer_for(target_for(board, target), work_dir, **options)


def measurer_for(target: Target, work_dir: Path, **options: Any) -> Any:
    """The measurer for a Target: a board's serial harness, an OpenCL device or the host
    (`options` holds every measurer's settings; each takes the ones it has)."""
    from tinyc.targets.registry import BoardTarget, OpenCLTarget

    if isinstance(target, OpenCLTarget):
        keep = {k: v for k, v in options.items() if k in ("repeat", "device")}
        return OpenCLMeasurer(work_dir, **keep)
    if isinstance(target, BoardTarget):
        keep = {k: v for k, v in options.items() if k in ("repeat", "run_timeout", "port", "lost_board", "fast_build")}
        return BoardMeasurer(target.definition, target.schedule_target, work_dir, **keep)
    keep = {k: v for k, v in options.items() if k in ("repeat", "cflags")}
    return HostMeasurer(work_dir, **keep)


__all__ = [
    "BoardMeasurer",
    "BoardUnavailable",
    "HostMeasurer",
    "OpenCLMeasurer",
    "Measurement",
    "make_measurer",
    "measurer_for",
    "BuildError",
]
