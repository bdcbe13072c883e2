"""`tinyc validate` and `tinyc profile` on host and OpenCL folders, the error metrics every
target reports (RMSE, cosine, max/mean abs error per output and comparison), and `tinyc run`
giving dequantized outputs for an --io-dtype int8 model (int8 with raw).

Real gcc builds loaded through ctypes, onnxruntime as the independent reference, PoCL (or any
OpenCL device) for the OpenCL folder; the metric definitions are checked against numpy."""
from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

import tinyc
from tinyc.cli import main
from tinyc.numerics.metrics import accuracy, cosine_similarity, error_metrics, top1_agreement
from tinyc.quantize.io import to_float_output
from util import REPO

sys.path.insert(0, str(REPO / "examples" / "digits"))
from data import load_split  # noqa: E402

DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"
METRICS = {"rmse", "cosine", "max_abs_error", "mean_abs_error", "count", "top1_agreement", "values"}


# ------------------------------------------------------------------------------ the metric math

def test_metrics_against_numpy():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 10)).astype(np.float32)
    b = a + rng.normal(scale=0.1, size=a.shape).astype(np.float32)
    m = error_metrics(a, b)
    d = a.astype(np.float64) - b.astype(np.float64)
    assert m["rmse"] == pytest.approx(np.sqrt(np.mean(d * d)), rel=1e-12)
    assert m["max_abs_error"] == pytest.approx(np.abs(d).max(), rel=1e-12)
    assert m["mean_abs_error"] == pytest.approx(np.abs(d).mean(), rel=1e-12)
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    assert m["cosine"] == pytest.approx(x @ y / np.linalg.norm(x) / np.linalg.norm(y), rel=1e-12)
    assert m["count"] == 40
    # known values: orthogonal, opposite, parallel of another length
    assert cosine_similarity([1, 0], [0, 3]) == 0.0
    assert cosine_similarity([1, 2], [-2, -4]) == pytest.approx(-1.0)
    assert cosine_similarity([1, 2], [3, 6]) == pytest.approx(1.0)
    assert error_metrics([3.0, 4.0], [0.0, 0.0]) == {"rmse": pytest.approx(np.sqrt(12.5)), "cosine": 0.0,
                                                     "max_abs_error": 4.0, "mean_abs_error": 3.5, "count": 2}


def test_metrics_zero_vectors_int8_and_undefined_values():
    z = np.zeros(8, np.float32)
    assert error_metrics(z, z) == {"rmse": 0.0, "cosine": 1.0, "max_abs_error": 0.0, "mean_abs_error": 0.0,
                                   "count": 8}
    assert cosine_similarity(z, np.ones(8)) == 0.0
    # int8: no wrap-around (127 - (-128) is 255, not -1) and no overflow in the dot products
    a = np.array([127, -128, 127, -128], np.int8)
    b = np.array([-128, 127, -128, 127], np.int8)
    m = error_metrics(a, b)
    assert m["max_abs_error"] == 255.0 and m["mean_abs_error"] == 255.0 and m["rmse"] == 255.0
    assert m["cosine"] == pytest.approx(np.dot(a.astype(np.float64), b) / (np.linalg.norm(a.astype(float))
                                                                              * np.linalg.norm(b.astype(float))))
    big = np.full(1000, 3e38, np.float32)
    assert cosine_similarity(big, big / 2) == pytest.approx(1.0)  # scaled first: no overflow to inf
    # NaN and empty arrays: None (valid JSON), never NaN
    n = error_metrics(np.array([np.nan, 1.0]), np.array([0.0, 1.0]))
    assert n["rmse"] is None and n["cosine"] is None and n["max_abs_error"] is None
    assert error_metrics(np.zeros(0), np.zeros(0))["rmse"] is None
    json.dumps(n, allow_nan=False)
    assert top1_agreement([[0, 1], [1, 0]], [[0, 2], [0, 2]]) == 0.5
    assert top1_agreement([1.0, 2.0], [2.0, 1.0]) == 0.0 and top1_agreement([[1.0]], [[2.0]]) is None
    assert accuracy([[0, 1], [1, 0], [1, 0]], [1, 0, 1]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="3 output values with 2"):
        error_metrics(np.zeros(3), np.zeros(2))


# ------------------------------------------------------------------------------ host folders

@pytest.fixture(scope="module")
def data(tmp_path_factory):
    x_train, _, x_test, y_test = load_split()
    d = tmp_path_factory.mktemp("vdata")
    np.savez(d / "calib.npz", input=x_train[:64])
    np.savez(d / "test.npz", input=x_test[:16].astype(np.float32), labels=y_test[:16])
    return d


