"""Tuning and profiling on the OpenCL target, on a real OpenCL driver (PoCL's CPU device in CI):
candidates timed by event profiling, checked against the golden model, logged under the device's
name; a compile with the log stays exact; `tinyc profile` reports per-kernel device times.
Skipped only where pyopencl or an OpenCL device is absent."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from util import opencl_or_skip

pyopencl = opencl_or_skip()

import tinyc  # noqa: E402
import tinyc.reference  # noqa: E402
from tinyc.tune import bench as bench_mod  # noqa: E402
from tinyc.tune.log import TuningLog, knobs_id  # noqa: E402
from tinyc.tune.tuner import result_table, tune  # noqa: E402
from util import REPO, ort_run  # noqa: E402

sys.path.insert(0, str(REPO / "examples" / "digits"))
DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    from data import load_split
    x_train, _, x_test, _ = load_split()
    d = tmp_path_factory.mktemp("cl_tune_digits")
    np.savez(d / "calib.npz", input=x_train[:64])
    np.savez(d / "test.npz", input=x_test[:8])
    return d


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _int8(d):
    return dict(quantize="int8", calib=d / "calib.npz")


def test_int8_tuning_finds_at_least_default_and_compiles_exact(tmp_path, digits):
    log = tmp_path / "t.jsonl"
    res = tune(DIGITS, target="opencl", trials=10, log=log, batch_size=6, work_dir=tmp_path / "w",
               progress=False, **_int8(digits))
    print(result_table(res))
    assert res.trials == 10 and res.units == "ns" and res.target == "opencl"
    recs = _lines(log)
    assert recs and all(r["board"].startswith("opencl:") and r["target"] == "opencl" for r in recs)
    assert all(r["status"] == "ok" for r in recs), [r for r in recs if r["status"] != "ok"]
    ids = [(r["key"], knobs_id(r["knobs"])) for r in recs]
    assert len(ids) == len(set(ids))
    assert res.tuned_total <= res.default_total
    # resume: nothing measured again, nothing built
    again = tune(DIGITS, target="opencl", trials=0, log=log, work_dir=tmp_path / "w2", progress=False, **_int8(digits))
    assert again.trials == 0 and again.builds == 0 and len(_lines(log)) == len(recs)
    # the compile takes the log's best per layer and stays bit-exact with the golden model
    out = tmp_path / "cl"
    r = tinyc.compile(DIGITS, out, target="opencl", tuning_log=log, **_int8(digits))
    assert r.report["tuned_layers"]
    x = np.load(digits / "test.npz")["input"]
    y = tinyc.run(out, {"input": x})
    spec = json.loads((out / "tinyc.json").read_text())["inputs"][0]
    from tinyc.quantize.io import to_model_input
    g = r.graph
    for k in range(len(x)):
        gold = tinyc.reference.run_graph(g, {g.inputs[0]: to_model_input(spec, x[k:k + 1].reshape(spec["shape"]))})
        np.testing.assert_array_equal(np.asarray(gold["logits"]).reshape(-1), y["logits"][k].reshape(-1))


def test_float_tuning_compiles_within_onnxruntime_tolerance(tmp_path, digits):
    log = tmp_path / "t.jsonl"
    res = tune(DIGITS, target="opencl", trials=6, log=log, batch_size=6, work_dir=tmp_path / "w", progress=False)
    assert res.tuned_total <= res.default_total
    assert all(r["status"] == "ok" for r in _lines(log))
    out = tmp_path / "cl"
    r = tinyc.compile(DIGITS, out, target="opencl", tuning_log=log)
    assert r.report["tuned_layers"]
    x = np.load(digits / "test.npz")["input"]
    y = tinyc.run(out, {"input": x})
    for k in range(len(x)):
        ref = ort_run(DIGITS, {"input": x[k:k + 1]})
        want = ref[0]
        np.testing.assert_allclose(y["logits"][k].reshape(-1), want.reshape(-1), rtol=1e-4, atol=1e-4)


def test_wrong_candidate_is_recorded_wrong(tmp_path, digits, monkeypatch):
    """A candidate whose output differs (its output zero point shifted) is "wrong", never a speed."""
    real = bench_mod.build_batch_graph

    def sabotage(graph, candidates, env):
        batch = real(graph, candidates, env)
        if len(batch.graph.nodes) > 1:
            node = batch.graph.nodes[1]
            node.attrs = dict(node.attrs, y_zp=int(node.attrs["y_zp"]) + 3)
        return batch

    monkeypatch.setattr("tinyc.tune.tuner.build_batch_graph", sabotage)
    log = tmp_path / "t.jsonl"
    tune(DIGITS, target="opencl", trials=3, log=log, batch_size=6, work_dir=tmp_path / "w", progress=False,
         **_int8(digits))
    recs = _lines(log)
    wrong = [r for r in recs if r["status"] == "wrong"]
    assert wrong and all("differ from the golden model" in r["detail"] for r in wrong)
    tlog = TuningLog(log)
    for r in wrong:
        b = tlog.best(r["board"], r["key"])
        assert b is None or knobs_id(b["knobs"]) != knobs_id(r["knobs"])


def test_compile_with_log_of_another_device_needs_device(tmp_path, digits):
    log = tmp_path / "t.jsonl"
    rec = {"board": "opencl:dev A", "target": "opencl", "key": "k", "op": "QConv", "knobs": {}, "cycles": 1.0,
           "status": "ok"}
    log.write_text(json.dumps(rec) + "\n" + json.dumps(dict(rec, board="opencl:dev B")) + "\n")
    with pytest.raises(tinyc.errors.UsageError, match="2 OpenCL devices"):
        tinyc.compile(DIGITS, tmp_path / "o", target="opencl", tuning_log=log)


def test_profile_cli_reports_kernel_times(tmp_path, digits):
    out = tmp_path / "cl"
    tinyc.compile(DIGITS, out, target="opencl", **_int8(digits))
    js = tmp_path / "p.json"
    p = subprocess.run([sys.executable, "-m", "tinyc", "profile", str(out), "--input", str(digits / "test.npz"),
                        "--repeat", "5", "--json", str(js)], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert "OpenCL event profiling" in p.stdout and "RUN (one inference)" in p.stdout
    prof = json.loads(js.read_text())
    kernels = json.loads((out / "tinyc.json").read_text())["opencl"]["kernels"]
    report = json.loads((out / "report.json").read_text())
    assert len(prof["layers"]) == len(kernels) and prof["units"] == "ns"
    assert prof["macs"] == report["macs"]
    assert all(layer["ns"] > 0 for layer in prof["layers"])
    # kernels run back to back in one queue: their sum cannot exceed the span of the inference
    assert prof["layers_total"] <= prof["run_total"] * 1.001
    assert abs(sum(layer["share"] for layer in prof["layers"]) - 1.0) < 1e-6


def test_tune_cli_opencl(tmp_path, digits):
    log = tmp_path / "t.jsonl"
    p = subprocess.run([sys.executable, "-m", "tinyc", "tune", str(DIGITS), "--target", "opencl", "--trials", "2",
                        "--batch-size", "4", "--log", str(log), "--work-dir", str(tmp_path / "w")],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert "tuned on opencl:" in p.stdout and "counts are ns" in p.stdout
    bad = subprocess.run([sys.executable, "-m", "tinyc", "tune", str(DIGITS), "--target", "opencl", "--board",
                          "mps2-an386", "--log", str(log)], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode != 0 and "--board is for microcontrollers" in bad.stderr
