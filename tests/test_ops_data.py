"""Softmax family, Reduce*/ArgMax, and data-movement ops (Concat, Split, Slice, Gather, Pad,
Tile, Expand): compiled C and the numpy reference against onnxruntime (or onnx.reference where
onnxruntime lacks a kernel for a dtype), the layout pass pushing transposes through them, and
clear UnsupportedErrors. Several ops share one model so each build covers many cases."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import shutil

import tinyc
import tinyc.reference
from tinyc.errors import ModelLoadError, ShapeError, UnsupportedError

NP2ONNX = {np.dtype(k): v for k, v in [("float32", TensorProto.FLOAT), ("float64", TensorProto.DOUBLE),
                                       ("int8", TensorProto.INT8), ("uint8", TensorProto.UINT8),
                                       ("int16", TensorProto.INT16), ("uint16", TensorProto.UINT16),
                                       ("int32", TensorProto.INT32), ("uint32", TensorProto.UINT32),
                                       ("int64", TensorProto.INT64), ("uint64", TensorProto.UINT64),
                                       ("bool", TensorProto.BOOL)]}


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], outputs: list[str],
           inits: list[onnx.TensorProto] = (), opset: int = 18) -> onnx.ModelProto:
    from util import inferred_model
    return inferred_model(nodes, inputs, outputs, inits, opset=opset, ir_version=8, name="t", check=True)


def _expected(model: onnx.ModelProto, feeds: dict[str, np.ndarray], use_ort: bool = True) -> dict[str, np.ndarray]:
    names = [o.name for o in model.graph.output]
    if use_ort:
        res = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    else:
        res = ReferenceEvaluator(model).run(None, feeds)
    return dict(zip(names, res))


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp: Path, use_ort: bool = True,
           rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Compiled C and tinyc's numpy reference both match the runtime on every output."""
    exp = _expected(model, feeds, use_ort)
    ref = tinyc.reference.run_graph(tinyc.load(model), feeds)
    tinyc.compile(model, tmp, build=True)
    got = tinyc.run(tmp, feeds)
    for name, e in exp.items():
        for what, g in (("C", got[name]), ("numpy reference", ref[name])):
            assert g.shape == e.shape, f"{name} ({what}): shape {g.shape} != {e.shape}"
            # onnx.reference widens some integer reductions to int64; the ONNX type is the input's
            assert g.dtype == e.dtype or not use_ort, f"{name} ({what}): dtype {g.dtype} != {e.dtype}"
            if e.dtype.kind == "f":
                np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"{name} ({what})")
            else:
                np.testing.assert_array_equal(g, e, err_msg=f"{name} ({what})")


# -- softmax family ---------------------------------------------------------------------------
def test_softmax_family(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 3, 4, 5)) * 4).astype(np.float32)
    x[0, 0, 0, :] = 1000.0  # stability: exp would overflow without subtracting the max
    nodes, outs = [], []
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        for axis in (0, 1, 2, -1):
            outs.append(f"{op}_{axis + 4}")
            nodes.append(helper.make_node(op, ["x"], [outs[-1]], axis=axis))
    _check(_model(nodes, {"x": x}, outs, opset=13), {"x": x}, tmp_path / "m13")


def test_softmax_opset11_coerced_2d(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    nodes = [helper.make_node(op, ["x"], [f"{op}{a}"], axis=a)
             for op in ("Softmax", "LogSoftmax", "Hardmax") for a in (0, 1, 2)]
    nodes.append(helper.make_node("Softmax", ["x"], ["sdef"]))
    _check(_model(nodes, {"x": x}, [n.output[0] for n in nodes], opset=11), {"x": x}, tmp_path / "m11")


# -- reductions -------------------------------------------------------------------------------
REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]
AXES_CASES = [([1], 1), ([0, 2], 0), ([-1], 1), ([1, 3], 1), ([], 0), ([0, 1, 2, 3], 1)]


