"""--io-dtype int8: a quantized model that takes and gives int8 (as TFLite Micro's int8 models do).

Checked on the host build (real gcc, ctypes): the int8 outputs are the float-I/O model's outputs
before its last Dequantize, the arena loses the float input, float data is quantized on the host
with the golden QuantizeLinear, and misuse is refused with the tensor named."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tinyc
import tinyc.reference
from tinyc.errors import UsageError
from tinyc.quantize.io import to_float_output, to_model_input
from util import MLPERF, make_model
from onnx import helper

AD = MLPERF / "mlperf_ad_fc_autoencoder"


def _manifest(folder):
    return json.loads((folder / "tinyc.json").read_text())


def test_int8_io_equals_float_io_before_the_last_dequantize(tmp_path):
    x = np.load(AD / "test.npz")["x"][:5]
    f = tinyc.compile(AD / "model_int8_qdq.onnx", tmp_path / "f", build=True)
    q = tinyc.compile(AD / "model_int8_qdq.onnx", tmp_path / "q", build=True, io_dtype="int8")
    spec_in, spec_out = _manifest(tmp_path / "q")["inputs"][0], _manifest(tmp_path / "q")["outputs"][0]
    assert spec_in["dtype"] == "int8" and spec_out["dtype"] == "int8"
    assert spec_in["quant"]["scale"] > 0 and spec_out["quant"]["scale"] > 0
    # the float input (640 float32) no longer sits in the arena
    assert q.report["arena_bytes"] <= f.report["arena_bytes"] - 640 * 4 + 640
    yf = tinyc.run(tmp_path / "f", {"x": x})
    yq = tinyc.run(tmp_path / "q", {"x": x}, raw=True)  # the int8 values themselves
    (name, got), = yq.items()
    assert got.dtype == np.int8
    np.testing.assert_array_equal(to_float_output(spec_out, got), yf[name])
    # by default `run` gives what they stand for: the float-I/O model's outputs
    np.testing.assert_array_equal(tinyc.run(tmp_path / "q", {"x": x})[name], yf[name])
    # int8 data passes through untouched, and the golden graph agrees bit for bit
    xq = np.stack([to_model_input(spec_in, x[k:k + 1].reshape(spec_in["shape"])) for k in range(len(x))])
    assert xq.dtype == np.int8
    np.testing.assert_array_equal(tinyc.run(tmp_path / "q", {"x": xq}, raw=True)[name].reshape(got.shape), got)
    g = q.graph
    gold = tinyc.reference.run_graph(g, {g.inputs[0]: xq[0]})
    np.testing.assert_array_equal(np.asarray(next(iter(gold.values()))).reshape(got[0].shape), got[0])


def test_host_quantization_is_the_models_own():
    """Float data given to an int8 input is quantized exactly as the model's QuantizeLinear would."""
    spec = {"name": "x", "dtype": "int8", "shape": [6], "quant": {"scale": 0.5, "zero_point": -3}}
    x = np.array([0.25, 0.75, -0.25, 1000.0, -1000.0, 1.0], np.float32)
    np.testing.assert_array_equal(to_model_input(spec, x), [-3, -1, -3, 127, -128, -1])  # half to even
    with pytest.raises(UsageError, match="input 'y' is int8 without a quantization grid"):
        to_model_input({"name": "y", "dtype": "int8", "shape": [1]}, np.zeros(1, np.float32))


def test_int8_io_needs_an_int8_model(tmp_path):
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 4])], [("y", [1, 4])])
    with pytest.raises(UsageError, match="--io-dtype int8 needs an int8 model"):
        tinyc.compile(m, tmp_path / "o", io_dtype="int8")
    with pytest.raises(UsageError, match="--io-dtype must be one of float, int8"):
        tinyc.compile(m, tmp_path / "o", io_dtype="int16")


def test_float_input_use_cannot_become_int8(tmp_path):
    """A QDQ model's input without a grid, read by a float op, is refused with its name and the node."""
    m = make_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
                    helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
                    helper.make_node("Div", ["xd", "a"], ["y"])],
                   [("x", [1, 4]), ("a", [1, 4])], [("y", [1, 4])], {"s": np.float32(0.1), "z": np.int8(0)})
    with pytest.raises(UsageError, match="input 'a' cannot become int8: node '.*' \\(Div\\) reads it in float"):
        tinyc.compile(m, tmp_path / "o", io_dtype="int8")


def test_float_output_cannot_become_int8(tmp_path):
    """A QDQ model whose output has no grid (its last MatMul stays float) cannot give int8."""
    w = np.random.default_rng(0).normal(size=(4, 4)).astype(np.float32)
    m = make_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
                    helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
                    helper.make_node("MatMul", ["xd", "w"], ["y"])],
                   [("x", [1, 4])], [("y", [1, 4])], {"w": w, "s": np.float32(0.1), "z": np.int8(0)})
    with pytest.raises(UsageError, match="output 'y' is computed in float by node 'MatMul_2'"):
        tinyc.compile(m, tmp_path / "o", io_dtype="int8")


def test_cli_io_dtype(tmp_path, capsys):
    from tinyc.cli import main
    assert main(["compile", str(AD / "model_int8_qdq.onnx"), "-o", str(tmp_path / "o"), "--io-dtype", "int8"]) == 0
    assert _manifest(tmp_path / "o")["inputs"][0]["dtype"] == "int8"
