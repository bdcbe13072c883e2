"""TopK and the index / integer ops (GatherND, ScatterND, TensorScatter, OneHot, Compress,
ReverseSequence, CumProd, Bitwise*, BitCast, Det, MatMulInteger, ConvInteger,
DynamicQuantizeLinear, NonZero/Unique): a real classifier ending in Softmax -> TopK (float vs
onnxruntime, int8 vs float, int8 golden vs C, int8 on the emulated Cortex-M4), and the ops
through real gcc against onnxruntime or onnx's reference evaluator (fixed seeds). Many ops share
one model so each build covers many cases."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tinyc
import tinyc.reference
from tinyc.errors import UnsupportedError
from util import REPO, inferred_model, ort_run, sanitized_project

sys.path.insert(0, str(REPO / "examples" / "digits"))
DIGITS = REPO / "examples/digits/digits_cnn.onnx"
HAVE_QEMU = shutil.which("qemu-system-arm") is not None and shutil.which("arm-none-eabi-gcc") is not None
n = helper.make_node


def _c(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


# -- a classifier whose outputs are TopK(values, indices) -----------------------------------------
def _topk_classifier(path: Path) -> Path:
    """The digits CNN (logits) -> Softmax -> TopK k=3: outputs top_p [1, 3], top_i [1, 3] int64."""
    m = onnx.load(DIGITS)
    g = m.graph
    g.node.append(n("Softmax", ["logits"], ["probs"], axis=-1))
    g.initializer.append(_c("k", np.array([3], np.int64)))
    g.node.append(n("TopK", ["probs", "k"], ["top_p", "top_i"], axis=-1))
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info("top_p", TensorProto.FLOAT, [1, 3]),
                     helper.make_tensor_value_info("top_i", TensorProto.INT64, [1, 3])])
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    from data import load_split
    d = tmp_path_factory.mktemp("topk")
    x_train, _, x_test, _ = load_split()
    np.savez(d / "calib.npz", input=x_train[:300])
    return _topk_classifier(d / "topk.onnx"), d / "calib.npz", x_test


@pytest.fixture(scope="module")
def float_outputs(tmp_path_factory, classifier):
    """The float C model's outputs on the test images (compiled once for the module)."""
    model, _, x = classifier
    out = tmp_path_factory.mktemp("topk_f") / "f"
    tinyc.compile(model, out)
    return tinyc.run(out, {"input": x})


def test_topk_classifier_float_matches_onnxruntime(classifier, float_outputs):
    model, _, x = classifier
    got = float_outputs
    ref = [np.concatenate(v) for v in zip(*(ort_run(model, {"input": xi[None]}) for xi in x))]
    rel = np.abs(got["top_p"] - ref[0]).max() / np.abs(ref[0]).max()
    assert rel < 1e-4, rel
    np.testing.assert_array_equal(got["top_i"], ref[1])
    assert (np.diff(got["top_p"], axis=1) <= 0).all()  # sorted, largest first


def test_topk_classifier_int8(tmp_path, classifier, float_outputs):
    """TopK runs on the int8 softmax (its values keep the input's grid: no float island, no
    requantization); top-1 agrees with the float model; the golden model equals the C."""
    model, calib, x = classifier
    ref = float_outputs
    res = tinyc.compile(model, tmp_path / "q", quantize="int8", calib=calib)
    g = res.graph
    topk = next(nd for nd in g.nodes if nd.op == "TopK")
    src, val = g.tensor(topk.inputs[0]), g.tensor(topk.outputs[0])
    assert src.dtype == val.dtype == "int8" and g.tensor(topk.outputs[1]).dtype == "int64"
    assert (val.quant.scale, val.quant.zero_point) == (src.quant.scale, src.quant.zero_point)
    assert not [nd for nd in g.nodes if nd.op == "QRequantize"]
    got = tinyc.run(tmp_path / "q", {"input": x})
    agree = (got["top_i"][:, 0] == ref["top_i"][:, 0]).mean()
    assert agree >= 0.99, agree
    for i in range(4):  # golden (reference executor on the int8 graph) == C, bit for bit
        gold = tinyc.reference.run_graph(g, {"input": x[i:i + 1]})
        for name in ("top_p", "top_i"):
            np.testing.assert_array_equal(got[name][i], np.asarray(gold[name]).reshape(got[name][i].shape))


