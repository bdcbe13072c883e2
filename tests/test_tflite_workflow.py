"""The verbs a user runs on a .tflite work as on ONNX: inspect, compile (host, OpenCL, library,
board), quantize a float .tflite with tinyc's PTQ, tune, profile — on real files, real compilers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tflite_micro")

import tinyc  # noqa: E402
import tinyc.api  # noqa: E402
from tests.tflite_models import Op, T, build, tflm_run  # noqa: E402

KWS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny" / "mlperf_kws_dscnn" / "tflm_int8.tflite"


def float_cnn(rng: np.random.Generator) -> bytes:
    """A small float32 classifier: CONV_2D (RELU) -> AVERAGE_POOL_2D -> RESHAPE -> FULLY_CONNECTED -> SOFTMAX."""
    w = rng.normal(0, 0.3, (8, 3, 3, 2)).astype(np.float32)
    fw = rng.normal(0, 0.3, (5, 8)).astype(np.float32)
    tensors = [
        T("x", (1, 12, 12, 2), "float32"),
        T("w", (8, 3, 3, 2), "float32", data=w),
        T("b", (8,), "float32", data=rng.normal(0, 0.1, 8).astype(np.float32)),
        T("c", (1, 12, 12, 8), "float32"),
        T("p", (1, 1, 1, 8), "float32"),
        T("shape", (2,), "int32", data=np.array([1, 8], np.int32)),
        T("f", (1, 8), "float32"),
        T("fw", (5, 8), "float32", data=fw),
        T("fb", (5,), "float32", data=np.zeros(5, np.float32)),
        T("l", (1, 5), "float32"),
        T("y", (1, 5), "float32"),
    ]
    ops = [
        Op("CONV_2D", ["x", "w", "b"], ["c"], {"padding": "SAME", "stride_h": 1, "stride_w": 1, "fused_activation_function": "RELU"}),
        Op("AVERAGE_POOL_2D", ["c"], ["p"], {"padding": "VALID", "filter_height": 12, "filter_width": 12, "stride_h": 1, "stride_w": 1}),
        Op("RESHAPE", ["p", "shape"], ["f"]),
        Op("FULLY_CONNECTED", ["f", "fw", "fb"], ["l"], {}),
        Op("SOFTMAX", ["l"], ["y"], {"beta": 1.0}),
    ]
    return build(tensors, ops, ["x"], ["y"])


def test_float_tflite_host_and_ptq(tmp_path):
    rng = np.random.default_rng(3)
    model = tmp_path / "cnn.tflite"
    model.write_bytes(float_cnn(rng))
    x = rng.normal(0, 1, (32, 1, 12, 12, 2)).astype(np.float32)
    tinyc.compile(str(model), tmp_path / "host", target="host")
    got = tinyc.run(tmp_path / "host", {"x": x[:4]})["y"]
    ref = np.stack([tflm_run(model.read_bytes(), [x[i]])[0] for i in range(4)])
    np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-5, atol=1e-6)
    # tinyc's PTQ on the float .tflite: report, then an int8 compile that runs
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=x[:, 0])
    q = tinyc.api.quantize(str(model), str(calib))
    assert q.model_path is None and "int8" in q.report_markdown.lower()
    tinyc.compile(str(model), tmp_path / "q", target="host", quantize="int8", calib=str(calib))
    got8 = tinyc.run(tmp_path / "q", {"x": x[:4]})["y"]
    assert np.abs(got8.reshape(ref.shape) - ref).max() < 0.1
    with pytest.raises(tinyc.errors.UsageError, match="needs an ONNX source"):
        tinyc.api.quantize(str(model), str(calib), output=tmp_path / "q.onnx")


def test_cli_inspect_compile_opencl_and_library(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tinyc", "inspect", str(KWS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "QConv" in r.stdout and "TflmSoftmax" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "tinyc", "compile", str(KWS), "--target", "opencl", "-o", str(tmp_path / "cl")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "cl" / "tinyc.json").is_file()
    r = subprocess.run(
        [sys.executable, "-m", "tinyc", "compile", str(KWS), "--board", "mps2-an386", "--format", "library",
         "-o", str(tmp_path / "lib"), "--build"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    header = next((tmp_path / "lib").rglob("tflm_int8.h")).read_text()
    assert "_IN_INPUT_1_SCALE 0.584702909f" in header and "_OUT_IDENTITY_ZERO_POINT (-128)" in header


@pytest.mark.slow
def test_profile_on_the_board(tmp_path):
    tinyc.compile(str(KWS), tmp_path / "fw", board="mps2-an386")
    p = tinyc.profile(tmp_path / "fw")
    text = json.dumps(p)
    assert "depthwise_conv_2d_1" in text and "conv_2d_0" in text
