"""report.html as a person sees it (rendered by headless Chromium, read back from the printed PDF
and a screenshot), the reports' build/profile/validation sections, one layer numbering, and
model-given names kept inert in report.html, report.md and memory.svg."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import tinyc
from util import REPO, make_model

DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"
CHROMIUM = shutil.which("chromium")
HAVE_CHROMIUM = CHROMIUM is not None and shutil.which("pdftotext") is not None
HAVE_ARM = all(shutil.which(t) for t in ("arm-none-eabi-gcc", "cmake", "qemu-system-arm"))
needs_chromium = pytest.mark.skipif(not HAVE_CHROMIUM, reason="needs chromium and pdftotext (.ci/install.sh)")
ACTIVATION_RGB = (0xF2, 0x8E, 0x2B)  # tinyc.report.plots.KIND_COLORS["activation"]


def _chromium(page: Path, *args: str) -> None:
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--no-first-run", "--host-resolver-rules=MAP * ~NOTFOUND", *args, page.resolve().as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]


def seen_text(page: Path, work: Path) -> str:
    """What a reader sees: the page printed to PDF by headless Chromium, its text extracted."""
    pdf = work / (page.stem + ".pdf")
    _chromium(page, f"--print-to-pdf={pdf}", "--no-pdf-header-footer")
    return subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout


def assert_self_contained(html: str) -> None:
    """No script, nothing fetched: no external src/href/url(), no <link>, no <iframe>/<object>."""
    assert not re.search(r"<\s*script", html, re.I)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//|file:)""", html, re.I)
    assert not re.search(r"url\(\s*['\"]?\s*(https?:|//)", html, re.I)
    assert not re.search(r"<\s*(link|iframe|object|embed|img)\b", html, re.I)
    assert not re.search(r"\son[a-z]+\s*=", html, re.I)  # no event handler attributes


def layer_rows(md: str) -> list[list[str]]:
    """report.md's layer table as cells (split on unescaped '|')."""
    part = md.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in part.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in rows[1:]]


@needs_chromium
def test_html_report_as_seen_in_chromium(tmp_path: Path) -> None:
    out = tmp_path / "o"
    res = tinyc.compile(DIGITS, out)
    html = (out / "report.html").read_text()
    assert_self_contained(html)
    text = seen_text(out / "report.html", tmp_path)
    r = res.report
    assert "tinyc report: digits_cnn (host)" in text
    for number in (f"{r['macs']:,}", f"{r['params']:,}", f"{r['weights_bytes']:,} B", f"{r['arena_bytes']:,} B"):
        assert number in text, number
    assert "/3/Conv" in text and "/10/Gemm" in text
    # the arena plot: its legend, its byte axis, the layer names on its boxes
    for label in ("arena plan", "model input", "activation", "arena offset (bytes)", "layer in execution order",
                  "1,000 B"):
        assert label in text, label
    assert re.search(r"/3/Conv[\s\S]*arena offset", text) or re.search(r"arena offset[\s\S]*/3/Conv", text)
    # pixels: the page is drawn (not blank) and shows the arena plot's boxes
    import matplotlib.image as mpimg

    png = tmp_path / "page.png"
    _chromium(out / "report.html", f"--screenshot={png}", "--window-size=1200,1600")
    img = (mpimg.imread(png)[..., :3] * 255).round().astype(int)
    assert (img < 250).any(axis=-1).mean() > 0.05, "the rendered page is (almost) blank"
    box = (np.abs(img - np.array(ACTIVATION_RGB)).max(axis=-1) <= 12).mean()
    assert box > 0.005, f"the arena plot's activation boxes are not on the page ({box:.4f})"
    # memory.svg is the same plot, with text as text
    svg = (out / "memory.svg").read_text()
    root = ET.fromstring(svg)
    texts = " ".join("".join(e.itertext()) for e in root.iter() if e.tag.endswith("text"))
    assert "model input" in texts and "arena offset (bytes)" in texts and "/3/Conv" in texts
    assert svg[svg.index("<svg"):] in html