def test_topk_classifier_qdq_export_matches_onnxruntime(tmp_path, classifier):
    """The QDQ export puts TopK's values on its input's grid (as onnxruntime's quantizer does);
    imported back, tinyc's int8 TopK picks what onnxruntime picks on that QDQ model. (The values
    may differ by a few steps of the 1/255 grid: tinyc's int8 Softmax is an integer kernel, the
    QDQ model's a float one between Dequantize and Quantize.)"""
    import tinyc.api
    model, calib, x = classifier
    qdq = tmp_path / "topk_qdq.onnx"
    tinyc.api.quantize(model, calib, qdq, progress=False)
    res = tinyc.compile(qdq, tmp_path / "q")
    assert "TopK" in [nd.op for nd in res.graph.nodes]
    got = tinyc.run(tmp_path / "q", {"input": x[:64]})
    ref = [np.concatenate(v) for v in zip(*(ort_run(qdq, {"input": xi[None]}) for xi in x[:64]))]
    np.testing.assert_array_equal(got["top_i"], ref[1])
    np.testing.assert_allclose(got["top_p"], ref[0], atol=5 / 255)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_QEMU, reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_topk_classifier_int8_on_cortex_m4(tmp_path, classifier):
    model, calib, x = classifier
    out = tmp_path / "fw"
    tinyc.compile(model, out, board="mps2-an386", quantize="int8", calib=calib, build=True)
    v = tinyc.validate(out, {"input": x[:16]})
    assert v["integer"] and v["samples"] == 16, v
    assert all(o["bit_exact_vs_golden"] for o in v["outputs"].values()), v["outputs"]
    assert v["units"] == "instructions" and v["per_inference"] > 10_000


# -- the ops through gcc ---------------------------------------------------------------------------
def _model(nodes, feeds, outs, inits=(), opset=18) -> onnx.ModelProto:
    return inferred_model(nodes, feeds, outs, inits, opset=opset, ir_version=10, name="t")


def _compare(got: dict[str, np.ndarray], exp: dict[str, np.ndarray], what: str) -> None:
    for name, e in exp.items():
        g = got[name]
        assert g.shape == e.shape, f"{name} ({what}): shape {g.shape} != {e.shape}"
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=f"{name} ({what})")
        else:
            assert g.dtype == e.dtype, f"{name} ({what}): dtype {g.dtype} != {e.dtype}"
            np.testing.assert_array_equal(g, e, err_msg=f"{name} ({what})")


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp: Path, exp: dict[str, np.ndarray]) -> None:
    """numpy reference and the C (built under ASan + UBSan, strict C99) against `exp`."""
    _compare(tinyc.reference.run_graph(tinyc.load(model), feeds), exp, "numpy reference")
    graph = tinyc.compile(model, tmp / "p").graph
    _compare(sanitized_project(tmp / "p", graph, feeds, tmp), exp, "C")


def _index_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    r = np.random.default_rng(3)
    x = r.integers(-3, 4, (3, 5, 4)).astype(np.float32)  # many ties
    data = r.standard_normal((2, 3, 4)).astype(np.float32)
    gnd = np.array([[[1, -1]], [[0, 2]]], np.int64)  # batch_dims 1: [2, 1, 2] tuples into (3, 4)
    snd_i = np.array([[1, -1], [0, 0], [1, 2]], np.int64)  # duplicate-free tuples into (2, 3)
    snd_u = r.standard_normal((3, 4)).astype(np.float32)
    hot = np.array([[0, 3, -1], [7, -4, 2]], np.int64)
    lens = np.array([4, 1, 0], np.int64)
    nodes = [
        n("TopK", ["x", "k2"], ["tk_v", "tk_i"], axis=1, largest=0),  # inner > 1, smallest, ties
        n("TopK", ["x", "k3"], ["tl_v", "tl_i"], axis=-1),
        n("GatherND", ["data", "gnd"], ["gnd_y"], batch_dims=1),
        n("ScatterND", ["data", "snd_i", "snd_u"], ["snd_y"]),
        n("ScatterND", ["data", "snd_i", "snd_u"], ["snd_max"], reduction="max"),
        n("OneHot", ["hot", "depth", "onoff"], ["hot_y"], axis=1),
        n("Compress", ["data", "cond"], ["cmp_y"], axis=2),
        n("Compress", ["data", "cond5"], ["cmp_flat"]),
        n("ReverseSequence", ["rs", "lens"], ["rs_y"], batch_axis=1, time_axis=0),
        n("Det", ["m3"], ["det"]),
        n("DynamicQuantizeLinear", ["data"], ["dq_y", "dq_s", "dq_z"]),
        n("BitwiseAnd", ["b1", "b2"], ["band"]),
        n("BitwiseXor", ["b1", "b2"], ["bxor"]),
        n("BitwiseNot", ["b1"], ["bnot"]),
    ]
    inits = [_c("k2", np.array([2], np.int64)), _c("k3", np.array([3], np.int64)), _c("depth", np.array(5.0, np.float32)),
             _c("cond", np.array([True, False, True])), _c("cond5", np.array([0, 1, 1, 0, 1], bool))]
    feeds = {"x": x, "data": data, "gnd": gnd, "snd_i": snd_i, "snd_u": snd_u, "hot": hot,
             "onoff": np.array([-1.0, 2.0], np.float32), "rs": r.standard_normal((4, 3, 2)).astype(np.float32),
             "lens": lens, "m3": r.standard_normal((2, 3, 3)).astype(np.float32),
             "b1": r.integers(-2 ** 15, 2 ** 15, (3, 4)).astype(np.int16), "b2": np.array([0x0F0F], np.int16)}
    outs = [o for nd in nodes for o in nd.output]
    return _model(nodes, feeds, outs, inits), feeds


