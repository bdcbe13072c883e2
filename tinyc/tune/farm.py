"""The tuning farm's worker side: Dask tasks that build and measure batches, the boards a worker
holds, `tinyc worker` and `tinyc farm status`. The client side, which submits the tasks, is
``tinyc.tune.executor.DaskExecutor``; what both sides share (the steps, `MeasureSpec`) is
``tinyc.tune.steps``, so this module never imports the executor.

A farm is a Dask distributed cluster: a `dask scheduler` anywhere, and workers on the machines
the boards are plugged into, each started with `tinyc worker ADDRESS --board NAME=PORT ...` or
`--emulated NAME:N`. A worker declares one Dask resource unit ``board:NAME`` per attached board;
measure tasks ask for one unit, so the scheduler never runs two measurements on one board at a
time, and only sends them to workers that have that board. The worker alone knows its serial
ports: a measure task takes a free port of its board from the worker's pool (emulated boards need
none: each measurement starts its own QEMU on its own TCP port).

Per worker process, `FarmState` keeps the port pool, the build folders, what is busy and how many
candidates were measured when (for `tinyc farm status`), and a watchdog process: QEMU runs in its
own session, so a worker killed with SIGKILL would leave its emulators spinning a core each; the
watchdog notices the worker's death (its stdin pipe closes) and kills the processes the worker had
started (they carry a marker in their environment).
"""

from __future__ import annotations

import asyncio
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from collections.abc import Iterator, Mapping, Sequence

from distributed import WorkerPlugin

from tinyc.errors import UsageError
from tinyc.tune.steps import (
    BuildFailed,
    BuildFolders,
    Firmware,
    Measured,
    MeasureSpec,
    board_resource,
    build_image,
    measure_image,
)

#: Seconds over which `tinyc farm status` reports measurements per minute.
RATE_WINDOW_S = 60.0
#: Name of the WorkerPlugin `tinyc worker` installs (its serial ports).
PLUGIN_NAME = "tinyc-boards"

#: Environment variable marking the processes a worker starts (QEMU, compilers): they inherit it.
MARKER_ENV = "TINYC_FARM_WORKER"

_WATCHDOG = r"""
import os, sys, psutil
marker, me = sys.argv[1], os.getpid()
while os.read(0, 4096):            # blocks until EOF: the worker process is gone
    pass
for proc in psutil.process_iter():
    try:
        if proc.pid != me and proc.environ().get(sys.argv[2]) == marker:
            proc.kill()
    except psutil.Error:
        pass
"""


def _start_watchdog() -> subprocess.Popen | None:
    """A process that, once this process dies, kills every process this one started (see the
    module docstring). They are found by a marker in their environment, inherited from this
    process, so even one started a moment before the death is found, whoever it was reparented
    to. None where psutil is missing (it comes with distributed)."""
    try:
        import psutil  # noqa: F401
    except ImportError:
        return None
    marker = f"{os.getpid()}-{time.time_ns()}"
    os.environ[MARKER_ENV] = marker
    env = {k: v for k, v in os.environ.items() if k != MARKER_ENV}
    return subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, marker, MARKER_ENV],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )


def all_workers(client: Any) -> dict[str, dict[str, Any]]:
    """Every worker the scheduler knows, address -> its info (resources, name, nthreads). Recent
    distributed lists only a few unless asked for all."""
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:  # distributed before the n_workers argument: all of them anyway
        info = client.scheduler_info()
    return dict(info.get("workers", {}))


