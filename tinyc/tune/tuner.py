"""The tuning loop: tasks -> batches of proposals -> one firmware per batch -> measurements -> log.

1. The model is prepared exactly as `compile` prepares it (same passes, quantization, I/O), so the
   tasks' keys match what `compile --tuning-log` looks up.
2. Round 0 measures every task's default schedule (the baseline of the final table, and the
   weights that spread trials over tasks by their share of the total, as Ansor's task scheduler).
3. Each later round fills one batch: tasks in turn by unfilled budget, candidates proposed by the
   cost model (simulated annealing + epsilon-greedy; random search when asked or untrained),
   never one the log already holds for this board. Every measurement is appended (fsync'ed) the
   moment it exists, so an interrupted run resumes with nothing lost and nothing measured twice.
4. After each batch the cost model is refit on every record in the log — other models' and other
   boards' too (their task and board features are stored in the records): tuning starts warm.
5. Batches are built and measured by an executor (tinyc/tune/executor.py): this machine with
   `jobs` builders and as many emulated boards, or a Dask farm (`cluster`). Up to the executor's
   capacity batches are in flight; as each finishes, its records are written (here, the log's only
   writer), the model refit and the next batch proposed, never repeating a candidate in flight.
   With one job this is the sequential loop: build, measure, record, refit, propose.
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import numpy as np

from tinyc.errors import UsageError
from tinyc.ir import Graph
from tinyc.targets.base import Target
from tinyc.tune.bench import Candidate, build_batch_graph, candidate_is_buildable
from tinyc.tune.executor import Job
from tinyc.tune.tasks import Task, extract_tasks

SEARCHES = ("model", "random")


@dataclass
class TaskResult:
    key: str
    op: str
    layers: list[str]
    macs: int
    default_cycles: float | None
    best_cycles: float | None
    best_knobs: dict[str, Any] | None
    measured: int
    space: int


@dataclass
class TuneResult:
    board: str
    target: str
    units: str
    log: Path
    tasks: list[TaskResult]
    trials: int  # new measurements this run
    failures: dict[str, int] = field(default_factory=dict)
    builds: int = 0
    wall_s: float = 0.0
    measure_s: float = 0.0
    history: list[tuple[int, float]] = field(default_factory=list)  # (trial number, best total so far)
    build_s: float = 0.0  # summed over builds (they may overlap)
    executor: str = ""  # where batches ran
    retried: int = 0  # batches submitted again after losing their worker
    #: summed over batches: generate_s, compile_s, link_s (building), flash_s, run_s (on the board),
    #: compiled / cached (objects); see tinyc.tune.steps.Measured.times
    times: dict[str, float] = field(default_factory=dict)
    measured_all: int = 0  # measurements this run, the defaults of round 0 included

    @property
    def breakdown(self) -> dict[str, float]:
        """Seconds per measured candidate (round 0 included) of each step, and of the rest of the
        run (preparing the model, the golden run, proposing, refitting, logging: "other_s")."""
        n = max(1, self.measured_all)
        steps = ("generate_s", "compile_s", "link_s", "flash_s", "run_s")
        out = {k: self.times.get(k, 0.0) / n for k in steps}
        out["other_s"] = max(0.0, self.wall_s - sum(self.times.get(k, 0.0) for k in steps)) / n
        out["all_in_s"] = self.wall_s / n
        out["compile_cpu_s"] = self.times.get("compile_cpu_s", 0.0) / n  # CPU, not wall: load-independent
        return out

    @property
    def default_total(self) -> float:
        return sum((t.default_cycles or 0.0) * len(t.layers) for t in self.tasks)

    @property
    def tuned_total(self) -> float:
        return sum((t.best_cycles or t.default_cycles or 0.0) * len(t.layers) for t in self.tasks)

    @property
    def seconds_per_candidate(self) -> float:
        return self.wall_s / self.trials if self.trials else 0.0


def board_features(board: Mapping[str, Any] | None, target: str, name: str = "host") -> dict[str, Any]:
    """What the cost model knows of the machine (stored in every record, for transfer)."""
    from tinyc.ir.isa import isa_of

    if board is None:
        return {"name": name, "core": target, "isa": [], "clock_hz": 0}
    cpu = board.get("cpu", {})
    return {
        "name": board["name"],
        "core": cpu.get("core", "?"),
        "isa": sorted(isa_of(target)),
        "clock_hz": int(cpu.get("clock_hz", 0)),
    }


def _sample_input(graph: Graph, calib: Any, seed: int) -> dict[str, np.ndarray]:
    """One input for the golden run: the first calibration sample when given (quantized on the
    input's grid for an int8-I/O model), else seeded noise in each input's range (kernel speed
    does not depend on the values)."""
    from tinyc.quantize.calibrate import _load_calib
    from tinyc.quantize.feeds import prepare_feeds
    from tinyc.quantize.io import io_quant

    rng = np.random.default_rng(seed)
    first: dict[str, np.ndarray] = {}
    if calib is not None:  # outside data: checked (names, shapes, values) as every runner checks it
        specs = [
            {
                k: v
                for k, v in {
                    "name": n,
                    "dtype": graph.tensor(n).dtype,
                    "shape": list(graph.tensor(n).shape),
                    "quant": io_quant(graph.tensor(n)),
                }.items()
                if v is not None
            }
            for n in graph.inputs
        ]
        first = prepare_feeds({"inputs": specs}, _load_calib(calib)).model(0)
    feeds: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        t = graph.tensor(name)
        if name in first:
            feeds[name] = first[name]
        elif t.dtype in ("int8", "uint8"):
            info = np.iinfo(t.dtype)
            feeds[name] = rng.integers(info.min, info.max + 1, size=t.shape).astype(t.dtype)
        else:
            feeds[name] = rng.normal(size=t.shape).astype(t.dtype)
    return feeds


def ram_room(graph: Graph, board: Mapping[str, Any] | None, ram_budget: int | None, arena: int) -> int | None:
    """Bytes the arena may take: --ram-budget, else the board's RAM less stack, I/O buffers and a
    margin for the runtime's own data (None on the host: no limit)."""
    if ram_budget is not None:
        return int(ram_budget)
    if board is None:
        return None
    mem = board["memory"]
    io = sum(graph.tensor(n).nbytes for n in graph.inputs) + sum(graph.tensor(n).nbytes for n in graph.outputs)
    return int(mem["ram_size"]) - int(mem.get("stack_size", 0)) - io - 8192


def tune(
    model: Any,
    board: str | None = None,
    trials: int = 64,
    log: str | os.PathLike = "tune.jsonl",
    input_shapes: Any = None,
    io_layout: str = "onnx",
    bind: Any = None,
    quantize: str = "auto",
    calib: Any = None,
    calib_method: str = "minmax",
    io_dtype: str = "float",
    board_dir: Any = None,
    ram_budget: int | None = None,
    search: str = "model",
    batch_size: int = 16,
    seed: int = 0,
    repeat: int | None = None,
    port: str | None = None,
    work_dir: str | os.PathLike | None = None,
    progress: bool | None = None,
    epsilon: float = 0.15,
    run_timeout: float = 10.0,
    target: str | None = None,
    device: str | None = None,
    jobs: int = 1,
    cluster: str | None = None,
    retries: int = 2,
    cluster_timeout: float = 10.0,
    fast_build: bool = True,
) -> TuneResult:
    """Tune `model`'s layers on `board` (None: the host, or with target "opencl" the OpenCL
    `device`, "platform:device", default the first GPU else the first device) with at most
    `trials` new measurements.

    `jobs`: parallel builds on this machine, and as many emulated boards measuring at once (a real
    board on `port`, the host and an OpenCL device measure one batch at a time: their timings need
    a quiet machine). `cluster`: the address of a Dask scheduler whose workers hold the board
    (see tinyc/tune/farm.py); a batch whose worker is lost is tried `retries` more times, then its
    candidates are logged as "lost" (not measured: the next run over the same log measures them).
    `log` is outside input too: a record whose knobs the op does not offer is skipped, with a
    warning naming its line. `fast_build` (emulated boards): each batch from one cached object per
    candidate, compiled on every core, inputs baked into the image (tinyc.tune.objects); False:
    the CMake project a normal compile builds."""
    from tinyc.memory import plan_graph_memory
    from tinyc.pipeline import prepare
    from tinyc.reference import run_graph
    from tinyc.schedule import default_schedules
    from tinyc.targets.registry import TARGETS, load_mcu_board, target_for
    from tinyc.tune.log import TuningLog, check_log_path
    from tinyc.tune.measure import measurer_for

    if search not in SEARCHES:
        raise UsageError(f"--search must be one of {', '.join(SEARCHES)}, got {search!r}")
    if trials < 0 or batch_size < 1:
        raise UsageError("--trials must be >= 0 and --batch-size >= 1")
    named = TARGETS.get(target or "host")
    if named is None:
        raise UsageError(f"--target must be {' or '.join(TARGETS)} (or use --board), got {target!r}")
    if named.selects_device and board:
        raise UsageError("--target opencl tunes on an OpenCL device (--device); --board is for microcontrollers")
    if device is not None and not named.selects_device:
        raise UsageError("--device is for --target opencl")
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}")
    if cluster is not None and not board:
        raise UsageError(
            "--cluster measures on boards held by farm workers: name one with --board (host and "
            "OpenCL tuning run on this machine)"
        )
    if cluster is not None and jobs != 1:
        raise UsageError(
            "--jobs is for tuning on this machine; on a farm (--cluster) the workers' boards and "
            "threads set the parallelism"
        )
    if cluster is not None and port:
        raise UsageError(
            "--port is for a board on this machine; farm workers own their ports (tinyc worker --board NAME=PORT)"
        )
    check_log_path(log)  # before the model is prepared: a directory is one clear error, at once
    t_start = time.perf_counter()
    if search == "model":  # scikit-learn takes seconds to import: meanwhile the model is prepared
        threading.Thread(target=_import_cost_model, name="tinyc-import-sklearn", daemon=True).start()
    board_def = load_mcu_board(board, board_dir)
    if cluster is not None and board_def is None:
        raise UsageError(f"--cluster measures on microcontroller boards held by farm workers; '{board}' is the host")
    tgt = target_for(board_def, target or "host")
    graph, _ = prepare(
        model,
        input_shapes,
        None,
        io_layout,
        bind,
        quantize,
        calib,
        calib_method,
        progress=bool(progress),
        io_dtype=io_dtype,
    )
    defaults = default_schedules(graph, tgt.schedule_target)
    arena = plan_graph_memory(graph, defaults, tgt.schedule_target).arena_bytes
    room = ram_room(graph, board_def, ram_budget, arena)
    if room is not None and arena > room:
        raise UsageError(f"the model's arena ({arena:,} B with default schedules) exceeds the RAM budget ({room:,} B)")
    tasks = extract_tasks(graph, tgt.schedule_target, defaults, arena, room)
    if not tasks:
        raise UsageError(f"model '{graph.name}' has no tunable layers")
    env = run_graph(graph, _sample_input(graph, calib, seed), keep_all=True)
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="tinyc-tune-"))
    options: dict[str, Any] = {"port": port, "run_timeout": run_timeout, "device": device, "fast_build": fast_build}
    if repeat is not None:
        options["repeat"] = repeat
    measurer = measurer_for(tgt, work, **options)
    executor = _make_executor(
        measurer, board_def, tgt.schedule_target, work, jobs, cluster, retries, cluster_timeout, repeat, run_timeout
    )
    session = TuningSession(
        graph, tgt, tasks, env, TuningLog(log), measurer, executor, Path(log), trials, progress, seed, epsilon
    )
    try:
        session.measure_baseline(batch_size)
        session.search(trials, batch_size, search)
    finally:
        session.close()
    return session.finish(t_start)