def test_index_ops_match_onnxruntime(tmp_path):
    model, feeds = _index_model()
    exp = dict(zip([o.name for o in model.graph.output], ort_run(model, feeds)))
    _check(model, feeds, tmp_path, exp)


def _integer_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    r = np.random.default_rng(4)
    nodes = [
        n("MatMulInteger", ["qa", "qb", "azp", "bzp"], ["mmi"]),  # batched A, shared B, per-row / per-column zp
        n("ConvInteger", ["qx", "qw", "xzp", "wzp"], ["cvi"], strides=[2, 1], pads=[1, 0, 1, 2], dilations=[1, 2],
          group=2),
        n("ConvInteger", ["qx1", "qw1", "xzp"], ["cvi1"], auto_pad="SAME_UPPER", strides=[2]),  # 1-D
        n("MatMulInteger", ["qa", "qbb"], ["mmb"]),  # both batched, no zero points
    ]
    feeds = {"qa": r.integers(0, 256, (2, 3, 5)).astype(np.uint8), "qb": r.integers(-128, 128, (5, 4)).astype(np.int8),
             "azp": np.array([[3], [200], [128]], np.uint8), "bzp": np.array([0, -5, 7, 1], np.int8),
             "qx": r.integers(0, 256, (1, 4, 6, 7)).astype(np.uint8),
             "qw": r.integers(0, 256, (6, 2, 3, 2)).astype(np.uint8),
             "xzp": np.array(121, np.uint8), "wzp": r.integers(0, 256, (6,)).astype(np.uint8),
             "qx1": r.integers(0, 256, (2, 3, 9)).astype(np.uint8), "qw1": r.integers(-128, 128, (4, 3, 3)).astype(np.int8),
             "qbb": r.integers(0, 256, (2, 5, 2)).astype(np.uint8)}
    return _model(nodes, feeds, OUTS_INT), feeds


OUTS_INT = ["mmi", "cvi", "cvi1", "mmb"]


def test_integer_ops_match_onnx_reference(tmp_path):
    """onnxruntime has no per-row MatMulInteger zero point nor grouped ConvInteger: onnx's
    reference evaluator is the independent reference."""
    model, feeds = _integer_model()
    exp = dict(zip(OUTS_INT, ReferenceEvaluator(model).run(None, feeds)))
    _check(model, feeds, tmp_path, exp)


def _opset26_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    r = np.random.default_rng(5)
    nodes = [
        n("CumProd", ["cp", "ax"], ["cp_y"], exclusive=1, reverse=1),
        n("CumProd", ["ci", "ax"], ["ci_y"]),
        n("BitCast", ["cp"], ["bc"], to=TensorProto.INT32),
        n("TensorScatter", ["cache", "upd", "wi"], ["ts"], mode="circular"),
    ]
    inits = [_c("ax", np.array(1, np.int64))]
    feeds = {"cp": r.uniform(0.5, 1.5, (2, 5, 3)).astype(np.float32), "ci": r.integers(-9, 9, (3, 6)).astype(np.int32),
             "cache": r.standard_normal((2, 2, 5, 3)).astype(np.float32),
             "upd": r.standard_normal((2, 2, 3, 3)).astype(np.float32), "wi": np.array([4, 1], np.int64)}
    return _model(nodes, feeds, ["cp_y", "ci_y", "bc", "ts"], inits, opset=26), feeds


def test_opset26_ops_match_onnx_reference(tmp_path):
    model, feeds = _opset26_model()
    exp = dict(zip(["cp_y", "ci_y", "bc", "ts"], ReferenceEvaluator(model).run(None, feeds)))
    _check(model, feeds, tmp_path, exp)


def test_data_dependent_shapes_fold_or_refuse():
    """NonZero / Unique fold on a constant input and are refused, with the reason, otherwise."""
    x = np.array([[0, 2, 0], [1, 1, 3]], np.int64)
    folded = _model([n("NonZero", ["c"], ["nz"]), n("Unique", ["c"], ["u", "ui", "uinv", "uc"], sorted=0)],
                    {}, ["nz", "u", "ui", "uinv", "uc"], [_c("c", x)])
    got = tinyc.reference.run_graph(tinyc.load(folded), {})
    exp = ort_run(folded, {})
    for name, e in zip(["nz", "u", "ui", "uinv", "uc"], exp):
        np.testing.assert_array_equal(got[name], e, err_msg=name)
    runtime = _model([n("Unique", ["x"], ["u"])], {"x": x.astype(np.float32)}, ["u"])
    with pytest.raises(UnsupportedError, match=r"\(Unique\).*output shape depends on its values"):
        tinyc.load(runtime)