def test_reductions_float(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 1.5, (2, 3, 4, 5)).astype(np.float32)  # positive: LogSum/Prod well defined
    nodes, inits, outs = [], [], []
    for op in REDUCE_OPS:
        for k, (axes, keep) in enumerate(AXES_CASES):
            name = f"{op}_{k}"
            inputs = ["x"]
            if axes:
                inits.append(_i64(f"{name}_axes", axes))
                inputs.append(f"{name}_axes")
            nodes.append(helper.make_node(op, inputs, [name], keepdims=keep))
            outs.append(name)
    nodes.append(helper.make_node("ReduceSum", ["x", "empty"], ["noop"], noop_with_empty_axes=1))
    inits.append(_i64("empty", []))
    for k, (op, axis, keep, last) in enumerate([("ArgMax", 1, 1, 0), ("ArgMin", 3, 0, 1), ("ArgMax", -1, 0, 1),
                                                 ("ArgMin", 0, 1, 0)]):
        nodes.append(helper.make_node(op, ["xr"], [f"arg{k}"], axis=axis, keepdims=keep, select_last_index=last))
    xr = rng.integers(0, 3, (2, 3, 4, 5)).astype(np.float32)  # ties exercise select_last_index
    outs += ["noop"] + [f"arg{k}" for k in range(4)]
    _check(_model(nodes, {"x": x, "xr": xr}, outs, inits, opset=18), {"x": x, "xr": xr}, tmp_path / "r",
           rtol=1e-5, atol=1e-5)