def describe(exc: BaseException) -> str:
    """ "Type: message", or just the type when the message is empty (asyncio's TimeoutError)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class FarmState:
    """One worker's boards, build folders and counters."""

    def __init__(self, ports: Mapping[str, Sequence[str]], root: Path, address: str = "") -> None:
        self.address = address
        self.ports = {name: list(p) for name, p in ports.items()}
        self.root = Path(root)
        self.folders = BuildFolders(self.root / "builds")
        self._lock = threading.Lock()
        self._free = {name: list(p) for name, p in ports.items()}
        self.busy: dict[str, int] = collections.defaultdict(int)
        self.busy_ports: set[str] = set()
        self.recent: collections.deque[tuple[float, int]] = collections.deque()
        self.measured = 0
        self.batches = 0
        self.builds = 0
        self.started = time.time()
        self.watchdog = _start_watchdog()

    @contextmanager
    def board(self, board: Mapping[str, Any]) -> Iterator[str | None]:
        """Hold one board of this definition for a measurement: a free serial port of it (real
        boards), or None (emulated: the measurement starts its own QEMU)."""
        name = str(board["name"])
        port = None
        with self._lock:
            if not board.get("emulated"):
                if not self.ports.get(name):
                    raise UsageError(
                        f"worker {self.address} declares {board_resource(name)} but has no serial port "
                        f"for it: start it with `tinyc worker SCHEDULER --board {name}=PORT`"
                    )
                if not self._free[name]:
                    raise UsageError(
                        f"worker {self.address}: every port of {name} is busy "
                        f"({', '.join(self.ports[name])}) — it declares more {board_resource(name)} "
                        "units than it has ports"
                    )
                port = self._free[name].pop(0)
                self.busy_ports.add(port)
            self.busy[name] += 1
        try:
            yield port
        finally:
            with self._lock:
                self.busy[name] -= 1
                if port is not None:
                    self.busy_ports.discard(port)
                    self._free[name].append(port)

    def note_build(self) -> None:
        with self._lock:
            self.builds += 1

    def count(self, n: int) -> None:
        now = time.time()
        with self._lock:
            self.measured += n
            self.batches += 1
            self.recent.append((now, n))
            while self.recent and self.recent[0][0] < now - RATE_WINDOW_S:
                self.recent.popleft()

    def report(self) -> dict[str, Any]:
        now = time.time()
        with self._lock:
            window = min(RATE_WINDOW_S, max(1e-9, now - self.started))
            recent = sum(n for t, n in self.recent if t >= now - RATE_WINDOW_S)
            return {
                "ports": {k: list(v) for k, v in self.ports.items()},
                "busy": dict(self.busy),
                "busy_ports": sorted(self.busy_ports),
                "measured": self.measured,
                "batches": self.batches,
                "builds": self.builds,
                "per_minute": recent * 60.0 / window,
                "uptime_s": now - self.started,
            }


_STATES: weakref.WeakKeyDictionary[Any, FarmState] = weakref.WeakKeyDictionary()
_STATES_LOCK = threading.Lock()


def worker_state(worker: Any) -> FarmState:
    """The FarmState of a Dask worker, made on first use (the ports come from the plugin `tinyc
    worker` installs; a plain `dask worker --resources board:NAME=N` can hold emulated boards)."""
    with _STATES_LOCK:
        state = _STATES.get(worker)
        if state is None:
            plugin = (getattr(worker, "plugins", None) or {}).get(PLUGIN_NAME)
            ports = plugin.ports if plugin is not None else {}
            root = Path(getattr(worker, "local_directory", None) or tempfile.mkdtemp(prefix="tinyc-worker-"))
            state = FarmState(ports, root / "tinyc", str(getattr(worker, "address", "")))
            _STATES[worker] = state
        return state


def _check_worker(spec: MeasureSpec, worker: Any) -> None:
    """Refuse, with a message naming the worker, what would otherwise poison the log with
    wrong statuses: another tinyc version (other generated code), a missing cross toolchain
    (every candidate a build_error) or a missing QEMU (every candidate a crash)."""
    from tinyc.version import __version__

    if spec.tinyc_version and spec.tinyc_version != __version__:
        raise UsageError(
            f"worker {worker.address} runs tinyc {__version__}, the tuning client tinyc "
            f"{spec.tinyc_version}: install the same version on every worker"
        )


def build_task(spec: MeasureSpec, batch: Any, name: str) -> Firmware | BuildFailed:
    """Dask task: build one batch's firmware on this worker (any worker: no resource asked)."""
    from distributed import get_worker

    from tinyc.tune.measure import make_measurer

    worker = get_worker()
    _check_worker(spec, worker)
    prefix = str(spec.board.get("toolchain", {}).get("prefix", ""))
    for tool in ("cmake", f"{prefix}gcc"):
        if shutil.which(tool) is None:
            raise UsageError(
                f"worker {worker.address} cannot build firmware for {spec.board['name']}: {tool} is not installed there"
            )
    state = worker_state(worker)
    measurer = make_measurer(spec.board, spec.target, state.root, **_options(spec))
    image = build_image(measurer, batch, name, state.folders)
    if isinstance(image, Firmware):
        state.note_build()
    return image


def measure_task(spec: MeasureSpec, image: Firmware | BuildFailed, batch: Any) -> Measured | BuildFailed:
    """Dask task: measure a built batch on one of this worker's boards (the scheduler only sends
    it to workers with a free ``board:NAME`` unit). A batch that did not build passes through."""
    from distributed import get_worker

    from tinyc.tune.measure import make_measurer

    if isinstance(image, BuildFailed):
        return image
    worker = get_worker()
    _check_worker(spec, worker)
    if spec.board.get("emulated"):
        qemu = str((spec.board.get("emulator") or {}).get("qemu", "qemu-system-arm"))
        if shutil.which(qemu) is None:
            raise UsageError(f"worker {worker.address} declares {spec.resource} but {qemu} is not installed there")
    state = worker_state(worker)
    with state.board(spec.board) as port:
        measurer = make_measurer(spec.board, spec.target, state.root, port=port, lost_board="raise", **_options(spec))
        result = measure_image(measurer, image, batch, state.root / "measure")
    result.where = str(worker.address) + (f" {port}" if port else "")
    state.count(len(result.measurements))
    return result


