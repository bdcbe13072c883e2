"""Unit tests of the autotuner's building blocks: the tuning log, candidate features, the cost
model, the search and the task scheduler. No compiler, board or emulator: measurements come from
a synthetic cycle function, so the learning and search parts are checked against a known truth."""
from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from tinyc.tune import log as log_module
from tinyc.tune.cost_model import CostModel, records_to_samples, spearman
from tinyc.tune.features import candidate_features
from tinyc.tune.log import STATUSES, TuningLog, knobs_id, load_records
from tinyc.tune.search import model_proposals, random_proposals
from tinyc.tune.task_scheduler import allocate, next_task

ROOT = Path(__file__).resolve().parents[1]

M4 = {"name": "m4", "core": "cortex-m4", "isa": ["dsp"], "clock_hz": 80_000_000}
M55 = {"name": "m55", "core": "cortex-m55", "isa": ["dsp", "mve"], "clock_hz": 160_000_000}


def record(**overrides):
    base = {"board": "m4", "target": "mcu+dsp", "key": "conv-a", "op": "QConv", "knobs": {"oc_tile": 4, "px_tile": 2},
            "cycles": 1000, "status": "ok", "units": "cycles", "repeats": 3}
    base.update(overrides)
    return base


# ---------------------------------------------------------------- log


def test_log_round_trip(tmp_path):
    path = tmp_path / "sub" / "tune.jsonl"
    log = TuningLog(path)
    assert path.parent.is_dir() and not path.exists()  # the file appears with the first record
    log.append(record(knobs={"oc_tile": np.int64(8), "mac": "dsp", "wide_weights": False}))
    log.append(record(status="crash", cycles=None))
    log.append(record(board="m55", cycles=500, time=123.0))
    again = TuningLog(path)
    assert len(again) == len(log) == 3
    first = again.records()[0]
    assert first["knobs"] == {"oc_tile": 8, "mac": "dsp", "wide_weights": False}
    assert isinstance(first["time"], float) and first["tinyc_version"]
    assert again.records()[2]["time"] == 123.0  # a given time is kept
    assert [r["board"] for r in again.records(board="m55")] == ["m55"]
    assert again.records(key="other") == []
    assert load_records(path) == again.records()
    assert load_records(tmp_path / "missing.jsonl") == []
    for line in path.read_text().splitlines():
        assert set(json.loads(line)) >= {"board", "key", "knobs", "status", "time", "tinyc_version"}


