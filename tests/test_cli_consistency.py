"""Issue 18, friction 8 (and 5): one CLI — the same data flag, -o, --json, --target choices and
-v/-q on every verb; "did you mean" for board and op names; npz keys checked against the model's
inputs with expected and found keys listed; labels only from --labels or a 'labels' key; a remedy
in the fit error; board notes at compile; a line when `run` builds first; a line per layer a
tuning log changed; progress bars only on a terminal; `tinyc analyze` writing nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinyc.cli import main
from util import REPO

sys.path.insert(0, str(REPO / "examples" / "digits"))
from data import load_split  # noqa: E402

DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"


def cli(capsys, *args):
    """(exit code, stdout, stderr) of `tinyc ARGS` run in this process (stderr is not a terminal)."""
    capsys.readouterr()
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def tinyc_proc(*args, env=None):
    return subprocess.run([sys.executable, "-m", "tinyc", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env=env)


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    """Data files for the digits model (its one input is called 'input')."""
    x_train, y_train, x_test, y_test = load_split()
    d = tmp_path_factory.mktemp("cli18")
    np.savez(d / "x.npz", input=x_test[:3])
    np.savez(d / "calib.npz", input=x_train[:16])
    np.savez(d / "calib_labels.npz", input=x_train[:16], labels=y_train[:16])
    np.savez(d / "calib_y.npz", input=x_train[:16], y=y_train[:16])
    np.savez(d / "wrong_key.npz", image=x_test[:3])
    np.savez(d / "test.npz", input=x_test[:8], labels=y_test[:8])
    np.savez(d / "test_y.npz", input=x_test[:8], y=y_test[:8])
    return d


@pytest.fixture(scope="module")
def host_folder(tmp_path_factory):
    import tinyc

    out = tmp_path_factory.mktemp("cli18h") / "digits"
    tinyc.compile(DIGITS, out, build=True)
    return out


def _big_model(path):
    """A float MatMul with 2.4 MB of weights: more than an rpi-pico's 2 MB flash."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((512, 1200)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "big",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1200])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _wide_model(path):
    """Add + Relu over 40,000 values: int8 with float I/O needs more RAM than an nrf52840dk has."""
    b = numpy_helper.from_array(np.full((1, 40000), 0.5, np.float32), "b")
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                          "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40000])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40000])], [b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


# ------------------------------------------------------------------ one data flag, -o, --target


def test_data_flag_and_its_aliases_on_every_verb(capsys, tmp_path, d, host_folder):
    for flag in ("--data", "--input"):
        rc, out, err = cli(capsys, "run", host_folder, flag, d / "x.npz", "-o", tmp_path / f"y{flag}.npz")
        assert rc == 0, err
        assert np.load(tmp_path / f"y{flag}.npz")["logits"].shape == (3, 10)
    for flag in ("--data", "--calib"):
        rc, out, err = cli(capsys, "compile", DIGITS, "-o", tmp_path / f"q{flag}", "--quantize", "int8", flag,
                           d / "calib.npz")
        assert rc == 0, err
        assert json.loads((tmp_path / f"q{flag}" / "report.json").read_text())["quantization"]["int8_nodes"] > 0
    rc, out, err = cli(capsys, "quantize", DIGITS, "--data", d / "calib.npz", "-o", tmp_path / "m.onnx")
    assert rc == 0 and (tmp_path / "m.onnx").is_file(), err
    rc, out, err = cli(capsys, "analyze", DIGITS, "--quantize", "int8", "--data", d / "calib.npz")
    assert rc == 0 and "int8:" in out, err


def test_target_is_a_choice_in_compile_and_analyze(tmp_path):
    for verb in ("compile", "analyze"):
        extra = ["-o", str(tmp_path / "o")] if verb == "compile" else []
        p = tinyc_proc(verb, DIGITS, *extra, "--target", "gpu")
        assert p.returncode == 2 and "--target: invalid choice: 'gpu'" in p.stderr and "'opencl'" in p.stderr


# ------------------------------------------------------------------ --json [FILE]


