"""Where batches are built and measured: this machine (`--jobs N`) or a Dask farm (`--cluster`).

The tuner hands an executor *jobs* — one batch of candidates each — and takes back *outcomes*
as they finish; it never learns where a job ran. Both executors run the same two steps, the
functions of `tinyc.tune.steps`:

1. `build_image`: write and compile the batch's project in a build folder of this process (one
   folder per concurrent builder, reused so CMake's configuration and the runtime's objects stay
   built), then pack the project into a `Firmware` — the files the runner needs, as bytes. The
   folder is free again the moment the build is packed, so the next build never overwrites a
   firmware that is still being measured.
2. `measure_image`: unpack the firmware into a fresh folder next to the board (the worker that
   holds it, on a farm), measure every candidate, delete the folder.

`LocalExecutor` runs them on threads (builds are compiler subprocesses, measurements wait on QEMU
or a serial port: threads suffice). `DaskExecutor` submits them as Dask tasks: builds go to
any worker, measurements only to workers that declare the board as a resource (one unit per
attached board, so two measurements never share a board); a batch whose worker is lost is
submitted again, up to `retries` times, then reported `lost`. Outcomes are only ever produced for
finished jobs, and the tuner records them in the client, the only writer of the log: a lost or
retried batch cannot leave half a batch, or a batch twice, in the log.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import uuid
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping

from tinyc.errors import RunError, UsageError
from tinyc.tune.bench import Batch
from tinyc.tune.steps import BuildFailed, BuildFolders, Firmware, Measured, build_image, measure_image


@dataclass
class Job:
    """One batch submitted by the tuner. `counted`: its candidates count against --trials."""

    batch: Batch
    name: str
    counted: bool
    attempts: int = 0
    handles: Any = None  # the executor's futures, while in flight
    recorded: set[tuple[str, str]] = field(default_factory=set)  # (task key, knobs id) the tuner logged


@dataclass
class Outcome:
    """What the tuner gets back. kind: "partial" (one `measurement` of a job still measuring:
    the local executor streams them, so a run killed mid-batch keeps what was measured),
    "measured" (the job is done: `measured`), "build_error" (`message`) or "lost" (the measuring
    worker was lost `attempts` times; `message` says how)."""

    job: Job
    kind: str
    measured: Measured | None = None
    message: str = ""
    measurement: Any = None
    fit: int = 0  # build_error: how many leading candidates would fit the flash (0: unknown)


def measure_view(batch: Batch) -> Batch:
    """The batch without its graph: all a measurement needs (inputs, expected outputs, where each
    candidate's output lies), so the weights do not travel twice."""
    return dataclasses.replace(batch, graph=None, schedules={})  # type: ignore[arg-type]


class _DaemonPool:
    """A fixed set of daemon worker threads. Unlike concurrent.futures' pool, they do not hold up
    the interpreter's exit, so Ctrl-C stops a tuning run at once instead of after the batch being
    measured (its QEMU is stopped by the session's finalizer at exit; a compiler by the same
    Ctrl-C, which reaches the whole terminal process group)."""

    def __init__(self, n: int, name: str) -> None:
        self._queue: queue.Queue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = queue.Queue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(n)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        self._queue.put((fut, fn, args))
        return fut

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001  (handed to whoever waits on the future)
                fut.set_exception(exc)

    def shutdown(self) -> None:
        """Cancel what has not started; let the threads end after their current call."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in self._threads:
            self._queue.put(None)


class LocalExecutor:
    """This machine: `jobs` builder threads and `slots` measuring threads (one per board: an
    emulated board is one QEMU process, so N slots are N emulated boards; a real board on one
    --port, the host and an OpenCL device are one slot each)."""

    def __init__(
        self, measurer: Any, work_dir: Path, jobs: int = 1, slots: int = 1, capacity: int | None = None
    ) -> None:
        if jobs < 1:
            raise UsageError(f"--jobs must be >= 1, got {jobs}")
        self.measurer = measurer
        self.work_dir = Path(work_dir)
        self.jobs, self.slots = jobs, max(1, slots)
        #: batches in flight at once: every builder and every board busy
        self.capacity = capacity if capacity is not None else max(jobs, self.slots)
        self.folders = BuildFolders(self.work_dir)
        self._builders = _DaemonPool(jobs, "tinyc-build")
        self._boards = _DaemonPool(self.slots, "tinyc-measure")
        self._done: queue.Queue[tuple[Job, str, Any]] = queue.Queue()
        self.in_flight = 0
        self.builds = 0
        self.retried = 0
        self.description = (
            f"local: {jobs} build thread{'s' * (jobs > 1)}, {self.slots} measuring slot{'s' * (self.slots > 1)}"
        )

    def submit(self, job: Job) -> None:
        self.in_flight += 1
        fut = self._builders.submit(build_image, self.measurer, job.batch, job.name, self.folders)
        fut.add_done_callback(lambda f: self._built(job, f))

    def _built(self, job: Job, fut: Future[Firmware | BuildFailed]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            self._done.put((job, "error", exc))
            return
        image = fut.result()
        if isinstance(image, BuildFailed):
            self._done.put((job, "build_error", image))
            return
        mfut = self._boards.submit(
            measure_image,
            self.measurer,
            image,
            measure_view(job.batch),
            self.work_dir / "measure",
            lambda m: self._done.put((job, "partial", m)),
        )
        mfut.add_done_callback(lambda f: self._done.put((job, "measured", f)))

    def wait(self) -> Outcome:
        """The next measurement or finished job (a build or measurement exception is raised here)."""
        job, kind, value = self._done.get()
        if kind == "partial":
            return Outcome(job, "partial", measurement=value)
        self.in_flight -= 1
        if kind == "error":
            raise value
        if kind == "build_error":
            return Outcome(job, "build_error", message=value.message, fit=value.fit)
        measured = value.result()  # raises what the measurement raised
        self.builds += 1
        return Outcome(job, "measured", measured)

    def close(self) -> None:
        self._builders.shutdown()
        self._boards.shutdown()


def _worker_loss(exc: BaseException) -> bool:
    """Whether a failed Dask task failed because its worker went away (killed, crashed, the
    network dropped, its board could not be reached), rather than because of the batch: those
    batches are worth another try elsewhere; anything else stops the run."""
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    from tinyc.tune.measure import BoardUnavailable

    return isinstance(exc, (KilledWorker, CommClosedError, BoardUnavailable))


class DaskExecutor:
    """A Dask distributed farm at `address`: builds on any worker, measurements on workers that
    hold the resource ``board:<board name>`` (see tinyc.tune.farm)."""

    def __init__(self, spec: Any, address: str, retries: int = 2, timeout: float = 10.0) -> None:
        try:
            from distributed import Client

            from tinyc.tune import farm  # the tasks it submits (the farm module needs distributed)
        except ImportError:
            raise UsageError("--cluster needs Dask distributed: pip install 'tinyc[farm]'") from None
        self._farm = farm
        if retries < 0:
            raise UsageError(f"--retries must be >= 0, got {retries}")
        self.spec, self.address, self.retries = spec, address, retries
        try:
            self.client = Client(address, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            raise UsageError(
                f"cannot reach the Dask scheduler at {address} within {timeout:g} s "
                f"({farm.describe(exc)}); start one with `dask scheduler`"
            ) from None
        self.resource = spec.resource
        units, workers = self._units()
        if units == 0:
            self.client.close()
            name = spec.board["name"]
            held = "; ".join(f"{addr}: {_resources_text(res)}" for addr, res in workers.items()) or "no workers"
            how = f"--emulated {name}:N" if spec.board.get("emulated") else f"--board {name}=PORT"
            raise UsageError(
                f"no worker of the farm at {address} holds board '{name}' (resource {self.resource}); "
                f"the workers hold: {held}. Start one with `tinyc worker {address} {how}`"
            )
        self.slots = units
        #: a board measures one batch while the next one is built for it
        self.capacity = 2 * units
        self._done: queue.Queue[tuple[Job, Any]] = queue.Queue()
        self._live: dict[int, Job] = {}
        self.in_flight = 0
        self.builds = 0
        self.retried = 0
        self.description = f"Dask farm {address}: {units} {spec.board['name']} board{'s' * (units > 1)}"

    def _units(self) -> tuple[int, dict[str, dict[str, float]]]:
        workers = {addr: dict(w.get("resources") or {}) for addr, w in self._farm.all_workers(self.client).items()}
        return int(sum(res.get(self.resource, 0) for res in workers.values())), workers

    def submit(self, job: Job) -> None:
        self.in_flight += 1
        self._launch(job)

    def _launch(self, job: Job) -> None:
        farm = self._farm
        tag = uuid.uuid4().hex[:8]
        build = self.client.submit(
            farm.build_task, self.spec, job.batch, job.name, key=f"tinyc-build-{job.name}-{tag}", pure=False
        )
        measure = self.client.submit(
            farm.measure_task,
            self.spec,
            build,
            measure_view(job.batch),
            key=f"tinyc-measure-{job.name}-{tag}",
            pure=False,
            resources={self.resource: 1},
        )
        job.handles = (build, measure)
        self._live[id(job)] = job
        measure.add_done_callback(lambda f: self._done.put((job, f)))

    def wait(self) -> Outcome:
        """The next finished job. A job whose worker was lost is submitted again (fresh build and
        measurement, since the lost worker may have held the firmware too) up to `retries`
        times, then comes back as "lost"; any other task error is raised here."""
        while True:
            job, fut = self._done.get()
            try:
                value = fut.result()
            except Exception as exc:  # noqa: BLE001  (sorted below: retry, lost, or raised)
                if not _worker_loss(exc):
                    self._finish(job)
                    if isinstance(exc, CancelledError):  # the scheduler dropped it (restarted, gone)
                        raise RunError(
                            f"the farm at {self.address} cancelled batch {job.name} ({self._farm.describe(exc)}): "
                            "was the scheduler restarted? Run the same command again to resume"
                        ) from None
                    raise
                job.attempts += 1
                if job.attempts <= self.retries:
                    self.retried += 1
                    self._launch(job)
                    continue
                self._finish(job)
                return Outcome(
                    job,
                    "lost",
                    message=f"the batch lost its board or worker {job.attempts} "
                    f"time{'s' * (job.attempts > 1)} ({type(exc).__name__}: {str(exc)[:200]})",
                )
            self._finish(job)
            if isinstance(value, BuildFailed):
                return Outcome(job, "build_error", message=value.message, fit=getattr(value, "fit", 0))
            self.builds += 1
            return Outcome(job, "measured", value)

    def _finish(self, job: Job) -> None:
        self.in_flight -= 1
        self._live.pop(id(job), None)
        job.handles = None  # dropping the futures releases the firmware on the workers

    def close(self) -> None:
        """Cancel what is still queued or running (the tuner stopped) and disconnect; the farm
        itself keeps running."""
        try:
            live = [f for job in list(self._live.values()) for f in (job.handles or ())]
            if live:
                self.client.cancel(live)
        finally:
            self.client.close()


def _resources_text(res: Mapping[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(res.items())) or "(no resources)"


__all__ = ["DaskExecutor", "Job", "LocalExecutor", "Outcome", "measure_view"]