def _options(spec: MeasureSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"run_timeout": spec.run_timeout}
    if spec.repeat is not None:
        out["repeat"] = spec.repeat
    return out


# ------------------------------------------------------------------------------------- tinyc worker


class BoardsPlugin(WorkerPlugin):
    """The serial ports a `tinyc worker` was started with (board name -> ports), available to its
    tasks through `worker_state`; travels to the worker process a nanny starts."""

    name = PLUGIN_NAME

    def __init__(self, ports: Mapping[str, Sequence[str]]) -> None:
        self.ports = {k: list(v) for k, v in ports.items()}

    def setup(self, worker: Any) -> None:
        worker_state(worker)  # start the watchdog before the first QEMU

    def teardown(self, worker: Any) -> None:
        state = _STATES.pop(worker, None)
        if state is not None and state.watchdog is not None and state.watchdog.stdin is not None:
            state.watchdog.stdin.close()  # the watchdog cleans up and exits


def parse_boards(
    boards: Sequence[str] | None, emulated: Sequence[str] | None, board_dir: Any = None
) -> tuple[dict[str, list[str]], dict[str, float]]:
    """`--board NAME=PORT` (repeatable) and `--emulated NAME:N` -> (ports per real board, Dask
    resources), each board checked against its definition."""
    from tinyc.targets.boards import load_board

    ports: dict[str, list[str]] = {}
    resources: dict[str, float] = {}
    for spec in boards or []:
        name, sep, port = spec.partition("=")
        if not sep or not name or not port:
            raise UsageError(f"--board '{spec}': expected NAME=PORT (e.g. nucleo-f746zg=/dev/ttyACM0)")
        board = load_board(name, board_dir)
        if board.get("emulated"):
            raise UsageError(
                f"--board {name}: {name} is emulated (QEMU); declare emulated boards with --emulated {name}:N"
            )
        if board.get("kind") == "host":
            raise UsageError(f"--board {name}: not a microcontroller board")
        if port in ports.get(name, []):
            raise UsageError(f"--board {name}={port} given twice")
        ports.setdefault(name, []).append(port)
        resources[board_resource(name)] = resources.get(board_resource(name), 0) + 1
    for spec in emulated or []:
        name, sep, count = spec.partition(":")
        try:
            n = int(count) if sep else 1
        except ValueError:
            n = 0
        if not name or n < 1:
            raise UsageError(f"--emulated '{spec}': expected NAME:N with N >= 1 (e.g. mps2-an386:4)")
        board = load_board(name, board_dir)
        if not board.get("emulated"):
            raise UsageError(f"--emulated {name}: {name} is real hardware; attach it with --board {name}=PORT")
        resources[board_resource(name)] = resources.get(board_resource(name), 0) + n
    if not resources:
        raise UsageError("a tinyc worker needs at least one board: --board NAME=PORT or --emulated NAME:N")
    return ports, resources


