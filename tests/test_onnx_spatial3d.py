"""3D convolution and pooling (Conv, ConvTranspose, AveragePool, MaxPool with Indices, global
pools), LpPool, MaxUnpool, Col2Im and DeformConv: compiled C (real gcc) and the numpy golden model
against onnxruntime, or onnx's reference where the two runtimes disagree (MaxUnpool's
output_shape)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from util import inferred_model, ort_run  # noqa: E402

import tinyc  # noqa: E402
from tinyc.errors import UnsupportedError  # noqa: E402
from tinyc.reference import run_graph  # noqa: E402

RTOL = 1e-4


def _close(got: np.ndarray, ref: np.ndarray, what: str) -> None:
    assert got.shape == ref.shape, what
    if ref.dtype.kind in "iu":
        np.testing.assert_array_equal(got, ref, err_msg=what)
        return
    err = np.max(np.abs(got.astype(np.float64) - ref)) / max(1e-6, float(np.max(np.abs(ref))))
    assert err < RTOL, f"{what}: relative error {err:.2e}"


def _check(model, feeds, tmp_path, refs, bind=None, ops=()):
    """Compile with gcc and run; the C output and the golden model (run_graph) both match `refs`.
    `ops`: IR ops the imported graph must contain."""
    graph = tinyc.load(model, bind=bind)
    present = {n.op for n in graph.nodes}
    assert set(ops) <= present, present
    tinyc.compile(model, tmp_path / "m", build=True, bind=bind)
    got = tinyc.run(tmp_path / "m", feeds)
    gold = run_graph(graph, feeds)
    for o, r in zip(model.graph.output, refs):
        _close(np.asarray(got[o.name]), r, f"C {o.name}")
        _close(np.asarray(gold[o.name]), r, f"golden {o.name}")
    return graph


def _init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def _model_3d():
    """One 5-D input through 3D Conv (groups, dilations, strides, pads, bias, fused Relu,
    auto_pad), ConvTranspose (groups, output_padding, output_shape), AveragePool (both
    count_include_pad, ceil_mode), MaxPool (dilations, ceil_mode, Indices in both storage
    orders), LpPool and the global pools: (model, feeds)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 6, 7, 5)).astype(np.float32)
    w1 = (rng.standard_normal((6, 2, 3, 2, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((3, 4, 2, 2, 2)) * 0.3).astype(np.float32)
    wt = (rng.standard_normal((4, 3, 3, 2, 2)) * 0.3).astype(np.float32)
    inits = [_init("w1", w1), _init("b1", rng.standard_normal(6).astype(np.float32)), _init("w2", w2),
             _init("wt", wt), _init("bt", rng.standard_normal(6).astype(np.float32))]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1p"], group=2, dilations=[2, 1, 1], strides=[1, 2, 1], pads=[1, 0, 1, 2, 1, 0]),
        n("Relu", ["c1p"], ["c1"]),
        n("Conv", ["x", "w2"], ["c2"], auto_pad="SAME_UPPER", strides=[2, 2, 1]),
        n("ConvTranspose", ["x", "wt", "bt"], ["t1"], group=2, strides=[2, 1, 2], output_padding=[1, 0, 1], pads=[1, 0, 0, 0, 1, 1]),
        n("ConvTranspose", ["x", "wt"], ["t2"], group=2, strides=[2, 2, 2], output_shape=[12, 15, 11]),
        n("AveragePool", ["x"], ["a1"], kernel_shape=[3, 2, 2], strides=[2, 2, 2], pads=[1, 1, 0, 1, 0, 1], count_include_pad=1),
        n("AveragePool", ["x"], ["a2"], kernel_shape=[2, 3, 2], strides=[2, 2, 2], pads=[1, 0, 1, 0, 1, 0], ceil_mode=1),
        n("MaxPool", ["x"], ["m1", "i1"], kernel_shape=[2, 3, 2], strides=[1, 2, 2], dilations=[2, 1, 1], pads=[0, 1, 1, 1, 0, 0]),
        n("MaxPool", ["x"], ["m2", "i2"], kernel_shape=[2, 2, 2], strides=[2, 2, 2], ceil_mode=1, storage_order=1),
        n("LpPool", ["x"], ["l1"], kernel_shape=[2, 2, 3], strides=[2, 1, 1], p=2, pads=[0, 1, 1, 1, 0, 1]),
        n("GlobalAveragePool", ["x"], ["g1"]),
        n("GlobalMaxPool", ["x"], ["g2"]),
    ]
    outs = ["c1", "c2", "t1", "t2", "a1", "a2", "m1", "i1", "m2", "i2", "l1", "g1", "g2"]
    return inferred_model(nodes, {"x": x}, outs, inits, opset=19), {"x": x}


def test_3d_conv_pool_model(tmp_path):
    """The 3D model (_model_3d) in C and in the golden model vs onnxruntime."""
    model, feeds = _model_3d()
    graph = _check(model, feeds, tmp_path, ort_run(model, feeds), ops=("ConvND", "ConvTransposeND", "PoolND"))
    # the Relu went into the 3D conv
    assert not any(nd.op == "Relu" for nd in graph.nodes)


def test_3d_model_on_opencl(tmp_path):
    """The same templates in the OpenCL dialect (PoCL in CI): vs onnxruntime, each 3D kernel
    spread over work-items (one per image and channel)."""
    from util import opencl_or_skip
    opencl_or_skip()
    model, feeds = _model_3d()
    tinyc.compile(model, tmp_path / "cl", target="opencl")
    got = tinyc.run(tmp_path / "cl", feeds)
    for o, r in zip(model.graph.output, ort_run(model, feeds)):
        _close(np.asarray(got[o.name]), r, f"OpenCL {o.name}")
    kernels = json.loads((tmp_path / "cl" / "tinyc.json").read_text())["opencl"]["kernels"]
    sizes: dict[str, set[int]] = {}
    for k in kernels:
        sizes.setdefault(k["op"], set()).add(k["global_size"])
    # N x output channels: 2 x 6 and 2 x 3 (Conv), 2 x 6 (ConvTranspose), 2 x 4 (every pool)
    assert sizes["ConvND"] == {12, 6} and sizes["ConvTransposeND"] == {12} and sizes["PoolND"] == {8}, sizes


def test_2d_paths_unchanged():
    """1D/2D Conv and pools without Indices keep their channels-last ops (their tuned and int8
    kernels); only Indices moves a 2D MaxPool to the N-D kernel."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    n = helper.make_node
    model = inferred_model([n("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), n("MaxPool", ["c"], ["m"], kernel_shape=[2, 2]),
                            n("AveragePool", ["c"], ["a"], kernel_shape=[2, 2]), n("MaxPool", ["c"], ["mi", "ii"], kernel_shape=[2, 2])],
                           {"x": x}, ["m", "a", "mi", "ii"], [_init("w", w)], opset=19)
    ops = sorted(nd.op for nd in tinyc.load(model).nodes if nd.op not in ("Transpose",))
    assert ops == ["Conv", "Pool", "Pool", "PoolND"], ops


@pytest.mark.parametrize("order", [0, 1])
def test_maxpool_indices_1d_2d(tmp_path, order):
    """MaxPool's Indices (flat over N, C and the spatial dims; storage_order 1 column-major over
    the spatial dims) in 1D and 2D with pads, strides and dilations, vs onnxruntime."""
    rng = np.random.default_rng(2 + order)
    x2 = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    x1 = rng.standard_normal((2, 3, 9)).astype(np.float32)
    n = helper.make_node
    nodes = [n("MaxPool", ["x2"], ["y2", "i2"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], storage_order=order),
             n("MaxPool", ["x2"], ["y3", "i3"], kernel_shape=[2, 2], dilations=[2, 2], storage_order=order),
             n("MaxPool", ["x1"], ["y1", "i1"], kernel_shape=[3], strides=[2], pads=[1, 1])]
    feeds = {"x2": x2, "x1": x1}
    model = inferred_model(nodes, feeds, ["y2", "i2", "y3", "i3", "y1", "i1"], opset=12)
    _check(model, feeds, tmp_path, ort_run(model, feeds), ops=("PoolND",))


def test_lppool(tmp_path):
    """LpPool for p = 1, 2, 3 in 1D and 2D with pads, strides, dilations and auto_pad."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 3, 7, 8)).astype(np.float32)
    x1 = rng.standard_normal((2, 2, 10)).astype(np.float32)
    n = helper.make_node
    nodes = [n("LpPool", ["x"], ["a"], kernel_shape=[3, 2], p=1, pads=[1, 0, 1, 1], strides=[2, 2]),
             n("LpPool", ["x"], ["b"], kernel_shape=[2, 3], p=3, dilations=[2, 1]),
             n("LpPool", ["x"], ["c"], kernel_shape=[3, 3], p=2, auto_pad="SAME_UPPER", strides=[2, 3]),
             n("LpPool", ["x1"], ["d"], kernel_shape=[4], p=2, strides=[3], pads=[2, 1])]
    feeds = {"x": x, "x1": x1}
    model = inferred_model(nodes, feeds, ["a", "b", "c", "d"], opset=19)
    _check(model, feeds, tmp_path, ort_run(model, feeds), ops=("PoolND",))


