"""ONNX function expansion at import: ops without a tinyc kernel compile through their function bodies.

Every check runs the model through tinyc (import, codegen, gcc, ASan/UBSan run) and compares with an
independent reference: onnxruntime where it has the op, onnx's ReferenceEvaluator otherwise.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tinyc
from tinyc.errors import UnsupportedError
from tinyc.frontend.functions import has_function_body
from tinyc.ops import onnx_op

from util import inferred_model, ort_run, rng, sanitized_run


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path, reference: str = "ort",
           rtol: float = 1e-5, atol: float = 1e-6):
    got = sanitized_run(model, feeds, tmp_path)
    want = ort_run(model, feeds) if reference == "ort" else ReferenceEvaluator(model).run(None, feeds)
    for name, w in zip([o.name for o in model.graph.output], want):
        np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol, err_msg=name)
    return tinyc.load(model)


def test_context_dependent_body_nested_two_levels(tmp_path):
    """SoftmaxCrossEntropyLoss has no kernel; its (context-dependent) body calls NegativeLogLikelihoodLoss,
    whose body is expanded too. With class weights and ignore_index, as losses are exported for eval."""
    assert onnx_op("SoftmaxCrossEntropyLoss") is None and onnx_op("NegativeLogLikelihoodLoss") is None
    r = rng(1)
    feeds = {"scores": r.standard_normal((4, 5, 3)).astype(np.float32),
             "labels": np.array([[0, 4, 2], [1, 1, 3], [4, 0, 0], [2, 3, 1]], np.int64)}
    w = onnx.numpy_helper.from_array(r.uniform(0.5, 2.0, 5).astype(np.float32), "w")
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels", "w"], ["loss", "log_prob"],
                            reduction="mean", ignore_index=3)
    model = inferred_model([node], feeds, ["loss", "log_prob"], inits=[w], opset=18)
    g = _check(model, feeds, tmp_path)
    assert "SoftmaxCrossEntropyLoss" not in {n.op for n in g.nodes}
    assert any(n.name.startswith("SoftmaxCrossEntropyLoss_0/") for n in g.nodes), [n.name for n in g.nodes]


def test_attribute_defaults_come_from_the_schema(tmp_path):
    """Swish's body reads `alpha` by reference; left off at the call site, the schema's default (1.0)
    applies. Given, the call site's value is used."""
    x = rng(2).standard_normal((2, 7)).astype(np.float32)
    for attrs in ({}, {"alpha": 1.7}):
        node = helper.make_node("Swish", ["x"], ["y"], **attrs)
        model = inferred_model([node], {"x": x}, ["y"], opset=24)
        got = sanitized_run(model, {"x": x}, tmp_path / f"a{len(attrs)}")["y"]
        alpha = attrs.get("alpha", 1.0)
        np.testing.assert_allclose(got, x / (1.0 + np.exp(-alpha * x)), rtol=1e-5, atol=1e-6)


def test_group_normalization_through_its_body_matches_onnxruntime(tmp_path):
    r = rng(3)
    feeds = {"x": r.standard_normal((2, 6, 5, 4)).astype(np.float32)}
    inits = [onnx.numpy_helper.from_array(r.standard_normal(6).astype(np.float32), "s"),
             onnx.numpy_helper.from_array(r.standard_normal(6).astype(np.float32), "b")]
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-5)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 5, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 5, 4])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    _check(model, feeds, tmp_path, reference="onnx", rtol=1e-4, atol=1e-5)


def test_a_registered_kernel_still_wins():
    """LayerNormalization has a function body, but tinyc's own kernel is used."""
    assert has_function_body("LayerNormalization", "", 18) and onnx_op("LayerNormalization") is not None
    feeds = {"x": rng(4).standard_normal((3, 8)).astype(np.float32)}
    inits = [onnx.numpy_helper.from_array(np.ones(8, np.float32), "s")]
    model = inferred_model([helper.make_node("LayerNormalization", ["x", "s"], ["y"])], feeds, ["y"],
                           inits=inits, opset=18)
    assert [n.op for n in tinyc.load(model).nodes] == ["LayerNormalization"]


def test_model_local_functions_are_inlined(tmp_path):
    """An exporter's custom block (a model-local FunctionProto) is inlined before import."""
    f = helper.make_function("custom.blocks", "MulAddRelu", ["a", "b"], ["c"],
                             [helper.make_node("Mul", ["a", "b"], ["t"]),
                              helper.make_node("Add", ["t", "a"], ["u"]),
                              helper.make_node("Relu", ["u"], ["c"])],
                             [helper.make_opsetid("", 18)])
    g = helper.make_graph([helper.make_node("MulAddRelu", ["x", "y"], ["z"], domain="custom.blocks")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(g, functions=[f], opset_imports=[helper.make_opsetid("", 18),
                                                               helper.make_opsetid("custom.blocks", 1)])
    r = rng(5)
    feeds = {"x": r.standard_normal((2, 3)).astype(np.float32), "y": r.standard_normal((2, 3)).astype(np.float32)}
    _check(model, feeds, tmp_path)


def test_an_op_inside_a_body_without_kernel_is_refused_with_the_path():
    """A refusal from inside an expanded body names the calling node and the body node."""
    feeds = {"x": np.full((2, 3), 0.5, np.float32)}
    node = helper.make_node("Bernoulli", ["x"], ["y"], name="coin", seed=1.0)
    model = inferred_model([node], feeds, ["y"], opset=22)
    with pytest.raises(UnsupportedError, match=r"node 'coin/[^']*' \(RandomUniformLike\)"):
        tinyc.load(model)


def test_an_op_with_neither_kernel_nor_body_is_refused_up_front():
    g = helper.make_graph([helper.make_node("Erf", ["x"], ["e"]),
                           helper.make_node("Frobnicate", ["e"], ["y"], name="frob", domain="com.acme")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.acme", 1)])
    with pytest.raises(UnsupportedError, match=r"'frob' \(com.acme.Frobnicate\)"):
        tinyc.load(model)
