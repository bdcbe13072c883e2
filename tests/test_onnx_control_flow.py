"""Control flow with a static structure (tinyc/ops/control_flow.py): If with a constant condition is
folded at import; Loop (constant trip count) and Scan compile to a C loop over the body's kernels,
the body planned once in the arena. Each model runs on host C (real gcc) against onnxruntime."""
from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinyc
from util import ort_run


def _vi(name: str, dtype: int, shape: list[int] | None):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "cf", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def _compile_and_compare(model: onnx.ModelProto, feeds: dict[str, np.ndarray], out) -> dict:
    want = ort_run(model, feeds)
    res = tinyc.compile(model, out)
    got = tinyc.run(out, feeds)
    for vi, w in zip(model.graph.output, want):
        np.testing.assert_allclose(got[vi.name], w, rtol=1e-5, atol=1e-6, err_msg=vi.name)
    return res.report


# -- If -----------------------------------------------------------------------------------------
def _if_model(cond: bool) -> onnx.ModelProto:
    """Branches read the outer input x and an outer weight; they differ in ops and in shape."""
    then_g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t_out"])], "then", [],
                               [_vi("t_out", TensorProto.FLOAT, [2, 3])])
    else_g = helper.make_graph([_const("k", np.float32(3.0)), helper.make_node("Mul", ["x", "k"], ["e_mul"]),
                                helper.make_node("Relu", ["e_mul"], ["e_out"])], "else", [],
                               [_vi("e_out", TensorProto.FLOAT, [2, 3])])
    nodes = [helper.make_node("If", ["c"], ["y0"], then_branch=then_g, else_branch=else_g, name="branchy"),
             helper.make_node("Sigmoid", ["y0"], ["y"])]
    inits = [numpy_helper.from_array(np.array(cond), "c"),
             numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) / 4, "w")]
    return _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 3])], [_vi("y", TensorProto.FLOAT, [2, 3])], inits)


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_constant_condition_is_folded(tmp_path, cond):
    model = _if_model(cond)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    _compile_and_compare(model, {"x": x}, tmp_path / "m")
    graph = tinyc.load(model)
    assert "If" not in {n.op for n in graph.nodes}
    assert {n.op for n in graph.nodes} - {"Sigmoid"} == ({"Add"} if cond else {"Mul"})  # only the taken branch


def test_if_with_runtime_condition_is_refused(tmp_path):
    model = _if_model(True)
    model.graph.initializer.pop(0)
    model.graph.input.append(_vi("c", TensorProto.BOOL, []))
    with pytest.raises(tinyc.errors.UnsupportedError, match=r"node 'branchy' \(If\).*cond.*constant"):
        tinyc.compile(model, tmp_path / "m")


# -- Loop ---------------------------------------------------------------------------------------
def _loop_model(trip: int, cond_out: str = "cond_in") -> onnx.ModelProto:
    """s_{i+1} = 0.5 * s_i + x + float(i) * w (x: outer input, w: outer weight), scan output 2 * s_{i+1}."""
    body_nodes = [
        helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["fi", "w"], ["iw"]),
        _const("half", np.float32(0.5)),
        helper.make_node("Mul", ["s_in", "half"], ["hs"]),
        helper.make_node("Add", ["hs", "x"], ["hx"]),
        helper.make_node("Add", ["hx", "iw"], ["s_out"]),
        _const("two", np.float32(2.0)),
        helper.make_node("Mul", ["s_out", "two"], ["scan"]),
        helper.make_node("Identity", [cond_out], ["cond_out"]),
    ]
    if cond_out == "stop":
        body_nodes.insert(0, _const(cond_out, np.array(False)))
    elif cond_out != "cond_in":
        body_nodes.insert(0, helper.make_node("ReduceSum", ["s_in"], ["tot"], keepdims=0))
        body_nodes.insert(1, _const("lim", np.float32(100.0)))
        body_nodes.insert(2, helper.make_node("Less", ["tot", "lim"], [cond_out]))
    body = helper.make_graph(
        body_nodes, "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("s_in", TensorProto.FLOAT, [4])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("s_out", TensorProto.FLOAT, [4]),
         _vi("scan", TensorProto.FLOAT, [4])])
    nodes = [helper.make_node("Loop", ["M", "c", "s0"], ["s_final", "scans"], body=body, name="looper")]
    inits = [numpy_helper.from_array(np.array(trip, np.int64), "M"), numpy_helper.from_array(np.array(True), "c"),
             numpy_helper.from_array(np.linspace(-1, 1, 4).astype(np.float32), "w")]
    return _model(nodes, [_vi("s0", TensorProto.FLOAT, [4]), _vi("x", TensorProto.FLOAT, [4])],
                  [_vi("s_final", TensorProto.FLOAT, [4]), _vi("scans", TensorProto.FLOAT, [None, 4])], inits)


