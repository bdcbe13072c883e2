"""What a user sees when a .tflite cannot be compiled: one line naming the problem (operator index,
builtin or custom name, tensor names), never a traceback — and a fuzzed file never gets further
than such an error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.tflite_models import Op, T, build, single_op
from tinyc.errors import ModelLoadError, ShapeError, TinycError, UnsupportedError
from tinyc.frontend.tflite import import_tflite


def _relu_model() -> bytes:
    x = T("x", (1, 4), "float32")
    return single_op("RELU", [x], [T("y", (1, 4), "float32")])


def test_every_unsupported_op_is_named_with_index_and_tensors():
    x, a, b = T("x", (1, 4), "float32"), T("a", (1, 4), "float32"), T("b", (1, 4), "float32")
    ops = [Op("LSH_PROJECTION", ["x"], ["a"]), Op("RELU", ["a"], ["b"]), Op("SKIP_GRAM", ["b"], ["y"])]
    model = build([x, a, b, T("y", (1, 4), "float32")], ops, ["x"], ["y"])
    with pytest.raises(UnsupportedError) as err:
        import_tflite(model)
    msg = str(err.value)
    assert "LSH_PROJECTION" in msg and "SKIP_GRAM" in msg and "\n" not in msg
    assert "#0 LSH_PROJECTION (x -> a)" in msg and "#2 SKIP_GRAM (b -> y)" in msg


def test_custom_op_is_named_by_its_custom_code():
    x = T("x", (1, 4), "float32")
    model = single_op("CUSTOM", [x], [T("y", (1, 4), "float32")], custom_code="MyVendorOp")
    with pytest.raises(UnsupportedError, match=r"custom op 'MyVendorOp' \(x -> y\)"):
        import_tflite(model)


def test_not_a_tflite_file(tmp_path):
    bad = tmp_path / "model.tflite"
    bad.write_bytes(b"\x08\x07\x12\x04onnx" + bytes(100))
    with pytest.raises(ModelLoadError, match="not a TFLite model"):
        import_tflite(bad)
    with pytest.raises(ModelLoadError, match="cannot read model"):
        import_tflite(tmp_path / "missing.tflite")


def test_float16_model_is_refused_with_a_remedy():
    w = T("w", (4, 4), "float16", data=np.eye(4, dtype=np.float16))
    x, wf, y = T("x", (1, 4), "float32"), T("wf", (4, 4), "float32"), T("y", (1, 4), "float32")
    ops = [Op("DEQUANTIZE", ["w"], ["wf"]), Op("FULLY_CONNECTED", ["x", "wf", None], ["y"], {})]
    model = build([w, x, wf, y], ops, ["x"], ["y"])
    with pytest.raises(UnsupportedError, match="float16 model.*quantize to int8"):
        import_tflite(model)


def test_int16_activations_are_refused():
    x = T("x", (1, 8), "int16", scale=1 / 4096, zero_point=0)
    model = single_op("LOGISTIC", [x], [T("y", (1, 8), "int16", scale=1 / 32768, zero_point=0)])
    with pytest.raises(UnsupportedError, match=r"int16 activations \(16x8 quantization\)"):
        import_tflite(model)


def test_dynamic_input_shape_is_refused():
    x = T("x", (1, 4), "float32", shape_signature=(1, -1))
    model = single_op("RELU", [x], [T("y", (1, 4), "float32")])
    with pytest.raises(ShapeError, match="input 'x' has a dynamic shape"):
        import_tflite(model)


def test_cli_error_is_one_line_without_traceback(tmp_path):
    bad = tmp_path / "m.tflite"
    bad.write_bytes(bytes(64))
    r = subprocess.run(
        [sys.executable, "-m", "tinyc", "compile", str(bad), "-o", str(tmp_path / "o")], capture_output=True, text=True
    )
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "not a TFLite model" in r.stderr
    assert not (tmp_path / "o" / "tinyc.json").exists()


def test_inspect_lists_the_tflite_graph(tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(_relu_model())
    r = subprocess.run([sys.executable, "-m", "tinyc", "inspect", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "relu_0" in r.stdout.lower() or "Relu" in r.stdout


KWS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny" / "mlperf_kws_dscnn" / "tflm_int8.tflite"


def test_subgraph_input_index_out_of_range_is_a_clear_error():
    """Found by the fuzz test below: one flipped bit made the subgraph's input index 2 of 2 tensors,
    and the import failed with an IndexError deep in the converter."""
    buf = bytearray(_relu_model())
    buf[164] ^= 1 << 1
    with pytest.raises(ModelLoadError, match="subgraph input refers to tensor 2, the subgraph has 2"):
        import_tflite(bytes(buf))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_flatbuffers_fail_cleanly(data):
    """Flipped bytes, truncations and overwritten offsets in a real model: the import either works
    or raises a TinycError; no other exception escapes (IndexError, struct.error, numpy errors...)."""
    buf = bytearray(KWS.read_bytes() if data.draw(st.booleans()) else _relu_model())
    for _ in range(data.draw(st.integers(1, 8))):
        kind = data.draw(st.sampled_from(["flip", "truncate", "word"]))
        pos = data.draw(st.integers(0, len(buf) - 1))
        if kind == "flip":
            buf[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "truncate":
            del buf[max(8, pos):]
        else:
            word = data.draw(st.integers(0, 2**32 - 1)).to_bytes(4, "little")
            buf[pos : pos + 4] = word
    try:
        import_tflite(bytes(buf))
    except TinycError:
        pass