def test_reductions_int_and_attribute_axes(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    xi = rng.integers(-50, 50, (3, 4, 5)).astype(np.int32)
    xb = rng.integers(0, 2, (3, 4)).astype(bool)
    xf = rng.standard_normal((3, 4, 5)).astype(np.float64)
    nodes = [helper.make_node(op, ["xi"], [f"i_{op}"], axes=[1], keepdims=0)
             for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceSumSquare")]
    nodes += [helper.make_node(op, ["xf"], [f"f_{op}"], axes=[0, 2], keepdims=1)
              for op in ("ReduceMean", "ReduceLogSumExp", "ReduceL2")]
    nodes += [helper.make_node("ReduceMean", ["xf"], ["f_all"], keepdims=0)]
    outs = [n.output[0] for n in nodes]
    feeds = {"xi": xi, "xf": xf}
    _check(_model(nodes, feeds, outs, opset=11), feeds, tmp_path / "ri", use_ort=False)
    # bool ReduceMax/Min (opset 20)
    nodes = [helper.make_node(op, ["xb", "ax"], [op], keepdims=0) for op in ("ReduceMax", "ReduceMin")]
    _check(_model(nodes, {"xb": xb}, ["ReduceMax", "ReduceMin"], [_i64("ax", [1])], opset=20), {"xb": xb},
           tmp_path / "rb", use_ort=False)


# -- data movement ----------------------------------------------------------------------------
def _movement_model(dtype: str, opset: int = 18) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Concat/Split/Slice/Gather/Pad/Tile/Expand on one input of `dtype`."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 100, (2, 3, 4)).astype(dtype) if dtype != "float32" else \
        rng.standard_normal((2, 3, 4)).astype(np.float32)
    y = (rng.integers(0, 100, (2, 2, 4)) > 40).astype(dtype)
    c = numpy_helper.from_array((np.arange(8).reshape(2, 1, 4) % 2).astype(dtype), "c")
    inits = [c, _i64("split", [1, 2]), _i64("s0", [3, -1]), _i64("e0", [-100, 0]), _i64("a0", [2, 0]),
             _i64("st0", [-2, -1]), _i64("s1", [1]), _i64("e1", [1000]), _i64("gi", [2, -1, 0, 2]), _i64("g0", [1, -2, 1]),
             _i64("gs", 1), _i64("pads", [1, 0, 2, 0, 1, 1]), _i64("pneg", [0, -1, 1, 1, 0, -1]),
             _i64("pax", [2]), _i64("pax_p", [1, 2]), _i64("reps", [2, 1, 3]), _i64("shape", [3, 1, 2, 4]), _i64("shape2", [2, 3, 1]),
             numpy_helper.from_array(np.array(7).astype(dtype), "cv")]
    n = helper.make_node
    nodes = [
        n("Concat", ["x", "y", "c", "x"], ["concat1"], axis=1),
        n("Concat", ["x", "x"], ["concat_last"], axis=-1),
        n("Split", ["x", "split"], ["split_a", "split_b"], axis=1),
        n("Split", ["x"], ["sp0", "sp1"], axis=-2, num_outputs=2),
        n("Slice", ["x", "s0", "e0", "a0", "st0"], ["slice_neg"]),
        n("Slice", ["x", "s1", "e1"], ["slice_clamp"]),
        n("Gather", ["x", "gi"], ["gather1"], axis=2),
        n("Gather", ["x", "gs"], ["gather_scalar"], axis=1),
        n("Gather", ["x", "g0"], ["gather0"], axis=-3),
        n("Pad", ["x", "pads", "cv"], ["pad_const"], mode="constant"),
        n("Pad", ["x", "pax_p", "", "pax"], ["pad_axes"], mode="edge"),
        n("Pad", ["x", "pads"], ["pad_reflect"], mode="reflect"),
        n("Pad", ["x", "pads"], ["pad_wrap"], mode="wrap"),
        n("Tile", ["x", "reps"], ["tile"]),
        n("Expand", ["y", "shape"], ["expand"]),
        n("Expand", ["split_a", "shape2"], ["expand_mid"]),
    ]
    if dtype == "float32":  # onnx.reference (np.pad) cannot crop; onnxruntime checks this one
        nodes.append(n("Pad", ["x", "pneg"], ["pad_crop"]))
    outs = [o for nd in nodes for o in nd.output]
    return _model(nodes, {"x": x, "y": y}, outs, inits, opset), {"x": x, "y": y}


def test_data_movement_float32(tmp_path: Path) -> None:
    m, feeds = _movement_model("float32")
    _check(m, feeds, tmp_path / "f32")


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64", "bool", "float64"])
def test_data_movement_dtypes(tmp_path: Path, dtype: str) -> None:
    m, feeds = _movement_model(dtype)
    _check(m, feeds, tmp_path / dtype, use_ort=False)


def test_data_movement_old_opsets(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    n = helper.make_node
    nodes = [n("Slice", ["x"], ["slice9"], starts=[1, -3], ends=[100, -1], axes=[0, 2]),
             n("Split", ["x"], ["s_a", "s_b"], axis=2, split=[2, 3]),
             n("Split", ["x"], ["e_a", "e_b"], axis=1),
             n("Pad", ["x"], ["pad2"], pads=[0, 1, 2, 0, 1, 0], mode="constant", value=1.5),
             n("Pad", ["x"], ["pad2r"], pads=[0, 1, 2, 0, 1, 3], mode="reflect")]
    outs = [o for nd in nodes for o in nd.output]
    m = _model(nodes, {"x": x}, outs, opset=9)
    _check(m, {"x": x}, tmp_path / "old")


def test_gather_runtime_indices(tmp_path: Path) -> None:
    """An embedding lookup: constant table, indices fed at run time (negative ones wrap)."""
    table = numpy_helper.from_array(np.random.default_rng(7).standard_normal((10, 6)).astype(np.float32), "table")
    ids = np.array([[0, 9, -1], [3, -10, 4]], dtype=np.int64)
    m = _model([helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0)], {"ids": ids}, ["emb"], [table],
               opset=13)
    _check(m, {"ids": ids}, tmp_path / "emb")


# -- layout: transposes pushed through (permute) --------------------------------------------
def test_permute_through_conv_chain(tmp_path: Path) -> None:
    """Conv -> op -> Conv for each op: with NHWC I/O no Transpose may be left anywhere."""
    rng = np.random.default_rng(8)
    inits: list[onnx.TensorProto] = []

    def w(name: str, cout: int, cin: int) -> str:
        inits.append(numpy_helper.from_array(rng.standard_normal((cout, cin, 1, 1)).astype(np.float32), name))
        return name

    n = helper.make_node
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    nodes = [n("Conv", ["x", w("w1", 4, 4)], ["a"]), n("Conv", ["x", w("w1b", 4, 4)], ["b"])]
    branches = [  # (nodes, output, channels)
        ([n("Softmax", ["a"], ["sm"], axis=1)], "sm", 4),
        ([n("LogSoftmax", ["a"], ["lsm"], axis=2)], "lsm", 4),
        ([n("ReduceMean", ["a"], ["rm"], axes=[2, 3], keepdims=1)], "rm", 4),
        ([n("ReduceSum", ["a", "ax1"], ["rx"], keepdims=1)], "rx", 1),
        ([n("Concat", ["a", "b", "k"], ["cat"], axis=1)], "cat", 10),
        ([n("Split", ["a", "sp"], ["s1", "s2"], axis=1), n("Add", ["s1", "s2"], ["spl"])], "spl", 2),
        ([n("Slice", ["a", "st", "en", "ax23", "stp"], ["sl"])], "sl", 4),
        ([n("Pad", ["a", "pads"], ["pd"], mode="reflect")], "pd", 4),
        ([n("Gather", ["a", "gi"], ["ga"], axis=1)], "ga", 3),
        ([n("Tile", ["a", "reps"], ["ti"])], "ti", 4),
    ]
    inits += [_i64("ax23", [2, 3]), _i64("ax1", [1]), _i64("sp", [2, 2]), _i64("st", [5, 1]), _i64("en", [0, 5]),
              _i64("stp", [-2, 1]), _i64("pads", [0, 0, 1, 2, 0, 0, 2, 1]), _i64("gi", [3, -1, 0]),
              _i64("reps", [1, 1, 2, 1]),
              numpy_helper.from_array(rng.standard_normal((1, 2, 6, 6)).astype(np.float32), "k")]
    outs = []
    for k, (bn, out, ch) in enumerate(branches):
        nodes += bn
        nodes.append(n("Conv", [out, w(f"w2_{k}", 3, ch)], [f"y{k}"]))
        outs.append(f"y{k}")
    m = _model(nodes, {"x": x}, outs, inits, opset=13)
    g = tinyc.load(m, io_layout="nhwc")
    assert [nd.op for nd in g.nodes if nd.op == "Transpose"] == [], [nd.op for nd in g.nodes]
    _check(m, {"x": x}, tmp_path / "layout", rtol=1e-4, atol=1e-5)


def test_permute_refusals_leave_node_unchanged() -> None:
    """can_permute vetoes (the pass asks it first); permute then changes nothing."""
    from tinyc.ir import Graph, Node, Tensor
    from tinyc.ops import get_op
    g = Graph("g")
    g.add_tensor(Tensor("x", (2, 3, 4, 5)))
    g.add_tensor(Tensor("y", (2, 3, 4, 5)))
    soft = Node("s", "Softmax", ["x"], ["y"], {"kind": "softmax", "axes": [1, 2]})
    assert not get_op("Softmax").can_permute(soft, g, [0, 3, 1, 2])  # {3, 1}: not contiguous
    assert not get_op("Softmax").permute(soft, g, [0, 3, 1, 2]) and soft.attrs["axes"] == [1, 2]
    assert get_op("Softmax").can_permute(soft, g, [0, 2, 3, 1])  # {2, 3}
    red = Node("r", "ReduceSum", ["x"], ["y"], {"axes": [1], "keepdims": False})
    assert not get_op("ReduceSum").permute(red, g, [0, 2, 3, 1]) and red.attrs["axes"] == [1]
    g.add_tensor(Tensor("i", (2, 2), "int32", np.zeros((2, 2), np.int32)))
    gat = Node("g", "Gather", ["x", "i"], ["y"], {"axis": 1})
    assert not get_op("Gather").can_permute(gat, g, [0, 2, 3, 1])


# -- numpy reference alone vs onnxruntime (cheap: no builds) ---------------------------------
def test_reference_matches_onnxruntime_random() -> None:
    rng = np.random.default_rng(10)
    for trial in range(30):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(d) for d in rng.integers(1, 5, rank))
        x = rng.standard_normal(shape).astype(np.float32)
        ax = int(rng.integers(-rank, rank))
        starts = [int(v) for v in rng.integers(-6, 6, rank)]
        ends = [int(v) for v in rng.integers(-6, 6, rank)]
        steps = [int(v) for v in rng.choice([-2, -1, 1, 2, 3], rank)]
        pads = [int(v) for v in rng.integers(0, 3, 2 * rank)]
        axes = sorted({int(a) for a in rng.integers(0, rank, int(rng.integers(1, rank + 1)))})
        inits = [_i64("s", starts), _i64("e", ends), _i64("a", list(range(rank))), _i64("st", steps),
                 _i64("p", pads), _i64("rax", axes), _i64("gi", [0, -1])]
        n = helper.make_node
        nodes = [n("Softmax", ["x"], ["sm"], axis=ax), n("LogSoftmax", ["x"], ["lsm"], axis=ax),
                 n("Slice", ["x", "s", "e", "a", "st"], ["sl"]), n("Pad", ["x", "p"], ["pe"], mode="edge"),
                 n("Pad", ["x", "p"], ["pc"]), n("ReduceSumSquare", ["x", "rax"], ["rs"], keepdims=trial % 2),
                 n("ReduceLogSumExp", ["x", "rax"], ["rl"], keepdims=1), n("Gather", ["x", "gi"], ["g"], axis=ax),
                 n("ArgMin", ["x"], ["am"], axis=ax, keepdims=trial % 2)]
        if any(shape[k] + pads[k] + pads[rank + k] == 0 for k in range(rank)):
            continue
        outs = [o for nd in nodes for o in nd.output]
        m = _model(nodes, {"x": x}, outs, inits, opset=18)
        g = tinyc.load(m)
        if any(0 in g.tensor(o).shape for o in g.outputs):
            continue  # empty slices fold to constants; nothing to compare
        ref = tinyc.reference.run_graph(g, {"x": x})
        exp = _expected(m, {"x": x})
        for k in outs:
            np.testing.assert_allclose(ref[k], exp[k], rtol=1e-5, atol=1e-6, err_msg=f"{k} trial {trial}")


# -- sanitizers ---------------------------------------------------------------------------------
def _sanitized_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp: Path) -> dict[str, np.ndarray]:
    from util import sanitized_run
    return sanitized_run(model, feeds, tmp)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_sanitizers_clean(tmp_path: Path) -> None:
    """Every kernel family (incl. scratch-using Softmax/ArgMax/LogSumExp paths, pads, negative
    strides) runs clean under AddressSanitizer and UBSan, and still gives the right answers."""
    rng = np.random.default_rng(11)
    m, feeds = _movement_model("int16")
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    n = helper.make_node
    nodes = [n("Softmax", ["x"], ["sm"], axis=1), n("LogSoftmax", ["x"], ["lsm"], axis=2),
             n("Hardmax", ["x"], ["hm"], axis=0), n("ArgMax", ["x"], ["am"], axis=1),
             n("ReduceLogSumExp", ["x", "ax"], ["lse"], keepdims=0), n("ReduceMean", ["x", "ax"], ["rm"]),
             n("ReduceL2", ["x", "ax2"], ["l2"], keepdims=0)]
    m2 = _model(nodes, {"x": x}, [nd.output[0] for nd in nodes], [_i64("ax", [1, 3]), _i64("ax2", [0, 2])])
    for k, (model, fd) in enumerate([(m, feeds), (m2, {"x": x})]):
        (tmp_path / f"s{k}").mkdir()
        got = _sanitized_run(model, fd, tmp_path / f"s{k}")
        exp = _expected(model, fd, use_ort=k == 1)
        for name, e in exp.items():
            np.testing.assert_allclose(got[name].astype(np.float64), np.asarray(e).astype(np.float64),
                                       rtol=1e-5, atol=1e-5, err_msg=name)