def test_one_layer_numbering(tmp_path: Path) -> None:
    """A layer's number is its code-layer index: the header's NUM_LAYERS counts the numbered rows,
    views (Flatten/Reshape) get none, and report.md, report.html and report.json agree."""
    out = tmp_path / "o"
    res = tinyc.compile(DIGITS, out)
    header = (out / f"{res.report['prefix']}.h").read_text()
    n = int(re.search(r"#define \w+_NUM_LAYERS (\d+)", header).group(1))
    rows = layer_rows((out / "report.md").read_text())
    assert len(rows) == len(res.report["layers"])
    numbered = [row[0] for row in rows if row[0] != "\u2014"]
    assert numbered == [str(i) for i in range(n)]
    views = [row for row in rows if "(view)" in row[2]]
    assert views and all(row[0] == "\u2014" for row in views)
    flatten = next(row for row in rows if row[1] == "/9/Flatten")
    assert flatten[0] == "\u2014"
    gemm = next(row for row in rows if row[1] == "/10/Gemm")
    assert gemm[0] == str(n - 2)
    html = (out / "report.html").read_text()
    assert re.search(rf'<td class="num">{n - 2}</td><td>/10/Gemm</td>', html)
    assert re.search(r'<td class="num">\u2014</td><td>/9/Flatten</td>', html)


def update_reports(out: Path, section: str, data: dict) -> None:
    from tinyc.report import update_reports as update  # (imported here: each test fails on its own)

    update(out, section, data)


def _profile(names: list[str]) -> dict:
    layers = [{"index": i, "name": nm, "ticks": 100 * (i + 1), "instructions": 31.25 * (i + 1), "macs": 64 * (i + 1),
               "macs_per_instruction": 2.048, "share": (i + 1) / 6} for i, nm in enumerate(names)]
    return {"board": "mps2-an386", "units": "instructions", "units_note": "QEMU instruction counts",
            "layers": layers, "layers_total": 187.5, "run_total": 190.0, "macs": 384,
            "macs_per_instruction": 2.0211}


def _validation(output: str) -> dict:
    return {"samples": 8, "golden_ok": True, "reference": "onnxruntime",
            "outputs": {output: {"max_abs_diff_vs_golden": 0.0, "bit_exact_vs_golden": True,
                                 "vs_golden": {"max_abs_error": 0.0, "mean_abs_error": 0.0, "rmse": 0.0,
                                               "cosine": 1.0, "top1_agreement": 1.0},
                                 "vs_onnxruntime": {"max_abs_error": 0.03125, "mean_abs_error": 0.0078125,
                                                    "rmse": 0.0110485, "cosine": 0.999734, "top1_agreement": 0.875},
                                 "accuracy": 0.625}}}


def test_update_reports_adds_sections(tmp_path: Path) -> None:
    out = tmp_path / "o"
    tinyc.compile(DIGITS, out)
    update_reports(out, "build", {"flash_bytes": 54432, "flash_size": 4194304, "ram_bytes": 23728,
                                  "ram_size": 4194304, "stack_bytes": 1104, "stack_size": 16384, "text": 54432,
                                  "data": 0, "bss": 23728, "elf": "x.elf", "warnings": []})
    update_reports(out, "profile", _profile(["/0/Conv", "/3/Conv", "/6/MaxPool"]))
    update_reports(out, "validation", _validation("logits"))
    report = json.loads((out / "report.json").read_text())
    assert report["build"]["flash_bytes"] == 54432 and report["profile"]["units"] == "instructions"
    assert report["arena_plan"]["buffers"], "the arena plan stays in report.json"
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for doc in (md, html):
        assert "54,432 B of 4,194,304 B (1.3%)" in doc  # flash against the board
        assert "1,104 B of 16,384 B (6.7%)" in doc  # stack
        assert "/3/Conv" in doc and "62.5" in doc and "2.048" in doc  # a layer's instructions, MACs/instruction
        assert "0.03125" in doc and "0.0110485" in doc and "0.999734" in doc and "0.875" in doc and "0.625" in doc
    assert md.index("## Build") < md.index("## Profile") < md.index("## Validation")
    assert "[report.html](report.html)" in md
    for fig in ("fig-arena", "fig-build", "fig-profile", "fig-validation-0", "fig-validation-1"):
        m = re.search(rf'<div class="fig" id="{fig}"><svg[\s\S]*?</svg>', html)
        assert m, fig
    prof = re.search(r'id="fig-profile"><svg([\s\S]*?)</svg>', html).group(1)
    assert "instructions per layer" in prof and "MACs per instruction" in prof and "/6/MaxPool" in prof
    val = re.search(r'id="fig-validation-0"><svg([\s\S]*?)</svg>', html).group(1)
    assert "logits vs onnxruntime: rmse" in val
    assert_self_contained(html)
    update_reports(out, "profile", _profile(["/0/Conv"]))  # a later profile replaces the earlier one
    assert "/6/MaxPool" not in re.search(r"## Profile[\s\S]*?## Validation", (out / "report.md").read_text()).group(0)
    with pytest.raises(ValueError, match="report section"):
        update_reports(out, "bogus", {})


