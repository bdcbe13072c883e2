"""The tuner end to end: real candidate builds, real QEMU boards over the serial harness, real host timing.

Budgets are small; what is checked is what must hold whatever the budget: tuned is never slower
than the default, the compiled result with the log stays bit-exact, a second run measures nothing,
an interrupted run loses nothing, and wrong or crashing candidates are caught, never counted as fast."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import tinyc
import tinyc.tune.bench as bench_mod
from tinyc.tune.log import TuningLog, knobs_id
from tinyc.tune.tuner import result_table, tune
from util import REPO

sys.path.insert(0, str(REPO / "examples" / "digits"))
from data import load_split  # noqa: E402

DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"
HAVE_QEMU = shutil.which("qemu-system-arm") is not None and shutil.which("arm-none-eabi-gcc") is not None
needs_qemu = pytest.mark.skipif(not HAVE_QEMU, reason="needs qemu-system-arm and arm-none-eabi-gcc")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    x_train, _, x_test, y_test = load_split()
    d = tmp_path_factory.mktemp("tune_digits")
    np.savez(d / "calib.npz", input=x_train[:64])
    np.savez(d / "test.npz", input=x_test[:16], labels=y_test[:16])
    return d


def _opts(d):
    return dict(quantize="int8", calib=d / "calib.npz", io_dtype="int8")


def _tasks(d):
    from tinyc.api import prepare
    from tinyc.schedule import default_schedules
    from tinyc.tune.tasks import extract_tasks
    graph, _ = prepare(DIGITS, quantize="int8", calib=d / "calib.npz", progress=False)
    return extract_tasks(graph, "host", default_schedules(graph, "host"))


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_host_tuning_resumes_and_compiles_exact(tmp_path, digits):
    log = tmp_path / "t.jsonl"
    res = tune(DIGITS, None, trials=6, log=log, batch_size=8, work_dir=tmp_path / "w", progress=False, **_opts(digits))
    assert res.trials == 6 and res.units == "ns"
    recs = _lines(log)
    assert all(r["status"] == "ok" for r in recs), [r for r in recs if r["status"] != "ok"]
    ids = [(r["key"], knobs_id(r["knobs"])) for r in recs]
    assert len(ids) == len(set(ids))     # nothing measured twice
    assert res.tuned_total <= res.default_total
    print(result_table(res))
    # a second run with the same budget spent: nothing new measured, nothing built
    again = tune(DIGITS, None, trials=0, log=log, work_dir=tmp_path / "w2", progress=False, **_opts(digits))
    assert again.trials == 0 and again.builds == 0 and len(_lines(log)) == len(recs)
    out = tmp_path / "p"
    r = tinyc.compile(DIGITS, out, tuning_log=log, build=True, **_opts(digits))
    assert r.report["tuned_layers"]
    y = tinyc.run(out, {"input": np.load(digits / "test.npz")["input"]}, raw=True)  # int8, as the golden model
    g = r.graph
    from tinyc.quantize.io import to_model_input
    spec = json.loads((out / "tinyc.json").read_text())["inputs"][0]
    x = np.load(digits / "test.npz")["input"]
    for k in range(len(x)):
        gold = tinyc.reference.run_graph(g, {g.inputs[0]: to_model_input(spec, x[k:k + 1].reshape(spec["shape"]))})
        np.testing.assert_array_equal(np.asarray(gold["logits"]).reshape(-1), y["logits"][k].reshape(-1))


def test_wrong_candidate_is_caught_by_the_output_check(tmp_path, digits, monkeypatch):
    """Candidate 1 of every batch gets a shifted output zero point: its output differs from the
    golden model and must be recorded as "wrong", never as a speed."""
    real = bench_mod.build_batch_graph

    def sabotage(graph, candidates, env):
        batch = real(graph, candidates, env)
        if len(batch.graph.nodes) > 1:
            node = batch.graph.nodes[1]
            node.attrs = dict(node.attrs, y_zp=int(node.attrs["y_zp"]) + 3)
        return batch

    monkeypatch.setattr("tinyc.tune.tuner.build_batch_graph", sabotage)
    log = tmp_path / "t.jsonl"
    tune(DIGITS, None, trials=4, log=log, batch_size=8, work_dir=tmp_path / "w", progress=False, **_opts(digits))
    recs = _lines(log)
    wrong = [r for r in recs if r["status"] == "wrong"]
    assert wrong and all("differ from the golden model" in r["detail"] for r in wrong)
    assert all(r["cycles"] is None or r["status"] == "wrong" for r in wrong)
    best = TuningLog(log)
    for r in wrong:   # a wrong candidate is never the best
        b = best.best("host", r["key"])
        assert b is None or knobs_id(b["knobs"]) != knobs_id(r["knobs"])


def test_killed_tuner_loses_nothing_and_resumes(tmp_path, digits):
    """SIGKILL in the middle of a run: every complete line survives; a truncated last line is
    skipped with a warning; the resumed run measures none of the completed candidates again."""
    log = tmp_path / "t.jsonl"
    cmd = [sys.executable, "-m", "tinyc", "tune", str(DIGITS), "--quantize", "int8", "--calib",
           str(digits / "calib.npz"), "--trials", "40", "--batch-size", "4", "--log", str(log), "--search", "random",
           "--work-dir", str(tmp_path / "w")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    deadline = time.time() + 240
    while time.time() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 8):
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    text = log.read_text()
    complete = [json.loads(line) for line in text.split("\n")[:-1] if line]   # every finished line parses
    assert len(complete) >= 8
    # simulate power loss while writing: half a record at the end
    with open(log, "a") as f:
        f.write('{"board": "host", "key": "trunc')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = TuningLog(log)
    assert any("corrupt" in str(w.message).lower() or "skipp" in str(w.message).lower() for w in caught)
    assert len(before) == len(complete)
    res = tune(DIGITS, None, trials=3, log=log, batch_size=4, work_dir=tmp_path / "w2", progress=False,
               quantize="int8", calib=digits / "calib.npz")
    assert res.trials == 3
    after = TuningLog(log)
    ids = [(r["board"], r["key"], knobs_id(r["knobs"])) for r in after.records()]
    assert len(ids) == len(set(ids))                       # nothing measured twice
    assert after.records()[:len(complete)] == complete     # nothing lost or changed
    new = after.records()[len(complete):]
    # the 3 trials, plus a default the killed run had not reached (round 0 is not counted as trials)
    defaults = [r for r in new if r["knobs"] == next(t.default for t in _tasks(digits) if t.key == r["key"])]
    assert len(new) == 3 + len(defaults), new


@pytest.mark.slow
@needs_qemu
def test_board_tuning_is_exact_and_not_slower(tmp_path, digits):
    log = tmp_path / "t.jsonl"
    res = tune(DIGITS, "mps2-an386", trials=12, log=log, batch_size=16, work_dir=tmp_path / "w", progress=False,
               **_opts(digits))
    print(result_table(res))
    assert res.units == "instructions" and res.trials == 12
    # the breakdown of a measured candidate's cost, step by step (benchmarks/tuning.py prints it)
    b = res.breakdown
    assert set(b) == {"generate_s", "compile_s", "link_s", "flash_s", "run_s", "other_s", "all_in_s", "compile_cpu_s"}
    assert all(v >= 0 for v in b.values()) and b["compile_s"] > 0 and b["run_s"] > 0
    assert res.measured_all >= res.trials and res.times["compiled"] > 0
    assert "per measured candidate" in result_table(res)
    assert res.tuned_total <= res.default_total
    assert all(t.best_cycles is not None and t.best_cycles <= t.default_cycles for t in res.tasks)
    again = tune(DIGITS, "mps2-an386", trials=0, log=log, work_dir=tmp_path / "w2", progress=False, **_opts(digits))
    assert again.trials == 0 and again.builds == 0
    out = tmp_path / "p"
    tinyc.compile(DIGITS, out, board="mps2-an386", tuning_log=log, build=True, **_opts(digits))
    v = tinyc.validate(out, digits / "test.npz")
    assert v["outputs"]["logits"]["bit_exact_vs_golden"], v
    # the tuned firmware is at least as fast as the default one, end to end (counts repeat to
    # within one SysTick tick between QEMU runs)
    d = tmp_path / "d"
    tinyc.compile(DIGITS, d, board="mps2-an386", build=True, **_opts(digits))
    x = np.load(digits / "test.npz")["input"][:1]
    assert tinyc.run_on_board(out, {"input": x}).ticks[0] <= tinyc.run_on_board(d, {"input": x}).ticks[0] + 1


@pytest.mark.slow
@needs_qemu
@pytest.mark.parametrize("inject,status", [("__builtin_trap();", "crash"), ("for (;;) { }", "timeout")])
def test_faulting_or_hanging_candidate_is_recorded_and_the_batch_goes_on(tmp_path, digits, monkeypatch,
                                                                        inject, status):
    """Candidate 1's kernel executes an undefined instruction (the board faults and reports it over
    the link) or never returns (the host's timeout): the emulator is restarted, the candidate is
    logged as a crash / timeout, the others are measured."""
    real = bench_mod.generate_batch

    def faulty(batch, target):
        gen = real(batch, target)
        src = gen.files["tune.c"]
        m = re.search(r"static void layer1_\w+\([^)]*\)\s*\{", src)
        assert m
        gen.files["tune.c"] = src[:m.end()] + f"\n    {inject}\n" + src[m.end():]
        return gen

    monkeypatch.setattr(bench_mod, "generate_batch", faulty)
    log = tmp_path / "t.jsonl"
    t0 = time.perf_counter()
    tune(DIGITS, "mps2-an386", trials=0, log=log, batch_size=8, work_dir=tmp_path / "w", progress=False,
         run_timeout=3.0, **_opts(digits))
    recs = _lines(log)
    assert [r["status"] for r in recs].count(status) == 1, recs
    assert recs[1]["status"] == status and all(r["status"] == "ok" for i, r in enumerate(recs) if i != 1)
    assert time.perf_counter() - t0 < 120


def test_ram_budget_drops_candidates_whose_scratch_does_not_fit(digits):
    """--ram-budget: candidates whose scratch would push the arena above the budget are never
    built (the space shrinks; the default always stays); no budget keeps them all."""
    from tinyc.api import prepare
    from tinyc.memory import plan_graph_memory
    from tinyc.schedule import default_schedules
    from tinyc.tune.tasks import extract_tasks
    graph, _ = prepare(DIGITS, quantize="int8", calib=digits / "calib.npz", io_dtype="int8", progress=False)
    defaults = default_schedules(graph, "host")
    arena = plan_graph_memory(graph, defaults, "host").arena_bytes
    free = extract_tasks(graph, "host", defaults)
    tight = extract_tasks(graph, "host", defaults, arena, ram_budget=arena)
    assert sum(t.dropped_for_memory for t in free) == 0
    assert sum(t.dropped_for_memory for t in tight) > 0
    for f, t in zip(free, tight):
        base = t.scratch[knobs_id(t.default)]
        assert t.default in t.space
        assert all(t.scratch[knobs_id(c)] <= base for c in t.space)
        assert len(t.space) + t.dropped_for_memory == len(f.space)
    with pytest.raises(tinyc.errors.UsageError, match="exceeds the RAM budget"):
        tune(DIGITS, None, trials=1, log=digits / "never.jsonl", ram_budget=arena - 1, progress=False, **_opts(digits))


# ---------------------------------------------------------------- fast batch builds (tinyc.tune.objects)


def _board_batch(d, board="mps2-an386", extra=2):
    """A batch as the tuner makes it: every task's default plus `extra` other candidates of the first."""
    from tinyc.pipeline import prepare
    from tinyc.reference import run_graph
    from tinyc.schedule import default_schedules
    from tinyc.targets.registry import load_mcu_board, target_for
    from tinyc.tune.bench import Candidate, build_batch_graph, candidate_is_buildable
    from tinyc.tune.tasks import extract_tasks
    from tinyc.tune.tuner import _sample_input

    board_def = load_mcu_board(board, None)
    tgt = target_for(board_def, "host")
    graph, _ = prepare(DIGITS, None, None, "onnx", None, "int8", d / "calib.npz", "minmax", progress=False,
                       io_dtype="int8")
    tasks = extract_tasks(graph, tgt.schedule_target, default_schedules(graph, tgt.schedule_target))
    env = run_graph(graph, _sample_input(graph, d / "calib.npz", 0), keep_all=True)
    cands = [Candidate(t.key, t.nodes[0], dict(t.default)) for t in tasks]
    others = [k for k in tasks[0].space if k != tasks[0].default
              and not candidate_is_buildable(graph, tasks[0].nodes[0], k, tgt.schedule_target)]
    cands += [Candidate(tasks[0].key, tasks[0].nodes[0], dict(k)) for k in others[:extra]]
    return board_def, tgt.schedule_target, build_batch_graph(graph, cands, env)


@needs_qemu
def test_fast_build_caches_objects_by_content_and_links_once(tmp_path, digits):
    """One object per candidate: a second build of the same batch compiles nothing (every object
    comes from the cache, the ELF is the same bytes); a changed source is compiled again, alone;
    compiling on one core or on several gives the same firmware."""
    from tinyc.tune.measure import BoardMeasurer
    from tinyc.tune.objects import BUILD_INFO, BuildStats, ObjectBuilder

    board, target, batch = _board_batch(digits)
    m = BoardMeasurer(board, target, tmp_path / "w")
    p1 = m.prepare(batch, "b0", out=tmp_path / "p1")
    info = json.loads((p1 / BUILD_INFO).read_text())
    n = len(batch.candidates)
    assert info["fast"] and info["split"] and info["baked_inputs"]
    sources = ObjectBuilder.sources(p1, board, [p.name for p in p1.glob("*.c") if p.name != "main.c"])
    assert sum(f"tune_cand{j}.c" in sources for j in range(n)) == n
    assert info["compiled"] == len(sources) and info["cached"] == 0
    elf1 = (p1 / "build" / "tune.elf").read_bytes()
    p2 = m.prepare(batch, "b1", out=tmp_path / "p2")  # same content, another folder
    again = json.loads((p2 / BUILD_INFO).read_text())
    assert again["compiled"] == 0 and again["cached"] == len(sources)
    assert (p2 / "build" / "tune.elf").read_bytes() == elf1
    # a changed candidate source: that object alone is compiled again
    cand = p2 / "tune_cand1.c"
    cand.write_text(cand.read_text() + "\nint tune_test_marker(void);\nint tune_test_marker(void) { return 1; }\n")
    stats = BuildStats()
    m.objects.build(p2, board, "tune", sources, stats)
    assert stats.compiled == 1 and stats.cached == len(sources) - 1
    # serial and parallel compiles of the same project: the same firmware, byte for byte
    for jobs in (1, 2):
        ObjectBuilder(tmp_path / f"cache{jobs}", jobs=jobs).build(p1, board, "tune", sources, BuildStats())
        assert (p1 / "build" / "tune.elf").read_bytes() == elf1


@needs_qemu
def test_fast_build_measures_exactly_like_the_cmake_build(tmp_path, digits):
    """The batch linked from per-candidate objects, inputs baked in, runs on QEMU: every
    candidate's output is bit-exact against the golden model (the measurer checks it) and its
    count is the one-translation-unit CMake build's, give or take the extra call into the
    candidate's object (a few instructions); the measurer reports flash and run seconds."""
    from tinyc.tune.measure import BoardMeasurer

    board, target, batch = _board_batch(digits)
    counts = {}
    for fast in (True, False):
        m = BoardMeasurer(board, target, tmp_path / f"w{fast}", fast_build=fast)
        project = m.prepare(batch, "b", out=tmp_path / f"p{fast}")
        times: dict = {}
        res = m.measure(batch, project, lambda _m: None, times=times)
        assert [r.status for r in res] == ["ok"] * len(batch.candidates), [r.detail for r in res]
        assert times["flash_s"] > 0 and times["run_s"] > 0
        counts[fast] = [r.cycles for r in res]
    for fast, slow in zip(counts[True], counts[False]):
        assert abs(fast - slow) <= 16, counts


@needs_qemu
def test_batch_too_big_for_the_flash_says_where_to_split(tmp_path, digits):
    """A batch a little too big for the flash: the build fails as a normal build would (needed vs
    available bytes) and says how many leading candidates fit, from the candidates' object sizes;
    the build step hands that split point on to the tuner (which splits there, not in halves)."""
    from tinyc.tune.measure import BoardMeasurer
    from tinyc.tune.objects import BatchTooBig
    from tinyc.tune.steps import BuildFolders, build_image

    board, target, batch = _board_batch(digits, extra=4)
    p = BoardMeasurer(board, target, tmp_path / "w").prepare(batch, "b", out=tmp_path / "p")
    size = subprocess.run(["arm-none-eabi-size", "-B", str(p / "build" / "tune.elf")], capture_output=True,
                          text=True).stdout
    text, data = (int(v) for v in size.splitlines()[1].split()[:2])
    baked = sum(np.asarray(v).nbytes for v in batch.inputs.values())
    # too small with the inputs baked in and without them (the build tries both)
    small = dict(board, memory=dict(board["memory"], flash_size=text + data - baked - 1024))
    tight = BoardMeasurer(small, target, tmp_path / "w2")
    with pytest.raises(BatchTooBig, match="does not fit board") as err:
        tight.prepare(batch, "b", out=tmp_path / "p2")
    assert 0 < err.value.fit < len(batch.candidates)
    failed = build_image(tight, batch, "b", BuildFolders(tmp_path / "f"))
    assert failed.fit == err.value.fit and "does not fit" in failed.message