@pytest.fixture(scope="module")
def host_float(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "f"
    tinyc.compile(DIGITS, out, build=True)
    return out


@pytest.fixture(scope="module")
def host_int8(tmp_path_factory, data):
    """The int8 digits model with int8 I/O (--io-dtype int8)."""
    out = tmp_path_factory.mktemp("hq") / "q"
    tinyc.compile(DIGITS, out, quantize="int8", calib=data / "calib.npz", io_dtype="int8", build=True)
    return out


def _check_metrics(m, exact=False):
    assert METRICS <= set(m), m
    assert m["count"] == 16 * 10
    assert 0.99 < m["cosine"] <= 1.0 and 0.0 <= m["mean_abs_error"] <= m["max_abs_error"]
    assert m["rmse"] <= m["max_abs_error"] + 1e-12
    if exact:
        assert m["rmse"] == 0.0 and m["max_abs_error"] == 0.0 and m["cosine"] == 1.0


def test_validate_host_float_model(host_float, data, capsys):
    v = tinyc.validate(host_float, data / "test.npz")
    json.dumps(v, allow_nan=False)  # what --json writes: strict JSON
    assert v["target"] == "host" and v["board"] == "host" and v["reference"] == "onnxruntime"
    assert v["samples"] == 16 and v["units"] == "ns" and v["per_inference"] > 0
    e = v["outputs"]["logits"]
    assert v["golden_ok"] and e["golden_ok"] and not v["integer"]
    _check_metrics(e["vs_golden"])
    _check_metrics(e["vs_onnxruntime"])
    assert e["vs_golden"]["max_abs_error"] < 1e-4 and e["vs_onnxruntime"]["max_abs_error"] < 1e-4
    assert e["vs_onnxruntime"]["top1_agreement"] == 1.0 and e["accuracy"] >= 0.9
    # the CLI prints the metrics and writes the same result as JSON; the reports gain it
    assert main(["validate", str(host_float), "--data", str(data / "test.npz")]) == 0
    out = capsys.readouterr().out
    assert "validated 'digits_cnn' on host: 16 samples" in out
    assert re.search(r"vs\s+RMSE\s+cosine\s+max\|err\|\s+mean\|err\|\s+top-1", out)
    assert re.search(r"golden model\s+\S+\s+1\.000000", out) and re.search(r"onnxruntime\s+\S+\s+1\.000000", out)
    report = json.loads((host_float / "report.json").read_text())
    assert report["validation"]["outputs"]["logits"]["vs_golden"]["count"] == 160


def test_validate_host_int8_io_model(host_int8, data, tmp_path):
    v = tinyc.validate(host_int8, data / "test.npz", output=tmp_path / "y.npz")
    json.dumps(v, allow_nan=False)
    e = v["outputs"]["logits"]
    assert v["integer"] and v["golden_ok"] and e["bit_exact_vs_golden"]
    _check_metrics(e["vs_golden"], exact=True)
    _check_metrics(e["vs_onnxruntime"])
    assert e["values"] == "dequantized" and e["vs_golden"]["values"] == "float32"
    assert e["vs_onnxruntime"]["top1_agreement"] >= 0.9 and e["accuracy"] >= 0.9
    # the metrics are on what the outputs stand for: vs onnxruntime a few quantization steps at most
    scale = json.loads((host_int8 / "tinyc.json").read_text())["outputs"][0]["quant"]["scale"]
    assert 0 < e["vs_onnxruntime"]["max_abs_error"] < 20 * scale
    saved = np.load(tmp_path / "y.npz")["logits"]
    assert saved.dtype == np.float32 and saved.shape == (16, 10)
    r = tinyc.validate(host_int8, data / "test.npz", raw=True, output=tmp_path / "r.npz")
    er = r["outputs"]["logits"]
    assert r["raw"] and er["values"] == "int8" and er["vs_golden"]["values"] == "int8"
    assert er["bit_exact_vs_golden"] and er["vs_golden"]["rmse"] == 0.0
    spec = json.loads((host_int8 / "tinyc.json").read_text())["outputs"][0]
    raw = np.load(tmp_path / "r.npz")["logits"]
    assert raw.dtype == np.int8
    np.testing.assert_array_equal(to_float_output(spec, raw), saved)


def test_run_int8_io_model_gives_float_unless_raw(host_int8, data, tmp_path, capsys):
    x = np.load(data / "test.npz")["input"][:3]
    y = tinyc.run(host_int8, {"input": x}, output=tmp_path / "y.npz")["logits"]
    q = tinyc.run(host_int8, {"input": x}, raw=True)["logits"]
    assert y.dtype == np.float32 and q.dtype == np.int8 and y.shape == q.shape == (3, 10)
    spec = json.loads((host_int8 / "tinyc.json").read_text())["outputs"][0]
    np.testing.assert_array_equal(y, to_float_output(spec, q))
    np.testing.assert_array_equal(np.load(tmp_path / "y.npz")["logits"], y)
    # the CLI: float by default, int8 with --raw
    assert main(["run", str(host_int8), "--data", str(data / "test.npz")]) == 0
    assert "logits: float32[16, 10]" in capsys.readouterr().out
    assert main(["run", str(host_int8), "--data", str(data / "test.npz"), "--raw"]) == 0
    assert "logits: int8[16, 10]" in capsys.readouterr().out


def test_profile_host_numbers_layers_as_the_code(host_float, data):
    p = tinyc.profile(host_float, {"input": np.load(data / "test.npz")["input"][:1]}, repeat=5)
    json.dumps(p, allow_nan=False)
    header = (host_float / f"{json.loads((host_float / 'tinyc.json').read_text())['prefix']}.h").read_text()
    nlayers = int(re.search(r"#define \w+_NUM_LAYERS (\d+)", header).group(1))
    assert p["board"] == "host" and p["units"] == "ns" and p["repeat"] == 5
    assert [layer["index"] for layer in p["layers"]] == list(range(nlayers))
    assert all(layer["ns"] > 0 for layer in p["layers"]) and p["run_total"] > 0
    assert sum(layer["share"] for layer in p["layers"]) == pytest.approx(1.0)
    # MACs per layer are report.json's for that code layer ("kernel")
    report = json.loads((host_float / "report.json").read_text())
    want = {}
    for layer in report["layers"]:
        if layer["kernel"] is not None:
            want[layer["kernel"]] = want.get(layer["kernel"], 0) + layer["macs"]
    assert {layer["index"]: layer["macs"] for layer in p["layers"]} == want
    assert p["macs"] == report["macs"]
    assert report["profile"]["layers"][0]["index"] == 0
    from tinyc.device.runner import profile_table
    table = profile_table(p)
    assert "MACs/ns" in table and "RUN (one inference)" in table


# ------------------------------------------------------------------------------ OpenCL

def test_validate_and_profile_opencl_folder(tmp_path, data):
    from util import opencl_or_skip
    opencl_or_skip()
    out = tmp_path / "cl"
    tinyc.compile(DIGITS, out, target="opencl", quantize="int8", calib=data / "calib.npz", io_dtype="int8")
    v = tinyc.validate(out, data / "test.npz")
    json.dumps(v, allow_nan=False)
    e = v["outputs"]["logits"]
    assert v["target"] == "OpenCL" and v["board"].startswith("opencl:") and v["per_inference"] > 0
    assert v["golden_ok"] and e["bit_exact_vs_golden"]
    _check_metrics(e["vs_golden"], exact=True)
    _check_metrics(e["vs_onnxruntime"])
    assert e["accuracy"] >= 0.9
    p = tinyc.profile(out, repeat=3)
    report = json.loads((out / "report.json").read_text())
    kernels = {layer["kernel"] for layer in report["layers"] if layer["kernel"] is not None}
    assert {layer["index"] for layer in p["layers"]} <= kernels  # the code-layer numbering
    assert all(layer["ns"] > 0 for layer in p["layers"])


# ------------------------------------------------------------------------------ a board

def test_validate_on_a_board_reports_the_same_metrics(tmp_path, data):
    """The board's validate (QEMU, serial harness) gives the same metric fields as the host's."""
    import shutil
    if shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    out = tmp_path / "fw"
    tinyc.compile(DIGITS, out, board="mps2-an386", quantize="int8", calib=data / "calib.npz", io_dtype="int8")
    v = tinyc.validate(out, data / "test.npz")
    json.dumps(v, allow_nan=False)
    e = v["outputs"]["logits"]
    assert v["board"] == "mps2-an386" and v["units"] == "instructions" and v["golden_ok"]
    _check_metrics(e["vs_golden"], exact=True)
    _check_metrics(e["vs_onnxruntime"])
    assert e["values"] == "dequantized" and e["accuracy"] >= 0.9



def test_validate_host_int8_tflite_against_tflm(tmp_path):
    """A full-integer .tflite on the host: == golden == TFLite Micro bit for bit; its outputs stay
    int8 (the source model's own interface), and so do the metrics."""
    pytest.importorskip("tflite_micro")
    from util import MLPERF
    path = MLPERF / "mlperf_ad_fc_autoencoder" / "tflm_int8.tflite"
    tinyc.compile(str(path), tmp_path / "t", build=True)
    spec = json.loads((tmp_path / "t" / "tinyc.json").read_text())["inputs"][0]
    x = np.load(MLPERF / "mlperf_ad_fc_autoencoder" / "test.npz")["x"][:3].astype(np.float32)
    v = tinyc.validate(tmp_path / "t", {spec["name"]: x.reshape((3, *spec["shape"]))}, against="tflm")
    json.dumps(v, allow_nan=False)
    (e,) = v["outputs"].values()
    assert v["reference"] == "tflm" and v["golden_ok"] and e["bit_exact_vs_tflm"] and e["vs_tflm"]["bit_exact"]
    assert e["values"] == "int8" and e["vs_tflm"]["values"] == "int8"
    assert e["vs_tflm"]["rmse"] == 0.0 and e["vs_tflm"]["cosine"] == 1.0 and e["vs_golden"]["max_abs_error"] == 0.0
    got = tinyc.run(tmp_path / "t", {spec["name"]: x.reshape((3, *spec["shape"]))})
    assert next(iter(got.values())).dtype == np.int8