def run_worker(
    address: str,
    ports: Mapping[str, list[str]],
    resources: Mapping[str, float],
    nthreads: int | None = None,
    name: str | None = None,
    nanny: bool = True,
    timeout: float = 30.0,
    announce: Any = print,
) -> int:
    """Join the farm at `address` with these boards until SIGINT/SIGTERM (or the scheduler goes
    away). Threads default to boards + 1, so every board can measure while one build runs; more
    builders only help with more cores. With `nanny` (default) a worker process that dies is
    restarted by its nanny, boards and all."""
    from distributed import Nanny, Worker

    boards = int(sum(resources.values()))
    threads = nthreads or boards + 1
    plugin = BoardsPlugin({k: list(v) for k, v in ports.items()})

    async def serve() -> int:
        cls = Nanny if nanny else Worker
        node = cls(
            address, nthreads=threads, resources=dict(resources), name=name, plugins=(plugin,), death_timeout=timeout
        )
        try:
            await asyncio.wait_for(node.start(), timeout)
        except (OSError, asyncio.TimeoutError, TimeoutError) as exc:
            await node.close()
            raise UsageError(
                f"cannot reach the Dask scheduler at {address} within {timeout:g} s ({describe(exc)})"
            ) from None
        held = ", ".join(
            f"{k[len('board:') :]} x{v:g}"
            + (f" ({', '.join(ports[k[len('board:') :]])})" if k[len("board:") :] in ports else " (emulated)")
            for k, v in resources.items()
        )
        announce(
            f"tinyc worker {node.worker_address if nanny else node.address} joined {address}: {held}; "
            f"{threads} threads",
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        waiter = asyncio.ensure_future(stop.wait())
        finished = asyncio.ensure_future(node.finished())
        await asyncio.wait([waiter, finished], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not finished.done():
            await node.close()
        return 0

    return asyncio.run(serve())


# ------------------------------------------------------------------------------------- farm status


def _report(dask_worker: Any) -> dict[str, Any] | None:
    """client.run: this worker's FarmState report (None before its first tinyc task)."""
    state = _STATES.get(dask_worker)
    if state is None:
        plugin = (getattr(dask_worker, "plugins", None) or {}).get(PLUGIN_NAME)
        return (
            {
                "ports": dict(plugin.ports),
                "busy": {},
                "busy_ports": [],
                "measured": 0,
                "batches": 0,
                "builds": 0,
                "per_minute": 0.0,
                "uptime_s": 0.0,
            }
            if plugin is not None
            else None
        )
    return state.report()


def farm_status(address: str, timeout: float = 10.0) -> dict[str, Any]:
    """Workers of the farm at `address`, their boards (resources ``board:NAME``), busy/idle and
    measurements per minute (over the last RATE_WINDOW_S seconds)."""
    from distributed import Client

    try:
        client = Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(
            f"cannot reach the Dask scheduler at {address} within {timeout:g} s ({describe(exc)})"
        ) from None
    try:
        info = all_workers(client)
        reports = client.run(_report, on_error="return")
    finally:
        client.close()
    workers: list[dict[str, Any]] = []
    for addr, w in sorted(info.items()):
        rep = reports.get(addr)
        rep = rep if isinstance(rep, dict) else {}
        boards = []
        for res, units in sorted((w.get("resources") or {}).items()):
            if not res.startswith("board:"):
                continue
            bname = res[len("board:") :]
            busy = int((rep.get("busy") or {}).get(bname, 0))
            boards.append(
                {
                    "board": bname,
                    "units": int(units),
                    "busy": busy,
                    "idle": max(0, int(units) - busy),
                    "ports": list((rep.get("ports") or {}).get(bname, [])),
                }
            )
        workers.append(
            {
                "address": addr,
                "name": w.get("name"),
                "nthreads": w.get("nthreads"),
                "boards": boards,
                "measured": int(rep.get("measured", 0)),
                "batches": int(rep.get("batches", 0)),
                "builds": int(rep.get("builds", 0)),
                "per_minute": float(rep.get("per_minute", 0.0)),
            }
        )
    return {
        "scheduler": address,
        "workers": workers,
        "per_minute": sum(w["per_minute"] for w in workers),
        "boards": {
            b["board"]: sum(x["units"] for w in workers for x in w["boards"] if x["board"] == b["board"])
            for w in workers
            for b in w["boards"]
        },
    }


def status_table(status: Mapping[str, Any]) -> str:
    """`tinyc farm status` as text."""
    ws = status["workers"]
    total = ", ".join(f"{k} x{v}" for k, v in sorted(status["boards"].items())) or "no boards"
    rows = [
        f"farm {status['scheduler']}: {len(ws)} worker{'s' * (len(ws) != 1)}, {total}; "
        f"{status['per_minute']:.1f} measurements/min (last {RATE_WINDOW_S:.0f} s)",
        f"{'worker':<34} {'board':<18} {'units':>5} {'busy':>4} {'idle':>4} {'measured':>8} {'per min':>8}  ports",
    ]
    for w in ws:
        label = str(w["address"]) + (f" ({w['name']})" if w["name"] not in (None, w["address"]) else "")
        if not w["boards"]:
            rows.append(
                f"{label:<34} {'(no boards)':<18} {'':>5} {'':>4} {'':>4} {w['measured']:>8} {w['per_minute']:>8.1f}"
            )
        for i, b in enumerate(w["boards"]):
            rows.append(
                f"{label if i == 0 else '':<34} {b['board']:<18} {b['units']:>5} {b['busy']:>4} "
                f"{b['idle']:>4} {w['measured'] if i == 0 else '':>8} "
                f"{format(w['per_minute'], '.1f') if i == 0 else '':>8}  "
                f"{', '.join(b['ports']) or ('emulated' if not b['ports'] else '')}"
            )
    return "\n".join(rows)


__all__ = [
    "BoardsPlugin",
    "FarmState",
    "build_task",
    "farm_status",
    "measure_task",
    "parse_boards",
    "run_worker",
    "status_table",
    "worker_state",
]