class TuningSession:
    """One tuning run's state: the prepared graph and its tasks, the golden values, the log (its
    only writer), the measurer and executor, and what is in flight. Batches go to the executor
    (`submit`); what comes back is recorded as it arrives (`settle`); `propose` fills the next
    batch from the cost model, never with a candidate the log holds or a batch in flight carries."""

    def __init__(
        self,
        graph: Graph,
        target: Target,
        tasks: list[Task],
        env: Mapping[str, np.ndarray],
        tlog: Any,
        measurer: Any,
        executor: Any,
        log_path: Path,
        trials: int,
        progress: bool | None,
        seed: int,
        epsilon: float,
    ) -> None:
        from tinyc.progress import Bar
        from tinyc.tune.cost_model import CostModel
        from tinyc.tune.tasks import drop_unoffered_records

        self.graph, self.target, self.tasks, self.env, self.tlog = graph, target, tasks, env, tlog
        self.measurer, self.executor, self.epsilon = measurer, executor, epsilon
        # the log keys OpenCL records by device ("opencl:<device name>"), board records by board
        self.board_name = measurer.board["name"] if target.selects_device else target.name
        self.features = board_features(target.board, target.schedule_target, self.board_name)
        nodes = {n.name: n for n in graph.nodes}
        for t in tasks:  # a log is outside input: records whose knobs the op does not offer are skipped
            drop_unoffered_records(tlog, self.board_name, t.key, nodes[t.nodes[0]], graph, target.schedule_target)
        self.rng = np.random.default_rng(seed)
        self.cost_model = CostModel(seed=seed)
        self.by_key = {t.key: t for t in tasks}
        self.result = TuneResult(
            self.board_name, target.schedule_target, measurer.units, log_path, [], 0, executor=executor.description
        )
        # a bar on a terminal, a plain line per stage elsewhere (tinyc.progress); progress=False: silent
        self.bar = Bar(trials, f"tuning on {self.board_name}", unit="cand", show=progress, leave=True)
        self.in_flight: dict[str, set[str]] = {}  # task key -> knobs ids of candidates submitted, not yet recorded
        self.lost_now: dict[str, set[str]] = {}  # task key -> knobs ids lost (after their retries) in this run
        self.pending_trials = 0  # counted candidates in flight
        self.n_jobs = 0
        # filled by measure_baseline: trials spread over tasks, and what each task has used
        self.weights: dict[str, float] = {}
        self.budget: dict[str, int] = {}
        self.done: dict[str, int] = {}
        self.spaces: dict[str, list[dict[str, Any]]] = {}
        self.fitted_on = -1

    # ---------------------------------------------------------------- what the log says

    def best_of(self, task: Task) -> float | None:
        rec = self.tlog.best(self.board_name, task.key)
        return float(rec["cycles"]) if rec else None

    def default_of(self, task: Task) -> float | None:
        from tinyc.tune.log import knobs_id

        want = knobs_id(task.default)
        oks = [
            r
            for r in self.tlog.records(self.board_name, task.key)
            if r["status"] == "ok" and knobs_id({k: v for k, v in r["knobs"].items() if not k.startswith("_")}) == want
        ]
        return float(oks[-1]["cycles"]) if oks else None

    def total_best(self) -> float:
        return sum((self.best_of(t) or self.default_of(t) or 0.0) * t.count for t in self.tasks)

    # ---------------------------------------------------------------- recording

    def record(self, m: Any, where: str = "") -> None:
        from tinyc.tune.log import knobs_id

        task = self.by_key[m.candidate.task_key]
        knobs = dict(m.candidate.knobs)
        rec = {
            "board": self.board_name,
            "target": self.target.schedule_target,
            "key": task.key,
            "op": task.op,
            "knobs": knobs,
            "cycles": m.cycles,
            "status": m.status,
            "units": self.measurer.units,
            "repeats": m.repeats,
            "detail": m.detail,
            "scratch_bytes": task.scratch.get(knobs_id(knobs), 0),
            "task": task.info,
            "board_info": self.features,
            "model": self.graph.name,
        }
        if where:
            rec["measured_on"] = where
        self.tlog.append(rec)
        if m.status not in ("build_error", "lost"):
            self.result.measured_all += 1
        if m.status != "ok":
            self.result.failures[m.status] = self.result.failures.get(m.status, 0) + 1

    def _tick(self, counted: bool) -> None:
        best = self.total_best()
        if counted:  # (round 0's partial totals, defaults still missing, are not history)
            self.result.trials += 1
            self.bar.update(1)
            self.result.history.append((self.result.trials, best))
        self.bar.set_postfix_str(f"best {best:,.0f} {self.measurer.units}")

    def _record_failure(self, c: Candidate, status: str, detail: str, counted: bool, where: str = "") -> None:
        from tinyc.tune.measure import Measurement

        self.record(Measurement(c, status, detail=detail), where)
        self._tick(counted)

    # ---------------------------------------------------------------- batches in and out

    def submit(self, cands: list[Candidate], counted: bool) -> None:
        """Log the candidates the op refuses as build errors; hand the rest, as one batch, to the
        executor (settle() records it when it is done)."""
        from tinyc.tune.log import knobs_id

        ok: list[Candidate] = []
        for c in cands:
            why = candidate_is_buildable(self.graph, c.node, c.knobs, self.target.schedule_target)
            if why:
                self._record_failure(c, "build_error", why, counted)
            else:
                ok.append(c)
        if not ok:
            return
        batch = build_batch_graph(self.graph, ok, self.env)
        for c in ok:
            self.in_flight.setdefault(c.task_key, set()).add(knobs_id(c.knobs))
        if counted:
            self.pending_trials += len(ok)
        self.executor.submit(Job(batch, f"batch{self.n_jobs:04d}", counted))
        self.n_jobs += 1

    def release(self, job: Job, c: Candidate) -> None:
        """`c` of `job` is recorded (or handed on to a smaller batch): no longer in flight."""
        from tinyc.tune.log import knobs_id

        self.in_flight.get(c.task_key, set()).discard(knobs_id(c.knobs))
        if job.counted:
            self.pending_trials -= 1

    def settle(self, out: Any) -> None:
        """Record what the executor finished: one measurement as soon as it exists (this machine's
        executor streams them), or a whole batch — its measurements not yet recorded; or, when it
        did not build, its halves are submitted (until the failing candidate is alone; a batch too
        big for the flash is split where it stops fitting, when the build says); or, when
        its worker was lost too often, every candidate as "lost" (measured again by a later run)."""
        from tinyc.tune.log import knobs_id

        job = out.job
        if out.kind == "partial":
            ident = (out.measurement.candidate.task_key, knobs_id(out.measurement.candidate.knobs))
            if ident not in job.recorded:
                job.recorded.add(ident)
                self.record(out.measurement)
                self.release(job, out.measurement.candidate)
                self._tick(job.counted)
            return
        left = [c for c in job.batch.candidates if (c.task_key, knobs_id(c.knobs)) not in job.recorded]
        if out.kind == "build_error":
            for c in left:
                self.release(job, c)
            if len(left) == 1:
                self._record_failure(left[0], "build_error", out.message.splitlines()[0][:300], job.counted)
                return
            # where it stops fitting in the flash when the build knows, else in halves
            fit = int(getattr(out, "fit", 0) or 0)
            half = fit if 0 < fit < len(left) and len(left) == len(job.batch.candidates) else len(left) // 2
            self.submit([Candidate(c.task_key, c.node, c.knobs) for c in left[:half]], job.counted)
            self.submit([Candidate(c.task_key, c.node, c.knobs) for c in left[half:]], job.counted)
            return
        if out.kind == "lost":  # not the candidates' fault: "lost", measured again by a later run
            for c in left:
                from tinyc.tune.measure import Measurement

                self.record(Measurement(c, "lost", detail=out.message))
                self.lost_now.setdefault(c.task_key, set()).add(knobs_id(c.knobs))
                self.release(job, c)
                self._tick(job.counted)
            return
        measured = out.measured
        self.result.measure_s += measured.measure_s
        self.result.build_s += measured.build_s
        for k, v in (getattr(measured, "times", None) or {}).items():
            self.result.times[k] = self.result.times.get(k, 0.0) + float(v)
        for m in measured.measurements:
            ident = (m.candidate.task_key, knobs_id(m.candidate.knobs))
            if ident in job.recorded:
                continue
            job.recorded.add(ident)
            self.record(m, measured.where)
            self.release(job, m.candidate)
            self._tick(job.counted)
        for c in left:  # a measurer that dropped a candidate must not lose it silently
            if (c.task_key, knobs_id(c.knobs)) not in job.recorded:
                job.recorded.add((c.task_key, knobs_id(c.knobs)))
                self.release(job, c)
                self._record_failure(c, "crash", "no measurement came back for it", job.counted, measured.where)

    def drain(self) -> None:
        """Wait for and record every batch in flight."""
        while self.executor.in_flight:
            self.settle(self.executor.wait())

    # ---------------------------------------------------------------- the rounds

    def measure_baseline(self, batch_size: int) -> None:
        """Round 0: the defaults (the baseline; not counted against --trials), and the candidates
        an earlier run lost with their batch (its board or farm worker gone): what it still owes.
        Their counts weight the tasks' shares of the trials."""
        from tinyc.tune.log import knobs_id

        first: list[Candidate] = []
        for t in self.tasks:
            done_ids = self.tlog.measured(self.board_name, t.key)
            in_space = {knobs_id(c) for c in t.space}
            owed = [dict(t.default)] + [k for k in self.tlog.lost(self.board_name, t.key) if knobs_id(k) in in_space]
            seen: set[str] = set()
            for knobs in owed:
                ident = knobs_id(knobs)
                if ident not in done_ids and ident not in seen:
                    seen.add(ident)
                    first.append(Candidate(t.key, t.nodes[0], knobs))
        for i in range(0, len(first), batch_size):
            self.submit(first[i : i + batch_size], counted=False)
        self.drain()
        self.result.history.append((0, self.total_best()))

    def search(self, trials: int, batch_size: int, search: str) -> None:
        """Later rounds: keep the executor full with proposed batches until `trials` new
        measurements are recorded (or every space is exhausted)."""
        from tinyc.tune.task_scheduler import allocate

        self.weights = {t.key: (self.default_of(t) or 1.0) * t.count for t in self.tasks}
        measured_now = {t.key: len(self.tlog.measured(self.board_name, t.key)) for t in self.tasks}
        self.budget = allocate(
            self.weights,
            trials,
            minimum=1,
            measured=measured_now,
            space_sizes={t.key: len(t.space) for t in self.tasks},
        )
        self.done = {k: 0 for k in self.budget}
        while True:
            while (
                self.executor.in_flight < self.executor.capacity and self.result.trials + self.pending_trials < trials
            ):
                batch = self.propose(batch_size, search)
                if not batch:
                    break
                self.submit(batch, counted=True)
            if not self.executor.in_flight:
                break
            self.settle(self.executor.wait())

    def propose(self, batch_size: int, search: str) -> list[Candidate]:
        """One batch of new candidates: tasks by unfilled budget, the cost model's picks (or
        random ones), none the log holds or a batch in flight carries."""
        from tinyc.tune.log import knobs_id
        from tinyc.tune.task_scheduler import next_task

        if search == "model" and len(self.tlog) != self.fitted_on:
            _refit(self.cost_model, self.tlog)
            self.fitted_on = len(self.tlog)
        batch: list[Candidate] = []
        taken: dict[str, set[str]] = {}
        budget, done = self.budget, self.done
        while len(batch) < batch_size:
            key = next_task(self.weights, done, budget)
            if key is None:
                break
            task = self.by_key[key]
            exclude = (
                self.tlog.measured(self.board_name, key)
                | self.in_flight.get(key, set())
                | self.lost_now.get(key, set())
                | taken.setdefault(key, set())
            )
            # several per task and call, so the epsilon-greedy share is at least one candidate
            want = min(budget[key] - done[key], batch_size - len(batch), max(4, batch_size // 2))
            space = self.spaces.setdefault(
                key, [{**c, "_scratch_bytes": task.scratch.get(knobs_id(c), 0)} for c in task.space]
            )
            if search == "random" or not self.cost_model.trained:
                from tinyc.tune.search import random_proposals

                props = random_proposals(space, exclude, want, self.rng)
            else:
                from tinyc.tune.search import model_proposals

                props = model_proposals(
                    space,
                    exclude,
                    want,
                    self.cost_model,
                    dict(task.info),
                    self.features,
                    self.rng,
                    epsilon=self.epsilon,
                )
            props = [{k: v for k, v in p.items() if not k.startswith("_")} for p in props]
            if not props:
                budget[key] = done[key]  # space exhausted
                continue
            for p in props:
                taken[key].add(knobs_id(p))
                batch.append(Candidate(key, task.nodes[0], dict(p)))
            done[key] += len(props)
        return batch

    def close(self) -> None:
        self.bar.close()
        self.executor.close()

    def finish(self, t_start: float) -> TuneResult:
        """The result: per task its default and best counts from the log, and the run's totals."""
        result = self.result
        for t in self.tasks:
            best = self.tlog.best(self.board_name, t.key)
            result.tasks.append(
                TaskResult(
                    t.key,
                    t.op,
                    list(t.sources),
                    int(t.info["macs"]),
                    self.default_of(t),
                    float(best["cycles"]) if best else None,
                    dict(best["knobs"]) if best else None,
                    len(self.tlog.measured(self.board_name, t.key)),
                    len(t.space),
                )
            )
        result.builds = self.executor.builds
        result.retried = self.executor.retried
        result.wall_s = time.perf_counter() - t_start
        return result


def _make_executor(
    measurer: Any,
    board_def: Mapping[str, Any] | None,
    target: str,
    work: Path,
    jobs: int,
    cluster: str | None,
    retries: int,
    cluster_timeout: float,
    repeat: int | None,
    run_timeout: float,
) -> Any:
    """A DaskExecutor on `cluster`, else a LocalExecutor: `jobs` builders and, for an emulated
    board, `jobs` boards (QEMU processes); one measuring slot for a real board (one port), the
    host and an OpenCL device, whose builds never overlap their measurements (the timings of the
    host and a device on it need a quiet machine)."""
    from tinyc.version import __version__
    from tinyc.tune.executor import DaskExecutor, LocalExecutor
    from tinyc.tune.steps import MeasureSpec

    if cluster is not None:
        assert board_def is not None
        spec = MeasureSpec(dict(board_def), target, repeat, run_timeout, __version__)
        return DaskExecutor(spec, cluster, retries=retries, timeout=cluster_timeout)
    if board_def is None:
        return LocalExecutor(measurer, work, jobs=1, slots=1, capacity=1)
    slots = jobs if board_def.get("emulated") else 1
    return LocalExecutor(measurer, work, jobs=jobs, slots=slots)


def _import_cost_model() -> None:
    """Import what the cost model's first fit needs, ahead of it (a thread started by `tune`:
    most of the import waits on the disk and the dynamic loader, while the main thread waits on
    the model's preparation and round 0's build)."""
    try:
        import sklearn.ensemble  # noqa: F401
        import sklearn.feature_extraction  # noqa: F401
        import sklearn.pipeline  # noqa: F401
    except Exception:  # noqa: BLE001  (the fit imports them again and reports what is wrong)
        pass


def _refit(model: Any, tlog: Any) -> None:
    """Fit the cost model on every ok record of the log (all models, all boards: transfer)."""
    from tinyc.tune.cost_model import records_to_samples
    from tinyc.tune.features import candidate_features

    def usable(r: Mapping[str, Any]) -> bool:
        """The record's stored task and board features make features (a log is outside input:
        one malformed `task` must not stop the fit, nor stand in for its task's good records)."""
        try:
            candidate_features(r["task"], r["knobs"], r["board_info"])
            return True
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
            return False

    recs = [
        dict(r, knobs={**r["knobs"], "_scratch_bytes": r.get("scratch_bytes", 0)})
        for r in tlog.records()
        if r.get("status") == "ok" and "task" in r and "board_info" in r
    ]
    recs = [r for r in recs if usable(r)]
    tasks = {r["key"]: r["task"] for r in recs}
    boards = {r["board"]: r["board_info"] for r in recs}
    samples = records_to_samples(recs, tasks, boards)
    if len(samples) >= 4:
        model.fit(samples)


def result_table(res: TuneResult) -> str:
    """Per task: layers, MACs, default vs tuned count, speed-up, MACs per count; then the totals."""
    u = res.units
    rows = [
        f"tuned on {res.board} ({res.target}); counts are {u}"
        + (" (QEMU instruction counts, deterministic)" if u == "instructions" else ""),
        f"{'layer(s)':<42} {'MACs':>10} {'default':>12} {'tuned':>12} {'speed-up':>8} {'MAC/' + u[:5]:>9} {'tried':>9}",
    ]
    for t in res.tasks:
        name = t.layers[0][:36] + (f" x{len(t.layers)}" if len(t.layers) > 1 else "")
        d, b = t.default_cycles, t.best_cycles
        sp = f"{d / b:.2f}x" if d and b else "-"
        mpc = f"{t.macs / b:.3f}" if b else "-"
        rows.append(
            f"{name:<42} {t.macs:>10,} {d or 0:>12,.0f} {b or 0:>12,.0f} {sp:>8} {mpc:>9} {t.measured:>4}/{t.space:<4}"
        )
    d, b = res.default_total, res.tuned_total
    rows.append(f"{'total (tuned layers)':<42} {'':>10} {d:>12,.0f} {b:>12,.0f} {(d / b if b else math.nan):>7.2f}x")
    rows.append(
        f"{res.trials} new measurements, {res.builds} firmware builds, {res.wall_s:.1f} s "
        f"({res.seconds_per_candidate:.2f} s per candidate); failures: {res.failures or 'none'}"
    )
    if res.times:
        bd = res.breakdown
        rows.append(
            f"per measured candidate ({res.measured_all}, defaults included): {bd['all_in_s']:.3f} s = generate "
            f"{bd['generate_s']:.3f} + compile {bd['compile_s']:.3f} + link {bd['link_s']:.3f} + flash "
            f"{bd['flash_s']:.3f} + measure {bd['run_s']:.3f} + other {bd['other_s']:.3f} (compiler CPU "
            f"{bd['compile_cpu_s']:.3f}); objects compiled {res.times.get('compiled', 0):.0f}, cached "
            f"{res.times.get('cached', 0):.0f}"
        )
    if res.executor:
        rows.append(
            f"on {res.executor}"
            + (f"; {res.retried} batch(es) tried again after losing their worker" if res.retried else "")
        )
    return "\n".join(rows)
