"""Names in an ONNX file are untrusted text: tensor, node, graph and model names (and `--name`) never
reach generated C, OpenCL, CMake, make or Markdown/SVG as anything but tinyc's own identifiers,
escaped comments and escaped string literals. The generated code builds warning-free whatever the
names, computes what onnxruntime computes, and a name written as C code never runs."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import tinyc
from tinyc.numerics.text import (C_KEYWORDS, MAX_IDENT, MAX_PREFIX, c_comment, c_identifier, c_prefix,
                               c_string_literal, md_text, xml_text)
from util import REPO, opencl_or_skip, ort_run

RELIABILITY = REPO.parent / "shared" / "reliability"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
GCC = shutil.which("gcc")
HAVE_ARM = all(shutil.which(t) for t in ("arm-none-eabi-gcc", "cmake"))
needs_gcc = pytest.mark.skipif(GCC is None, reason="needs gcc")

#: Text that is C code (a constructor that prints) if it escapes the comment it is written into.
PAYLOAD = '*/ __attribute__((constructor)) static void tinyc_pwn(void) { extern int puts(const char *); ' \
          'puts("INJECTED CODE RAN"); } /*'
#: A marker no C identifier can hold: outside comments and string literals it means a name got out.
SENTINEL = "@EVIL@"
#: Pieces names are made of: comment and literal delimiters, trigraphs, line breaks, control and
#: bidi characters, markup, names that collide after sanitising or with tinyc's own files.
PIECES = ["*/", "/*", "//", "\\", '"', "'", "??/", "??=", "???", "\n", "\r\n", "\r", "\t", "\x01", "\x1b", "\x7f",
          "\u2028", "\u202e", "\ufeff", "é", "\U0001f600", "<svg onload=alert(1)>", "](javascript:x)", "|", "`",
          "${x}", "$(shell id)", "#", ";", "a-b", "a_b", "A_B", "main", "tinyc_rt", "tinyc_q", "int", "_", "0",
          " ", f"*/ {SENTINEL} /*", f"\n{SENTINEL}\n"]


def _no_nul(s: str) -> bool:
    return "\x00" not in s


name_text = st.one_of(
    st.text(min_size=1, max_size=12).filter(_no_nul),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4).filter(_no_nul)), min_size=1, max_size=6)
    .map("".join),
    st.integers(300, 5000).map(lambda n: f"*/ {SENTINEL} /*" + "x" * n),
).filter(lambda s: s != "")


def names_model(names: list[str], node_names: list[str], graph_name: str) -> onnx.ModelProto:
    """x + w -> t; relu(t) -> o1; t * y -> o2, every name given (tensors: x, y, w, t, o1, o2)."""
    x, y, w, t, o1, o2 = names
    nodes = [helper.make_node("Add", [x, w], [t], name=node_names[0]),
             helper.make_node("Relu", [t], [o1], name=node_names[1]),
             helper.make_node("Mul", [t, y], [o2], name=node_names[2])]
    g = helper.make_graph(
        nodes, graph_name, [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in (x, y)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in (o1, o2)],
        initializer=[numpy_helper.from_array(np.array([[1.5, -2.0, 3.0, -4.0]], np.float32), w)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def relu_model(graph_name: str = "g") -> onnx.ModelProto:
    m = names_model(["x", "y", "w", "t", "o1", "o2"], ["n0", "n1", "n2"], graph_name)
    return m


# ------------------------------------------------------------------------------------------
# checks on generated files

def _strip_c(path: Path) -> str:
    """The C (or OpenCL C) text without comments (gcc's preprocessor, nothing expanded) and without
    string and character literals: what remains is code."""
    p = subprocess.run([GCC, "-std=c99", "-x", "c", "-fpreprocessed", "-dD", "-E", "-P", str(path)],
                       capture_output=True, text=True, errors="replace")
    assert p.returncode == 0, p.stderr
    return re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', p.stdout)


def _c_comments(text: str) -> list[str]:
    """The /* */ and // comments of C text (a small lexer: literals are skipped, not searched)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(text[i:j])
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(text[i:j])
            i = j
        else:
            i += 1
    return out


def _inert(code: str) -> bool:
    """No trace of a model name that got out: the sentinel, or the payload's calls."""
    return SENTINEL not in code and not re.search(r"\b(?:tinyc_pwn|puts)\s*\(", code)


#: Non-ASCII characters of tinyc's own (the runtime's comments, which the OpenCL program carries).
RUNTIME_CHARS = {ch for f in (REPO / "runtime_c").rglob("*.[ch]") for ch in f.read_text() if not ch.isascii()}


def _tinycs_chars(text: str) -> bool:
    return all(ch.isascii() or ch in RUNTIME_CHARS for ch in text)


def check_generated_files(folder: Path) -> None:
    """No model-given text outside escaped comments and literals, anywhere tinyc wrote."""
    files = [p for p in folder.rglob("*") if p.is_file() and "build" not in p.relative_to(folder).parts
             and "runtime" not in p.relative_to(folder).parts]
    for f in files:
        text = f.read_text(errors="replace")
        if f.suffix in (".c", ".h", ".cl"):
            assert _tinycs_chars(text), f"{f.name}: non-ASCII characters"
            assert _inert(_strip_c(f)), f"{f.name}: a model name escaped its comment or literal"
            for comment in _c_comments(text):
                assert comment.startswith("/*") and comment.endswith("*/"), f"{f.name}: {comment[:200]}"
                assert "/*" not in comment[2:], f"{f.name}: '/*' inside a comment: {comment[:200]}"
                assert "??" not in comment, f"{f.name}: trigraph in a comment"
        elif f.suffix == ".ld":
            assert _inert(text), f.name
        elif f.name == "CMakeLists.txt" or f.suffix in (".mk", ".cmake"):
            assert _tinycs_chars(text), f"{f.name}: non-ASCII characters"
            for line in text.splitlines():
                if not _inert(line) or "INJECTED" in line:
                    assert line.lstrip().startswith("#"), f"{f.name}: a name outside a comment: {line[:200]}"
        elif f.suffix == ".md":
            assert "<svg" not in text and "](javascript" not in text and "\u202e" not in text, f.name
            assert not any(line.startswith(SENTINEL) for line in text.splitlines()), f"{f.name}: a name broke its line"
        elif f.suffix == ".svg":
            root = ET.parse(f).getroot()  # well-formed XML: no markup from names
            assert not [e for e in root.iter() if e.tag.endswith("svg") and e is not root]


def build_and_run_host(folder: Path, feeds: list[np.ndarray], work: Path) -> list[np.ndarray]:
    """The generated C (runner main.c + model + runtime) with gcc -std=c99 -Werror -pedantic, run
    once; the outputs in the manifest's order."""
    import json
    manifest = json.loads((folder / "tinyc.json").read_text())
    exe = work / "runner"
    srcs = [str(p) for p in sorted(folder.glob("*.c"))] + [str(folder / "runtime/src/tinyc_rt.c")]
    p = subprocess.run([GCC, *STRICT, "-O0", "-I", str(folder), "-I", str(folder / "runtime/include"), *srcs,
                        "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr[-4000:]
    args = []
    for k, x in enumerate(feeds):
        np.ascontiguousarray(x, np.float32).tofile(work / f"in{k}.bin")
        args.append(str(work / f"in{k}.bin"))
    outs = [work / f"out{k}.bin" for k in range(len(manifest["outputs"]))]
    run = subprocess.run([str(exe), *args, *map(str, outs)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "INJECTED" not in run.stdout + run.stderr
    return [np.fromfile(o, np.float32).reshape(s["shape"]) for o, s in zip(outs, manifest["outputs"])]


# ------------------------------------------------------------------------------------------
# the escaping functions

def test_identifiers_are_tinycs_own():
    for text in ["", "_", "__x", "9lives", "int", "a-b", "é", "x" * 5000, "x" * 5000 + "y", PAYLOAD]:
        ident = c_identifier(text, "t")
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", ident) and len(ident) <= MAX_IDENT, ident
        assert ident not in C_KEYWORDS
    assert c_identifier("x" * 5000) != c_identifier("x" * 5000 + "y")  # the hash keeps them apart
    assert c_identifier("digits_cnn") == "digits_cnn" and c_identifier("onnx::Gemm_0") == "onnx__Gemm_0"
    for text, want in [("main", "m_main"), ("tinyc_rt", "m_tinyc_rt"), ("TinyC", "m_tinyc"), ("tinyc_q", "m_tinyc_q"),
                       ("harness_main", "m_harness_main"), ("CMakeLists", "m_cmakelists"), ("int", "m_int"),
                       ("all", "m_all"), ("model_cl", "m_model_cl"), ("digits_cnn", "digits_cnn"), ("m", "m"),
                       ("x*/y", "x__y"), ("", "model")]:
        assert c_prefix(text) == want, text
    for text in ["tinyc" + "x" * 100, "x" * 100, PAYLOAD, "main"]:
        p = c_prefix(text)
        assert len(p) <= MAX_PREFIX and c_prefix(p) == p and re.fullmatch(r"[a-z][a-z0-9_]*", p), p


def test_comment_text_cannot_end_or_nest_a_comment():
    for text in ["*/", "/*", "*/*", "/*/", "**//", "??/", "???/", "a\nb", "x\\", "é\U0001f600\x01", PAYLOAD,
                 "x" * 5000]:
        s = c_comment(text)
        assert s.isascii() and s.isprintable() and len(s) <= 2 * 130
        assert "*/" not in s and "/*" not in s and "??" not in s and "\n" not in s, s
    assert c_comment("/0/Conv") == "/0/Conv" and c_comment("a */ b") == "a * / b"
    assert c_comment("é\n") == "\\u00E9\\u000A"
    assert len(c_string_literal("x" * 5000)) <= 1024 and c_string_literal('a"b?\\') == 'a\\"b\\?\\\\'
    assert md_text("<b>|[x](y)") == "&lt;b&gt;\\|\\[x\\](y)" and "\n" not in md_text("a\nb")
    assert xml_text('<a href="x">&\x01') == "&lt;a href=&quot;x&quot;&gt;&amp;\\u0001"


# ------------------------------------------------------------------------------------------
# (1) the reproducer

@needs_gcc
def test_reproducer_name_injection_does_not_run(tmp_path):
    model = RELIABILITY / "name_injection.onnx"
    if not model.is_file():
        pytest.skip(f"{model} is missing")
    out, y = tmp_path / "ni", tmp_path / "y.npz"
    cli = [sys.executable, "-m", "tinyc"]
    p = subprocess.run([*cli, "compile", str(model), "-o", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([*cli, "run", str(out), "--input", str(RELIABILITY / "name_injection_x.npz"),
                        "--output", str(y)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "INJECTED" not in p.stdout + p.stderr
    check_generated_files(out)
    proto = onnx.load(str(model))
    x = np.load(RELIABILITY / "name_injection_x.npz")
    feeds = {proto.graph.input[0].name: x[x.files[0]].astype(np.float32)}
    want = ort_run(proto, feeds)
    got = np.load(y)
    np.testing.assert_allclose(got[proto.graph.output[0].name], want[0], rtol=1e-4, atol=1e-5)
    # the CMake-built runner too (the constructor would print from there)
    from tinyc.targets.host import load_manifest
    exe = out / "build" / f"{load_manifest(out)['prefix']}_main"
    if exe.is_file():
        np.ascontiguousarray(feeds[proto.graph.input[0].name]).tofile(tmp_path / "x.bin")
        r = subprocess.run([str(exe), str(tmp_path / "x.bin"), str(tmp_path / "o.bin")], capture_output=True,
                           text=True)
        assert r.returncode == 0 and "INJECTED" not in r.stdout + r.stderr


# ------------------------------------------------------------------------------------------
# (2) arbitrary names, property-tested

@needs_gcc
@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.generate])  # a compile and a gcc build each: no shrinking
@given(names=st.lists(name_text, min_size=6, max_size=6, unique=True),
       node_names=st.lists(name_text, min_size=3, max_size=3, unique=True),  # onnxruntime wants them unique
       graph_name=name_text, prefix=st.one_of(st.none(), name_text))
@example(names=["a-b", "A_B", "a_b", "a b", "a.b", "A.B"], node_names=["/*", "*/", "??/"],
         graph_name="main", prefix=None)
@example(names=[f"x {PAYLOAD} {i}" for i in range(6)], node_names=[PAYLOAD, "/* nested", "x" * 5000],
         graph_name=PAYLOAD, prefix="x*/y")
@example(names=["x" * 5000 + str(i) for i in range(6)], node_names=["n\nn", "\r", "é"], graph_name="g",
         prefix="tinyc_rt")
def test_arbitrary_names_build_run_and_stay_inert(tmp_path_factory, names, node_names, graph_name, prefix):
    work = tmp_path_factory.mktemp("names")
    model = names_model(names, node_names, graph_name)
    out = work / "p"
    res = tinyc.compile(model, out, name=prefix)
    assert re.fullmatch(r"[a-z][a-z0-9_]*", res.report["prefix"]) and len(res.report["prefix"]) <= MAX_PREFIX
    check_generated_files(out)
    prefix = res.report["prefix"]
    macros = re.findall(r"^#define (\w+)", (out / f"{prefix}.h").read_text(), re.M)
    assert len(macros) == len(set(macros)), macros  # I/O names equal after sanitising stay apart
    r = np.random.default_rng(0)
    feeds = [r.normal(size=(1, 4)).astype(np.float32) for _ in range(2)]
    got = build_and_run_host(out, feeds, work)
    want = ort_run(model, {names[0]: feeds[0], names[1]: feeds[1]})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    # the firmware harness, rendered as tinyc.device.hostsim does (from tinyc.json alone)
    from tinyc.device.hostsim import harness_context, render_harness_main
    harness = work / "harness_main.c"
    harness.write_text(render_harness_main(harness_context(out)))
    p = subprocess.run([GCC, *STRICT, "-fsyntax-only", "-I", str(out), "-I", str(out / "runtime/include"),
                        str(harness)], capture_output=True, text=True)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr[-4000:]
    assert _inert(_strip_c(harness))


# ------------------------------------------------------------------------------------------
# (3) model files named like tinyc's own files

@pytest.mark.skipif(GCC is None or shutil.which("cmake") is None, reason="needs gcc and cmake")
@pytest.mark.parametrize("stem", ["main", "tinyc_rt", "tinyc_q", "harness_main", "CMakeLists"])
def test_model_files_named_like_tinycs_files_build(tmp_path, stem):
    path = tmp_path / f"{stem}.onnx"
    onnx.save(relu_model(), str(path))
    res = tinyc.compile(path, tmp_path / "o", build=True)
    prefix = res.report["prefix"]
    assert prefix == f"m_{stem.lower()}"
    assert (tmp_path / "o" / "main.c").read_text().count("int main(int argc") == 1
    x = np.array([[1.0, 2.0, -3.0, 4.0]], np.float32)
    y = tinyc.run(tmp_path / "o", {"x": x, "y": x})
    want = ort_run(relu_model(), {"x": x, "y": x})
    np.testing.assert_array_equal(y["o1"], want[0])
    np.testing.assert_array_equal(y["o2"], want[1])


@pytest.mark.skipif(GCC is None or shutil.which("cmake") is None, reason="needs gcc and cmake")
@pytest.mark.parametrize("name", ["x*/y", "/* 5000 */" + "n" * 5000])
def test_name_option_builds_with_cmake(tmp_path, name):
    """`tinyc compile --name ... --build`: the CMake project (-Werror -pedantic) builds and runs."""
    model = tmp_path / "m.onnx"
    onnx.save(names_model(["x", "y", "w", "t", "o1", "o2"], ["/* n0", "n1 */", "n" * 5000], name), str(model))
    p = subprocess.run([sys.executable, "-m", "tinyc", "compile", str(model), "-o", str(tmp_path / "o"), "--name", name,
                        "--build"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    check_generated_files(tmp_path / "o")
    x = np.array([[1.0, 2.0, -3.0, 4.0]], np.float32)
    y = tinyc.run(tmp_path / "o", {"x": x, "y": x})
    np.testing.assert_array_equal(y["o1"], np.maximum(x + [[1.5, -2.0, 3.0, -4.0]], 0))


# ------------------------------------------------------------------------------------------
# (4) the OpenCL target, the library format and the firmware project

INJECTED_NAMES = [f"x {PAYLOAD}", f"y \n{SENTINEL}\n", "w ??/", "t */", f"o1 {PAYLOAD}", "o2 /*"]


@needs_gcc
def test_opencl_target_with_injected_names(tmp_path):
    opencl_or_skip()
    model = names_model(INJECTED_NAMES, [PAYLOAD, "/*", "x" * 5000], PAYLOAD)
    out = tmp_path / "cl"
    res = tinyc.compile(model, out, target="opencl", name="x*/y")
    check_generated_files(out)
    prefix = res.report["prefix"]
    p = subprocess.run([GCC, *STRICT, "-fsyntax-only", f"{prefix}_cl.c", f"{prefix}_cl_main.c"], cwd=out,
                       capture_output=True, text=True)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr[-4000:]
    x = np.array([[1.0, 2.0, -3.0, 4.0]], np.float32)
    feeds = {INJECTED_NAMES[0]: x, INJECTED_NAMES[1]: -x}
    got = tinyc.run(out, feeds)
    want = ort_run(model, feeds)
    np.testing.assert_allclose(got[INJECTED_NAMES[4]], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[INJECTED_NAMES[5]], want[1], rtol=1e-6)


@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and cmake")
@pytest.mark.parametrize("fmt", ["library", "project"])
def test_board_formats_with_injected_names(tmp_path, fmt):
    model = names_model(INJECTED_NAMES, [PAYLOAD, "/*", "x" * 5000], PAYLOAD)
    out = tmp_path / fmt
    tinyc.compile(model, out, board="mps2-an386", format=fmt, name=f"main */ {SENTINEL}")
    check_generated_files(out)
    readme = out / "README.md"
    if fmt == "library":
        assert readme.is_file() and "<" not in readme.read_text().split("\n", 1)[0]
    tinyc.build_project(out)  # arm-none-eabi-gcc through CMake (the library with -Werror)