def _loop_feeds() -> dict[str, np.ndarray]:
    r = np.random.default_rng(1)
    return {"s0": r.standard_normal(4).astype(np.float32), "x": r.standard_normal(4).astype(np.float32)}


def test_loop_state_and_scan_outputs_match_onnxruntime(tmp_path):
    _compile_and_compare(_loop_model(5), _loop_feeds(), tmp_path / "m")


def test_loop_whose_body_stops_it_runs_once(tmp_path):
    """A constant false condition out of the body: one iteration, a scan output of one row."""
    _compile_and_compare(_loop_model(5, cond_out="stop"), _loop_feeds(), tmp_path / "m")
    assert tinyc.load(_loop_model(5, cond_out="stop")).tensor("scans").shape == (1, 4)


def test_loop_is_a_c_loop_over_one_planned_body(tmp_path):
    """The generated C does not grow with the trip count (one for loop over the body's kernels, not
    N copies) and neither does the arena beyond the stacked scan output itself."""
    srcs, arenas = [], []
    for trip in (3, 30):
        report = _compile_and_compare(_loop_model(trip), _loop_feeds(), tmp_path / f"t{trip}")
        src = (tmp_path / f"t{trip}" / "model.c").read_text() if (tmp_path / f"t{trip}" / "model.c").exists() \
            else "".join(p.read_text() for p in (tmp_path / f"t{trip}").glob("*.c") if "weights" not in p.name
                         and p.name != "main.c")
        srcs.append(src)
        arenas.append(report["arena_bytes"] - trip * 4 * 4)  # minus the [trip, 4] float scan output
        assert f"for (int32_t it = 0; it < {trip}; ++it)" in src
    kernels = [len(re.findall(r"^static void \w+\(", s, re.M)) for s in srcs]
    assert kernels[0] == kernels[1] >= 5  # the loop kernel and its body's (Cast, Mul, Mul, Add, Add, Mul)
    assert abs(len(srcs[0]) - len(srcs[1])) < 40
    assert abs(arenas[0] - arenas[1]) <= 16  # one alignment unit of rounding
    # report.json: the Loop layer's scratch is its body's planned arena (not 0), the same for both trips
    loops = [[x for x in json.loads((tmp_path / f"t{trip}" / "report.json").read_text())["layers"]
              if x["op"] == "Loop"] for trip in (3, 30)]
    assert len(loops[0]) == len(loops[1]) == 1
    assert loops[0][0]["scratch_bytes"] == loops[1][0]["scratch_bytes"] > 0


def test_loop_with_a_runtime_exit_condition_is_refused(tmp_path):
    with pytest.raises(tinyc.errors.UnsupportedError, match=r"node 'looper' \(Loop\).*condition.*run time"):
        tinyc.compile(_loop_model(4, cond_out="keep_going"), tmp_path / "m")


