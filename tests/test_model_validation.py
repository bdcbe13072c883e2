"""Untrusted models: a malformed or inconsistent model is refused up front with one clear line (a
TinycError subclass; `tinyc: error: ...` and exit 2 from the CLI), never a traceback, and a model
onnxruntime refuses is refused. One case per class of defect, plus the reproducers of the mutation
campaign in shared/reliability/ (tinyc/frontend/validate.py and the ops' shape rules)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh

import tinyc
from tinyc.cli import main
from tinyc.errors import ModelLoadError, ShapeError, TinycError, UnsupportedError
from tinyc.frontend import validate

RELIABILITY = Path(__file__).resolve().parent.parent.parent / "shared" / "reliability"
F = TP.FLOAT


def vi(name: str, t: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, t, shape)


def model(nodes, inputs, outputs, inits=(), opset: int = 17, ir: int = 8) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m


def relu(out_type: int = F, out_shape=(1, 4), **kw) -> onnx.ModelProto:
    return model([helper.make_node("Relu", ["x"], ["y"], name="act")], [vi("x", F, [1, 4])],
                 [vi("y", out_type, list(out_shape))], **kw)


def conv(w=(4, 3, 3, 3), b=None, x=(1, 3, 8, 8), wdt=np.float32, **attrs) -> onnx.ModelProto:
    inits = [nh.from_array(np.ones(w, wdt), "w")]
    ins = ["x", "w"]
    if b is not None:
        inits.append(nh.from_array(np.ones(b, np.float32), "b"))
        ins.append("b")
    return model([helper.make_node("Conv", ins, ["y"], name="conv", **attrs)], [vi("x", F, list(x))],
                 [vi("y", F, ["n", "c", "h", "w"])], inits)


def conv_t(w=(3, 2, 3, 3), x=(1, 3, 4, 4), **attrs) -> onnx.ModelProto:
    return model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="deconv", **attrs)],
                 [vi("x", F, list(x))], [vi("y", F, ["n", "c", "h", "w"])],
                 [nh.from_array(np.ones(w, np.float32), "w")])


def pool(op: str = "MaxPool", **attrs) -> onnx.ModelProto:
    return model([helper.make_node(op, ["x"], ["y"], name="pool", **attrs)], [vi("x", F, [1, 1, 4, 4])],
                 [vi("y", F, ["n", "c", "h", "w"])])


def gemm(a=(2, 4), b=(4, 3), c=None, **attrs) -> onnx.ModelProto:
    inits = [nh.from_array(np.ones(b, np.float32), "b")]
    ins = ["a", "b"]
    if c is not None:
        inits.append(nh.from_array(np.ones(c, np.float32), "c"))
        ins.append("c")
    return model([helper.make_node("Gemm", ins, ["y"], name="fc", **attrs)], [vi("a", F, list(a))],
                 [vi("y", F, ["m", "n"])], inits)


def qdq(op: str, scale, zp=0) -> onnx.ModelProto:
    inits = [nh.from_array(np.array(scale, np.float32), "s"), nh.from_array(np.array(zp, np.uint8), "z")]
    x_t, y_t = (F, TP.UINT8) if op == "QuantizeLinear" else (TP.UINT8, F)
    return model([helper.make_node(op, ["x", "s", "z"], ["y"], name="q")], [vi("x", x_t, [4])], [vi("y", y_t, [4])],
                 inits, opset=19)


def _no_outputs() -> onnx.ModelProto:
    m = relu()
    m.graph.ClearField("output")
    return m


def _elem_type(t: int) -> onnx.ModelProto:
    m = relu()
    m.graph.input[0].type.tensor_type.elem_type = t
    return m


def _raw_and_float_data() -> onnx.ModelProto:
    t = nh.from_array(np.ones((2, 2), np.float32), "w")
    t.raw_data = b""
    t.float_data.extend([1.0] * 4)
    return model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", F, [2, 2])], [vi("y", F, [2, 2])], [t])


def _zero_point_out_of_range() -> onnx.ModelProto:
    m = qdq("QuantizeLinear", 0.1)
    z = onnx.TensorProto()
    z.name, z.data_type = "z", TP.UINT8
    z.int32_data.append(300)
    m.graph.initializer[1].CopyFrom(z)
    return m


def _bad_utf8() -> onnx.ModelProto:
    m = conv(group=1)
    data = m.SerializeToString().replace(b"group", b"grou\xf0")
    return onnx.load_from_string(data)


def _value_info_type() -> onnx.ModelProto:
    m = model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
              [vi("x", F, [1, 4])], [vi("y", F, [1, 4])])
    m.graph.value_info.append(vi("h", TP.INT32, [1, 4]))
    return m


# (id, model builder, error class, message fragment, what onnxruntime does: "load" refuses at load,
#  "run" fails at its first run, "runs" computes something)
CASES: list[tuple[str, Callable[[], onnx.ModelProto], type, str, str]] = [
    # the onnx checker (full mode) and the file's structure
    ("bad-utf8-name", _bad_utf8, ModelLoadError, "not valid UTF-8", "load"),
    ("unknown-elem-type", lambda: _elem_type(77), ModelLoadError, "element type 77, which is not an ONNX data type",
     "load"),
    ("float-data-and-empty-raw-data", _raw_and_float_data, ModelLoadError, "raw_data holds 0 bytes", "load"),
    ("zero-point-out-of-range", _zero_point_out_of_range, ModelLoadError, "value 300 is out of range for UINT8",
     "runs"),
    ("no-graph-outputs", _no_outputs, ModelLoadError, "no graph outputs", "run"),
    ("opset-99", lambda: relu(opset=99), UnsupportedError, "opsets 1 to 28", "load"),
    # declared types and shapes must agree with inference
    ("declared-output-type", lambda: relu(TP.INT64), ModelLoadError,
     "graph output 'y' is declared tensor(int64) [1,4], but onnx inference gives tensor(float)", "load"),
    ("declared-output-shape", lambda: relu(F, (1, 5)), ShapeError, "declared tensor(float) [1,5]", "runs"),
    ("value-info-type", _value_info_type, ModelLoadError, "value_info 'h' is declared tensor(int32)", "load"),
    # the schemas' type constraints
    ("int32-weights-into-float-conv", lambda: conv(wdt=np.int32), ModelLoadError,
     "input 'w' (W) is tensor(int32), which type T does not allow", "load"),
    ("add-mixed-types", lambda: model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", F, [2, 2])],
                                      [vi("y", F, [2, 2])], [nh.from_array(np.ones((2, 2), np.int32), "w")]),
     ModelLoadError, "type T binds them to one element type", "load"),
    # Conv / ConvTranspose / pools
    ("conv-negative-pads", lambda: conv(pads=[-1, 0, 0, 0]), ShapeError, "pads must not contain negative", "load"),
    ("conv-pads-length", lambda: conv(pads=[1, 1]), ShapeError, "pads has incorrect size", "load"),
    ("conv-zero-dilation", lambda: conv(dilations=[0, 1]), ShapeError, "dilations must only contain positive", "load"),
    ("conv-zero-stride", lambda: conv(strides=[0, 1]), ShapeError, "strides must only contain positive", "load"),
    ("conv-kernel-larger-than-padded-input", lambda: conv(w=(4, 3, 9, 9)), ShapeError,
     "more than the padded input", "run"),
    ("conv-kernel-shape-vs-weights", lambda: conv(kernel_shape=[2, 2]), ShapeError,
     "kernel_shape [2, 2] differs from the weights' kernel [3, 3]", "run"),
    ("conv-group-does-not-divide", lambda: conv(w=(4, 1, 3, 3), group=2), ShapeError, "group 2 must divide", "run"),
    ("conv-output-channels-vs-group", lambda: conv(x=(1, 4, 8, 8), w=(3, 2, 3, 3), group=2), ShapeError,
     "output channels (3)", "run"),
    ("conv-weight-channels", lambda: conv(w=(4, 2, 3, 3)), ShapeError, "2 input channels per group", "run"),
    ("conv-bias-length", lambda: conv(b=(5,)), ShapeError, "bias of shape [5] must be 1-D", "run"),
    ("conv-empty-bias", lambda: conv(b=(0,)), ShapeError, "bias of shape [0]", "run"),
    ("conv-auto-pad-with-pads", lambda: conv(auto_pad="SAME_UPPER", pads=[1, 1, 1, 1]), ShapeError,
     "auto_pad=SAME_UPPER together with explicit pads", "load"),
    ("convtranspose-negative-pads", lambda: conv_t(pads=[-1, 0, 0, 0]), ShapeError, "pads must not contain negative",
     "load"),
    ("convtranspose-group", lambda: conv_t(group=2), ShapeError, "divisible by group", "load"),
    ("convtranspose-auto-pad-with-pads", lambda: conv_t(auto_pad="VALID", pads=[0, 0, 0, 0]), ShapeError,
     "cannot be used simultaneously with auto_pad", "load"),
    ("maxpool-zero-kernel", lambda: pool(kernel_shape=[0, 2]), ShapeError, "kernel_shape must only contain positive",
     "load"),
    ("maxpool-pads-not-smaller-than-kernel", lambda: pool(kernel_shape=[2, 2], pads=[2, 0, 0, 0]), ShapeError,
     "must be smaller than the kernel", "load"),
    ("maxpool-kernel-larger-than-input", lambda: pool(kernel_shape=[5, 5]), ShapeError, "more than the padded input",
     "runs"),
    ("averagepool-auto-pad-with-pads", lambda: pool("AveragePool", kernel_shape=[2, 2], pads=[1, 1, 1, 1],
                                                     auto_pad="VALID"), ShapeError, "together with explicit pads",
     "runs"),
    # Gemm / MatMul
    ("gemm-inner-dimension", lambda: gemm(a=(2, 5)), ShapeError, "Dimension mismatch", "load"),
    ("gemm-transB-inner-dimension", lambda: gemm(b=(3, 4)), ShapeError, "Dimension mismatch", "load"),
    ("gemm-bias-length", lambda: gemm(c=(5,)), ShapeError,
     "bias C of shape [5] does not broadcast to the result [2, 3]", "run"),
    ("gemm-bias-2d", lambda: gemm(c=(2, 5)), ShapeError, "does not broadcast", "run"),
    ("matmul-inner-dimension", lambda: model([helper.make_node("MatMul", ["a", "b"], ["y"])], [vi("a", F, [2, 5])],
                                             [vi("y", F, ["m", "n"])],
                                             [nh.from_array(np.ones((4, 3), np.float32), "b")]),
     ShapeError, "Incompatible dimensions", "load"),
    # data movement (the fuzz campaign's VWW model with a 5-D input before its 4-axis Transpose)
    ("transpose-perm-vs-rank", lambda: model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1])],
                                             [vi("x", F, [1, 2, 3, 4])], [vi("y", F, ["a", "b", "c"])]),
     ShapeError, "is not a permutation of the input's 4 axes", "run"),
    # broadcasting an old opset did not have (the fuzz campaign's ResNet-8 relabelled opset 6)
    ("opset6-add-without-broadcast-attr",
     lambda: model([helper.make_node("Add", ["x", "b"], ["y"])], [vi("x", F, [1, 10])], [vi("y", F, [1, 10])],
                   [nh.from_array(np.ones(10, np.float32), "b")], opset=6),
     ShapeError, "at opset 6 Add does not broadcast without broadcast=1", "load"),
    # quantization scales (onnxruntime runs all of these; their outputs are inf, NaN or meaningless)
    ("quantize-zero-scale", lambda: qdq("QuantizeLinear", 0.0), UnsupportedError, "y_scale 0 is zero", "runs"),
    ("quantize-negative-scale", lambda: qdq("QuantizeLinear", -1.0), UnsupportedError, "is negative", "runs"),
    ("quantize-subnormal-scale", lambda: qdq("QuantizeLinear", 1e-40), UnsupportedError, "is subnormal", "runs"),
    ("quantize-nan-scale", lambda: qdq("QuantizeLinear", np.nan), UnsupportedError, "is not finite", "runs"),
    ("dequantize-zero-scale", lambda: qdq("DequantizeLinear", 0.0), UnsupportedError, "x_scale 0 is zero", "runs"),
    ("dequantize-subnormal-scale", lambda: qdq("DequantizeLinear", 1e-40), UnsupportedError, "is subnormal", "runs"),
    ("dequantize-inf-scale", lambda: qdq("DequantizeLinear", np.inf), UnsupportedError, "is not finite", "runs"),
]


def _feed(sess) -> dict[str, np.ndarray]:
    kinds = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8}
    return {i.name: np.ones([d if isinstance(d, int) else 1 for d in i.shape], kinds.get(i.type, np.float32))
            for i in sess.get_inputs()}


def ort_outcome(m: onnx.ModelProto) -> str:
    """"load" (onnxruntime refuses the model), "run" (its first run fails) or "runs"."""
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception:
        return "load"
    try:
        sess.run(None, _feed(sess))
    except Exception:
        return "run"
    return "runs"


def assert_cli_refuses(path: Path, fragment: str, capsys) -> None:
    capsys.readouterr()
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("tinyc: error: ") and fragment in err, err


@pytest.mark.parametrize("case_id,build,error,fragment,ort", CASES, ids=[c[0] for c in CASES])
def test_invalid_model_refused(case_id, build, error, fragment, ort, tmp_path, capsys):
    m = build()
    with pytest.raises(error) as exc:
        tinyc.load(m)
    msg = str(exc.value)
    assert fragment in msg and "\n" not in msg, msg
    assert ort_outcome(m) == ort, f"onnxruntime no longer behaves as recorded ({ort}) for {case_id}"
    path = tmp_path / f"{case_id}.onnx"
    path.write_bytes(m.SerializeToString())
    assert_cli_refuses(path, fragment, capsys)


REPRODUCERS = [
    ("m0023", ModelLoadError, "node '/0/Conv' (Conv) → attribute #1: field 'name' is not valid UTF-8", "load"),
    ("m0166", ModelLoadError, "input 'input' has element type 77, which is not an ONNX data type", "load"),
    ("m0192", ModelLoadError, "no graph outputs", "run"),
    ("m0210", ShapeError, "node '/0/Conv' (Conv): Attribute pads must not contain negative values", "load"),
    ("m0376", ModelLoadError, "raw_data holds 0 bytes, but shape [64] of FLOAT needs 256", "load"),
    ("m0500", ShapeError, "node '/13/Gemm' (Gemm): bias C of shape [11] does not broadcast to the result [1, 10]",
     "run"),
]


@pytest.mark.parametrize("name,error,fragment,ort", REPRODUCERS, ids=[r[0] for r in REPRODUCERS])
def test_reliability_reproducer(name, error, fragment, ort, capsys):
    path = RELIABILITY / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    with pytest.raises(error) as exc:
        tinyc.load(path)
    assert fragment in str(exc.value), str(exc.value)
    m = onnx.load(str(path), load_external_data=False)
    assert ort_outcome(m) == ort
    assert_cli_refuses(path, fragment, capsys)


def test_every_error_is_a_tinyc_error():
    for _, build, error, _, _ in CASES:
        assert issubclass(error, TinycError)


def test_opset_range_is_the_released_one():
    """The upper bound is the newest released opset, which onnxruntime accepts; one more it refuses."""
    top = validate.max_opset()
    assert top == max(row[2] for row in helper.VERSION_TABLE)
    m = relu(opset=top)
    m.ir_version = max(row[1] for row in helper.VERSION_TABLE if row[2] == top)
    tinyc.load(m)
    assert ort_outcome(m) == "runs"
    over = relu(opset=top + 1)
    over.ir_version = m.ir_version
    with pytest.raises(UnsupportedError, match=f"opset {top + 1}; tinyc handles ai.onnx opsets 1 to {top}"):
        tinyc.load(over)
    assert ort_outcome(over) == "load"


def test_input_with_initializer_is_its_default(tmp_path):
    """IR >= 4: a graph input that also has an initializer takes the initializer as its default.
    onnxruntime lists it as an overridable initializer (not an input) and uses the default when it
    is not fed; tinyc freezes it to that default and the C builds."""
    ort = pytest.importorskip("onnxruntime")
    b = np.arange(4, dtype=np.float32).reshape(1, 4)
    m = model([helper.make_node("Add", ["x", "b"], ["y"])], [vi("x", F, [1, 4]), vi("b", F, [1, 4])],
              [vi("y", F, [1, 4])], [nh.from_array(b, "b")])
    g = tinyc.load(m)
    assert g.inputs == ["x"] and g.tensor("b").is_constant
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["x"]
    x = np.full((1, 4), 10, np.float32)
    want = sess.run(None, {"x": x})[0]
    tinyc.compile(m, tmp_path / "p")
    got = tinyc.run(tmp_path / "p", {"x": x})["y"]
    np.testing.assert_allclose(got, want)


def test_valid_qdq_weights_with_a_zero_channel_scale_are_accepted():
    """A constant's DequantizeLinear may carry a per-channel scale of exactly 0 (an all-zero
    channel): only activation scales must be positive."""
    w = np.zeros((2, 3), np.int8)
    inits = [nh.from_array(w, "wq"), nh.from_array(np.array([0.5, 0.0], np.float32), "ws"),
             nh.from_array(np.zeros(2, np.int8), "wz")]
    m = model([helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
               helper.make_node("MatMul", ["x", "w"], ["y"])],
              [vi("x", F, [1, 2])], [vi("y", F, [1, 3])], inits, opset=19)
    tinyc.load(m)