def test_maxunpool(tmp_path):
    """MaxPool -> MaxUnpool round trip (2D and 3D) vs onnxruntime; a larger output_shape vs onnx's
    reference, which places the unpooled tensor at the start of each dim (onnxruntime instead
    reads the indices in the output's shape)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
    x3 = rng.standard_normal((1, 2, 4, 6, 4)).astype(np.float32)
    n = helper.make_node
    nodes = [n("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             n("MaxUnpool", ["p", "i"], ["u"], kernel_shape=[2, 2], strides=[2, 2]),
             n("MaxPool", ["x3"], ["p3", "i3"], kernel_shape=[2, 3, 2], strides=[2, 3, 2]),
             n("MaxUnpool", ["p3", "i3"], ["u3"], kernel_shape=[2, 3, 2], strides=[2, 3, 2])]
    feeds = {"x": x, "x3": x3}
    model = inferred_model(nodes, feeds, ["u", "u3"], opset=12)
    _check(model, feeds, tmp_path / "a", ort_run(model, feeds), ops=("MaxUnpool",))

    nodes = [n("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             n("MaxUnpool", ["p", "i", "s"], ["u"], kernel_shape=[2, 2], strides=[2, 2])]
    model = inferred_model(nodes, {"x": x}, ["u"], [_init("s", np.array([2, 3, 7, 9], np.int64))], opset=12)
    del model.graph.output[:]  # onnx infers no shape from a constant output_shape
    model.graph.output.append(helper.make_tensor_value_info("u", TensorProto.FLOAT, [2, 3, 7, 9]))
    ref = ReferenceEvaluator(model).run(None, {"x": x})
    _check(model, {"x": x}, tmp_path / "b", ref, ops=("MaxUnpool",))


def test_col2im(tmp_path):
    """Col2Im in 2D (strides, pads, dilations) and 3D vs onnxruntime."""
    rng = np.random.default_rng(6)
    # 2D: image 5x6, block 2x3, strides 1x2, pads 1,0,0,1, dilations 2x1 -> blocks 4 x 3
    x2 = rng.standard_normal((2, 2 * 6, 12)).astype(np.float32)
    x3 = rng.standard_normal((1, 3 * 8, 3 * 4 * 2)).astype(np.float32)
    n = helper.make_node
    nodes = [n("Col2Im", ["x2", "im2", "bl2"], ["y2"], strides=[1, 2], pads=[1, 0, 0, 1], dilations=[2, 1]),
             n("Col2Im", ["x3", "im3", "bl3"], ["y3"])]
    inits = [_init("im2", np.array([5, 6], np.int64)), _init("bl2", np.array([2, 3], np.int64)),
             _init("im3", np.array([4, 5, 3], np.int64)), _init("bl3", np.array([2, 2, 2], np.int64))]
    feeds = {"x2": x2, "x3": x3}
    model = inferred_model(nodes, feeds, ["y2", "y3"], inits, opset=18)
    _check(model, feeds, tmp_path, ort_run(model, feeds), ops=("Col2Im",))


def test_deform_conv(tmp_path):
    """DeformConv with groups, offset groups, mask, bias, strides, pads and dilations; offsets
    large enough to sample outside the input (zeros there) and between pixels, vs onnxruntime."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 6, 7)).astype(np.float32)
    w = (rng.standard_normal((6, 2, 3, 2)) * 0.5).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    # out: (6 + 1 + 1 - 5) // 2 + 1 = 2, (7 + 0 + 1 - 2) // 1 + 1 = 7
    off = (rng.standard_normal((2, 2 * 2 * 3 * 2, 2, 7)) * 2.0).astype(np.float32)
    mask = rng.uniform(0, 1, (2, 2 * 3 * 2, 2, 7)).astype(np.float32)
    n = helper.make_node
    nodes = [n("DeformConv", ["x", "w", "off", "b", "mask"], ["y"], group=2, offset_group=2, strides=[2, 1],
               pads=[1, 0, 1, 1], dilations=[2, 1]),
             n("DeformConv", ["x", "w2", "off2"], ["z"])]
    w2 = (rng.standard_normal((3, 4, 2, 2)) * 0.5).astype(np.float32)
    off2 = (rng.standard_normal((2, 8, 5, 6)) * 1.5).astype(np.float32)
    feeds = {"x": x, "off": off, "mask": mask, "off2": off2}
    model = inferred_model(nodes, feeds, ["y", "z"], [_init("w", w), _init("b", b), _init("w2", w2)], opset=19)
    _check(model, feeds, tmp_path, ort_run(model, feeds), ops=("DeformConv",))


