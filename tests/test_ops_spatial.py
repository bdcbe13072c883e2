"""ConvTranspose, Resize/Upsample, LRN and InstanceNormalization: numpy references against the onnx
node tests, compiled C against onnxruntime, and the channels-last flow through all of them."""
from __future__ import annotations

import functools
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from util import ort_run  # noqa: E402

import tinyc  # noqa: E402
from tinyc.errors import UnsupportedError  # noqa: E402
from tinyc.reference import run_graph  # noqa: E402

OPS = {"ConvTranspose", "Resize", "Upsample", "LRN", "InstanceNormalization"}
# onnx node tests that cover a variation tinyc refuses on purpose (3D ConvTranspose runs now)
UNSUPPORTED: set[str] = set()
# node tests also compiled to C (one per family plus the trickiest tables)
COMPILED = ["test_convtranspose_output_shape", "test_convtranspose_autopad_same", "test_resize_tf_crop_and_resize_axes_3_2",
            "test_resize_downsample_scales_cubic_antialias", "test_resize_upsample_sizes_nearest_not_larger",
            "test_lrn_default", "test_instancenorm_epsilon"]


@functools.lru_cache(maxsize=1)
def _node_cases() -> dict[str, tuple[onnx.ModelProto, list, list, float, float]]:
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    out = {}
    for c in cases:
        if {n.op_type for n in c.model.graph.node} & OPS:
            inputs, outputs = c.data_sets[0]
            out[c.name] = (c.model, [np.asarray(i) for i in inputs], [np.asarray(o) for o in outputs], c.rtol, c.atol)
    return out


def _bind(model: onnx.ModelProto, inputs: list[np.ndarray]) -> tuple[dict, dict]:
    """Freeze every input but the first (weights, scales, sizes, roi) to a constant."""
    names = [i.name for i in model.graph.input]
    return {names[0]: inputs[0]}, dict(zip(names[1:], inputs[1:]))


def _model(nodes, inputs, outputs, inits, opset=19, in_type=TensorProto.FLOAT):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, in_type, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, in_type, ["d"] * r) for n, r in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _compile_run(model, tmp_path, feeds, name="m"):
    tinyc.compile(model, tmp_path / name, build=True)
    return tinyc.run(tmp_path / name, feeds)


# -- onnx node tests ---------------------------------------------------------------------------
def test_node_cases_reference():
    """Every onnx node test of these ops: the numpy reference (after all passes) matches, or the
    case is refused with a clear UnsupportedError."""
    cases = _node_cases()
    assert len(cases) >= 55
    for name, (model, inputs, outputs, rtol, atol) in cases.items():
        feeds, bind = _bind(model, inputs)
        if name in UNSUPPORTED:
            with pytest.raises(UnsupportedError, match="1D and 2D"):
                tinyc.load(model, bind=bind)
            continue
        graph = tinyc.load(model, bind=bind)
        got = list(run_graph(graph, feeds).values())
        for g, r in zip(got, outputs):
            assert g.shape == r.shape, name
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("name", COMPILED)
def test_node_cases_compiled(name, tmp_path):
    model, inputs, outputs, rtol, atol = _node_cases()[name]
    feeds, bind = _bind(model, inputs)
    tinyc.compile(model, tmp_path / "m", build=True, bind=bind)
    got = tinyc.run(tmp_path / "m", feeds)
    for o, r in zip(model.graph.output, outputs):
        np.testing.assert_allclose(got[o.name], r, rtol=rtol, atol=atol)


# -- ConvTranspose -------------------------------------------------------------------------------
def test_convtranspose_variants(tmp_path):
    """Several transposed convolutions over one input (groups, strides, dilations, pads,
    output_padding, output_shape, auto_pad, fused ReLU), compiled channels-last, vs onnxruntime."""
    rng = np.random.default_rng(1)
    variants = [
        dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
        dict(group=2, strides=[2, 3], dilations=[2, 1], kernel_shape=[3, 2]),
        dict(group=4, strides=[1, 2], pads=[0, 1, 2, 0]),                         # depthwise-like
        dict(strides=[3, 2], output_shape=[16, 13]),                              # extends past the full result
        dict(strides=[2, 2], output_shape=[9, 9]),                                # crops (even totals)
        dict(strides=[2, 2], auto_pad="SAME_LOWER", kernel_shape=[4, 4]),
        dict(strides=[1, 1], auto_pad="VALID", dilations=[2, 3]),
    ]
    nodes, inits, outs = [], {}, []
    for k, attrs in enumerate(variants):
        g = attrs.get("group", 1)
        ks = attrs.get("kernel_shape", [3, 3])
        inits[f"w{k}"] = (rng.standard_normal((4, 3, *ks)) * 0.5).astype(np.float32)
        inits[f"b{k}"] = rng.standard_normal(3 * g).astype(np.float32)
        out = f"y{k}"
        if k % 3 == 0:
            nodes += [helper.make_node("ConvTranspose", ["x", f"w{k}", f"b{k}"], [out + "_p"], **attrs),
                      helper.make_node("Relu", [out + "_p"], [out])]
        else:
            nodes.append(helper.make_node("ConvTranspose", ["x", f"w{k}"] + ([f"b{k}"] if k % 2 else []), [out], **attrs))
        outs.append((out, 4))
    model = _model(nodes, [("x", [2, 4, 5, 6])], outs, inits, opset=17)
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    graph = tinyc.load(model)
    cts = [n for n in graph.nodes if n.op == "ConvTranspose"]
    assert all(n.attrs["layout"] == "NHWC" for n in cts)
    assert sum(1 for n in cts if n.attrs.get("activation")) == 3 and not any(n.op == "Relu" for n in graph.nodes)
    ref = ort_run(model, {"x": x})
    got = _compile_run(graph, tmp_path, {"x": x})
    for (name, _), r in zip(outs, ref):
        np.testing.assert_allclose(got[name], r, rtol=1e-4, atol=1e-4, err_msg=name)


