"""Models on the emulated boards, end to end: compile --board, cross-compile, QEMU, the serial harness.

Real QEMU, real serial bytes (pyserial over QEMU's UART socket). Counts are QEMU instruction
counts (deterministic under -icount)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import threading
import time

import numpy as np
import pytest

import tinyc
import tinyc.reference
from tinyc.errors import BuildError, DeviceError
from util import MLPERF, MLPERF_MODELS, REPO, ort_run

sys.path.insert(0, str(REPO / "examples" / "digits"))
from data import load_split  # noqa: E402

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None,
                                 reason="needs qemu-system-arm and arm-none-eabi-gcc")]

EMULATED = ["mps2-an385", "mps2-an386", "mps2-an500", "mps3-an547"]
DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"


@pytest.fixture(scope="module")
def digits_data(tmp_path_factory):
    x_train, _, x_test, y_test = load_split()
    d = tmp_path_factory.mktemp("digits_data")
    np.savez(d / "calib.npz", input=x_train[:200])
    np.savez(d / "test.npz", input=x_test[:24], labels=y_test[:24])
    return d


@pytest.fixture(scope="module")
def m4_int8(tmp_path_factory, digits_data):
    """The int8 digits firmware for mps2-an386, built once for several tests."""
    out = tmp_path_factory.mktemp("m4_int8") / "proj"
    tinyc.compile(DIGITS, out, board="mps2-an386", quantize="int8", calib=digits_data / "calib.npz", build=True)
    return out


@pytest.mark.parametrize("board", EMULATED)
def test_int8_model_bit_exact_on_every_emulated_board(tmp_path, digits_data, board):
    res = tinyc.compile(DIGITS, tmp_path / "p", board=board, quantize="int8", calib=digits_data / "calib.npz",
                        build=True)
    assert res.report["board"] == board and res.report["flash_bytes"] > res.report["weights_bytes"]
    assert res.report["stack_bytes"] > 0 and res.report["ram_bytes"] >= res.report["arena_bytes"]
    v = tinyc.validate(tmp_path / "p", digits_data / "test.npz")
    e = v["outputs"]["logits"]
    assert v["integer"] and e["bit_exact_vs_golden"], v
    assert e["top1_agreement_vs_onnxruntime"] >= 0.95 and e["accuracy"] >= 0.9
    assert v["units"] == "instructions" and v["per_inference"] > 10_000


@pytest.mark.parametrize("board", EMULATED)
def test_float_model_matches_onnxruntime(tmp_path, digits_data, board):
    """Float kernels: hardware FPU on the M4F/M7/M55, soft float on the M3."""
    tinyc.compile(DIGITS, tmp_path / "p", board=board, quantize="none", build=True)
    x = np.load(digits_data / "test.npz")["input"][:6]
    got = tinyc.run(tmp_path / "p", {"input": x})["logits"]
    want = np.concatenate([ort_run(DIGITS, {"input": xi[None]})[0] for xi in x])
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


def test_profile_sums_to_run_and_counts_repeat(m4_int8, digits_data):
    x = {"input": np.load(digits_data / "test.npz")["input"][:1]}
    p1 = tinyc.profile(m4_int8, x)
    p2 = tinyc.profile(m4_int8, x)
    # deterministic: a fresh QEMU gives the same counts, up to one SysTick tick (1/3.2 instruction:
    # where in an instruction's 3.2 ticks the counter is read varies by that much)
    for a, b in zip(p1["layers"], p2["layers"]):
        assert abs(a["ticks"] - b["ticks"]) <= 1, (a, b)
    assert abs(p1["ticks"]["run"] - p2["ticks"]["run"]) <= 1
    assert abs(p1["layers_total"] - p1["run_total"]) <= 0.05 * p1["run_total"]
    report = json.loads((m4_int8 / "report.json").read_text())
    assert len(p1["layers"]) == len({layer["kernel"] for layer in report["layers"] if layer["kernel"] is not None})
    conv = [layer for layer in p1["layers"] if layer["macs"]]
    assert conv and all(layer["macs_per_instruction"] > 0 for layer in conv)
    assert p1["macs"] == report["macs"]


def test_n_inferences_in_one_session(m4_int8, digits_data):
    """A leading dimension N runs N inferences without reflashing; results equal one-by-one runs."""
    x = np.load(digits_data / "test.npz")["input"][:5]
    dev = tinyc.run_on_board(m4_int8, {"input": x})
    assert len(dev.ticks) == 5 and dev.outputs["logits"].shape[0] == 5
    one = tinyc.run(m4_int8, {"input": x[3:4]})["logits"]
    np.testing.assert_array_equal(dev.outputs["logits"][3], one.reshape(dev.outputs["logits"][3].shape))


def test_cli_board_flow(tmp_path, digits_data, capsys):
    from tinyc.cli import main
    proj = tmp_path / "proj"
    assert main(["boards"]) == 0
    assert "mps2-an386" in capsys.readouterr().out
    assert main(["compile", str(DIGITS), "--board", "mps2-an386", "--quantize", "int8", "--calib",
                 str(digits_data / "calib.npz"), "-o", str(proj)]) == 0
    assert main(["build", str(proj)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"flash [\d,]+ B, RAM [\d,]+ B \(arena [\d,]+ B\), worst-case stack [\d,]+ B", out), out
    assert main(["flash", str(proj)]) == 0
    assert "mps2-an386 runs 'digits_cnn'" in capsys.readouterr().out
    assert main(["run", str(proj), "--input", str(digits_data / "test.npz"), "--output", str(tmp_path / "y.npz")]) == 0
    assert np.load(tmp_path / "y.npz")["logits"].shape[0] == 24
    assert main(["validate", str(proj), "--data", str(digits_data / "test.npz"), "--json", str(tmp_path / "v.json")]) == 0
    assert "device == golden model bit for bit" in capsys.readouterr().out
    assert main(["profile", str(proj), "--json", str(tmp_path / "p.json")]) == 0
    text = capsys.readouterr().out
    assert "instructions" in text and "QEMU" in text and "MACs/instr" in text
    assert json.loads((tmp_path / "p.json").read_text())["units"] == "instructions"


def test_model_too_big_for_board_is_refused_with_numbers(tmp_path, digits_data):
    """A user board with too little RAM: refused at compile time with needed vs available bytes."""
    text = (REPO / "boards" / "mps2-an386.toml").read_text()
    text = re.sub(r'name = "mps2-an386"', 'name = "tiny-ram"', text)
    text = re.sub(r"ram_size = \S+", "ram_size = 0x4400", text)
    (tmp_path / "boards").mkdir()
    (tmp_path / "boards" / "tiny-ram.toml").write_text(text)
    with pytest.raises(BuildError) as err:
        tinyc.compile(DIGITS, tmp_path / "p", board="tiny-ram", board_dir=tmp_path / "boards")
    msg = str(err.value)
    assert "tiny-ram" in msg and "RAM" in msg and re.search(r"\d[\d,]* bytes", msg), msg


def test_qemu_killed_mid_run_fails_fast_with_a_clear_error(m4_int8):
    """A RUN of many repeats is in flight when the emulator dies: DeviceError within the timeout."""
    from tinyc.device.runner import connect
    with connect(m4_int8, timeout=1.0, run_timeout=5.0) as dev:
        killer = threading.Timer(0.5, lambda: os.kill(dev.session.pid, signal.SIGKILL))
        killer.start()
        t0 = time.monotonic()
        with pytest.raises(DeviceError) as err:
            dev.client.run(repeat=100_000)
        assert time.monotonic() - t0 < 8.0
        killer.cancel()
    assert "RUN" in str(err.value)


def test_corrupted_link_to_qemu_recovers(m4_int8, digits_data):
    """Bytes corrupted both ways between host and QEMU: the client retries and gets the right answer."""
    from faultproxy import FaultProxy

    from tinyc.device import flashers
    from tinyc.device.client import HarnessClient
    from tinyc.device.runner import pack_inputs, unpack_outputs
    from tinyc.device.transport import open_link
    manifest = json.loads((m4_int8 / "tinyc.json").read_text())
    board = json.loads((m4_int8 / "board.json").read_text())
    x = np.load(digits_data / "test.npz")["input"][:1]
    want = tinyc.run(m4_int8, {"input": x})["logits"]
    session = flashers.start(board, m4_int8 / manifest["firmware"])
    host, port = session.url.replace("socket://", "").split(":")
    try:
        with FaultProxy(host, int(port)) as proxy:
            client = HarnessClient(open_link(proxy.url, 2.0), timeout=1.0, retries=3)
            client.hello()
            proxy.c2d.corrupt(at=proxy.c2d.bytes + 7)
            proxy.d2c.corrupt(at=proxy.d2c.bytes + 5)
            client.write_input(pack_inputs(manifest, {"input": x.reshape(manifest["inputs"][0]["shape"])}))
            client.run(1)
            got = unpack_outputs(manifest, client.read_output())["logits"]
            assert client.retries_used >= 1
            np.testing.assert_array_equal(got.reshape(want.shape), want)
            client.exit(0)
            client.close()
    finally:
        session.close()


@pytest.mark.parametrize("board,io_dtype", [("mps2-an386", "int8"), ("mps3-an547", "float")])
@pytest.mark.parametrize("name", MLPERF_MODELS)
def test_mlperf_int8_models_fit_and_run(tmp_path, name, board, io_dtype):
    """Every MLPerf Tiny int8 model (the QDQ model as given) fits the M4 and M55 boards and equals
    the golden model bit for bit on a test input. On the M4 with int8 input/output as TFLite
    Micro runs it (float data quantized on the host by `validate`), on the M55 with float I/O."""
    folder = MLPERF / name
    res = tinyc.compile(folder / "model_int8_qdq.onnx", tmp_path / "p", board=board, build=True, io_dtype=io_dtype)
    x = np.load(folder / "test.npz")["x"][:2]
    v = tinyc.validate(tmp_path / "p", {"x": x})
    (out, e), = v["outputs"].items()
    assert v["integer"] and e["bit_exact_vs_golden"], v
    manifest = json.loads((tmp_path / "p" / "tinyc.json").read_text())
    assert manifest["outputs"][0]["dtype"] == ("int8" if io_dtype == "int8" else "float32")
    assert res.report["flash_bytes"] <= res.report["flash_size"] and res.report["ram_bytes"] <= res.report["ram_size"]
    print(f"{name} on {board} ({io_dtype} I/O): {v['per_inference']:,.0f} instructions, arena "
          f"{res.report['arena_bytes']:,} B, flash {res.report['flash_bytes']:,} B, stack {res.report['stack_bytes']:,} B, "
          f"max diff vs onnxruntime {e.get('max_abs_diff_vs_onnxruntime')}")
