"""Sequences and optionals with static structure, the ai.onnx.ml numeric ops, TfIdfVectorizer and
two old-opset forms (legacy axis broadcasting, BatchNormalization training mode): each model is
compiled through real gcc (strict C99, ASan+UBSan) and compared with onnxruntime, or with onnx's
reference evaluator where onnxruntime lacks the op or the mode. Fixed seeds; one build per model."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tinyc
from tinyc.errors import UnsupportedError
from util import ort_run, rng, sanitized_run

n = helper.make_node
ML = "ai.onnx.ml"


def _model(nodes, inputs: dict[str, np.ndarray], outputs: list[tuple[str, int, list[int]]], inits=(),
           opset: int = 18, ml: int | None = None) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(name, et, shape) for name, et, shape in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(ML, ml)] if ml else [])
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    return m


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path, expected: list[np.ndarray],
           rtol: float = 1e-5, atol: float = 1e-6) -> None:
    got = sanitized_run(model, feeds, tmp_path)
    names = [o.name for o in model.graph.output]
    assert list(got) == names
    for name, want in zip(names, expected):
        assert got[name].shape == np.asarray(want).shape, name
        assert got[name].dtype == np.asarray(want).dtype, name
        np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol, err_msg=name)


# -- sequences ------------------------------------------------------------------------------------
def test_sequence_ops_match_onnxruntime(tmp_path):
    """Construct/Insert/Erase/At/Length, SplitToSequence (sizes, scalar, keepdims=0) and
    ConcatFromSequence (with and without new_axis) in one model; positions are initializers."""
    r = rng(1)
    x, y = r.standard_normal((2, 6, 3)).astype(np.float32), r.standard_normal((2, 2, 3)).astype(np.float32)
    inits = {"sizes": np.array([1, 2, 3], np.int64), "two": np.array(2, np.int64), "p0": np.array(0, np.int64),
             "pm1": np.array(-1, np.int64), "p1": np.array(1, np.int64)}
    nodes = [
        n("SplitToSequence", ["x", "sizes"], ["s"], axis=1),            # [2,1,3] [2,2,3] [2,3,3]
        n("SequenceInsert", ["s", "y", "p0"], ["s1"]),                  # y first
        n("SequenceErase", ["s1", "pm1"], ["s2"]),                      # drop [2,3,3]
        n("ConcatFromSequence", ["s2"], ["cat"], axis=1),               # [2,5,3]
        n("SequenceAt", ["s2", "p1"], ["at"]),                          # the [2,1,3] piece
        n("Relu", ["at"], ["at_relu"]),
        n("SequenceLength", ["s2"], ["len"]),
        n("SplitToSequence", ["x"], ["u"], axis=-1, keepdims=0),        # three [2,6]
        n("ConcatFromSequence", ["u"], ["stack"], axis=0, new_axis=1),  # [3,2,6]
        n("SplitToSequence", ["x", "two"], ["v"], axis=1),              # three [2,2,3]
        n("SequenceConstruct", ["y", "y"], ["w"]),
        n("SequenceAt", ["v", "pm1"], ["v_last"]),
        n("SequenceAt", ["w", "p0"], ["w0"]),
        n("Add", ["v_last", "w0"], ["vw"]),
        n("SequenceEmpty", [], ["e"]),
        n("SequenceInsert", ["e", "x"], ["e1"]),
        n("SequenceAt", ["e1", "p0"], ["e_at"]),
    ]
    F = TensorProto.FLOAT
    outs = [("cat", F, [2, 5, 3]), ("at_relu", F, [2, 1, 3]), ("len", TensorProto.INT64, []),
            ("stack", F, [3, 2, 6]), ("vw", F, [2, 2, 3]), ("e_at", F, [2, 6, 3])]
    m = _model(nodes, {"x": x, "y": y}, outs, inits, opset=18)
    feeds = {"x": x, "y": y}
    _check(m, feeds, tmp_path, ort_run(m, feeds), rtol=0, atol=0)


def test_sequence_position_must_be_constant():
    """A run-time position is refused naming the node (a caller can bind it and retry)."""
    x = np.zeros((2, 3), np.float32)
    m = _model([n("SequenceConstruct", ["x", "x"], ["s"]), n("SequenceAt", ["s", "p"], ["y"], name="pick")],
               {"x": x, "p": np.array(0, np.int64)}, [("y", TensorProto.FLOAT, [2, 3])])
    with pytest.raises(UnsupportedError, match=r"'pick' \(SequenceAt\).*position.*constant"):
        tinyc.load(m)
    g = tinyc.load(m, bind={"p": np.array(1, np.int64)})
    assert g.inputs == ["x"] and g.tensor("y").shape == (2, 3)


# -- optionals ------------------------------------------------------------------------------------
def test_optional_ops_match_onnxruntime(tmp_path):
    x = rng(2).standard_normal((3, 4)).astype(np.float32)
    tp = helper.make_tensor_type_proto(TensorProto.FLOAT, [3, 4])
    nodes = [
        n("Optional", ["x"], ["o"]),
        n("OptionalGetElement", ["o"], ["e"]),
        n("Neg", ["e"], ["y"]),
        n("OptionalHasElement", ["o"], ["has"]),
        n("Optional", [], ["none"], type=tp),
        n("OptionalHasElement", ["none"], ["has_none"]),
    ]
    B = TensorProto.BOOL
    m = _model(nodes, {"x": x}, [("y", TensorProto.FLOAT, [3, 4]), ("has", B, []), ("has_none", B, [])], opset=18)
    _check(m, {"x": x}, tmp_path, ort_run(m, {"x": x}), rtol=0, atol=0)


def test_empty_optional_element_is_refused():
    tp = helper.make_tensor_type_proto(TensorProto.FLOAT, [2])
    m = _model([n("Optional", [], ["o"], type=tp), n("OptionalGetElement", ["o"], ["y"], name="get")],
               {}, [("y", TensorProto.FLOAT, [2])], opset=18)
    with pytest.raises(tinyc.errors.TinycError, match=r"'get' \(OptionalGetElement\).*empty"):
        tinyc.load(m)


# -- ai.onnx.ml -----------------------------------------------------------------------------------
def _tree_attrs(dtype) -> dict:
    """Two trees over 3 features, three targets; modes <=, <, >=, ==, !=, member (with NaN-ended sets;
    integers, which onnxruntime requires, and none 0: onnx's reference ends a set at a 0 as at a NaN)."""
    return dict(
        tree_roots=[0, 4],
        nodes_featureids=[0, 1, 2, 1, 2, 0, 1],
        nodes_modes=numpy_helper.from_array(np.array([0, 1, 6, 4, 2, 5, 6], np.uint8), "m"),
        nodes_splits=numpy_helper.from_array(np.array([0.5, -1, 0, 1, 0, 0, 0], dtype), "s"),
        membership_values=numpy_helper.from_array(np.array([-1, 2, np.nan, -2, 1, np.nan], dtype), "mv"),
        nodes_truenodeids=[1, 0, 2, 3, 5, 4, 6],
        nodes_trueleafs=[0, 1, 1, 1, 0, 1, 1],
        nodes_falsenodeids=[2, 1, 3, 0, 6, 5, 7],
        nodes_falseleafs=[0, 1, 1, 1, 0, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0, 0, 0, 0, 1],
        leaf_targetids=[0, 1, 2, 0, 1, 2, 0, 1],
        leaf_weights=numpy_helper.from_array(np.array([1.5, -2, 3, 0.25, 4, -1, 7, 0.5], dtype), "w"),
        n_targets=3,
    )


@pytest.mark.parametrize("agg", [1, 0, 2, 3])
def test_tree_ensemble_matches_onnxruntime_and_reference(tmp_path, agg):
    x = rng(3).integers(-2, 3, (16, 3)).astype(np.float32)
    x[0, 0], x[1, 1] = np.nan, np.nan
    m = _model([n("TreeEnsemble", ["x"], ["y"], domain=ML, aggregate_function=agg, **_tree_attrs(np.float32))],
               {"x": x}, [("y", TensorProto.FLOAT, [16, 3])], opset=18, ml=5)
    ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
    # MIN/MAX: a target no tree reaches stays at onnx's reference start (the float extreme); onnxruntime
    # writes 0 there. tinyc follows the reference; everywhere else the two runtimes agree.
    reached = np.abs(ref) < np.finfo(np.float32).max
    assert reached.mean() > 0.3
    np.testing.assert_allclose(ort_run(m, {"x": x})[0][reached], ref[reached], rtol=1e-6)
    _check(m, {"x": x}, tmp_path, [ref])


def test_ml_ops_match_onnxruntime(tmp_path):
    """Binarizer, ArrayFeatureExtractor (run-time indices), LabelEncoder int64->float and float->int64."""
    r = rng(4)
    x = r.standard_normal((4, 5)).astype(np.float32)
    idx = np.array([4, 0, 2], np.int64)
    labels = np.array([[3, 7, 1], [9, 3, 2]], np.int64)
    nodes = [
        n("Binarizer", ["x"], ["b"], domain=ML, threshold=0.25),
        n("ArrayFeatureExtractor", ["x", "idx"], ["afe"], domain=ML),
        n("LabelEncoder", ["labels"], ["lf"], domain=ML, keys_int64s=[1, 3, 7], values_floats=[0.5, -1.0, 2.0],
          default_float=9.0),
        n("LabelEncoder", ["b"], ["li"], domain=ML, keys_floats=[0.0, 1.0], values_int64s=[10, 20]),
    ]
    F = TensorProto.FLOAT
    outs = [("b", F, [4, 5]), ("afe", F, [4, 3]), ("lf", F, [2, 3]), ("li", TensorProto.INT64, [4, 5])]
    feeds = {"x": x, "idx": idx, "labels": labels}
    m = _model(nodes, feeds, outs, opset=18, ml=4)
    _check(m, feeds, tmp_path, ort_run(m, feeds), rtol=0, atol=0)


def test_ml_refusals_name_the_node():
    x = np.zeros((2, 3), np.float32)
    m = _model([n("TreeEnsemble", ["x"], ["y"], domain=ML, name="trees", post_transform=1,
                  **_tree_attrs(np.float32))], {"x": x}, [("y", TensorProto.FLOAT, [2, 3])], opset=18, ml=5)
    with pytest.raises(UnsupportedError, match=r"'trees' \(TreeEnsemble\).*post_transform"):
        tinyc.load(m)


# -- TfIdfVectorizer ------------------------------------------------------------------------------
def test_tfidf_modes_match_onnxruntime_and_reference(tmp_path):
    """TF / IDF / TFIDF, with and without weights, unigrams+bigrams+trigrams with skips, over a
    batch of int64 token rows; one model, one build."""
    x = rng(5).integers(0, 6, (3, 10)).astype(np.int64)
    common = dict(min_gram_length=1, max_gram_length=3, max_skip_count=2, ngram_counts=[0, 4, 10],
                  ngram_indexes=list(range(10)), pool_int64s=[0, 2, 3, 5, 1, 2, 2, 3, 4, 4, 1, 2, 3, 5, 5, 5])
    w = [0.5, 1.5, 2.0, 0.25, 1.0, 3.0, 0.75, 1.25, 2.5, 4.0]
    shared = list(range(9)) + [2]  # two n-grams counted into one slot
    nodes = [
        n("TfIdfVectorizer", ["x"], ["tf"], mode="TF", **common),
        n("TfIdfVectorizer", ["x"], ["idf"], mode="IDF", weights=w, **common),
        n("TfIdfVectorizer", ["x"], ["idf1"], mode="IDF", **common),
        n("TfIdfVectorizer", ["x"], ["tfidf"], mode="TFIDF", weights=w, **common),
        n("TfIdfVectorizer", ["x"], ["bi"], mode="TF", **{**common, "min_gram_length": 2, "ngram_indexes": shared}),
    ]
    outs = [(o, TensorProto.FLOAT, [3, 10]) for o in ("tf", "idf", "idf1", "tfidf")] + [("bi", TensorProto.FLOAT, [3, 9])]
    m = _model(nodes, {"x": x}, outs, opset=18)
    want = ort_run(m, {"x": x})
    assert want[0].sum() > 0 and (want[4] != want[0][:, :9]).any()  # the data exercises the tables
    # onnx's reference cannot run IDF without weights (idf1): it checks the others
    no_idf1 = _model([nd for nd in nodes if nd.output[0] != "idf1"], {"x": x}, outs[:2] + outs[3:], opset=18)
    for got, ref in zip(want[:2] + want[3:], ReferenceEvaluator(no_idf1).run(None, {"x": x})):
        np.testing.assert_array_equal(got, ref)
    _check(m, {"x": x}, tmp_path, want, rtol=0, atol=0)


# -- old-opset forms ------------------------------------------------------------------------------
def test_legacy_axis_broadcast_and_batchnorm_training(tmp_path):
    """Opset-6 Mul/Sub with broadcast=1 and axis (B matched from `axis`, checked against numpy),
    and opset-15 BatchNormalization training mode (Y and the running statistics, vs the reference)."""
    r = rng(6)
    a = r.standard_normal((2, 3, 4)).astype(np.float32)
    b = r.standard_normal((3,)).astype(np.float32)
    legacy = _model([n("Mul", ["a", "b"], ["y"], broadcast=1, axis=1),
                     n("Sub", ["y", "c"], ["z"], broadcast=1, axis=0)],
                    {"a": a, "b": b}, [("z", TensorProto.FLOAT, [2, 3, 4])], {"c": np.float32([1.0, -2.0])}, opset=6)
    want = a * b.reshape(1, 3, 1) - np.float32([1.0, -2.0]).reshape(2, 1, 1)
    _check(legacy, {"a": a, "b": b}, tmp_path / "legacy", [want])

    x = r.standard_normal((4, 3, 5)).astype(np.float32)
    s, bias = r.uniform(0.5, 1.5, 3).astype(np.float32), r.standard_normal(3).astype(np.float32)
    mean, var = r.standard_normal(3).astype(np.float32), r.uniform(0.5, 2, 3).astype(np.float32)
    feeds = {"x": x, "s": s, "bias": bias, "mean": mean, "var": var}
    F = TensorProto.FLOAT
    bn = _model([n("BatchNormalization", list(feeds), ["y", "rm", "rv"], training_mode=1, momentum=0.8,
                   epsilon=1e-3)], feeds, [("y", F, [4, 3, 5]), ("rm", F, [3]), ("rv", F, [3])], opset=15)
    _check(bn, feeds, tmp_path / "bn", ReferenceEvaluator(bn).run(None, feeds), rtol=1e-5, atol=1e-5)
