"""The command line, run as a user would (a subprocess), end to end."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from util import REPO

DIGITS = REPO / "examples/digits/digits_cnn.onnx"


def tinyc_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinyc", *args], capture_output=True, text=True, cwd=REPO)


def test_inspect_compile_run(tmp_path):
    p = tinyc_cli("inspect", str(DIGITS))
    assert p.returncode == 0, p.stderr
    assert "Conv" in p.stdout and "MACs" in p.stdout and "90,176 MACs" in p.stdout

    out = tmp_path / "out"
    p = tinyc_cli("compile", str(DIGITS), "-o", str(out), "--target", "host")
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    for key in ("model", "target", "macs", "params", "weights_bytes", "arena_bytes", "arena_lower_bound_bytes", "layers"):
        assert key in report, key
    assert {"name", "op", "output_shape", "macs", "arena_offset", "arena_size"} <= set(report["layers"][0])

    x = np.random.default_rng(0).random((3, 1, 1, 8, 8), dtype=np.float32)
    np.savez(tmp_path / "x.npz", input=x)
    p = tinyc_cli("run", str(out), "--input", str(tmp_path / "x.npz"), "--output", str(tmp_path / "y.npz"))
    assert p.returncode == 0, p.stderr
    y = np.load(tmp_path / "y.npz")["logits"]
    assert y.shape == (3, 1, 10)


def test_io_layout_nhwc_and_bad_flags(tmp_path):
    p = tinyc_cli("compile", str(DIGITS), "-o", str(tmp_path / "o"), "--io-layout", "nhwc")
    assert p.returncode == 0, p.stderr
    manifest = json.loads((tmp_path / "o" / "tinyc.json").read_text())
    assert manifest["inputs"][0]["shape"] == [1, 8, 8, 1]
    p = tinyc_cli("compile", str(DIGITS), "-o", str(tmp_path / "o2"), "--target", "nope")
    assert p.returncode == 2 and "--target: invalid choice: 'nope'" in p.stderr  # a choice since issue 18
    p = tinyc_cli("compile", str(DIGITS), "-o", str(tmp_path / "o3"), "--input-shape", "garbage")
    assert p.returncode == 2 and "--input-shape 'garbage'" in p.stderr


def test_readable_report_and_memory_plot(tmp_path):
    import xml.etree.ElementTree as ET

    import tinyc
    res = tinyc.compile(DIGITS, tmp_path / "o")
    md = (tmp_path / "o" / "report.md").read_text()
    assert f"| arena (RAM) | {res.report['arena_bytes']:,} B |" in md
    assert md.count("\n| ") >= len(res.report["layers"]) + 6
    svg = ET.parse(tmp_path / "o" / "memory.svg").getroot()
    boxes = [e for e in svg.iter() if e.tag.endswith("g") and e.get("id", "").startswith("buffer-")]
    n_buffers = len(res.report["layers"]) - sum(1 for layer in res.report["layers"] if layer["alias"]) + 1  # + input
    assert len(boxes) >= n_buffers  # one box per planned buffer (matplotlib draws each as a group)
