"""The four MLPerf Tiny int8 .tflite models (the files TFLite Micro runs) through tinyc's TFLite
frontend: outputs bit-identical to TFLite Micro's own interpreter on the golden model, host C,
the emulated Cortex-M4 (mps2-an386) and Cortex-M55 (mps3-an547) boards, OpenCL, and after tuning."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tflite_micro")

import tinyc  # noqa: E402
from tests.tflite_models import tflm_run  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
NAMES = ["mlperf_kws_dscnn", "mlperf_vww_mobilenetv1_025", "mlperf_ic_resnet8", "mlperf_ad_fc_autoencoder"]


def _quantized_tests(name: str, n: int | None = None) -> tuple[Path, str, np.ndarray]:
    """(model, input name, the test inputs quantized with the model's input grid [N, *shape])."""
    path = MODELS / name / "tflm_int8.tflite"
    graph = tinyc.load(str(path))
    t = graph.tensor(graph.inputs[0])
    assert t.quant is not None
    s, zp = float(np.asarray(t.quant.scale).reshape(-1)[0]), int(np.asarray(t.quant.zero_point).reshape(-1)[0])
    x = np.load(MODELS / name / "test.npz")["x"][:n]
    q = np.clip(np.round(x / s) + zp, -128, 127).astype(np.int8).reshape((len(x), *t.shape))
    return path, graph.inputs[0], q


def _tflm(path: Path, q: np.ndarray) -> np.ndarray:
    buf = path.read_bytes()
    return np.stack([tflm_run(buf, [q[i]])[0] for i in range(len(q))])


@pytest.mark.parametrize("name", NAMES)
def test_golden_and_host_c_equal_tflm_on_every_test_input(tmp_path, name):
    from tinyc.reference import run_graph

    path, inp, q = _quantized_tests(name, 40 if "vww" in name else None)
    ref = _tflm(path, q)
    graph = tinyc.load(str(path))
    gold = np.stack([np.asarray(next(iter(run_graph(graph, {inp: q[i]}).values()))) for i in range(4)])
    assert np.array_equal(gold.reshape(ref[:4].shape), ref[:4])
    tinyc.compile(str(path), tmp_path / "host", target="host")
    got = next(iter(tinyc.run(tmp_path / "host", {inp: q}).values()))
    diff = np.abs(got.reshape(ref.shape).astype(int) - ref)
    assert diff.max() == 0, f"{int((diff > 0).sum())} outputs differ from TFLite Micro"
    manifest = json.loads((tmp_path / "host" / "tinyc.json").read_text())
    assert manifest["inputs"][0]["dtype"] == "int8" and manifest["outputs"][0]["dtype"] == "int8"
    assert manifest["inputs"][0]["quant"]["scale"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("board", ["mps2-an386", "mps3-an547"])
@pytest.mark.parametrize("name", NAMES)
def test_board_equals_tflm(tmp_path, board, name):
    """`validate --against tflm` on the emulated board: device == golden == TFLite Micro, float data
    quantized on the way in with the model's input grid."""
    path, inp, _ = _quantized_tests(name)
    n = 3 if "vww" in name else 8
    x = np.load(MODELS / name / "test.npz")["x"][:n].astype(np.float32)
    shape = tinyc.load(str(path)).tensor(inp).shape
    data = tmp_path / "data.npz"
    np.savez(data, **{inp: x.reshape((n, *shape))})
    tinyc.compile(str(path), tmp_path / "fw", board=board)
    v = tinyc.validate(tmp_path / "fw", str(data), against="tflm")
    assert v["reference"] == "tflm" and v["golden_ok"], v
    for entry in v["outputs"].values():
        assert entry["bit_exact_vs_golden"] and entry["bit_exact_vs_tflm"], entry


@pytest.mark.slow
def test_opencl_equals_tflm(tmp_path):
    from util import opencl_or_skip

    opencl_or_skip()
    for name in NAMES:
        path, inp, q = _quantized_tests(name, 4)
        ref = _tflm(path, q)
        tinyc.compile(str(path), tmp_path / name, target="opencl")
        got = next(iter(tinyc.run(tmp_path / name, {inp: q}).values()))
        assert np.array_equal(got.reshape(ref.shape), ref), name


@pytest.mark.slow
def test_tuned_schedules_stay_bit_exact(tmp_path):
    """Tune KWS on the M4 (a few trials), compile with the log, and still equal TFLite Micro."""
    from tinyc.tune.tuner import tune

    path, inp, q = _quantized_tests("mlperf_kws_dscnn", 6)
    log = tmp_path / "tune.jsonl"
    tune(str(path), board="mps2-an386", trials=8, log=log, work_dir=tmp_path / "work", progress=False)
    assert log.read_text().strip()
    tinyc.compile(str(path), tmp_path / "fw", board="mps2-an386", tuning_log=log)
    data = tmp_path / "q.npz"
    np.savez(data, **{inp: q})
    v = tinyc.validate(tmp_path / "fw", str(data), against="tflm")
    assert v["golden_ok"] and all(e["bit_exact_vs_tflm"] for e in v["outputs"].values())
