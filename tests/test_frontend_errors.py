"""Bad input must give one clear error (and exit code 2 from the CLI), never a traceback."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tinyc
from tinyc.cli import main
from tinyc.errors import ModelLoadError, ShapeError, UnsupportedError
from util import make_model


def test_missing_file(tmp_path, capsys):
    with pytest.raises(ModelLoadError, match="not found"):
        tinyc.load(tmp_path / "nope.onnx")
    assert main(["inspect", str(tmp_path / "nope.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tinyc: error: model file not found") and "Traceback" not in err


def test_not_an_onnx_file(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf \xff\xfe" * 10)
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        tinyc.load(bad)
    assert main(["compile", str(bad), "-o", str(tmp_path / "o")]) == 2
    assert "not an ONNX model" in capsys.readouterr().err


def test_every_unsupported_op_listed_with_node_names(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok_relu"),
        helper.make_node("ImageDecoder", ["a"], ["b"], name="decode_1"),
        helper.make_node("StringSplit", ["a"], ["c"], name="split_7"),
        helper.make_node("Add", ["b", "c"], ["y"], name="add"),
    ]
    model = make_model(nodes, [("x", [2, 2])], [("y", [2, 2])])
    with pytest.raises(UnsupportedError) as exc:
        tinyc.load(model)
    msg = str(exc.value)
    assert "'decode_1' (ImageDecoder)" in msg and "'split_7' (StringSplit)" in msg
    assert msg.startswith("2 node(s)")


def test_unsupported_attribute_names_node():
    """Pre-opset-14 BatchNormalization in training mode also returns saved statistics: refused by name."""
    c = {k: np.ones(2, np.float32) for k in ("s", "b", "m", "v")}
    model = make_model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                                         ["y", "rm", "rv", "sm", "sv"], name="bn_training")],
                       [("x", [1, 2, 3, 3])], [("y", [1, 2, 3, 3])], initializers=c, opset=12)
    for name in ("rm", "rv", "sm", "sv"):
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [2]))
    with pytest.raises(UnsupportedError, match="bn_training.*saved statistics"):
        tinyc.load(model)


def test_dynamic_shape_names_input_and_flag(tmp_path, capsys):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", ["batch", 3, 8, 8])], [("y", ["batch", 3, 8, 8])])
    with pytest.raises(ShapeError) as exc:
        tinyc.load(model)
    assert "input 'x'" in str(exc.value) and "--input-shape x=N,3,8,8" in str(exc.value)
    path = tmp_path / "dyn.onnx"
    onnx.save(model, path)
    assert main(["inspect", str(path)]) == 2
    assert "--input-shape" in capsys.readouterr().err
    # fixing it works
    g = tinyc.load(model, input_shapes=["x=2,3,8,8"])
    assert g.tensor("x").shape == (2, 3, 8, 8)
    assert main(["inspect", str(path), "--input-shape", "x=2,3,8,8"]) == 0


def test_input_shape_errors():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", ["n", 3])], [("y", ["n", 3])])
    with pytest.raises(ShapeError, match="unknown input"):
        tinyc.load(model, input_shapes={"x": (1, 3), "z": (1,)})
    with pytest.raises(ShapeError, match="fixed to 3"):
        tinyc.load(model, input_shapes={"x": (1, 4)})


def test_missing_external_data(tmp_path):
    w = np.ones((64, 64), np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [1, 64])], [("y", [1, 64])],
                       initializers={"w": w})
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
              size_threshold=0)
    assert tinyc.load(path).tensors  # loads fine with its data file
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(ModelLoadError, match="external-data weights are missing.*weights.bin"):
        tinyc.load(path)


def test_bad_run_inputs(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 4])], [("y", [1, 4])])
    tinyc.compile(model, tmp_path / "p")
    from tinyc.errors import RunError
    with pytest.raises(RunError, match="lacks model input"):
        tinyc.run(tmp_path / "p", {"a": np.zeros((1, 4)), "b": np.zeros((1, 4))})
    with pytest.raises(RunError, match="has shape"):
        tinyc.run(tmp_path / "p", {"x": np.zeros((3, 5), np.float32)})
    with pytest.raises(RunError, match="not a tinyc output folder"):
        tinyc.run(tmp_path, {"x": np.zeros((1, 4), np.float32)})
