"""int8 whole models: tinyc's post-training quantization and QDQ import against onnxruntime, and
the golden integer model against the generated C, bit for bit."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import tinyc
import tinyc.reference
from tinyc.errors import TinycError
from tinyc.ops.rounding import REQUANTIZING_OPS
from util import MLPERF, MLPERF_MODELS, REPO, ort_run

sys.path.insert(0, str(REPO / "examples" / "digits"))
DIGITS = REPO / "examples/digits/digits_cnn.onnx"


def _digits():
    from data import load_split
    return load_split()


def _ort_batch(model, name: str, x: np.ndarray) -> np.ndarray:
    return np.concatenate([ort_run(model, {name: xi[None]})[0] for xi in x])


def _golden_equals_c(graph, project, feeds: dict[str, np.ndarray], k: int = 3) -> None:
    """The int8 golden model (reference executor on the lowered graph) == the C, bit for bit."""
    got = tinyc.run(project, {n: v[:k] for n, v in feeds.items()})
    for i in range(k):
        ref = tinyc.reference.run_graph(graph, {n: v[i:i + 1] if v.shape[0] > 1 else v for n, v in feeds.items()})
        if not isinstance(ref, dict):
            ref = dict(zip([p for p, _ in graph.public_outputs()], ref))
        ref = {pub: ref[pub] if pub in ref else ref[internal] for pub, internal in graph.public_outputs()}
        for name, value in ref.items():
            np.testing.assert_array_equal(got[name][i], np.asarray(value).reshape(got[name][i].shape), err_msg=name)


def _int8_ops(graph) -> set[str]:
    return {n.op for n in graph.nodes}


# -- digits: tinyc's PTQ vs onnxruntime's quantize_static ------------------------------------------
@pytest.fixture(scope="module")
def digits_ort_qdq(tmp_path_factory):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    x_train = _digits()[0][:300]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{"input": xi[None]} for xi in x_train])

        def get_next(self):  # noqa: ANN201
            return next(self.it, None)

    out = tmp_path_factory.mktemp("ortq") / "digits_qdq.onnx"
    quantize_static(str(DIGITS), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return out


def test_digits_ptq_agrees_with_onnxruntime_quantize_static(tmp_path, digits_ort_qdq):
    x_train, _, x_test, y_test = _digits()
    calib = tmp_path / "calib.npz"
    np.savez(calib, input=x_train[:300])
    res = tinyc.compile(DIGITS, tmp_path / "q", quantize="int8", calib=calib, build=True)
    ops = _int8_ops(res.graph)
    assert {"QConv", "QMatMul"} <= ops, ops
    assert res.report["quantization"]["float_nodes"] == []
    got = tinyc.run(tmp_path / "q", {"input": x_test})["logits"]
    assert got.dtype == np.float32 and got.shape == (len(x_test), 10)
    ort_q = _ort_batch(digits_ort_qdq, "input", x_test)
    flt = _ort_batch(DIGITS, "input", x_test)
    agree = float((got.argmax(1) == ort_q.argmax(1)).mean())
    acc_int8, acc_float = float((got.argmax(1) == y_test).mean()), float((flt.argmax(1) == y_test).mean())
    print(f"digits: top-1 agreement tinyc int8 vs onnxruntime int8 {agree:.4f}; accuracy float {acc_float:.4f} "
          f"int8 {acc_int8:.4f}")
    assert agree >= 0.99
    assert acc_int8 >= acc_float - 0.01
    _golden_equals_c(res.graph, tmp_path / "q", {"input": x_test})
    # int8 weights are a quarter of the float ones (plus int32 biases / tables)
    float_res = tinyc.compile(DIGITS, tmp_path / "f")
    assert res.report["weights_bytes"] < 0.4 * float_res.report["weights_bytes"]


def test_digits_qdq_model_imported_as_given(tmp_path, digits_ort_qdq):
    _, _, x_test, _ = _digits()
    res = tinyc.compile(digits_ort_qdq, tmp_path / "q", build=True)
    assert {"QConv", "QMatMul"} <= _int8_ops(res.graph)
    assert res.report["quantization"]["mode"] == "qdq"
    got = tinyc.run(tmp_path / "q", {"input": x_test})["logits"]
    ref = _ort_batch(digits_ort_qdq, "input", x_test)
    agree = float((got.argmax(1) == ref.argmax(1)).mean())
    # the output grid's step: differences are counted in LSBs of the model's own output scale
    scale = float(res.graph.tensor(next(n.inputs[0] for n in res.graph.nodes if n.op == "DequantizeLinear"
                                         and n.outputs[0] in res.graph.outputs)).quant.scale)
    lsb = np.abs(got - ref) / scale
    print(f"digits QDQ: top-1 agreement {agree:.4f}; max diff {lsb.max():.2f} LSB, "
          f"{np.mean(lsb > 0.5):.4f} of logits differ")
    assert agree >= 0.99
    _golden_equals_c(res.graph, tmp_path / "q", {"input": x_test})


# -- MLPerf Tiny --------------------------------------------------------------------------------
def _anomaly_scores(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = x.reshape(len(x), -1), y.reshape(len(y), -1)
    return np.mean((x - y) ** 2, axis=1)


@pytest.mark.slow
@pytest.mark.parametrize("name", MLPERF_MODELS)
def test_mlperf_qdq_model_as_given(tmp_path, name):
    """The model's own scales, ONNX's rounding (half to even, once): with TFLite's double rounding
    ResNet-8 agreed on only 98/100 images, the 1-LSB differences compounding over nine convolutions."""
    folder = MLPERF / name
    res = tinyc.compile(folder / "model_int8_qdq.onnx", tmp_path / "m", build=True)
    q = res.report["quantization"]
    assert q["mode"] == "qdq" and q["int8_nodes"] > 0
    assert {n.attrs.get("rounding") for n in res.graph.nodes if n.op in REQUANTIZING_OPS} == {"half_even"}
    test = dict(np.load(folder / "test.npz"))
    got = next(iter(tinyc.run(tmp_path / "m", test).values()))
    ref = np.load(folder / "ref_int8.npz")["y"]
    assert got.shape == ref.shape
    if name == "mlperf_ad_fc_autoencoder":
        rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        print(f"{name}: relative error vs onnxruntime int8 {rel:.4f}; float ops {q['float_nodes']}")
        assert rel < 0.02
    else:
        agree = float((got.argmax(-1) == ref.argmax(-1)).mean())
        print(f"{name}: top-1 agreement vs onnxruntime int8 {agree:.4f}; max abs diff {np.abs(got - ref).max():.4f}; "
              f"float ops {q['float_nodes']}")
        assert agree >= 0.99
    _golden_equals_c(res.graph, tmp_path / "m", {res.graph.inputs[0]: test["x"]}, k=2)


def _ort_agreement(meta: dict, name: str) -> float:
    m = meta["metrics"]
    return m["score_corr_float_vs_int8qdq"] if name == "mlperf_ad_fc_autoencoder" else m["top1_agree_int8qdq_vs_float"]


#: Calibration method per model for tinyc's own PTQ (what the benchmark and docs quote).
PTQ_METHOD = {"mlperf_kws_dscnn": "minmax", "mlperf_vww_mobilenetv1_025": "minmax",
              "mlperf_ic_resnet8": "minmax", "mlperf_ad_fc_autoencoder": "mse"}


@pytest.mark.slow
@pytest.mark.parametrize("name", MLPERF_MODELS)
def test_mlperf_ptq_at_least_as_good_as_onnxruntime(tmp_path, name):
    folder = MLPERF / name
    meta = json.loads((folder / "meta.json").read_text())
    res = tinyc.compile(folder / "model.onnx", tmp_path / "m", quantize="int8", calib=folder / "inputs.npz",
                        calib_method=PTQ_METHOD[name], build=True)
    test = dict(np.load(folder / "test.npz"))
    got = next(iter(tinyc.run(tmp_path / "m", test).values()))
    ref = np.load(folder / "ref.npz")["y"]
    ours = (float(np.corrcoef(_anomaly_scores(test["x"], got), _anomaly_scores(test["x"], ref))[0, 1])
            if name == "mlperf_ad_fc_autoencoder" else float((got.argmax(-1) == ref.argmax(-1)).mean()))
    theirs = _ort_agreement(meta, name)
    print(f"{name}: tinyc int8 vs float {ours:.4f} (onnxruntime int8 vs float {theirs:.4f}); "
          f"float ops {[f['op'] for f in res.report['quantization']['float_nodes']]}")
    assert ours >= theirs - 1e-9


# -- float islands, reports, errors ----------------------------------------------------------------
def _island_model() -> onnx.ModelProto:
    r = np.random.default_rng(0)
    w1 = r.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    w2 = r.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("InstanceNormalization", ["r1", "s", "b"], ["n1"]),
             helper.make_node("Conv", ["n1", "w2"], ["y"])]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.ones(8, np.float32), "s"), numpy_helper.from_array(np.zeros(8, np.float32), "b")]
    g = helper.make_graph(nodes, "island", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_float_island_compiles_and_matches(tmp_path):
    model = _island_model()
    x = np.random.default_rng(1).normal(size=(40, 1, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", x=x.reshape(40, 1, 3, 8, 8)[:, 0])
    res = tinyc.compile(model, tmp_path / "q", quantize="int8", calib=tmp_path / "calib.npz", build=True)
    floats = res.report["quantization"]["float_nodes"]
    assert [f["op"] for f in floats] == ["InstanceNorm"] or any("Instance" in f["op"] for f in floats), floats
    assert "QConv" in _int8_ops(res.graph)
    assert "ops left in float: 1" in (tmp_path / "q" / "report.md").read_text()
    feeds = {"x": x[:4, 0]}
    got = tinyc.run(tmp_path / "q", feeds)["y"]
    ref = np.concatenate([ort_run(model, {"x": xi[None]})[0] for xi in feeds["x"]])
    # int8 error budget: a few output steps of the calibrated output range
    assert np.abs(got - ref).max() < 0.1 * np.abs(ref).max()
    _golden_equals_c(res.graph, tmp_path / "q", feeds, k=2)


@pytest.mark.parametrize("calib, message", [
    ({"a": np.zeros((4, 1, 3, 8, 8), np.float32), "b": np.zeros((4, 1, 3, 8, 8), np.float32)}, "lacks model input"),
    ({"x": np.zeros((4, 3, 9, 9), np.float32)}, "shape"),
    ({"x": np.zeros((0, 1, 3, 8, 8), np.float32)}, "no samples"),
])
def test_bad_calibration_data_is_a_clear_error(tmp_path, calib, message):
    with pytest.raises(TinycError, match=message):
        tinyc.compile(_island_model(), tmp_path / "q", quantize="int8", calib=calib)


def test_quantize_int8_without_calibration_is_a_usage_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tinyc", "compile", str(DIGITS), "-o", str(tmp_path / "o"),
                        "--quantize", "int8"], capture_output=True, text=True)
    assert r.returncode == 2 and "--calib" in r.stderr and "Traceback" not in r.stderr


def test_cli_quantize_exports_qdq_and_writes_report(tmp_path):
    x_train, y_train, _, _ = _digits()
    np.savez(tmp_path / "calib.npz", input=x_train[:100], labels=y_train[:100])
    r = subprocess.run([sys.executable, "-m", "tinyc", "quantize", str(DIGITS), "--calib", str(tmp_path / "calib.npz"),
                        "-o", str(tmp_path / "d_int8.onnx"), "--report", str(tmp_path / "q.md")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "q.md").read_text()
    for part in ("SNR", "top-1 vs labels", "weights (flash)", "arena (RAM)", "Calibrated ranges"):
        assert part in text, part
    qdq = onnx.load(tmp_path / "d_int8.onnx")
    assert any(n.op_type == "QuantizeLinear" for n in qdq.graph.node)
    out = ort_run(qdq, {"input": x_train[:1]})[0]
    assert out.shape == (1, 10)
    # and tinyc runs the exported model as given
    res = tinyc.compile(tmp_path / "d_int8.onnx", tmp_path / "c", build=True)
    assert res.report["quantization"]["mode"] == "qdq"


def test_quantization_report_bytes_are_the_compiled_reports(tmp_path):
    """The quantization report counts weights and arena from the graph and the memory plan, without
    rendering C: its numbers must stay those report.json gives for the same graphs on the host."""
    import copy

    from tinyc.api import prepare
    from tinyc.quantize.report import compare_float_int8

    x_train = _digits()[0]
    np.savez(tmp_path / "calib.npz", input=x_train[:50])
    _, quant = prepare(DIGITS, quantize="int8", calib=tmp_path / "calib.npz", progress=False)
    cmp = compare_float_int8(quant, lambda i: {"input": x_train[i : i + 1]}, 1, progress=False)
    for k, graph in enumerate((quant.float_graph, quant.graph)):
        report = tinyc.compile(copy.deepcopy(graph), tmp_path / f"g{k}").report
        assert (cmp.weights_bytes[k], cmp.arena_bytes[k]) == (report["weights_bytes"], report["arena_bytes"])