def test_json_on_every_verb_with_a_table(capsys, tmp_path, d, host_folder):
    rc, out, err = cli(capsys, "inspect", DIGITS, "--json")
    assert rc == 0, err
    g = json.loads(out)  # stdout is the JSON alone
    assert g["macs"] == 90176 and g["inputs"][0]["name"] == "input" and len(g["layers"]) >= 6
    rc, out, err = cli(capsys, "boards", "--json")
    assert rc == 0 and {"rpi-pico", "mps2-an386"} <= {b["name"] for b in json.loads(out)}
    rc, out, err = cli(capsys, "devices", "--json")
    assert rc == 0 and isinstance(json.loads(out), list)
    rc, out, err = cli(capsys, "run", host_folder, "--data", d / "x.npz", "--json")
    assert rc == 0, err
    assert np.asarray(json.loads(out)["logits"]["values"]).shape == (3, 10)
    # with a FILE: the table on stdout, the JSON in the file
    rc, out, err = cli(capsys, "boards", "--json", tmp_path / "b.json")
    assert rc == 0 and "rpi-pico" in out and f"wrote {tmp_path / 'b.json'}" in out
    assert any(b["name"] == "rpi-pico" for b in json.loads((tmp_path / "b.json").read_text()))
    rc, out, err = cli(capsys, "analyze", DIGITS, "--board", "rpi-pico", "--json")
    assert rc == 0 and json.loads(out)["fit"]["fits"] is True
    rc, out, err = cli(capsys, "validate", host_folder, "--data", d / "test.npz", "--json")
    assert rc == 0, err
    v = json.loads(out)
    assert v["samples"] == 8 and "logits" in v["outputs"]
    rc, out, err = cli(capsys, "profile", host_folder, "--data", d / "x.npz", "-o", tmp_path / "p.json")
    assert rc == 0 and "profile of 'digits_cnn'" in out, err
    assert len(json.loads((tmp_path / "p.json").read_text())["layers"]) == 6


# ------------------------------------------------------------------ -v / -q


def test_verbose_and_quiet_before_or_after_the_verb(capsys, tmp_path, d):
    import tinyc

    fresh = tmp_path / "fresh"
    tinyc.compile(DIGITS, fresh)  # not built: the first run builds it
    rc, out, err = cli(capsys, "-q", "run", fresh, "--data", d / "x.npz", "-o", tmp_path / "y.npz")
    assert rc == 0 and err == "" and "wrote" not in out and "logits" in out
    rc, out, err = cli(capsys, "compile", DIGITS, "-o", tmp_path / "q", "--quantize", "int8", "--data",
                       d / "calib.npz", "-q")
    assert rc == 0 and err == ""
    rc, out, err = cli(capsys, "-v", "compile", DIGITS, "-o", tmp_path / "q", "--quantize", "int8", "--data",
                       d / "calib.npz")
    assert rc == 0 and "calibrating (samples: 16) ..." in err and "calibrating: done, 16 sample" in err
    rc, out, err = cli(capsys, "compile", DIGITS, "-o", tmp_path / "q", "--quantize", "int8", "--data",
                       d / "calib.npz", "--verbose")
    assert rc == 0 and "calibrating: done" in err
    rc, out, err = cli(capsys, "-q", "boards", "-v")
    assert rc == 2 and "-q and -v" in err


def test_progress_is_a_plain_line_when_not_a_terminal(tmp_path, d):
    p = tinyc_proc("compile", DIGITS, "-o", tmp_path / "q", "--quantize", "int8", "--data", d / "calib.npz")
    assert p.returncode == 0, p.stderr
    assert "calibrating (samples: 16) ...\n" in p.stderr
    assert "\r" not in p.stderr and "%|" not in p.stderr and "it/s" not in p.stderr  # no tqdm bar in a log


def test_progress_bar_on_a_terminal(tmp_path, d):
    """stderr on a pseudo-terminal: the tqdm bar is drawn (and the plain line is not)."""
    pty = pytest.importorskip("pty")
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 0-column terminal draws no bar
    p = subprocess.Popen([sys.executable, "-m", "tinyc", "compile", str(DIGITS), "-o", str(tmp_path / "q"),
                          "--quantize", "int8", "--data", str(d / "calib.npz")],
                         stdout=subprocess.DEVNULL, stderr=slave, cwd=REPO)
    os.close(slave)  # the child holds the terminal now: reading ends (EIO) when it exits
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    text = b"".join(chunks).decode(errors="replace")
    assert p.wait(timeout=60) == 0, text
    assert "calibrating:" in text and "%|" in text and "/16 [" in text and "calibrating (samples: 16) ..." not in text


def test_run_says_when_it_builds_first(capsys, tmp_path, d):
    import tinyc

    fresh = tmp_path / "fresh"
    tinyc.compile(DIGITS, fresh)
    rc, out, err = cli(capsys, "run", fresh, "--data", d / "x.npz")
    assert rc == 0 and f"building {fresh} (first run) ..." in err
    rc, out, err = cli(capsys, "run", fresh, "--data", d / "x.npz")
    assert rc == 0 and "building" not in err


# ------------------------------------------------------------------ did you mean