# -- Scan ---------------------------------------------------------------------------------------
def _scan_model(in_axis: int, in_dir: int, out_axis: int, out_dir: int) -> onnx.ModelProto:
    """A running sum over the scan axis (state) plus a scaled running sum per step (scan output)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "xt"], ["acc_out"]),
         helper.make_node("Mul", ["acc_out", "g"], ["yt"])],
        "scan_body", [_vi("acc_in", TensorProto.FLOAT, [3]), _vi("xt", TensorProto.FLOAT, [3])],
        [_vi("acc_out", TensorProto.FLOAT, [3]), _vi("yt", TensorProto.FLOAT, [3])])
    x_shape = [3, 5] if in_axis == 1 else [5, 3]
    y_shape = [3, 5] if out_axis == 1 else [5, 3]
    node = helper.make_node("Scan", ["acc0", "x"], ["acc", "y"], body=body, num_scan_inputs=1,
                            scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                            scan_output_axes=[out_axis], scan_output_directions=[out_dir], name="scanner")
    return _model([node], [_vi("acc0", TensorProto.FLOAT, [3]), _vi("x", TensorProto.FLOAT, x_shape),
                           _vi("g", TensorProto.FLOAT, [3])],
                  [_vi("acc", TensorProto.FLOAT, [3]), _vi("y", TensorProto.FLOAT, y_shape)])


@pytest.mark.parametrize("axes", [(0, 0, 0, 0), (1, 1, 1, 0), (0, 1, 1, 1)])
def test_scan_running_sum_matches_onnxruntime(tmp_path, axes):
    model = _scan_model(*axes)
    r = np.random.default_rng(2)
    x_shape = tuple(d.dim_value for d in model.graph.input[1].type.tensor_type.shape.dim)
    feeds = {"acc0": r.standard_normal(3).astype(np.float32), "x": r.standard_normal(x_shape).astype(np.float32),
             "g": r.standard_normal(3).astype(np.float32)}
    _compile_and_compare(model, feeds, tmp_path / "m")


def _indexing_model(source: str) -> onnx.ModelProto:
    """s_{i+1} = s_i + source[i] (a row picked with Slice at the iteration number), scan output s_{i+1}."""
    body = helper.make_graph(
        [_const("one", np.array([1], np.int64)), _const("ax", np.array([0], np.int64)),
         helper.make_node("Unsqueeze", ["i", "ax"], ["start"]),
         helper.make_node("Add", ["start", "one"], ["stop"]),
         helper.make_node("Slice", [source, "start", "stop", "ax"], ["row"]),
         _const("shp", np.array([3], np.int64)),
         helper.make_node("Reshape", ["row", "shp"], ["r"]),
         helper.make_node("Add", ["s_in", "r"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["scan"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("s_in", TensorProto.FLOAT, [3])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("s_out", TensorProto.FLOAT, [3]), _vi("scan", TensorProto.FLOAT, [3])])
    table = np.arange(18, dtype=np.float32).reshape(6, 3) / 7
    inits = [numpy_helper.from_array(np.array(6, np.int64), "M"), numpy_helper.from_array(table, "table")]
    return _model([helper.make_node("Loop", ["M", "", "s0"], ["s_final", "scans"], body=body, name="indexer")],
                  [_vi("s0", TensorProto.FLOAT, [3]), _vi("x", TensorProto.FLOAT, [6, 3])],
                  [_vi("s_final", TensorProto.FLOAT, [3]), _vi("scans", TensorProto.FLOAT, [6, 3])], inits)


def test_loop_indexing_a_constant_with_the_iteration_number(tmp_path):
    """The per-iteration constants (the sliced rows) become one table read a row per iteration:
    still one body and one C loop."""
    r = np.random.default_rng(3)
    feeds = {"s0": r.standard_normal(3).astype(np.float32), "x": r.standard_normal((6, 3)).astype(np.float32)}
    _compile_and_compare(_indexing_model("table"), feeds, tmp_path / "m")
    src = "".join(p.read_text() for p in (tmp_path / "m").glob("*.c") if "weights" not in p.name and p.name != "main.c")
    assert src.count("for (int32_t it = 0; it < 6; ++it)") == 1
    graph = tinyc.load(_indexing_model("table"))
    (node,) = graph.nodes
    assert [graph.tensor(i).shape for i in node.inputs if graph.tensor(i).is_constant] == [(6, 3)]


def test_loop_indexing_a_runtime_tensor_with_the_iteration_number_is_refused(tmp_path):
    with pytest.raises(tinyc.errors.UnsupportedError, match=r"node 'indexer.*run-time tensor"):
        tinyc.compile(_indexing_model("x"), tmp_path / "m")
