"""The tuning farm: batches built and measured by a Dask distributed cluster (tinyc/tune/farm.py,
tinyc/tune/executor.py), against a local run of the same candidates.

Real Dask clusters (`distributed.LocalCluster`, worker processes) whose workers declare emulated
boards as resources, real candidate builds and QEMU measurements. What must hold whatever the
timing: the client is the log's only writer and each candidate is recorded exactly once, a
worker killed mid-batch costs nothing but a retry, a batch whose board keeps failing is logged as
"lost" after its retries (and measured again by the next run), and the farm's results equal a local run's."""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tinyc.errors import UsageError
from tinyc.tune.steps import BuildFolders, pack_project, unpack_project
from tinyc.tune.log import knobs_id
from tinyc.tune.tuner import result_table, tune
from util import REPO

distributed = pytest.importorskip("distributed")
psutil = pytest.importorskip("psutil")

sys.path.insert(0, str(REPO / "examples" / "digits"))
from data import load_split  # noqa: E402

DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"
BOARD = "mps2-an386"
RESOURCE = f"board:{BOARD}"
HAVE_QEMU = shutil.which("qemu-system-arm") is not None and shutil.which("arm-none-eabi-gcc") is not None
needs_qemu = pytest.mark.skipif(not HAVE_QEMU, reason="needs qemu-system-arm and arm-none-eabi-gcc")
#: QEMU counts of one firmware repeat to a tick (1 / (25 MHz x 2^7 / 1e9) = 0.3125 instructions),
#: plus the SysTick wrap interrupt's few instructions when the counter wraps inside a measured run
#: (its phase at the start depends on how long the harness idled waiting for the host: seen 5.3)
SAME_COUNT = 16.0


@pytest.fixture(scope="module")
def calib(tmp_path_factory):
    x_train, _, _, _ = load_split()
    d = tmp_path_factory.mktemp("farm_digits")
    np.savez(d / "calib.npz", input=x_train[:64])
    return d / "calib.npz"


def _opts(calib):
    return dict(quantize="int8", calib=calib, io_dtype="int8", progress=False)