def test_refusals():
    """What stays refused names the node: 4D windows, a 1D deformable convolution."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 1, 3, 3, 3, 3)).astype(np.float32)
    m = inferred_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2, 2], name="p4")], {"x": x}, ["y"])
    with pytest.raises(UnsupportedError, match="'p4'.*1D, 2D and 3D"):
        tinyc.load(m)
    xd = rng.standard_normal((1, 2, 5)).astype(np.float32)
    od = rng.standard_normal((1, 2, 4)).astype(np.float32)
    m = inferred_model([helper.make_node("DeformConv", ["x", "w", "o"], ["y"], name="dc")], {"x": xd, "o": od}, ["y"],
                       [_init("w", np.ones((1, 2, 2), np.float32))], opset=19)
    with pytest.raises(UnsupportedError, match="'dc'.*only 2D"):
        tinyc.load(m)


def test_int8_flow_keeps_3d_conv_float(tmp_path):
    """Post-training int8: the 3D Conv stays float between Q/DQ (no N-D integer conv), the 3D
    MaxPool runs on its input's int8 grid, the 2D Conv after it is a QConv; the C output equals
    the golden model bit for bit and stays near onnxruntime's float result."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 2, 5, 6, 4)).astype(np.float32)
    n = helper.make_node
    inits = [_init("w", rng.standard_normal((4, 2, 3, 3, 3)).astype(np.float32)),
             _init("w2", rng.standard_normal((3, 4, 3, 3)).astype(np.float32)),
             _init("s", np.array([1, 4, 6, 2], np.int64))]
    nodes = [n("Conv", ["x", "w"], ["c"], pads=[1] * 6), n("Relu", ["c"], ["r"]),
             n("MaxPool", ["r"], ["p"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
             n("Reshape", ["p", "s"], ["q"]), n("Conv", ["q", "w2"], ["y"], pads=[1, 1, 1, 1])]
    model = inferred_model(nodes, {"x": x}, ["y"], inits, opset=19)
    calib = {"x": rng.standard_normal((8, 2, 5, 6, 4)).astype(np.float32)}
    graph = tinyc.load(model, quantize="int8", calib=calib)
    dtype_in = {nd.op: graph.tensor(nd.inputs[0]).dtype for nd in graph.nodes}
    assert dtype_in["ConvND"] == "float32" and dtype_in["PoolND"] == "int8" and dtype_in["QConv"] == "int8"
    tinyc.compile(model, tmp_path / "q", build=True, quantize="int8", calib=calib)
    got = tinyc.run(tmp_path / "q", {"x": x})["y"]
    gold = run_graph(graph, {"x": x})
    np.testing.assert_array_equal(got, gold["y"] if isinstance(gold, dict) else gold[0])
    ref = ort_run(model, {"x": x})[0]
    assert np.abs(got - ref).max() < 0.05 * np.abs(ref).max()