EVIL = ["<script>alert(1)</script>", "$x$", "a|b", "$\\frac{1}{0}$"]


def _evil_model():
    x = helper.make_tensor_value_info
    nodes = [helper.make_node("Relu", ["in"], ["t0"], name=EVIL[0]),
             helper.make_node("Sigmoid", ["t0"], ["t1"], name=EVIL[1]),
             helper.make_node("Tanh", ["t1"], ["t2"], name=EVIL[2]),
             helper.make_node("Relu", ["t2"], ["out"], name=EVIL[3])]
    del x
    return make_model(nodes, [("in", [1, 16])], [("out", [1, 16])], name="<script>m$1$</script>|")


@needs_chromium
def test_untrusted_names_stay_inert(tmp_path: Path) -> None:
    out = tmp_path / "o"
    tinyc.compile(_evil_model(), out)
    update_reports(out, "profile", _profile(EVIL))
    update_reports(out, "validation", _validation("<script>y</script>$y$|"))
    html = (out / "report.html").read_text()
    assert_self_contained(html)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    svg = (out / "memory.svg").read_text()
    root = ET.fromstring(svg)  # well-formed: no markup from names
    texts = ["".join(e.itertext()) for e in root.iter() if e.tag.endswith("text")]
    assert "$x$" in texts and "<script>alert(1)</script>" in texts  # text as typed, no mathtext
    md = (out / "report.md").read_text()
    assert "<script" not in md
    rows = layer_rows(md)
    assert len({len(r) for r in rows}) == 1 and any("a\\|b" in r[1] for r in rows)
    text = seen_text(out / "report.html", tmp_path)
    assert "<script>alert(1)</script>" in text and "$x$" in text and "a|b" in text and "$\\frac{1}{0}$" in text
    assert "tinyc report: <script>m$1$</script>|" in text


@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc, cmake and qemu-system-arm")
def test_board_build_profile_validate_reports(tmp_path: Path) -> None:
    """On an emulated board: the compile's summary sets weights and arena against the board's
    flash and RAM; build's measured sizes, the QEMU profile and validation reach both reports (the
    API calls update_reports), and the profile's layer numbers are the report's."""
    out = tmp_path / "b"
    tinyc.compile(DIGITS, out, board="mps2-an386")
    md = (out / "report.md").read_text()
    assert re.search(r"\| weights \(flash\) \| 39,848 B of 4,194,304 B \(1\.0%\) \|", md), md[:800]
    built = tinyc.build_project(out)
    prof = tinyc.profile(out)  # build, profile and validate each update both reports
    x = np.random.default_rng(0).standard_normal((3, 1, 8, 8)).astype(np.float32)
    name = json.loads((out / "tinyc.json").read_text())["inputs"][0]["name"]
    tinyc.validate(out, {name: x})
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    flash = f"{built['flash_bytes']:,} B of {built['flash_size']:,} B"
    assert flash in md and flash in html
    assert f"{built['stack_bytes']:,} B of {built['stack_size']:,} B" in md
    rows = {r[0]: r[1] for r in layer_rows(md)}
    for layer in prof["layers"]:  # the device's layer i is the report's layer numbered i
        assert rows[str(layer["index"])] == layer["name"]
        assert f"{layer['instructions']:,.0f}" in md.split("## Profile")[1]
    assert 'id="fig-profile"><svg' in html and 'id="fig-validation-0"><svg' in html
    assert "## Validation" in md and "onnxruntime" in md.split("## Validation")[1]
