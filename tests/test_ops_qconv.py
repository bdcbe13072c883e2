"""QLinearConv -> QConv: the C kernel equals the integer golden model bit for bit, and onnxruntime
(which requantizes in float) within 1 LSB."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinyc
import tinyc.reference
from tinyc.errors import UnsupportedError
from util import ort_run, sanitized_run

_ET = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}


def qconv_model(seed: int, xshape: tuple[int, ...], oc: int, k: tuple[int, ...], group: int = 1,
                per_channel: bool = True, bias: bool = True, xdt: type = np.int8, wdt: type = np.int8,
                w_zp: int = 0, **attrs: object) -> onnx.ModelProto:
    """A one-node QLinearConv model with random constant int weights / scales / zero points."""
    r = np.random.default_rng(seed)
    c = xshape[1]
    lo, hi = (-127, 128) if wdt == np.int8 else (0, 256)
    w = r.integers(lo, hi, (oc, c // group, *k)).astype(wdt)
    ws = (r.uniform(0.002, 0.02, oc) if per_channel else np.array([0.01])).astype(np.float32)
    x_zp, y_zp = (-3, 5) if xdt == np.int8 else (120, 128)
    inits = {"x_scale": np.array(0.05, np.float32), "x_zp": np.array(x_zp, xdt), "w": w, "w_scale": ws,
             "w_zp": np.full(ws.shape, w_zp, wdt), "y_scale": np.array(r.uniform(0.1, 0.3), np.float32),
             "y_zp": np.array(y_zp, xdt)}
    names = ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"]
    if bias:
        inits["B"] = r.integers(-2000, 2000, oc).astype(np.int32)
        names.append("B")
    if group > 1:
        attrs["group"] = group
    node = helper.make_node("QLinearConv", names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "qconv_model", [helper.make_tensor_value_info("x", _ET[xdt], list(xshape))],
        [helper.make_tensor_value_info("y", _ET[xdt], [f"d{i}" for i in range(len(xshape))])],
        initializer=[numpy_helper.from_array(v, n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _input(seed: int, model: onnx.ModelProto) -> np.ndarray:
    vi = model.graph.input[0]
    dt = np.int8 if vi.type.tensor_type.elem_type == TensorProto.INT8 else np.uint8
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    info = np.iinfo(dt)
    return np.random.default_rng(seed + 100).integers(info.min, info.max + 1, shape).astype(dt)


CASES = {
    "pads_per_channel": (1, (1, 8, 9, 9), 16, (3, 3), dict(pads=[1, 1, 1, 1])),
    "depthwise_stride2": (2, (1, 8, 9, 9), 8, (3, 3), dict(group=8, strides=[2, 2], pads=[1, 0, 1, 1])),
    "depthwise_mult2_same": (3, (1, 4, 7, 7), 8, (3, 3), dict(group=4, auto_pad="SAME_UPPER", strides=[2, 2])),
    "grouped_1d_dilated": (4, (2, 6, 10), 4, (3,), dict(group=2, dilations=[2], per_channel=False)),
    "wide_tail_tiles": (5, (1, 5, 4, 4), 40, (1, 1), dict(bias=False)),
    "uint8_wzp": (6, (1, 3, 8, 8), 5, (2, 2), dict(xdt=np.uint8, wdt=np.uint8, w_zp=128, per_channel=False,
                                                    pads=[0, 1, 1, 0])),
}


def test_qconv_bit_exact_vs_golden_and_ort(tmp_path: Path) -> None:
    total = diff1 = 0
    for name, (seed, xs, oc, k, kw) in CASES.items():
        model = qconv_model(seed, xs, oc, k, **kw)
        x = _input(seed, model)
        golden = tinyc.reference.run_graph(tinyc.load(model), {"x": x})
        golden = golden["y"] if isinstance(golden, dict) else golden[0]
        out = tmp_path / name
        tinyc.compile(model, out, build=True)
        y = tinyc.run(out, {"x": x})["y"]
        assert y.dtype == x.dtype and y.shape == golden.shape, name
        np.testing.assert_array_equal(y, golden, err_msg=name)
        ref = ort_run(model, {"x": x})[0]
        d = np.abs(y.astype(np.int64) - ref.astype(np.int64))
        assert d.max() <= 1, (name, d.max())
        total += d.size
        diff1 += int((d == 1).sum())
    assert diff1 <= total // 20  # float vs fixed-point rounding: off by one only rarely


def test_qconv_sanitized(tmp_path: Path) -> None:
    seed, xs, oc, k, kw = CASES["depthwise_stride2"]
    model = qconv_model(seed, xs, oc, k, **kw)
    x = _input(seed, model)
    golden = tinyc.reference.run_graph(tinyc.load(model), {"x": x})
    golden = golden["y"] if isinstance(golden, dict) else golden[0]
    np.testing.assert_array_equal(sanitized_run(model, {"x": x}, tmp_path)["y"], golden)


def test_qconv_layout_and_requant_params() -> None:
    g = tinyc.load(qconv_model(1, (1, 8, 9, 9), 16, (3, 3), pads=[1, 1, 1, 1]))
    node = next(n for n in g.nodes if n.op == "QConv")
    assert node.attrs["layout"] == "NHWC"
    assert g.tensor(node.inputs[1]).shape == (3, 3, 8, 16)
    assert len(node.attrs["multiplier"]) == 16 and all(2**30 <= m < 2**31 for m in node.attrs["multiplier"])


def test_qconv_unsupported() -> None:
    m = qconv_model(1, (1, 2, 4, 4), 2, (1, 1))
    m.graph.input.append(helper.make_tensor_value_info("w_scale_rt", TensorProto.FLOAT, [2]))
    m.graph.node[0].input[4] = "w_scale_rt"
    with pytest.raises(UnsupportedError, match="must be a constant"):
        tinyc.load(m)
    m = qconv_model(1, (1, 2, 4, 4, 4), 2, (1, 1, 1))
    with pytest.raises(UnsupportedError, match="1D and 2D"):
        tinyc.load(m)