def _cluster(n_workers=2, boards=2, **kw):
    return distributed.LocalCluster(n_workers=n_workers, threads_per_worker=boards + 1, processes=True,
                                    resources={RESOURCE: boards}, dashboard_address=":0",
                                    silence_logs=logging.CRITICAL, **kw)


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes, each declaring two emulated mps2-an386 boards."""
    with _cluster() as c:
        yield c


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _ids(recs):
    return [(r["board"], r["key"], knobs_id(r["knobs"])) for r in recs]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------ no board needed

def test_pack_keeps_the_image_and_drops_cmake_intermediates(tmp_path):
    proj = tmp_path / "p"
    for rel, data in {"tinyc.json": b"{}", "board.json": b"{}", "tune.c": b"int x;", "runtime/src/a.c": b"",
                      "build/tune.elf": b"\x7fELF", "build/tune.bin": b"\0", "build/.tinyc-stamp": b"d",
                      "build/CMakeCache.txt": b"", "build/Makefile": b"", "build/tune.map": b"",
                      "build/CMakeFiles/tune.dir/tune.c.o": b"obj"}.items():
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_bytes(data)
    files = pack_project(proj)
    assert sorted(files) == ["board.json", "build/.tinyc-stamp", "build/tune.bin", "build/tune.elf",
                             "runtime/src/a.c", "tinyc.json", "tune.c"]
    out = unpack_project(files, tmp_path / "q")
    assert (out / "build" / "tune.elf").read_bytes() == b"\x7fELF"
    with pytest.raises(ValueError, match="outside"):
        unpack_project({"../evil": b""}, tmp_path / "r")


def test_build_folders_are_never_shared_by_concurrent_builds(tmp_path):
    folders = BuildFolders(tmp_path)
    held: list = []
    lock = threading.Lock()
    clash = []

    def build():
        with folders.take() as f:
            with lock:
                clash.extend([f] if f in held else [])
                held.append(f)
            time.sleep(0.05)
            with lock:
                held.remove(f)

    threads = [threading.Thread(target=build) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not clash
    with folders.take() as a, folders.take() as b:
        assert a != b and {a.name, b.name} <= {f"build{i}" for i in range(6)}


def test_worker_board_arguments_are_checked():
    from tinyc.tune.farm import parse_boards
    ports, res = parse_boards(["nucleo-f746zg=/dev/ttyACM0", "nucleo-f746zg=/dev/ttyACM1"], [f"{BOARD}:4"])
    assert ports == {"nucleo-f746zg": ["/dev/ttyACM0", "/dev/ttyACM1"]}
    assert res == {"board:nucleo-f746zg": 2, RESOURCE: 4}
    for boards, emulated, msg in [(["nucleo-f746zg"], None, "NAME=PORT"), ([f"{BOARD}=/dev/x"], None, "emulated"),
                                  (None, ["nucleo-f746zg:2"], "real hardware"), (None, [f"{BOARD}:0"], "N >= 1"),
                                  (None, None, "at least one board"), (["nope=/dev/x"], None, "unknown board")]:
        with pytest.raises(UsageError, match=msg):
            parse_boards(boards, emulated)


def test_a_worker_lends_each_port_to_one_measurement_at_a_time(tmp_path):
    from tinyc.targets.boards import load_board
    from tinyc.tune.farm import FarmState
    real, emu = load_board("nucleo-f746zg"), load_board(BOARD)
    state = FarmState({"nucleo-f746zg": ["/dev/a", "/dev/b"]}, tmp_path, "tcp://w:1")
    try:
        with state.board(real) as p1, state.board(real) as p2, state.board(emu) as p3:
            assert {p1, p2} == {"/dev/a", "/dev/b"} and p3 is None
            assert state.report()["busy"] == {"nucleo-f746zg": 2, BOARD: 1}
            with pytest.raises(UsageError, match="every port of nucleo-f746zg is busy"):
                with state.board(real):
                    pass
        assert state.report()["busy"] == {"nucleo-f746zg": 0, BOARD: 0}
        with state.board(real) as again:
            assert again in ("/dev/a", "/dev/b")
        state.count(5)
        assert state.report()["measured"] == 5 and state.report()["per_minute"] > 0
        with pytest.raises(UsageError, match="no serial port"):
            with FarmState({}, tmp_path, "tcp://w:2").board(real):
                pass
    finally:
        if state.watchdog is not None:
            state.watchdog.stdin.close()
            state.watchdog.wait(10)


def test_unreachable_cluster_names_address_and_timeout(tmp_path, calib):
    address = f"tcp://127.0.0.1:{_free_port()}"
    t0 = time.perf_counter()
    with pytest.raises(UsageError, match=rf"{address} within 1 s"):
        tune(DIGITS, BOARD, trials=1, log=tmp_path / "t.jsonl", cluster=address, cluster_timeout=1, **_opts(calib))
    assert time.perf_counter() - t0 < 60
    assert not (tmp_path / "t.jsonl").exists()


def test_cluster_option_errors(tmp_path, calib):
    for kw, msg in [(dict(board=None), "--board"), (dict(jobs=2), "--jobs"), (dict(port="/dev/x"), "--port")]:
        args = dict(board=BOARD, trials=1, log=tmp_path / "t.jsonl", cluster="tcp://127.0.0.1:1")
        args.update(kw)
        with pytest.raises(UsageError, match=msg):
            tune(DIGITS, **args, **_opts(calib))


def test_a_board_no_worker_holds_is_named_with_the_workers_resources(tmp_path, calib, cluster):
    with pytest.raises(UsageError) as err:
        tune(DIGITS, "mps2-an385", trials=1, log=tmp_path / "t.jsonl", cluster=cluster.scheduler_address,
             **_opts(calib))
    text = str(err.value)
    assert "board 'mps2-an385'" in text and "board:mps2-an385" in text and f"{RESOURCE}=2" in text
    assert "tinyc worker" in text


# ------------------------------------------------------------------------------ QEMU boards

@pytest.mark.slow
@needs_qemu
def test_farm_run_logs_each_record_once_and_equals_a_local_run(tmp_path, calib, cluster, capsys):
    """The same tuning job on the farm (two workers x two emulated boards) and locally with
    --jobs 2: random search with one seed proposes the same candidates whatever the timing
    (candidates in flight are excluded like measured ones), so both logs hold the same
    candidates, each once, with the same statuses and counts (to a SysTick tick or wrap)."""
    common = dict(trials=14, batch_size=4, search="random", seed=3, **_opts(calib))
    farm_log, local_log = tmp_path / "farm.jsonl", tmp_path / "local.jsonl"
    res = tune(DIGITS, BOARD, log=farm_log, cluster=cluster.scheduler_address, **common)
    print(result_table(res))
    assert res.trials == 14 and res.retried == 0 and "Dask farm" in res.executor
    farm = _lines(farm_log)
    assert len(farm) == len(set(_ids(farm))) == 14 + len(res.tasks)   # the trials + round 0's defaults
    assert all(r["measured_on"].startswith("tcp://") for r in farm)

    local = tune(DIGITS, BOARD, log=local_log, jobs=2, work_dir=tmp_path / "w", **common)
    assert "2 build threads, 2 measuring slots" in local.executor
    loc = _lines(local_log)
    assert len(loc) == len(set(_ids(loc))) and set(_ids(loc)) == set(_ids(farm))
    by_id = {i: r for i, r in zip(_ids(loc), loc)}
    for i, r in zip(_ids(farm), farm):
        assert r["status"] == by_id[i]["status"], (r, by_id[i])
        if r["status"] == "ok":
            assert abs(r["cycles"] - by_id[i]["cycles"]) <= SAME_COUNT, (r, by_id[i])
    for a, b in zip(res.tasks, local.tasks):   # the same best per layer (ties may pick another schedule)
        assert a.key == b.key and abs(a.best_cycles - b.best_cycles) <= SAME_COUNT, (a, b)

    # the farm's state: both workers, their boards, what they measured
    from tinyc.cli import main
    capsys.readouterr()
    assert main(["farm", "status", cluster.scheduler_address, "--json", str(tmp_path / "s.json")]) == 0
    text = capsys.readouterr().out
    status = json.loads((tmp_path / "s.json").read_text())
    assert len(status["workers"]) == 2 and status["boards"] == {BOARD: 4}
    assert sum(w["measured"] for w in status["workers"]) == len(farm)
    assert status["per_minute"] > 0
    for w in status["workers"]:
        assert w["boards"] == [{"board": BOARD, "units": 2, "busy": 0, "idle": 2, "ports": []}]
        assert w["address"] in text
    assert f"2 workers, {BOARD} x4" in text and "emulated" in text


def _qemu_child(pids):
    """(worker pid, QEMU process) for a QEMU running under one of `pids`, else None. Polled every
    few milliseconds from before the first batch, the first one seen has just started, so its
    batch is surely still being measured when the worker is killed."""
    for pid in pids:
        try:
            for child in psutil.Process(pid).children(recursive=True):
                if child.name().startswith("qemu-system"):
                    return pid, child
        except psutil.Error:
            continue
    return None


@pytest.mark.slow
@needs_qemu
def test_worker_killed_mid_measurement_costs_only_a_retry(tmp_path, calib):
    """SIGKILL the worker process that is running QEMU for a batch. The scheduler is told to give
    up on a task at the first lost worker (allowed-failures 0), so it is tinyc that submits the
    batch again; the run completes with every candidate logged once, none as a crash, and the
    killed worker's orphaned QEMU is stopped by the worker's watchdog."""
    import dask
    log = tmp_path / "t.jsonl"
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), _cluster(boards=1) as cl, \
            distributed.Client(cl, set_as_default=False) as client:
        pids = list(client.run(os.getpid).values())
        out: dict = {}

        def run():
            try:
                out["res"] = tune(DIGITS, BOARD, trials=16, batch_size=4, log=log, search="random", repeat=60,
                                  cluster=cl.scheduler_address, retries=2, **_opts(calib))
            except BaseException as exc:  # noqa: BLE001  (re-raised in the test thread)
                out["exc"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        victim = None
        deadline = time.time() + 120
        while victim is None and thread.is_alive() and time.time() < deadline:
            victim = _qemu_child(pids)
            time.sleep(0.005)
        assert victim is not None, "no measurement was seen running"
        worker_pid, qemu = victim
        os.kill(worker_pid, signal.SIGKILL)
        thread.join(240)
        assert not thread.is_alive()
        try:
            orphan_stopped = psutil.wait_procs([qemu], timeout=10)[1] == []
        finally:
            if qemu.is_running():
                qemu.kill()
        if "exc" in out:
            raise out["exc"]
    res = out["res"]
    print(result_table(res))
    recs = _lines(log)
    assert len(recs) == len(set(_ids(recs))) == 16 + len(res.tasks)   # nothing lost, nothing twice
    assert res.retried >= 1
    assert all(r["status"] == "ok" for r in recs), [r for r in recs if r["status"] != "ok"]
    assert orphan_stopped, "the killed worker's QEMU was left running"


@pytest.mark.slow
@needs_qemu
def test_a_batch_whose_board_keeps_failing_is_logged_as_lost_after_its_retries(tmp_path, calib, cluster):
    """A board whose emulator never starts (its QEMU is `false`): each measurement attempt raises
    BoardUnavailable on the worker, the batch is tried again `retries` times on the farm, then its
    candidates are logged once each as "lost" saying so (not crashes: a later run measures them)."""
    boards = tmp_path / "boards"
    boards.mkdir()
    text = (REPO / "boards" / f"{BOARD}.toml").read_text().replace('qemu = "qemu-system-arm"', 'qemu = "false"')
    assert 'qemu = "false"' in text
    (boards / f"{BOARD}.toml").write_text(text)
    log = tmp_path / "t.jsonl"
    res = tune(DIGITS, BOARD, trials=0, batch_size=8, log=log, board_dir=boards, cluster=cluster.scheduler_address,
               retries=1, **_opts(calib))
    recs = _lines(log)
    assert len(recs) == len(set(_ids(recs))) == len(res.tasks)
    assert res.retried == 1
    assert all(r["status"] == "lost" and "lost its board or worker 2 times" in r["detail"]
               and "BoardUnavailable" in r["detail"] for r in recs), recs


@pytest.mark.slow
def test_tinyc_worker_joins_with_its_boards_and_leaves_on_sigterm(tmp_path):
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=":0",
                                  silence_logs=logging.CRITICAL) as cl, \
            distributed.Client(cl, set_as_default=False) as client:
        address = cl.scheduler_address
        proc = subprocess.Popen([sys.executable, "-m", "tinyc", "worker", address, "--emulated", f"{BOARD}:3",
                                 "--board", "nucleo-f746zg=/dev/ttyFAKE0", "--name", "bench-a"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        try:
            deadline = time.time() + 90
            workers: dict = {}
            while time.time() < deadline and not workers:
                workers = client.scheduler_info(n_workers=-1)["workers"]
                time.sleep(0.2)
            assert workers, "the worker did not join"
            (w,) = workers.values()
            assert w["resources"] == {RESOURCE: 3, "board:nucleo-f746zg": 1}
            assert w["name"] == "bench-a" and w["nthreads"] == 5
            from tinyc.tune.farm import farm_status, status_table
            status = farm_status(address)
            text = status_table(status)
            print(text)
            assert status["boards"] == {BOARD: 3, "nucleo-f746zg": 1}
            assert status["workers"][0]["boards"] == [
                {"board": BOARD, "units": 3, "busy": 0, "idle": 3, "ports": []},
                {"board": "nucleo-f746zg", "units": 1, "busy": 0, "idle": 1, "ports": ["/dev/ttyFAKE0"]}]
            assert "/dev/ttyFAKE0" in text and "bench-a" in text
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
            deadline = time.time() + 30
            while time.time() < deadline and client.scheduler_info(n_workers=-1)["workers"]:
                time.sleep(0.2)
            assert not client.scheduler_info(n_workers=-1)["workers"]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert "joined" in proc.stdout.read()
    bad = subprocess.run([sys.executable, "-m", "tinyc", "worker", "tcp://127.0.0.1:1", "--emulated", "nucleo-f746zg:2"],
                         cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2 and "real hardware" in bad.stderr


class _FakeFarm:
    """Stands in for the DaskExecutor without a cluster: gives every batch back "lost" (as the farm
    does once a batch lost its worker --retries + 1 times), or measures every candidate at 1000."""

    def __init__(self, lose):
        self.lose, self.in_flight, self.capacity, self.builds, self.retried = lose, 0, 2, 0, 0
        self.description = "fake farm"
        self.jobs, self.submitted = [], []

    def submit(self, job):
        self.in_flight += 1
        self.jobs.append(job)
        self.submitted += [(c.task_key, knobs_id(c.knobs)) for c in job.batch.candidates]

    def wait(self):
        from tinyc.tune.executor import Outcome
        from tinyc.tune.steps import Measured
        from tinyc.tune.measure import Measurement
        job = self.jobs.pop(0)
        self.in_flight -= 1
        if self.lose:
            return Outcome(job, "lost", message="the batch lost its board or worker 3 times (KilledWorker: gone)")
        self.builds += 1
        return Outcome(job, "measured", Measured([Measurement(c, "ok", 1000.0, [1000.0]) for c in job.batch.candidates],
                                                 0.0, "fake"))

    def close(self):
        pass


def test_a_lost_batch_is_measured_again_by_the_next_run_but_a_crash_is_final(tmp_path, calib, monkeypatch):
    """A batch the farm lost on every try says nothing about its candidates: they are logged "lost"
    and the next run over the same log measures them first, defaults and trials alike (a real crash
    of a candidate stays final)."""
    import tinyc.tune.tuner as tuner
    log = tmp_path / "t.jsonl"
    farms = [_FakeFarm(lose=True), _FakeFarm(lose=False)]
    monkeypatch.setattr(tuner, "_make_executor", lambda *a, **k: farms.pop(0))
    first = farms[0]
    res = tune(DIGITS, BOARD, trials=4, batch_size=4, log=log, search="random", **_opts(calib))
    recs = _lines(log)
    assert recs and all(r["status"] == "lost" and "lost its board or worker 3 times" in r["detail"] for r in recs)
    assert res.failures == {"lost": len(recs)} and len(first.submitted) == len(recs) and res.trials == 4
    # one candidate really crashed its board (logged after it was lost): that is final
    crashed = dict(recs[0], status="crash", detail="fault: HardFault", time=recs[0]["time"] + 1)
    with open(log, "a") as f:
        f.write(json.dumps(crashed) + "\n")
    second = farms[0]
    tune(DIGITS, BOARD, trials=0, batch_size=4, log=log, **_opts(calib))
    lost_ids = {(r["key"], knobs_id(r["knobs"])) for r in recs}
    assert set(second.submitted) == lost_ids - {(crashed["key"], knobs_id(crashed["knobs"]))}
    assert len(second.submitted) == len(set(second.submitted))
    after = _lines(log)[len(recs) + 1:]
    assert sorted((r["key"], knobs_id(r["knobs"])) for r in after) == sorted(second.submitted)
    assert all(r["status"] == "ok" for r in after)