def test_convtranspose_1d(tmp_path):
    rng = np.random.default_rng(2)
    inits = {"w": rng.standard_normal((6, 2, 3)).astype(np.float32), "b": rng.standard_normal(6).astype(np.float32)}
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=3, strides=[2], pads=[1, 0],
                            output_padding=[1])
    model = _model([node], [("x", [1, 6, 7])], [("y", 3)], inits, opset=17)
    x = rng.standard_normal((1, 6, 7)).astype(np.float32)
    np.testing.assert_allclose(_compile_run(model, tmp_path, {"x": x})["y"], ort_run(model, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)


# -- Resize / Upsample ---------------------------------------------------------------------------
def test_resize_modes_vs_ort(tmp_path):
    """Modes whose arithmetic onnxruntime and onnx.reference agree on (integral output widths)."""
    rng = np.random.default_rng(3)
    empty = np.zeros(0, np.float32)
    configs = [
        (dict(mode="nearest"), [1, 1, 2, 3], None),
        (dict(mode="nearest", nearest_mode="floor", coordinate_transformation_mode="asymmetric"), [1, 1, 0.5, 0.5], None),
        (dict(mode="nearest", nearest_mode="ceil", coordinate_transformation_mode="align_corners"), None, [2, 3, 7, 5]),
        (dict(mode="linear"), [1, 1, 2, 0.5], None),
        (dict(mode="linear", coordinate_transformation_mode="align_corners"), None, [2, 3, 9, 3]),
        (dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), None, [2, 3, 1, 10]),
        (dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1), [1, 1, 2, 1.5], None),
        (dict(mode="linear", antialias=1), [1, 1, 0.5, 0.25], None),
        (dict(mode="linear", axes=[3, 2], keep_aspect_ratio_policy="not_smaller"), None, [5, 9]),
        (dict(mode="nearest", axes=[1]), [3.0], None),
        (dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-2.0),
         None, [2, 3, 5, 6]),
    ]
    nodes, inits, outs = [], {"roi": empty, "crop": np.array([0, 0, -0.2, 0.1, 1, 1, 0.8, 1.3], np.float32)}, []
    for k, (attrs, scales, sizes) in enumerate(configs):
        ins = ["x", "crop" if "tf_crop" in str(attrs) else "roi", "", ""]
        if scales is not None:
            inits[f"s{k}"] = np.array(scales, np.float32)
            ins[2] = f"s{k}"
        else:
            inits[f"z{k}"] = np.array(sizes, np.int64)
            ins[3] = f"z{k}"
        while not ins[-1]:
            ins.pop()
        nodes.append(helper.make_node("Resize", ins, [f"y{k}"], **attrs))
        outs.append((f"y{k}", 4))
    model = _model(nodes, [("x", [2, 3, 6, 8])], outs, inits)
    x = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
    ref = ort_run(model, {"x": x})
    got = _compile_run(model, tmp_path, {"x": x})
    for (name, _), r in zip(outs, ref):
        np.testing.assert_allclose(got[name], r, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("op,opset,mode", [("Resize", 10, "nearest"), ("Resize", 10, "linear"),
                                           ("Upsample", 9, "linear"), ("Upsample", 7, "nearest")])
def test_resize_legacy_vs_ort(op, opset, mode, tmp_path):
    """Resize-10 and Upsample: asymmetric coordinates, nearest floors (upsampling) or ceils (down)."""
    rng = np.random.default_rng(4)
    scales = [1, 1, 0.6, 1.7] if op == "Resize" else [1, 1, 2, 1.5]
    if opset == 7:
        nodes, inits = [helper.make_node(op, ["x"], ["y"], mode=mode, scales=scales)], {}
    else:
        nodes, inits = [helper.make_node(op, ["x", "s"], ["y"], mode=mode)], {"s": np.array(scales, np.float32)}
    model = _model(nodes, [("x", [1, 2, 5, 7])], [("y", 4)], inits, opset=opset)
    x = rng.standard_normal((1, 2, 5, 7)).astype(np.float32)
    np.testing.assert_allclose(_compile_run(model, tmp_path, {"x": x})["y"], ort_run(model, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)


def test_resize_nearest_uint8(tmp_path):
    """Nearest only moves data, so any element type works."""
    x = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(1, 2, 3, 4)
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")
    model = _model([node], [("x", [1, 2, 3, 4])], [("y", 4)], {"s": np.array([1, 1, 2, 1.5], np.float32)},
                   in_type=TensorProto.UINT8)
    np.testing.assert_array_equal(_compile_run(model, tmp_path, {"x": x})["y"], ort_run(model, {"x": x})[0])


# -- the channels-last chain ---------------------------------------------------------------------
def test_conv_convtranspose_resize_chain_stays_nhwc(tmp_path):
    """Conv -> ReLU -> ConvTranspose -> Resize -> LRN -> InstanceNorm -> Conv runs channels-last
    end to end: the only Transposes left are at the model's input and output."""
    rng = np.random.default_rng(5)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("ConvTranspose", ["r1", "w2", "b2"], ["t1"], strides=[2, 2], pads=[1, 1, 1, 1],
                         output_padding=[1, 1]),
        helper.make_node("Resize", ["t1", "", "sc"], ["z1"], mode="linear"),
        helper.make_node("LRN", ["z1"], ["l1"], size=3, alpha=0.01),
        helper.make_node("InstanceNormalization", ["l1", "s", "bb"], ["n1"]),
        helper.make_node("Conv", ["n1", "w3", "b3"], ["y"], pads=[1, 1, 1, 1]),
    ]
    inits = {"w1": w(8, 3, 3, 3), "b1": w(8), "w2": w(8, 6, 3, 3), "b2": w(6),
             "sc": np.array([1, 1, 1.5, 2], np.float32), "s": w(6), "bb": w(6), "w3": w(4, 6, 3, 3), "b3": w(4)}
    model = _model(nodes, [("x", [1, 3, 8, 8])], [("y", 4)], inits)
    graph = tinyc.load(model)
    ops = [n.op for n in graph.nodes]
    assert ops == ["Transpose", "Conv", "ConvTranspose", "Resize", "LRN", "InstanceNorm", "Conv", "Transpose"], ops
    resize = next(n for n in graph.nodes if n.op == "Resize")
    assert resize.attrs["sizes"] == [1, 24, 32, 6]
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(_compile_run(graph, tmp_path, {"x": x})["y"], ort_run(model, {"x": x})[0],
                               rtol=1e-3, atol=1e-4)


def test_lrn_instancenorm_nchw(tmp_path):
    """At the model's input they stay NCHW (channel axis 1, strided window). onnxruntime only
    takes odd LRN sizes; the even one is checked against the ONNX formula written out here."""
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("LRN", ["x"], ["l"], size=5, alpha=0.5, beta=0.6, bias=1.5),
             helper.make_node("InstanceNormalization", ["x", "s", "b"], ["n"], epsilon=1e-3),
             helper.make_node("LRN", ["x"], ["e"], size=4, alpha=0.3)]
    inits = {"s": rng.standard_normal(5).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
    model = _model(nodes, [("x", [2, 5, 3, 4])], [("l", 4), ("n", 4), ("e", 4)], inits, opset=17)
    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    got = _compile_run(model, tmp_path, {"x": x})
    odd = _model(nodes[:2], [("x", [2, 5, 3, 4])], [("l", 4), ("n", 4)], inits, opset=17)
    for name, r in zip(["l", "n"], ort_run(odd, {"x": x})):
        np.testing.assert_allclose(got[name], r, rtol=1e-4, atol=1e-5)
    sq = np.zeros_like(x)
    for c in range(5):  # window c-1 .. c+2 for size 4
        sq[:, c] = (x[:, max(0, c - 1):min(5, c + 3)] ** 2).sum(axis=1)
    np.testing.assert_allclose(got["e"], x / (1.0 + 0.3 / 4 * sq) ** 0.75, rtol=1e-4, atol=1e-6)


# -- refusals ------------------------------------------------------------------------------------
def test_unsupported_variations_are_clear():
    empty = np.zeros(0, np.float32)
    resize_dyn = _model([helper.make_node("Resize", ["x", "roi", "s"], ["y"])], [("x", [1, 1, 2, 2]), ("s", [4])],
                        [("y", 4)], {"roi": empty})
    with pytest.raises(UnsupportedError, match="scales.*constant"):
        tinyc.load(resize_dyn)
    linear_int = _model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")], [("x", [1, 1, 2, 2])],
                        [("y", 4)], {"s": np.array([1, 1, 2, 2], np.float32)}, in_type=TensorProto.INT8)
    with pytest.raises(UnsupportedError, match="float32 only"):
        tinyc.load(linear_int)
    ct_dyn = _model([helper.make_node("ConvTranspose", ["x", "w"], ["y"])], [("x", [1, 2, 3, 3]), ("w", [2, 2, 3, 3])],
                    [("y", 4)], {})
    with pytest.raises(UnsupportedError, match="weights must be constant"):
        tinyc.load(ct_dyn)