def test_did_you_mean_for_boards_and_ops(capsys, tmp_path):
    rc, out, err = cli(capsys, "compile", DIGITS, "-o", tmp_path / "o", "--board", "rpi-pic")
    assert rc == 2 and "unknown board 'rpi-pic'; did you mean 'rpi-pico'?" in err
    rc, out, err = cli(capsys, "analyze", DIGITS, "--board", "nucleo-f746")
    assert rc == 2 and "did you mean 'nucleo-f746zg'" in err
    for op, domain, want in (("Rellu", "", "Rellu: did you mean 'Relu'"),
                             ("Relu", "com.acme", "com.acme.Relu: did you mean 'Relu'")):
        g = helper.make_graph([helper.make_node(op, ["x"], ["y"], domain=domain)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
        opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
        onnx.save(helper.make_model(g, opset_imports=opsets), tmp_path / "m.onnx")
        rc, out, err = cli(capsys, "inspect", tmp_path / "m.onnx")
        assert rc == 2 and want in err, err


# ------------------------------------------------------------------ npz keys and labels (friction 5)


def test_npz_keys_are_checked_against_the_inputs_on_every_verb(capsys, tmp_path, d, host_folder):
    want = ("expected keys: 'input'", "found keys: 'image'")
    runs = [
        ("run", host_folder, "--data", d / "wrong_key.npz"),
        ("compile", DIGITS, "-o", tmp_path / "q", "--quantize", "int8", "--data", d / "wrong_key.npz"),
        ("quantize", DIGITS, "--data", d / "wrong_key.npz"),
        ("analyze", DIGITS, "--quantize", "int8", "--data", d / "wrong_key.npz"),
        ("tune", DIGITS, "--quantize", "int8", "--data", d / "wrong_key.npz", "--trials", "1", "-o",
         tmp_path / "t.jsonl"),
    ]
    for args in runs:
        rc, out, err = cli(capsys, *args)
        assert rc == 2, (args[0], err)
        assert all(w in err for w in want), (args[0], err)
        assert len(err.strip().splitlines()) == 1, err


def test_labels_only_from_labels_key_or_flag(capsys, tmp_path, d, host_folder):
    rc, out, err = cli(capsys, "validate", host_folder, "--data", d / "test_y.npz")
    assert rc == 2 and "found keys: 'input', 'y'" in err
    rc, out, err = cli(capsys, "validate", host_folder, "--data", d / "test.npz", "--json")
    assert rc == 0 and json.loads(out)["outputs"]["logits"]["accuracy"] >= 0.5, err  # labels from 'labels'
    rc, out, err = cli(capsys, "quantize", DIGITS, "--data", d / "calib_y.npz")
    assert rc == 2 and "'y' that are not model inputs" in err and "found keys: 'input', 'y'" in err
    rc, out, err = cli(capsys, "quantize", DIGITS, "--data", d / "calib_labels.npz", "--report", tmp_path / "q.md")
    assert rc == 0, err
    assert "top-1 vs labels" in (tmp_path / "q.md").read_text()


# ------------------------------------------------------------------ fit remedy, board notes, analyze


def test_fit_error_names_a_remedy_with_numbers(capsys, tmp_path):
    big = _big_model(tmp_path / "big.onnx")
    rc, out, err = cli(capsys, "compile", big, "-o", tmp_path / "p", "--board", "rpi-pico")
    assert rc == 2 and "does not fit board 'rpi-pico'" in err
    assert "--quantize int8 --data DATA.npz): weights about 614400 B instead of 2457600" in err
    assert "boards where it fits: mps2-an385 (flash 4194304 B, RAM 4194304 B for" in err
    assert not (tmp_path / "p").exists()
    wide = _wide_model(tmp_path / "wide.onnx")
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(0).standard_normal((4, 1, 40000)).astype(np.float32))
    rc, out, err = cli(capsys, "analyze", wide, "--board", "nrf52840dk", "--quantize", "int8", "--data",
                       tmp_path / "c.npz")
    assert rc == 0 and "fits nrf52840dk: no" in out
    assert "--io-dtype int8 (int8 inputs/outputs) saves at least 240000 B of RAM" in out
    assert "nucleo-l4r5zi (flash 2097152 B, RAM 655360 B for 528192 B)" in out
    rc, out, err = cli(capsys, "analyze", wide, "--board", "nrf52840dk", "--quantize", "int8", "--data",
                       tmp_path / "c.npz", "--io-dtype", "int8")
    assert rc == 0 and "fits nrf52840dk: yes" in out  # the remedy works


def test_board_notes_printed_at_compile(capsys, tmp_path):
    rc, out, err = cli(capsys, "compile", DIGITS, "-o", tmp_path / "pico", "--board", "rpi-pico")
    assert rc == 0, err
    assert "note (rpi-pico): The RP2040 boot ROM only starts an image whose first 256 bytes are a 'boot2'" in out


def test_analyze_writes_nothing(capsys, tmp_path):
    before = sorted(os.listdir(tmp_path))
    rc, out, err = cli(capsys, "analyze", DIGITS, "--board", "mps2-an386")
    assert rc == 0, err
    assert sorted(os.listdir(tmp_path)) == before and not (REPO / "digits_cnn").exists()
    assert "analysis of 'digits_cnn' for mps2-an386 (nothing written)" in out
    assert "MACs 90,176" in out and "weights 39,848 B" in out and "fits mps2-an386: yes" in out
    assert "  1  Conv             /3/Conv" in out  # the code-layer index, as profile numbers layers
    rc, out, err = cli(capsys, "analyze", DIGITS, "--board", "mps2-an386", "--json", tmp_path / "a.json")
    a = json.loads((tmp_path / "a.json").read_text())
    assert a["fit"]["ram"]["available"] == 4 * 1024 * 1024 and a["macs"] == 90176
    assert [lay["kernel"] for lay in a["layers"] if lay["kernel"] is not None] == list(range(6))


# ------------------------------------------------------------------ tuning log lines, tune --json


def test_tune_json_and_compile_says_which_layers_the_log_changed(capsys, tmp_path):
    log = tmp_path / "t.jsonl"
    rc, out, err = cli(capsys, "tune", DIGITS, "--trials", "2", "--repeat", "3", "-o", log, "--json")
    assert rc == 0, err
    res = json.loads(out)
    assert res["board"] == "host" and res["log"] == str(log) and len(res["tasks"]) >= 4
    assert "tuning on host (cands: 2) ..." in err  # not a terminal: a plain line, not silence
    # keep the default schedules' records (what a compile without the log takes), then make a
    # non-default Gemm schedule the fastest: the log now changes that layer only
    import tinyc

    defaults = [la["schedule"] for la in tinyc.compile(DIGITS, tmp_path / "plain").report["layers"]]
    recs = [r for r in map(json.loads, log.read_text().splitlines()) if r["knobs"] in defaults]
    gemm = next(r for r in recs if r["op"] == "Gemm" and r["status"] == "ok")
    fast = dict(gemm, knobs={"variant": "rowacc", "n_tile": 1, "m_tile": 1}, cycles=1.0, repeats=[1.0])
    log.write_text("".join(json.dumps(r) + "\n" for r in recs + [fast]))
    rc, out, err = cli(capsys, "compile", DIGITS, "-o", tmp_path / "c", "--tuning-log", log)
    assert rc == 0, err
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    layer = next(la for la in report["layers"] if la["name"] == gemm_name(report, gemm))
    assert f"  tuning log: 1 layer(s) changed" in out
    assert f"    layer {layer['kernel']} {layer['name']} (Gemm): variant=rowacc, n_tile=1, m_tile=1" in out


def gemm_name(report, rec):
    """The Gemm layer whose output shape the record's task key names."""
    out_shape = rec["key"].split("->")[1].split("]")[0]
    return next(la["name"] for la in report["layers"]
                if la["op"] == "Gemm" and "x".join(map(str, la["output_shape"])) == out_shape)


# ------------------------------------------------------------------ farm status, several models


def test_farm_status_address_is_optional(tmp_path):
    pytest.importorskip("distributed")
    env = {k: v for k, v in os.environ.items() if k != "TINYC_SCHEDULER"}
    p = tinyc_proc("farm", "status", "--timeout", "0.5", env=env)
    assert p.returncode == 2 and "cannot reach the Dask scheduler at tcp://127.0.0.1:8786" in p.stderr
    p = tinyc_proc("farm", "status", "--timeout", "0.5", env=dict(env, TINYC_SCHEDULER="tcp://127.0.0.1:9"))
    assert p.returncode == 2 and "at tcp://127.0.0.1:9 " in p.stderr


def test_compile_several_models_and_sections(capsys, tmp_path):
    rc, out, err = cli(capsys, "compile", DIGITS, DIGITS, "-o", tmp_path / "two", "--shared-arena")
    assert rc == 0, err
    assert "compiled 2 models" in out and "one shared arena of 6,176 B" in out
    assert len(json.loads((tmp_path / "two" / "report.json").read_text())["models"]) == 2
    rc, out, err = cli(capsys, "compile", DIGITS, "-o", tmp_path / "one", "--shared-arena")
    assert rc == 2 and "--shared-arena" in err and "two or more models" in err
    rc, out, err = cli(capsys, "compile", DIGITS, "-o", tmp_path / "s", "--arena-section", ".cli18_arena",
                       "--weights-section", ".cli18_weights")
    assert rc == 0, err
    sources = "".join(f.read_text() for f in sorted((tmp_path / "s").glob("*.[ch]")))
    assert '".cli18_arena"' in sources and '".cli18_weights"' in sources
