"""Input data comes from outside: bad data is refused in one line (exit 2), never a traceback or a
silently wrong number. The checks live in tinyc.quantize.feeds and every runner goes through them:
host (ctypes, or the runner executable for a sanitizer build), a board, OpenCL, validate,
calibration and --bind."""
from __future__ import annotations

import pickle
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

import tinyc
from tinyc.cli import main
from tinyc.errors import RunError, TinycError, UsageError
from tinyc.quantize.feeds import to_model_input
from tinyc.targets.host import load_manifest
from util import REPO, make_model, ort_run

sys.path.insert(0, str(REPO / "examples" / "digits"))
from data import load_split  # noqa: E402

DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    x_train, _, x_test, y_test = load_split()
    d = tmp_path_factory.mktemp("data")
    np.savez(d / "calib.npz", input=x_train[:64])
    return {"dir": d, "x": x_test[:6].astype(np.float32), "y": y_test[:6]}


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The float digits model, built for the host."""
    out = tmp_path_factory.mktemp("digits") / "f"
    tinyc.compile(DIGITS, out, build=True)
    return out


@pytest.fixture(scope="module")
def digits_int8_io(tmp_path_factory, data):
    """The int8 digits model taking and giving int8 (--io-dtype int8), built for the host."""
    out = tmp_path_factory.mktemp("digits_q") / "q"
    tinyc.compile(DIGITS, out, quantize="int8", calib=data["dir"] / "calib.npz", io_dtype="int8", build=True)
    return out


def _cli(args, capsys):
    """(exit code, the error line) of `tinyc ARGS`; an error is exactly one `tinyc: error:` line."""
    capsys.readouterr()
    rc = main([str(a) for a in args])
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if "it/s" not in line and "sample/s" not in line and "%|" not in line]  # tqdm
    if rc:
        assert len(err) == 1, err
        assert err[0].startswith("tinyc: error: ") and "Traceback" not in err[0]
        return rc, err[0]
    return rc, ""


# ------------------------------------------------------------------------------ files and arrays

def _bad_files(d, x):
    """(file, the message it must give) for every class of bad data file or array."""
    cases = []
    np.savez(d / "strings.npz", input=np.array(["a", "b"]))
    cases.append(("strings.npz", r"input 'input' holds <U1 data \(strings\); give numbers"))
    np.savez(d / "bytes.npz", input=np.array([b"ab"]))
    cases.append(("bytes.npz", r"holds \|S2 data \(bytes\)"))
    np.savez(d / "complex.npz", input=np.zeros((1, 1, 8, 8), np.complex64))
    cases.append(("complex.npz", r"holds complex64 data \(complex numbers\)"))
    np.savez(d / "objects.npz", input=np.array([1, "a"], dtype=object))
    cases.append(("objects.npz", r"array 'input' holds Python objects \(it needs unpickling, which tinyc never does\)"))
    np.save(d / "objects.npy", np.array([1, "a"], dtype=object))
    cases.append(("objects.npy", r"objects.npy holds Python objects"))
    np.savez(d / "empty_batch.npz", input=np.zeros((0, 1, 8, 8), np.float32))
    cases.append(("empty_batch.npz", r"input 'input' holds no samples \(shape \(0, 1, 8, 8\)\)"))
    np.savez(d / "shape.npz", input=np.zeros((2, 1, 8, 9), np.float32))
    cases.append(("shape.npz", r"input 'input' has shape \(2, 1, 8, 9\); expected \(1, 1, 8, 8\)"))
    np.savez(d / "missing.npz", a=x, b=x)
    cases.append(("missing.npz", r"input data lacks model input\(s\) input"))
    np.savez(d / "extra.npz", input=x, inptu=x)
    cases.append(("extra.npz", r"array\(s\) 'inptu' that are not model inputs .*expected keys: 'input'.*"
                               r"found keys: 'input', 'inptu'"))
    np.savez(d / "good.npz", input=x)
    (d / "truncated.npz").write_bytes((d / "good.npz").read_bytes()[:200])
    cases.append(("truncated.npz", r"truncated.npz is not a readable .npz/.npy file \(truncated or corrupt"))
    np.save(d / "good.npy", x)
    (d / "truncated.npy").write_bytes((d / "good.npy").read_bytes()[:300])
    cases.append(("truncated.npy", r"truncated.npy is not a readable .npz/.npy file \(truncated or corrupt"))
    with open(d / "pickled.npz", "wb") as f:
        pickle.dump({"input": x}, f)
    cases.append(("pickled.npz", r"pickled.npz is not a readable .npz/.npy file \(neither a zip archive"))
    (d / "empty.npz").write_bytes(b"")
    cases.append(("empty.npz", r"empty.npz is not a readable .npz/.npy file .*it is empty"))
    (d / "folder.npz").mkdir(exist_ok=True)
    cases.append(("folder.npz", r"folder.npz is a directory, not an .npz/.npy file"))
    cases.append(("nope.npz", r"input file .*nope.npz does not exist"))
    np.savez(d / "float_overflow.npz", input=np.full((1, 1, 8, 8), 1e300))
    cases.append(("float_overflow.npz", r"value 1e\+300 at index 0 .* is outside float32's range"))
    return cases


def test_bad_input_files_are_one_line_errors(tmp_path, digits, data, capsys):
    for name, message in _bad_files(tmp_path, data["x"]):
        rc, err = _cli(["run", digits, "--input", tmp_path / name], capsys)
        assert rc == 2, name
        assert re.search(message, err), (name, err)
        with pytest.raises(TinycError, match=message):  # the API says the same
            tinyc.run(digits, tmp_path / name)


def test_bad_arrays_through_the_api(digits, data):
    x = data["x"]
    with pytest.raises(RunError, match="input 'input' is not a rectangular array"):
        tinyc.run(digits, {"input": [[1.0, 2.0], [3.0]]})
    with pytest.raises(RunError, match=r"holds <U3 data \(strings\)"):
        tinyc.run(digits, {"input": np.array(["abc"])})
    with pytest.raises(RunError, match=r"holds object data \(Python objects\)"):
        tinyc.run(digits, {"input": np.array([None, 1.0], dtype=object)})
    with pytest.raises(RunError, match="holds no samples"):
        tinyc.run(digits, {"input": x[:0]})
    with pytest.raises(RunError, match=r"'extra' that are not model inputs"):
        tinyc.run(digits, {"input": x, "extra": x})
    with pytest.raises(UsageError, match="inputs must be a path to an .npz/.npy file"):
        tinyc.run(digits, 42)
    # labels (a key named 'labels') are not inputs and are ignored; one array alone is a one-input
    # model's input
    np.testing.assert_array_equal(tinyc.run(digits, {"input": x, "labels": data["y"]})["logits"],
                                  tinyc.run(digits, x)["logits"])


def test_no_traceback_from_a_real_process(tmp_path, digits):
    np.savez(tmp_path / "s.npz", input=np.array(["x"]))
    r = subprocess.run([sys.executable, "-m", "tinyc", "run", str(digits), "--input", str(tmp_path / "s.npz")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["tinyc: error: input 'input' holds <U1 data (strings); give numbers "
                                             "(int or float) or bool"]


def test_npy_is_accepted_for_one_input_models(tmp_path, digits, data, capsys):
    x = data["x"]
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "x.npz", input=x)
    assert _cli(["run", digits, "--input", tmp_path / "x.npy", "--output", tmp_path / "a.npz"], capsys)[0] == 0
    assert _cli(["run", digits, "--input", tmp_path / "x.npz", "--output", tmp_path / "b.npz"], capsys)[0] == 0
    np.testing.assert_array_equal(np.load(tmp_path / "a.npz")["logits"], np.load(tmp_path / "b.npz")["logits"])
    # a two-input model cannot take one array
    two = make_model([helper.make_node("Add", ["a", "b"], ["y"])], [("a", [1, 4]), ("b", [1, 4])], [("y", [1, 4])])
    tinyc.compile(two, tmp_path / "two")
    np.save(tmp_path / "one.npy", np.zeros((1, 4), np.float32))
    rc, err = _cli(["run", tmp_path / "two", "--input", tmp_path / "one.npy"], capsys)
    assert rc == 2 and "is an .npy file holding one array; the model has 2 inputs (a, b)" in err


# ------------------------------------------------------------------------------ int8 inputs

def test_int8_io_refuses_out_of_range_integers(tmp_path, digits_int8_io, capsys):
    spec = load_manifest(digits_int8_io)["inputs"][0]
    x = np.zeros((1, 1, 8, 8), np.int64)
    x.flat[17] = 300
    np.savez(tmp_path / "x300.npz", input=x)
    rc, err = _cli(["run", digits_int8_io, "--input", tmp_path / "x300.npz"], capsys)
    assert rc == 2
    assert "input 'input': value 300 at index 17 (element (0, 0, 2, 1)) is outside int8 [-128, 127]" in err
    assert "give float data to have it quantized" in err
    with pytest.raises(RunError, match=r"value 255 at index 0 .* is outside int8 \[-128, 127\] \(and 127 more\)"):
        tinyc.run(digits_int8_io, {"input": np.full((2, 1, 8, 8), 255, np.uint8)})
    with pytest.raises(RunError, match=r"value -129 at index 63 .* is outside int8"):
        tinyc.run(digits_int8_io, {"input": np.r_[np.zeros(63), -129].astype(np.int64).reshape(1, 1, 8, 8)})
    with pytest.raises(RunError, match=r"value 4294967296 at index 1 .* is outside int8"):
        tinyc.run(digits_int8_io, {"input": np.r_[0, 2 ** 32, np.zeros(62)].astype(np.int64).reshape(1, 1, 8, 8)})
    # in range: any integer dtype gives the same as int8 data
    q = np.random.default_rng(0).integers(-128, 128, size=(3, 1, 8, 8))
    ref = tinyc.run(digits_int8_io, {"input": q.astype(np.int8)})["logits"]
    np.testing.assert_array_equal(tinyc.run(digits_int8_io, {"input": q.astype(np.int64)})["logits"], ref)
    assert to_model_input(spec, q[0].astype(np.int32)).dtype == np.int8


def test_int8_io_float_data_is_quantized_but_nan_and_inf_are_refused(tmp_path, digits_int8_io, data, capsys):
    spec = load_manifest(digits_int8_io)["inputs"][0]
    x = data["x"]
    want = np.stack([to_model_input(spec, x[k]) for k in range(len(x))])
    np.testing.assert_array_equal(tinyc.run(digits_int8_io, {"input": x})["logits"],
                                  tinyc.run(digits_int8_io, {"input": want})["logits"])
    for bad in (np.nan, np.inf, -np.inf):
        xb = x.copy()
        xb.flat[70] = bad
        np.savez(tmp_path / "bad.npz", input=xb)
        rc, err = _cli(["run", digits_int8_io, "--input", tmp_path / "bad.npz"], capsys)
        assert rc == 2
        assert (f"input 'input': value {bad} at index 70 (element (1, 0, 0, 6)) cannot be quantized to int8 "
                f"(scale {spec['quant']['scale']:.6g}, zero point {spec['quant']['zero_point']}): NaN and ±Inf "
                "are refused") in err, err


def test_float_input_passes_nan_and_inf_through(tmp_path, digits, data):
    """IEEE semantics for float inputs: NaN and ±Inf reach the kernels unchanged (vs onnxruntime)."""
    x = data["x"][:3].copy()
    x.flat[10], x.flat[64 + 3] = np.nan, np.inf
    got = tinyc.run(digits, {"input": x})["logits"]
    ref = np.concatenate([ort_run(DIGITS, {"input": x[k:k + 1]})[0] for k in range(len(x))])
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert np.isnan(got[:2]).all() and np.isfinite(got[2]).all()
    model = make_model([helper.make_node("Mul", ["x", "two"], ["m"]), helper.make_node("Add", ["m", "one"], ["y"])],
                       [("x", [1, 6])], [("y", [1, 6])], {"two": np.float32(2), "one": np.float32(1)})
    tinyc.compile(model, tmp_path / "p", build=True)
    x = np.array([[[1.5, np.nan, np.inf, -np.inf, -0.0, 3e38]], [[0, 1, 2, 3, 4, np.nan]]], np.float32)
    got = tinyc.run(tmp_path / "p", {"x": x})["y"]
    ref = np.stack([ort_run(model, {"x": xi})[0] for xi in x])
    np.testing.assert_array_equal(got, ref)  # NaN-aware: NaN positions must match
    assert np.isnan(got[0, 0, 1]) and got[0, 0, 2] == np.inf and got[0, 0, 3] == -np.inf and got[0, 0, 5] == np.inf


# ------------------------------------------------------------------------------ calibration, --bind, validate, profile

def test_calibration_data_is_checked(tmp_path, capsys):
    np.savez(tmp_path / "s.npz", input=np.array(["a"]))
    rc, err = _cli(["quantize", DIGITS, "--calib", tmp_path / "s.npz"], capsys)
    assert rc == 2 and "calibration data: input 'input' holds <U1 data (strings)" in err
    np.savez(tmp_path / "good.npz", input=np.zeros((4, 1, 8, 8), np.float32))
    (tmp_path / "cut.npz").write_bytes((tmp_path / "good.npz").read_bytes()[:150])
    rc, err = _cli(["compile", DIGITS, "-o", tmp_path / "o", "--calib", tmp_path / "cut.npz"], capsys)
    assert rc == 2 and "calibration file" in err and "is not a readable .npz/.npy file" in err
    rc, err = _cli(["compile", DIGITS, "-o", tmp_path / "o", "--calib", tmp_path], capsys)
    assert rc == 2 and "is a directory" in err
    with pytest.raises(RunError, match="calibration data: input 'input' holds no samples"):
        tinyc.compile(DIGITS, tmp_path / "o", quantize="int8", calib={"input": np.zeros((0, 1, 8, 8), np.float32)})


def test_bind_files_are_checked(tmp_path, capsys):
    model = make_model([helper.make_node("Add", ["x", "b"], ["y"])], [("x", [1, 4]), ("b", [1, 4])], [("y", [1, 4])])
    import onnx
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.save(tmp_path / "s.npy", np.array(["a", "b", "c", "d"]))
    np.save(tmp_path / "b.npy", np.ones((1, 4), np.float32))
    for spec, message in [(f"b={tmp_path / 's.npy'}", "--bind b: " + str(tmp_path / "s.npy") + " holds <U1 data"),
                          (f"b={tmp_path}", "is a directory"), (f"b={tmp_path / 'no.npy'}", "does not exist"),
                          ("b", "expected NAME=FILE.npy")]:
        rc, err = _cli(["compile", tmp_path / "m.onnx", "-o", tmp_path / "o", "--bind", spec], capsys)
        assert rc == 2 and message in err, err
    assert _cli(["compile", tmp_path / "m.onnx", "-o", tmp_path / "o", "--bind", f"b={tmp_path / 'b.npy'}"],
                capsys)[0] == 0


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None, reason="needs arm-none-eabi-gcc")
def test_board_run_and_validate_check_the_data_before_the_board(tmp_path, data, capsys):
    """The same checks on a board (mps2-an386): bad data is refused before anything is built or flashed."""
    out = tmp_path / "fw"
    tinyc.compile(DIGITS, out, board="mps2-an386", quantize="int8", calib=data["dir"] / "calib.npz", io_dtype="int8")
    firmware = out / load_manifest(out)["firmware"]
    x = np.zeros((2, 1, 8, 8), np.int16)
    x.flat[100] = 300
    with pytest.raises(RunError, match=r"value 300 at index 100 \(element \(1, 0, 4, 4\)\) is outside int8"):
        tinyc.run(out, {"input": x})
    np.savez(tmp_path / "s.npz", input=np.array(["a"]), labels=np.arange(1))
    rc, err = _cli(["validate", out, "--data", tmp_path / "s.npz"], capsys)
    assert rc == 2 and "holds <U1 data (strings)" in err
    rc, err = _cli(["profile", out, "--input", tmp_path / "s.npz"], capsys)
    assert rc == 2 and "holds <U1 data (strings)" in err
    assert not firmware.exists()  # nothing was built


def test_opencl_run_and_profile_check_the_data(tmp_path, digits_int8_io, capsys):
    from util import opencl_or_skip
    opencl_or_skip()
    out = tmp_path / "cl"
    tinyc.compile(DIGITS, out, target="opencl")
    np.savez(tmp_path / "e.npz", input=np.zeros((0, 1, 8, 8), np.float32))
    for cmd in ("run", "profile"):
        rc, err = _cli([cmd, out, "--input", tmp_path / "e.npz"], capsys)
        assert rc == 2 and "input 'input' holds no samples" in err, err


# ------------------------------------------------------------------------------ sanitizer builds

def _has_libasan() -> bool:
    if shutil.which("gcc") is None:
        return False
    path = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return path.startswith("/")


@pytest.mark.skipif(not _has_libasan(), reason="needs gcc with libasan")
def test_asan_build_runs(tmp_path, digits, data, capsys):
    """A host project built with -fsanitize=address,undefined runs (through its runner executable,
    as ASan cannot be loaded into Python) and gives the plain build's outputs."""
    out = tmp_path / "asan"
    assert _cli(["compile", DIGITS, "-o", out, "--cflags", "-O1 -fsanitize=address,undefined"], capsys)[0] == 0
    np.save(tmp_path / "x.npy", data["x"])
    assert _cli(["run", out, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npz"], capsys)[0] == 0
    from tinyc.targets.host import ExecutableModel, is_sanitized, library_path, load_model
    assert is_sanitized(library_path(out, load_manifest(out)))
    assert isinstance(load_model(out), ExecutableModel)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npz")["logits"], tinyc.run(digits, data["x"])["logits"])
    rc, err = _cli(["run", out, "--input", tmp_path / "nope.npz"], capsys)  # the data rules hold here too
    assert rc == 2 and "does not exist" in err


def test_a_sanitizer_report_is_a_run_error(tmp_path):
    """What the runner executable reports (a sanitizer finding, a crash) comes back as a RunError."""
    exe = tmp_path / "m_main"
    exe.write_text("#!/bin/sh\necho 'm.c:3:5: runtime error: signed integer overflow' >&2\nexit 1\n")
    exe.chmod(0o755)
    from tinyc.targets.host import ExecutableModel
    manifest = {"prefix": "m", "inputs": [{"name": "x", "shape": [2], "dtype": "float32"}],
                "outputs": [{"name": "y", "shape": [2], "dtype": "float32"}]}
    with pytest.raises(RunError, match=r"m_main failed \(exit 1\):\n.*runtime error: signed integer overflow"):
        ExecutableModel(exe, manifest)({"x": np.zeros(2, np.float32)})
