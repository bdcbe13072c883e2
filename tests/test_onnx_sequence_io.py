"""Sequence- and optional-typed graph inputs/outputs compiled with a structure fixed at compile time
(tinyc/frontend/sequence_io.py), and the ai.onnx.preview.training optimizers (tinyc/ops/training.py).
Each model is built by real gcc (strict C99, ASan+UBSan) and compared with onnxruntime, or with onnx's
reference evaluator for the training domain (onnxruntime has no kernels for it). One build per model."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyc
from tinyc.errors import ShapeError
from tinyc.frontend import import_onnx, parse_input_shapes
from tinyc.frontend.sequence_io import flatten_values
from util import ort_run, rng, sanitized_project

n = helper.make_node
F = TensorProto.FLOAT


def _seq(name: str, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, shape)))


def _opt(name: str, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, helper.make_optional_type_proto(helper.make_tensor_type_proto(F, shape)))


def _model(nodes, inputs, outputs, domains=(("", 18),)) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "t", inputs, outputs),
                          opset_imports=[helper.make_opsetid(d, v) for d, v in domains])
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    return m


def _run(model, input_shapes, feeds: dict, tmp_path) -> tuple[dict[str, np.ndarray], tinyc.ir.Graph]:
    """Compile with `input_shapes`, run once on `feeds` (values flattened to element tensors)."""
    out = tmp_path / "p"
    graph = tinyc.compile(model, out, input_shapes=input_shapes).graph
    flat = dict(p for name, v in feeds.items() for p in flatten_values(name, v))
    return sanitized_project(out, graph, flat, tmp_path), graph


def _seq_model() -> onnx.ModelProto:
    """x: a sequence of [N, 3] tensors (N dynamic). y = x with Relu(x[0]) appended (a sequence),
    z = concat(x) along axis 0 (a tensor)."""
    p0 = helper.make_tensor("p0", TensorProto.INT64, [], [0])
    nodes = [n("Constant", [], ["p0"], value=p0), n("SequenceAt", ["x", "p0"], ["x0"]), n("Relu", ["x0"], ["r"]),
             n("SequenceInsert", ["x", "r"], ["y"]), n("ConcatFromSequence", ["x"], ["z"], axis=0)]
    return _model(nodes, [_seq("x", ["N", 3])], [_seq("y", ["N", 3]), helper.make_tensor_value_info("z", F, ["M", 3])])


def test_sequence_input_and_output_match_onnxruntime(tmp_path):
    """A 3-element sequence input becomes inputs x.0..x.2, the 4-element sequence output the outputs
    y.0..y.3; the element shapes differ (fixed per element at compile time)."""
    r = rng(3)
    xs = [r.standard_normal((k + 1, 3)).astype(np.float32) for k in range(3)]
    model = _seq_model()
    got, graph = _run(model, {"x": [x.shape for x in xs]}, {"x": xs}, tmp_path)
    assert graph.inputs == ["x.0", "x.1", "x.2"]
    assert list(got) == ["y.0", "y.1", "y.2", "y.3", "z"]
    want_y, want_z = ort_run(model, {"x": xs})
    assert len(want_y) == 4
    for k, w in enumerate(want_y):
        np.testing.assert_allclose(got[f"y.{k}"], w, rtol=1e-6, err_msg=f"y.{k}")
    np.testing.assert_allclose(got["z"], want_z, rtol=1e-6)


def test_command_line_structure_syntax():
    """`--input-shape "x=[2,3;1,3]"` and `opt=none` parse to the Python forms, and import alike."""
    shapes = parse_input_shapes(["x=[2,3;1,3]", "o=none", "e=[]", "s=[();2]", "t=1,4"])
    assert shapes == {"x": [(2, 3), (1, 3)], "o": None, "e": [], "s": [(), (2,)], "t": (1, 4)}
    g = import_onnx(_seq_model(), ["x=[2,3;1,3]"])
    assert [g.tensor(i).shape for i in g.inputs] == [(2, 3), (1, 3)]
    assert g.tensor(g.outputs[-1]).shape == (3, 3)


def test_sequence_input_without_structure_is_refused_with_the_fix():
    with pytest.raises(ShapeError) as e:
        import_onnx(_seq_model())
    msg = str(e.value)
    assert "input 'x' is a sequence" in msg and '--input-shape "x=[' in msg and "input_shapes=" in msg
    with pytest.raises(ShapeError, match="dimension 1 is fixed to 3"):
        import_onnx(_seq_model(), {"x": [(2, 4)]})


def _opt_model() -> onnx.ModelProto:
    """has = OptionalHasElement(o); same = o passed through (an optional output)."""
    nodes = [n("OptionalHasElement", ["o"], ["has"]), n("Identity", ["o"], ["same"])]
    return _model(nodes, [_opt("o", [4])], [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                                          _opt("same", [4])])


def test_optional_input_present_matches_onnxruntime(tmp_path):
    x = rng(4).standard_normal(4).astype(np.float32)
    model = _opt_model()
    got, graph = _run(model, {"o": (4,)}, {"o": x}, tmp_path)
    assert graph.inputs == ["o"]
    want_has, want_same = ort_run(model, {"o": x})
    assert bool(got["has"]) == bool(want_has) is True
    np.testing.assert_array_equal(got["same"], want_same)


def test_optional_input_absent():
    """Absent: no input, OptionalHasElement folds to False, the optional output has no tensor."""
    g = import_onnx(_opt_model(), {"o": None})
    assert g.inputs == []
    assert [pub for pub, _ in g.public_outputs()] == ["has"]
    assert g.tensor(g.outputs[0]).data is not None and not bool(g.tensor(g.outputs[0]).data)
    with pytest.raises(ShapeError, match="o=none"):
        import_onnx(_opt_model())


# -- ai.onnx.preview.training --------------------------------------------------------------------
def test_training_optimizers_match_onnx_reference(tmp_path):
    """Momentum (standard and Nesterov, two tensors), Adagrad and Adam in one model; R and T are
    run-time inputs (T > 0: Adam's bias correction and Momentum's beta apply)."""
    r = rng(5)
    a, b = r.standard_normal((3, 2)).astype(np.float32), r.standard_normal(5).astype(np.float32)
    feeds = {"R": np.array(0.05, np.float32), "T": np.array(3, np.int64), "X1": a, "X2": b,
             "G1": r.standard_normal(a.shape).astype(np.float32), "G2": r.standard_normal(b.shape).astype(np.float32),
             "V1": r.standard_normal(a.shape).astype(np.float32), "V2": r.standard_normal(b.shape).astype(np.float32),
             "H1": r.random(a.shape).astype(np.float32), "H2": r.random(b.shape).astype(np.float32)}
    TD = "ai.onnx.preview.training"
    nodes = [
        n("Momentum", ["R", "T", "X1", "X2", "G1", "G2", "V1", "V2"], ["m_x1", "m_x2", "m_v1", "m_v2"], domain=TD,
          alpha=0.9, beta=0.7, mode="standard", norm_coefficient=0.01),
        n("Momentum", ["R", "T", "X2", "G2", "V2"], ["n_x", "n_v"], domain=TD, alpha=0.8, beta=1.0,
          mode="nesterov", norm_coefficient=0.02),
        n("Adagrad", ["R", "T", "X1", "G1", "H1"], ["g_x", "g_h"], domain=TD, decay_factor=0.1, epsilon=1e-5,
          norm_coefficient=0.001),
        n("Adam", ["R", "T", "X1", "X2", "G1", "G2", "V1", "V2", "H1", "H2"],
          ["a_x1", "a_x2", "a_v1", "a_v2", "a_h1", "a_h2"], domain=TD, alpha=0.9, beta=0.99, epsilon=1e-6,
          norm_coefficient=0.001, norm_coefficient_post=0.01),
    ]
    outs = [o for node in nodes for o in node.output]
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in feeds.items()]
    shape = {o: (a.shape if o.endswith("1") or o.startswith("g_") else b.shape) for o in outs}
    model = _model(nodes, ins, [helper.make_tensor_value_info(o, F, shape[o]) for o in outs],
                   domains=(("", 18), (TD, 1)))
    out = tmp_path / "p"
    graph = tinyc.compile(model, out).graph
    assert not any(node.op in ("Momentum", "Adagrad", "Adam") for node in graph.nodes)  # lowered at import
    got = sanitized_project(out, graph, feeds, tmp_path)
    want = ReferenceEvaluator(model).run(None, feeds)
    assert list(got) == outs
    for name, w in zip(outs, want):
        np.testing.assert_allclose(got[name], np.asarray(w, np.float32), rtol=1e-5, atol=1e-6, err_msg=name)


# -- SequenceMap and a Loop carrying a sequence (unrolled at import) -------------------------------
def test_sequence_map_and_loop_over_a_sequence_match_onnxruntime(tmp_path):
    """SequenceMap adds two sequences element-wise (elements of different lengths) and scales by a
    tensor; a Loop with a constant trip count appends Relu(x[i]) to a carried sequence each step."""
    r = rng(6)
    a = [r.standard_normal(k + 2).astype(np.float32) for k in range(3)]
    b = [r.standard_normal(k + 2).astype(np.float32) for k in range(3)]
    w = np.array(0.5, np.float32)
    scalar = helper.make_tensor_value_info
    map_body = helper.make_graph(
        [n("Add", ["ea", "eb"], ["s"]), n("Mul", ["s", "ew"], ["o"])], "map",
        [scalar("ea", F, ["N"]), scalar("eb", F, ["N"]), scalar("ew", F, [])], [scalar("o", F, ["N"])])
    loop_body = helper.make_graph(
        [n("Identity", ["c_in"], ["c_out"]), n("SequenceAt", ["a", "i"], ["ai"]), n("Relu", ["ai"], ["ri"]),
         n("SequenceInsert", ["acc_in", "ri"], ["acc_out"])], "loop",
        [scalar("i", TensorProto.INT64, []), scalar("c_in", TensorProto.BOOL, []), _seq("acc_in", None)],
        [scalar("c_out", TensorProto.BOOL, []), _seq("acc_out", None)])
    trip = helper.make_tensor("trip", TensorProto.INT64, [], [2])
    true = helper.make_tensor("true", TensorProto.BOOL, [], [1])
    nodes = [n("SequenceMap", ["a", "b", "w"], ["mapped"], body=map_body),
             n("Constant", [], ["trip"], value=trip), n("Constant", [], ["true"], value=true),
             n("SequenceEmpty", [], ["empty"], dtype=F),
             n("Loop", ["trip", "true", "empty"], ["acc"], body=loop_body)]
    model = _model(nodes, [_seq("a", ["N"]), _seq("b", ["N"]), scalar("w", F, [])],
                   [_seq("mapped", ["N"]), _seq("acc", ["N"])])
    got, graph = _run(model, {"a": [x.shape for x in a], "b": [x.shape for x in b], "w": ()},
                      {"a": a, "b": b, "w": w}, tmp_path)
    assert not any(node.op in ("Loop", "SequenceMap") for node in graph.nodes)
    want_mapped, want_acc = ort_run(model, {"a": a, "b": b, "w": w})
    assert list(got) == ["mapped.0", "mapped.1", "mapped.2", "acc.0", "acc.1"]
    for name, want in [("mapped", want_mapped), ("acc", want_acc)]:
        for k, v in enumerate(want):
            np.testing.assert_allclose(got[f"{name}.{k}"], v, rtol=1e-6, err_msg=f"{name}.{k}")


def test_bound_sequence_input_folds_to_constants():
    """`bind` freezes a sequence input to constant elements: the whole model folds at import."""
    xs = [np.arange(6, dtype=np.float32).reshape(2, 3) - 2, np.ones((1, 3), np.float32)]
    g = import_onnx(_seq_model(), bind={"x": xs})
    assert g.inputs == [] and not g.nodes
    values = {pub: g.tensor(t).data for pub, t in g.public_outputs()}
    assert list(values) == ["y.0", "y.1", "y.2", "z"]
    np.testing.assert_array_equal(values["y.2"], np.maximum(xs[0], 0))
    np.testing.assert_array_equal(values["z"], np.concatenate(xs))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="x=[]();,0123456789 none-", max_size=24))
def test_input_shape_syntax_fuzz(spec):
    """Any --input-shape text parses to a structure or is one clear UsageError naming the flag,
    never another exception (the sequence syntax "seq=[2,3;2,3]" is outside input too)."""
    from tinyc.errors import UsageError
    from tinyc.frontend.onnx_import import parse_input_shapes

    try:
        parse_input_shapes([spec])
    except UsageError as exc:
        assert "--input-shape" in str(exc) and "\n" not in str(exc)