def test_log_fsyncs_every_record(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(log_module.os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    log = TuningLog(tmp_path / "t.jsonl")
    for i in range(3):
        log.append(record(cycles=100 + i))
    assert len(calls) == 3


def test_log_is_append_only(tmp_path):
    path = tmp_path / "t.jsonl"
    log = TuningLog(path)
    before = b""
    for i in range(5):
        log.append(record(cycles=10 + i, knobs={"oc_tile": i}))
        now = path.read_bytes()
        assert now.startswith(before) and len(now) > len(before)
        assert now.endswith(b"\n") and now.count(b"\n") == i + 1
        before = now


def test_log_truncated_last_line(tmp_path):
    path = tmp_path / "t.jsonl"
    log = TuningLog(path)
    log.append(record(cycles=10))
    log.append(record(cycles=20, knobs={"oc_tile": 8}))
    half = json.dumps(record(cycles=30, knobs={"oc_tile": 16}))[:25]
    with open(path, "a") as f:
        f.write(half)  # a run killed mid-write
    with pytest.warns(UserWarning, match=r"t\.jsonl.*last line 3"):
        log = TuningLog(path)
    assert [r["cycles"] for r in log.records()] == [10, 20]
    before = path.read_bytes()
    log.append(record(cycles=40, knobs={"oc_tile": 32}))
    after = path.read_bytes()
    assert after.startswith(before)  # the truncated bytes stay ...
    lines = after.decode().split("\n")
    assert lines[2] == half and json.loads(lines[3])["cycles"] == 40  # ... on a line of their own
    with pytest.warns(UserWarning, match=r"line 3"):
        again = TuningLog(path)
    assert [r["cycles"] for r in again.records()] == [10, 20, 40]


def test_log_corrupt_middle_line(tmp_path):
    path = tmp_path / "t.jsonl"
    good = [json.dumps(record(cycles=c)) for c in (1, 2)]
    path.write_text(good[0] + "\n{not json\n" + json.dumps({"board": "m4"}) + "\n" + good[1] + "\n")
    with pytest.warns(UserWarning) as caught:
        log = TuningLog(path)
    messages = [str(w.message) for w in caught]
    assert any("line 2" in m for m in messages) and any("line 3" in m and "missing" in m for m in messages)
    assert [r["cycles"] for r in log.records()] == [1, 2]


@pytest.mark.parametrize("bad", [
    {"board": None}, {"status": "great"}, {"cycles": "fast"}, {"cycles": float("nan")}, {"cycles": None},
    {"knobs": [1, 2]},
])
def test_log_rejects_invalid_records(tmp_path, bad):
    rec = record(**bad)
    if bad == {"board": None}:
        del rec["board"]
    with pytest.raises(ValueError):
        TuningLog(tmp_path / "t.jsonl").append(rec)
    assert not (tmp_path / "t.jsonl").exists()


def test_log_measured_and_best(tmp_path):
    log = TuningLog(tmp_path / "t.jsonl")
    log.append(record(knobs={"oc_tile": 4}, cycles=900))
    log.append(record(knobs={"oc_tile": 8}, cycles=700))
    log.append(record(knobs={"oc_tile": 16}, cycles=100, status="wrong"))  # fast but wrong: never best
    log.append(record(knobs={"oc_tile": 32}, cycles=None, status="crash"))
    log.append(record(knobs={"oc_tile": 2}, cycles=None, status="timeout"))
    log.append(record(knobs={"oc_tile": 1}, cycles=50, board="m55"))
    log.append(record(knobs={"oc_tile": 1}, cycles=60, key="conv-b"))
    assert log.measured("m4", "conv-a") == {knobs_id({"oc_tile": t}) for t in (4, 8, 16, 32, 2)}
    assert log.best("m4", "conv-a")["cycles"] == 700
    assert log.best("m55", "conv-a")["cycles"] == 50
    assert log.best("m4", "conv-x") is None
    only_failures = TuningLog(tmp_path / "f.jsonl")
    for status in STATUSES[1:]:
        only_failures.append(record(status=status, cycles=None))
    assert only_failures.best("m4", "conv-a") is None
    assert len(only_failures.measured("m4", "conv-a")) == 1


def test_knobs_id_is_canonical():
    assert knobs_id({"b": 1, "a": "x"}) == knobs_id({"a": "x", "b": 1}) == '{"a":"x","b":1}'
    assert knobs_id({"a": 1, "_scratch_bytes": 64}) == knobs_id({"a": 1})  # derived numbers are no identity
    assert knobs_id({"a": True}) != knobs_id({"a": 1})


def test_log_survives_sigkill(tmp_path):
    path = tmp_path / "t.jsonl"
    code = ("import sys\nfrom tinyc.tune.log import TuningLog\nlog = TuningLog(sys.argv[1])\ni = 0\n"
            "while True:\n"
            "    log.append({'board': 'm4', 'key': 'k', 'status': 'ok', 'cycles': 1000 + i,\n"
            "                'knobs': {'oc_tile': i, 'pad': 'x' * (i * 37 % 3000)}})\n"
            "    i += 1\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], env=env, cwd=ROOT)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and proc.poll() is None:
            if path.exists() and path.read_bytes().count(b"\n") >= 40:
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the writer died on its own"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    lines = path.read_bytes().split(b"\n")
    assert len(lines) > 40
    for raw in lines[:-1]:  # every complete line parses; only the last may be cut short
        json.loads(raw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log = TuningLog(path)
    assert len(log) >= len(lines) - 1
    assert [r["knobs"]["oc_tile"] for r in log.records()] == list(range(len(log)))
    log.append(record(key="k", cycles=5, knobs={"oc_tile": -1}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = TuningLog(path)
    assert again.records()[-1]["knobs"] == {"oc_tile": -1} and len(again) == len(log)


# ---------------------------------------------------------------- features


def conv_task(C=16, H=16, W=16, OC=32, K=3, G=1, op="QConv"):
    """A stride-1 'same' conv task dict as the tuner builds it."""
    ICG, OCG = C // G, OC // G
    dims = {"N": 1, "C": C, "H": H, "W": W, "OC": OC, "KH": K, "KW": K, "SH": 1, "SW": 1, "OH": H, "OW": W,
            "G": G, "ICG": ICG, "OCG": OCG, "PT": K // 2, "PL": K // 2, "PB": K // 2, "PR": K // 2}
    return {"op": op, "macs": H * W * OC * ICG * K * K, "dims": dims, "in_bytes": C * H * W,
            "out_bytes": OC * H * W, "weight_bytes": OC * ICG * K * K}


def test_features_deterministic_and_one_hot():
    task = conv_task(C=8, H=5, W=5, OC=24)
    knobs = {"variant": "pointwise", "oc_tile": 16, "px_tile": 4, "mac": "dsp", "wide_weights": True,
             "loop_order": "pixels_outer"}
    f = candidate_features(task, knobs, M4)
    assert list(f) == sorted(f)
    assert f == candidate_features(dict(task), dict(reversed(list(knobs.items()))), dict(M4))
    assert all(isinstance(v, float) and math.isfinite(v) for v in f.values())
    for name in ("op=QConv", "variant=pointwise", "mac=dsp", "loop_order=pixels_outer", "core=cortex-m4", "isa_dsp"):
        assert f[name] == 1.0
    assert f["isa_mve"] == 0.0 and f["knob_wide_weights"] == 1.0 and f["knob_oc_tile"] == 16.0
    assert f["log2_macs"] == pytest.approx(math.log2(1 + task["macs"]))
    assert f["dim_OC"] == pytest.approx(math.log2(25))
    assert candidate_features(task, knobs, M55)["isa_mve"] == 1.0


def test_features_conv_loop_counts():
    task = conv_task(C=8, H=5, W=5, OC=24)  # 25 output pixels, 24 channels
    knobs = {"oc_tile": 16, "px_tile": 4, "loop_order": "pixels_outer"}
    f = candidate_features(task, knobs, M4)
    assert f["loop_oc_trips"] == pytest.approx(math.log2(1 + 2))  # ceil(24/16)
    assert f["loop_px_trips"] == pytest.approx(math.log2(1 + 7))  # ceil(25/4)
    assert f["loop_oc_tail"] == 1.0 and f["loop_px_tail"] == 1.0
    assert f["loop_accumulators"] == 64.0
    assert f["loop_reread_bytes"] == pytest.approx(math.log2(1 + task["weight_bytes"] * 7))
    g = candidate_features(task, {"oc_tile": 8, "px_tile": 5, "loop_order": "channels_outer"}, M4)
    assert g["loop_oc_tail"] == 0.0 and g["loop_px_tail"] == 0.0
    assert g["loop_reread_bytes"] == pytest.approx(math.log2(1 + task["in_bytes"] * 3))
    depthwise = conv_task(C=12, H=4, W=4, OC=12, G=12)  # OCG == 1: the channel loop runs over all 12
    d = candidate_features(depthwise, {"oc_tile": 8, "px_tile": 16}, M4)
    assert d["loop_oc_trips"] == pytest.approx(math.log2(1 + 2)) and d["loop_oc_tail"] == 1.0
    assert d["loop_px_trips"] == pytest.approx(1.0) and d["loop_px_tail"] == 0.0


def test_features_matmul_and_derived_numbers():
    task = {"op": "QMatMul", "macs": 3 * 64 * 10, "dims": {"M": 3, "K": 64, "N": 10}, "in_bytes": 192,
            "out_bytes": 30, "weight_bytes": 640, "scratch_bytes": 128}
    f = candidate_features(task, {"n_tile": 4, "m_tile": 2, "mac": "i16", "_scratch_bytes": 256}, M4)
    assert f["loop_n_trips"] == pytest.approx(math.log2(1 + 3)) and f["loop_m_trips"] == pytest.approx(math.log2(1 + 2))
    assert f["loop_accumulators"] == 8.0 and f["loop_n_tail"] == 1.0 and f["loop_m_tail"] == 1.0
    assert f["log2_scratch_bytes"] == pytest.approx(math.log2(1 + 256))  # the per-candidate number wins
    assert not any(name.startswith("_") or "knob__" in name for name in f)
    assert candidate_features(task, {"n_tile": 4}, M4)["log2_scratch_bytes"] == pytest.approx(math.log2(129))


def test_features_unknown_op_and_knobs():
    task = {"op": "Mystery", "macs": 0, "dims": {"X": 7}, "in_bytes": 10, "out_bytes": 10, "weight_bytes": 0}
    knobs = {"unroll": 3, "order": "zig", "ratio": 0.5, "flag": False, "maybe": None}
    f = candidate_features(task, knobs, {"name": "pc", "core": "host", "isa": [], "clock_hz": None})
    assert f["op=Mystery"] == 1.0 and f["order=zig"] == 1.0 and f["maybe=None"] == 1.0 and f["core=host"] == 1.0
    assert f["knob_unroll"] == 3.0 and f["knob_ratio"] == 0.5 and f["knob_flag"] == 0.0
    assert f["isa_dsp"] == 0.0 and not any(name.startswith("loop_") for name in f)
    assert all(math.isfinite(v) for v in f.values())


# ---------------------------------------------------------------- synthetic ground truth


SPACE = [{"variant": "direct", "oc_tile": o, "px_tile": p, "mac": m, "loop_order": lo}
         for o in (1, 2, 4, 8, 16, 32) for p in (1, 2, 3, 4, 6, 8) for m in ("i16", "dsp")
         for lo in ("pixels_outer", "channels_outer")]
TASKS = [conv_task(16, 16, 16, 32), conv_task(32, 8, 8, 64), conv_task(8, 12, 12, 24)]


def true_cycles(task, knobs, rng=None):
    """A made-up but kernel-like cost: per-tile overheads shrink with tile size, register spills
    beyond 32 accumulators, wasted work in tail tiles, a faster MAC form and a loop order whose
    benefit depends on whether weights or activations are larger. Lognormal noise when rng."""
    d = task["dims"]
    o, p = knobs["oc_tile"], knobs["px_tile"]
    pixels = d["OH"] * d["OW"] * d["N"]
    c = task["macs"] * (1 + 2 / o + 2 / p)
    if o * p > 32:
        c *= 1 + 0.05 * (o * p - 32)
    c *= 1 + 0.5 * ((-d["OCG"]) % o) / d["OCG"] + 0.5 * ((-pixels) % p) / pixels
    c *= 0.7 if knobs["mac"] == "dsp" else 1.0
    if knobs["loop_order"] == "channels_outer":
        c *= 1.2 if task["in_bytes"] > task["weight_bytes"] else 0.9
    return c * (math.exp(rng.normal(0, 0.02)) if rng is not None else 1.0)


# ---------------------------------------------------------------- cost model


def test_cost_model_untrained():
    model = CostModel()
    items = [(TASKS[0], k, M4) for k in SPACE[:5]]
    assert not model.trained and model.n_samples == 0
    assert np.array_equal(model.predict(items), np.zeros(5))
    model.fit([(TASKS[0], k, M4, 100.0) for k in SPACE[:3]] + [(TASKS[0], SPACE[3], M4, None)])
    assert not model.trained and model.n_samples == 3  # failures do not count
    assert np.array_equal(model.predict(items), np.zeros(5)) and model.predict([]).shape == (0,)
    assert math.isnan(spearman(model, [(TASKS[0], k, M4, 1.0 + i) for i, k in enumerate(SPACE[:5])]))


def test_cost_model_ranks_held_out_candidates():
    rng = np.random.default_rng(0)
    samples = [(t, k, M4, true_cycles(t, k, rng)) for t in TASKS for k in SPACE]
    order = rng.permutation(len(samples))
    train, test = [samples[i] for i in order[:100]], [samples[i] for i in order[100:]]
    model = CostModel(seed=0).fit(train)
    assert model.trained and model.n_samples == 100
    assert spearman(model, test) > 0.8
    for task in TASKS:  # also within each layer, where only the knobs differ
        assert spearman(model, [s for s in test if s[0] is task]) > 0.7
    assert math.isnan(spearman(model, test[:2]))


def test_cost_model_transfers_to_unseen_task():
    rng = np.random.default_rng(1)
    task_a, task_b = conv_task(16, 16, 16, 32), conv_task(24, 10, 10, 48)
    model = CostModel().fit([(task_a, k, M4, true_cycles(task_a, k, rng)) for k in SPACE])
    held_out = [(task_b, k, M4, true_cycles(task_b, k)) for k in SPACE]
    assert spearman(model, held_out) > 0.5  # chance is 0


def test_records_to_samples_joins_tasks_and_boards():
    tasks, boards = {"conv-a": TASKS[0]}, {"m4": M4}
    records = [record(cycles=10), record(status="crash", cycles=None), record(key="unknown"),
               record(board="m7"), record(cycles=0)]
    samples = records_to_samples(records, tasks, boards)
    assert samples == [(TASKS[0], {"oc_tile": 4, "px_tile": 2}, M4, 10.0)]


# ---------------------------------------------------------------- search


def test_random_proposals():
    rng = np.random.default_rng(0)
    measured = {knobs_id(k) for k in SPACE[:100]}
    batch = random_proposals(SPACE + SPACE[:10], measured, 20, rng)  # duplicates in the space count once
    ids = [knobs_id(k) for k in batch]
    assert len(ids) == len(set(ids)) == 20 and not set(ids) & measured
    assert len(random_proposals(SPACE, measured, 100, rng)) == len(SPACE) - 100
    assert random_proposals(SPACE, {knobs_id(k) for k in SPACE}, 5, rng) == []
    assert random_proposals(SPACE, set(), 5, np.random.default_rng(3)) == random_proposals(
        SPACE, set(), 5, np.random.default_rng(3))


@pytest.fixture(scope="module")
def trained():
    """A model fit on 60 noisy measurements of the first task."""
    rng = np.random.default_rng(2)
    train = [SPACE[i] for i in rng.permutation(len(SPACE))[:60]]
    return CostModel().fit([(TASKS[0], k, M4, true_cycles(TASKS[0], k, rng)) for k in train]), train


def test_model_proposals_distinct_unmeasured_and_reproducible(trained):
    model, train = trained
    measured = {knobs_id(k) for k in train}
    batch = model_proposals(SPACE, measured, 8, model, TASKS[0], M4, np.random.default_rng(5))
    ids = [knobs_id(k) for k in batch]
    assert len(set(ids)) == 8 and not set(ids) & measured
    assert batch == model_proposals(SPACE, measured, 8, model, TASKS[0], M4, np.random.default_rng(5))
    untrained = model_proposals(SPACE, measured, 8, CostModel(), TASKS[0], M4, np.random.default_rng(5))
    assert untrained == random_proposals(SPACE, measured, 8, np.random.default_rng(5))
    nearly_all = {knobs_id(k) for k in SPACE[3:]}
    assert len(model_proposals(SPACE, nearly_all, 8, model, TASKS[0], M4, np.random.default_rng(5))) == 3


def test_model_proposals_follow_the_model(trained):
    model, train = trained
    measured = {knobs_id(k) for k in train}
    unmeasured = [k for k in SPACE if knobs_id(k) not in measured]
    predicted = model.predict([(TASKS[0], k, M4) for k in unmeasured])
    top = [knobs_id(unmeasured[i]) for i in np.argsort(predicted, kind="stable")]
    # the annealing walk (space of 144 > 4 * 8) finds the model's favourites
    greedy = model_proposals(SPACE, measured, 8, model, TASKS[0], M4, np.random.default_rng(0), epsilon=0)
    assert len(set(map(knobs_id, greedy)) & set(top[:8])) >= 6
    # ranked whole (exhaustive >= the space): exactly the model's favourites
    whole = model_proposals(SPACE, measured, 8, model, TASKS[0], M4, np.random.default_rng(0), epsilon=0,
                            exhaustive=4096)
    assert [knobs_id(k) for k in whole] == top[:8]
    # a small batch ranks the space exhaustively: the model's best first, then epsilon random picks
    tails = set()
    for seed in range(6):
        batch = model_proposals(SPACE, measured, 30, model, TASKS[0], M4, np.random.default_rng(seed), epsilon=0.1)
        ids = [knobs_id(k) for k in batch]
        assert ids[:27] == top[:27] and len(set(ids)) == 30
        tails.add(tuple(ids[27:]))
    assert len(tails) > 1  # the exploration share is random
    one = model_proposals(SPACE, measured, 4, model, TASKS[0], M4, np.random.default_rng(0), epsilon=0.01)
    assert len(one) == 4  # epsilon > 0 with n >= 4 explores at least once
    assert len(set(map(knobs_id, one[:3])) & set(top[:3])) >= 2


def test_exploration_goes_to_the_kernel_form_measured_least(trained):
    """The random share of a batch goes to the kernel form measured least: a form of two
    candidates next to 288 others (a Helium kernel among portable loops) is measured at once,
    where uniform picks would find it about once in 60 batches."""
    model, train = trained
    small = [{"variant": "mve", "oc_tile": 64, "px_tile": p, "mac": "mve", "loop_order": "pixels_outer"}
             for p in (2, 4)]
    measured = {knobs_id(k) for k in train}
    for seed in range(5):
        batch = model_proposals(SPACE + small, measured, 8, model, TASKS[0], M4, np.random.default_rng(seed),
                                epsilon=0.25)
        assert {knobs_id(k) for k in small} <= {knobs_id(k) for k in batch}, seed
        assert len({knobs_id(k) for k in batch}) == 8


def measurements_to_near_optimum(task, use_model, seed, batch=8):
    """Simulated tuning of one task: propose a batch, 'measure' it, refit; returns how many
    measurements it took to hit a candidate within 5% of the true optimum."""
    rng = np.random.default_rng(seed)
    target = 1.05 * min(true_cycles(task, k) for k in SPACE)
    model, measured, samples = CostModel(seed), set(), []
    while True:
        if use_model:
            proposals = model_proposals(SPACE, measured, batch, model, task, M4, rng)
        else:
            proposals = random_proposals(SPACE, measured, batch, rng)
        assert proposals, "the whole space was measured without reaching the optimum"
        for knobs in proposals:
            measured.add(knobs_id(knobs))
            samples.append((task, knobs, M4, true_cycles(task, knobs, rng)))
            if true_cycles(task, knobs) <= target:
                return len(measured)
        model.fit(samples)


def test_model_search_beats_random_search():
    seeds = range(5)
    for task in TASKS[:2]:
        guided = np.mean([measurements_to_near_optimum(task, True, s) for s in seeds])
        blind = np.mean([measurements_to_near_optimum(task, False, s) for s in seeds])
        assert guided < blind, (guided, blind)


# ---------------------------------------------------------------- task scheduler


def test_allocate_proportional_with_minimum():
    weights = {"a": 0.7, "b": 0.2, "c": 0.1}
    assert allocate(weights, 100) == {"a": 70, "b": 20, "c": 10}
    assert allocate(weights, 100, minimum=20) == {"a": 60, "b": 20, "c": 20}
    tiny = allocate({"a": 1000.0, "b": 1.0, "c": 1.0}, 50, minimum=2)
    assert sum(tiny.values()) == 50 and tiny["b"] == tiny["c"] == 2
    assert allocate(weights, 2) == {"a": 1, "b": 1, "c": 0}  # too few for every floor: heaviest first
    assert allocate(weights, 0) == {"a": 0, "b": 0, "c": 0}
    assert allocate({"a": 0.0, "b": 0.0}, 10) == {"a": 5, "b": 5}
    odd = allocate({"a": 1.0, "b": 1.0, "c": 1.0}, 10)
    assert sum(odd.values()) == 10 and max(odd.values()) - min(odd.values()) <= 1


def test_allocate_caps_and_redistributes():
    weights = {"a": 0.7, "b": 0.2, "c": 0.1}
    capped = allocate(weights, 100, measured={"a": 5}, space_sizes={"a": 30})
    assert capped["a"] == 25 and sum(capped.values()) == 100
    assert capped["b"] == pytest.approx(2 * capped["c"], abs=1)  # the leftover follows the weights
    assert allocate(weights, 100, space_sizes={"a": 3, "b": 4, "c": 5}) == {"a": 3, "b": 4, "c": 5}
    done = allocate(weights, 100, measured={"a": 10}, space_sizes={"a": 10, "b": 50, "c": 50})
    assert done["a"] == 0 and sum(done.values()) == 100
    assert allocate({"a": 1.0, "b": 0.0}, 10, space_sizes={"a": 2}) == {"a": 2, "b": 8}


def test_next_task_round_robin():
    weights = {"a": 0.7, "b": 0.2, "c": 0.1}
    budget = allocate(weights, 20)
    done = {k: 0 for k in budget}
    order = []
    while (key := next_task(weights, done, budget)) is not None:
        order.append(key)
        done[key] += 1
    assert done == budget
    assert sorted(order[:3]) == ["a", "b", "c"]  # every layer is touched before any gets a second turn
    assert order[0] == "a"  # the heaviest first on ties
    assert next_task(weights, {}, {"a": 0}) is None
    assert next_task(weights, {"a": 3, "b": 0}, {"a": 4, "b": 4}) == "b"


# ---------------------------------------------------------------- the log is outside input


def _warned(caught) -> list[str]:
    return [str(w.message) for w in caught]


def test_log_lines_that_would_crash_a_parser_are_skipped_with_their_line(tmp_path):
    """Each of these lines raised out of json.loads or out of the code reading the record (an
    OverflowError in isfinite, a RecursionError, ValueError past 4300 digits, TypeError on a list
    used as a dict key); now each is one warning naming its line, and its neighbours are kept."""
    path = tmp_path / "t.jsonl"
    good = json.dumps(record(cycles=5)).encode()
    bad = [
        json.dumps(record(cycles=1)).replace('"cycles": 1', '"cycles": ' + "9" * 401).encode(),   # 401 digits
        json.dumps(record(cycles=1)).replace('"cycles": 1', '"cycles": ' + "9" * 5000).encode(),  # past int()'s limit
        b"[" * 100_000 + b"]" * 100_000,                                                       # 100k deep
        b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        json.dumps(record(board=["m4"])).encode(),                                              # list for a string
        json.dumps(record(key={"k": 1})).encode(),
        json.dumps(record(knobs={"oc_tile": [4]})).encode(),
        json.dumps(record(cycles=1)).encode()[:-1] + b', "model": "\xff\xfe"}',                 # invalid UTF-8
        json.dumps(record(cycles=1)).replace('"cycles": 1', '"cycles": 1e400').encode(),        # inf
        json.dumps(record(time="now")).encode(),
        json.dumps(record(repeats=["a"])).encode(),
    ]
    path.write_bytes(b"\n".join([good] + bad + [good]) + b"\n")
    with pytest.warns(UserWarning) as caught:
        log = TuningLog(path)
    assert [r["cycles"] for r in log.records()] == [5, 5]
    messages = _warned(caught)
    assert len(messages) == len(bad)
    for number, m in enumerate(messages, start=2):
        assert f"line {number} " in m and str(path) in m and "\n" not in m, m
    assert "integer of 401 digits" in messages[0] and "nested too deeply" in messages[2]
    assert "board ['m4'] is not a string" in messages[4] and "not UTF-8: byte 0xff" in messages[7]
    log.append(record(cycles=7))   # and the log stays usable
    with pytest.warns(UserWarning):
        assert [r["cycles"] for r in TuningLog(path).records()] == [5, 5, 7]


def test_log_with_a_utf8_bom_keeps_its_first_record(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(record(cycles=3)).encode() + b"\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        log = TuningLog(path)
        assert [r["cycles"] for r in log.records()] == [3]
        assert log.measured("m4", "conv-a") == {knobs_id({"oc_tile": 4, "px_tile": 2})}
        log.append(record(cycles=4, knobs={"oc_tile": 8}))
        assert [r["cycles"] for r in TuningLog(path).records()] == [3, 4]
    assert path.read_bytes().startswith(b"\xef\xbb\xbf{")   # appended to, never rewritten


def test_log_path_that_is_a_directory(tmp_path):
    from tinyc.errors import UsageError
    with pytest.raises(UsageError, match=rf"tuning log {tmp_path} is a directory; give the path of a file"):
        TuningLog(tmp_path)
    with pytest.raises(UsageError, match="is a directory"):
        load_records(tmp_path)


def test_cli_tune_with_a_directory_as_log_is_one_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tinyc", "tune", str(ROOT / "examples" / "digits" / "digits_cnn.onnx"),
                           "--trials", "1", "--log", str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"tinyc: error: tuning log {tmp_path} is a directory; give the path of a file "
                                   f"(e.g. {tmp_path / 'tune.jsonl'})"), proc.stderr
    assert "Traceback" not in proc.stderr and list(tmp_path.iterdir()) == []


def test_knobs_are_checked_against_the_space_with_types():
    from tinyc.tune.tasks import knobs_problem
    legal = {"oc_tile": [1, 2, 4, 8], "wide_weights": [False, True], "mac": ["int32", "dsp"]}
    assert knobs_problem({"oc_tile": 8, "wide_weights": True, "mac": "dsp"}, legal) is None
    assert knobs_problem({"oc_tile": np.int64(4), "_scratch_bytes": 12}, legal) is None   # derived keys ignored
    assert "oc_tile = 8.0 is not one of the values offered (1, 2, 4, 8)" in knobs_problem({"oc_tile": 8.0}, legal)
    assert "oc_tile = true is not one of" in knobs_problem({"oc_tile": True}, legal)          # True is not 1
    assert "wide_weights = 1 is not one of the values offered (false, true)" in knobs_problem({"wide_weights": 1},
                                                                                           legal)
    assert "mac = \"simd\"" in knobs_problem({"mac": "simd"}, legal)
    assert "unknown knob 'n_tile'" in knobs_problem({"n_tile": 2}, legal)


def _gemm_graph():
    from onnx import helper

    from tinyc.api import prepare
    from util import make_model
    w = np.linspace(-1, 1, 64 * 32).reshape(64, 32).astype(np.float32)
    model = make_model([helper.make_node("Gemm", ["x", "w"], ["y"])], [("x", [4, 64])], [("y", [4, 32])], {"w": w},
                       name="g")
    graph, _ = prepare(model)
    return graph


def test_compile_skips_log_records_whose_knobs_the_op_does_not_offer(tmp_path):
    """`8.0` for 8 and `true` for 1 used to reach the generated C; now the record is skipped with a
    warning naming its line, and the fastest valid record is used."""
    from tinyc.ops import get_op
    from tinyc.tune.apply import schedules_from_log
    from tinyc.tune.tasks import schedule_space, task_key
    graph = _gemm_graph()
    node = next(n for n in graph.nodes if get_op(n.op).knobs(n, graph))
    key = task_key(node, graph)
    space = schedule_space(node, graph, "host")
    knob, value = next((k, v) for c in space for k, v in c.items() if isinstance(v, int) and not isinstance(v, bool))
    valid = next(c for c in space if c[knob] == value)
    as_float = dict(valid, **{knob: float(value)})
    as_bool = dict(valid, **{knob: True})
    path = tmp_path / "t.jsonl"
    log = TuningLog(path)
    for knobs, cycles in ((valid, 100), (as_float, 10), (as_bool, 20)):
        log.append(record(board="host", target="host", key=key, op=node.op, knobs=knobs, cycles=cycles))
    with pytest.warns(UserWarning) as caught:
        chosen = schedules_from_log(graph, path, "host", "host")
    assert chosen == {node.name: valid}
    messages = _warned(caught)
    assert any(f"line 2 for {key}" in m and f"{knob} = {float(value)}" in m for m in messages), messages
    assert any("line 3" in m and f"{knob} = true" in m for m in messages), messages
    with pytest.raises(Exception, match="is a directory"):
        schedules_from_log(graph, tmp_path, "host", "host")


def test_lost_batches_are_not_measured_but_crashes_are():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        log = TuningLog(Path(d) / "t.jsonl")
        log.append(record(knobs={"oc_tile": 1}, status="lost", cycles=None,
                          detail="the batch lost its board or worker 3 times (KilledWorker: ...)"))
        log.append(record(knobs={"oc_tile": 2}, status="crash", cycles=None,           # a log from before "lost"
                          detail="the batch lost its board or worker 3 times (KilledWorker: ...)"))
        log.append(record(knobs={"oc_tile": 4}, status="crash", cycles=None, detail="HardFault"))
        log.append(record(knobs={"oc_tile": 8}, status="lost", cycles=None))
        log.append(record(knobs={"oc_tile": 8}, cycles=50))                             # lost, then measured
        assert log.measured("m4", "conv-a") == {knobs_id({"oc_tile": 4}), knobs_id({"oc_tile": 8})}
        assert log.lost("m4", "conv-a") == [{"oc_tile": 1}, {"oc_tile": 2}]
        assert "lost" in STATUSES and log.best("m4", "conv-a")["cycles"] == 50


# ---------------------------------------------------------------- fast batch builds (tinyc.tune.objects)


def test_cost_model_fast_matrix_predicts_as_the_pipeline():
    """predict() vectorizes the features itself (and caches them per candidate): the same numbers
    as the fitted DictVectorizer + trees pipeline, for seen and unseen candidates alike."""
    task = conv_task()
    rng = np.random.default_rng(0)
    train = [dict(k) for k in SPACE[::3]]
    model = CostModel(0).fit([(task, k, M4, true_cycles(task, k, rng)) for k in train])
    items = [(task, k, M4) for k in SPACE] + [(conv_task(C=8), SPACE[0], M55)]
    want = model._pipeline.predict([candidate_features(t, k, b) for t, k, b in items])
    from tinyc.tune.cost_model import _log_macs
    want = want + np.array([_log_macs(t) for t, _, _ in items])
    got = model.predict(items)
    assert np.allclose(got, want, rtol=0, atol=1e-12)
    assert np.array_equal(model.predict(items), got)  # the second time from the feature cache


def _generated_batch(n_layers=3, extra=0):
    """A generated batch (C sources as the tuner's generate_batch makes them) of gemm layers."""
    import tinyc.tune.bench as bench
    from tinyc.reference import run_graph
    from tinyc.schedule import default_schedules
    from tinyc.tune.tasks import extract_tasks

    graph = _gemm_graph()
    tasks = extract_tasks(graph, "host", default_schedules(graph, "host"))
    env = run_graph(graph, {graph.inputs[0]: np.ones(graph.tensor(graph.inputs[0]).shape, np.float32)},
                    keep_all=True)
    cands = [bench.Candidate(t.key, t.nodes[0], dict(t.default)) for t in tasks][:n_layers]
    cands += [bench.Candidate(tasks[0].key, tasks[0].nodes[0], dict(k)) for k in tasks[0].space[1:1 + extra]]
    batch = bench.build_batch_graph(graph, cands, env)
    return batch, bench.generate_batch(batch, "host")


def test_split_layers_moves_each_kernel_to_its_own_source():
    from tinyc.tune.objects import split_layers

    batch, gen = _generated_batch(extra=2)
    n = len(batch.candidates)
    files = split_layers(gen.files, "tune")
    assert files is not None
    main = files["tune.c"]
    assert not re.search(r"\blayer\d+_\w+\s*\(", main)  # no kernel (nor a call of one) left behind
    for j in range(n):
        src = files[f"tune_cand{j}.c"]
        assert len(re.findall(rf"\blayer{j}_\w+\s*\(", src)) == 3  # its definition and two callers
        assert f"tune_cand{j}_all(arena);" in main and f"(void)tune_cand{j}(arena);" in main
        block = src.split("\n\n", 1)[1].split(f"\nvoid tune_cand{j}_all(uint8_t *const arena);")[0]
        assert block.startswith(f"/* layer {j}: ") and gen.files["tune.c"].count(block) == 1  # verbatim
    assert set(files) == set(gen.files) | {f"tune_cand{j}.c" for j in range(n)} | {"tune_pch.h"}
    assert all(files[f"tune_cand{j}.c"].startswith("#include <tune_pch.h>\n") for j in range(n))
    # a dispatcher that does not look as expected is built as it is
    assert split_layers({**gen.files, "tune.c": gen.files["tune.c"].replace("/* Layer names:", "/* names:")}) is None
    assert split_layers({k: v for k, v in gen.files.items() if k != "tune.c"}) is None


def test_bake_inputs_puts_the_payload_in_the_image_and_loads_it_before_serving():
    from tinyc.tune.objects import bake_inputs

    main = ("static const tinyc_harness_io_t harness_inputs[2] = {{0, 0}, {0, 0}};\nint main(void)\n{\n"
            "    tinyc_port_init();\n    return tinyc_harness_serve(&harness_model);\n}\n")
    payload = bytes(range(256)) * 3 + b"\x07"
    new_main, src = bake_inputs(main, payload)
    assert new_main.index("tune_load_baked_inputs();") < new_main.index("return tinyc_harness_serve")
    assert f"extern const uint8_t tune_baked_inputs[{len(payload)}];" in new_main
    body = src.split("= {", 1)[1].split("};", 1)[0]
    assert bytes(int(v) for v in body.replace("\n", "").split(",")) == payload
    assert bake_inputs(main, b"") is None  # nothing to bake
    assert bake_inputs(main.replace("tinyc_harness_serve", "serve"), payload) is None  # not the harness expected


def test_remove_stale_keeps_this_batch_only(tmp_path):
    from tinyc.tune.objects import remove_stale

    for name in ("tune_cand0.c", "tune_cand1.c", "tune_cand12.c", "tune_inputs.c", "tune.c", "main.c"):
        (tmp_path / name).write_text("")
    remove_stale(tmp_path, ["tune_cand0.c", "tune_cand1.c", "tune.c"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["main.c", "tune.c", "tune_cand0.c", "tune_cand1.c"]


def test_object_cache_trims_the_least_recently_used_half(tmp_path):
    from tinyc.tune.objects import ObjectBuilder

    b = ObjectBuilder(tmp_path, max_objects=4)
    for i in range(6):
        for ext in (".o", ".su", ".ci"):
            (tmp_path / f"k{i}{ext}").write_text("")
        os.utime(tmp_path / f"k{i}.o", (1000 + i, 1000 + i))
    b._trim({"k0"})  # k0 is this build's: kept however old
    assert sorted(p.name for p in tmp_path.glob("*.o")) == ["k0.o", "k3.o", "k4.o", "k5.o"]
    assert not any(tmp_path.glob("k1.*")) and not any(tmp_path.glob("k2.*"))
    b._trim(set())  # at the limit: nothing to do
    assert len(list(tmp_path.glob("*.o"))) == 4