# -- unsupported variations -------------------------------------------------------------------
def test_empty_reductions_fold_to_constants() -> None:
    """Reducing a zero-size input needs no code: the identity (finalised) is the answer."""
    want = {"ReduceSum": 0.0, "ReduceProd": 1.0, "ReduceMax": -np.inf, "ReduceMin": np.inf, "ReduceL2": 0.0,
            "ReduceLogSum": -np.inf, "ReduceLogSumExp": -np.inf}
    nodes = [helper.make_node(op, ["x", "ax"], [op], keepdims=1) for op in want]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n", 4])],
                          [helper.make_tensor_value_info(op, TensorProto.FLOAT, [2, 1, 4]) for op in want],
                          [_i64("ax", [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    graph = tinyc.load(m, input_shapes={"x": (2, 0, 4)})
    assert graph.nodes == []
    for op, v in want.items():
        np.testing.assert_array_equal(graph.tensor(graph.outputs[list(want).index(op)]).data, np.full((2, 1, 4), v))


def _raw(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], inits: list[onnx.TensorProto] = (),
         opset: int = 18) -> onnx.ModelProto:
    """A one-output model (rank 3, as every case below; its type left to inference) for nodes tinyc must refuse."""
    g = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(k, NP2ONNX[v.dtype], v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, ["a", "b", "c"])], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_unsupported_are_clear() -> None:
    x = np.zeros((2, 3, 4), np.float32)
    n = helper.make_node
    cases = [
        (_raw([n("Slice", ["x", "s", "e"], ["y"])], {"x": x, "s": np.array([0], np.int64)}, [_i64("e", [1])]),
         None, "starts"),
        (_raw([n("Pad", ["x", "p"], ["y"], mode="reflect")], {"x": x}, [_i64("p", [0, -1, 0, 0, 0, 0])]),
         None, "negative pads"),
        (_raw([n("ReduceSum", ["x", "ax"], ["y"])], {"x": x, "ax": np.array([0], np.int64)}), None, "axes"),
        (_raw([n("Softmax", ["x"], ["y"])], {"x": x.astype(np.int32)}, opset=13), None, "int32"),
        (_raw([n("ArgMax", ["x"], ["y"], axis=1)], {"x": np.zeros((2, 0, 4), np.float32)}), {"x": (2, 0, 4)},
         "empty axis"),
        (_raw([n("Pad", ["x", "p"], ["y"], mode="edge")], {"x": x}, [_i64("p", [0, 0, 0, 0, 0, 0, 1, 1])]),
         None, "(?i)pads"),
        (_raw([n("Gather", ["x", "i"], ["y"], axis=1)], {"x": x}, [_i64("i", [3])]), None, "out of range"),
        (_raw([n("Split", ["x"], ["y", "z"], axis=1)], {"x": x}, opset=13), None, "equal parts|evenly"),
    ]
    for model, shapes, needle in cases:
        # an int32 Softmax and 8 pads for a rank-3 Pad break ONNX's own rules: model validation refuses them
        with pytest.raises((UnsupportedError, ModelLoadError, ShapeError), match=needle):
            tinyc.load(model, input_shapes=shapes)
