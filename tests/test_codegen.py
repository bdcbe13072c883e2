"""Properties of the generated C: deterministic, warning-free, sanitizer-clean, allocation-free,
and the static arena is the only mutable global."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import tinyc
from tinyc.reference import run_graph
from util import MLPERF, REPO, make_model, rng

DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]


def padded_conv_model():
    """3x3 convs with padding and odd sizes: exercises the zero-row tile path and borders."""
    r = rng(1)
    w1 = r.normal(size=(8, 3, 3, 3)).astype(np.float32)
    w2 = r.normal(size=(12, 8, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 2, 1, 0], strides=[2, 1]),
        helper.make_node("AveragePool", ["c"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    return make_model(nodes, [("x", [1, 3, 9, 12])], [("y", [1, 12, 5, 12])], {"w1": w1, "w2": w2})


def test_generation_is_deterministic(tmp_path):
    a = tinyc.compile(DIGITS, tmp_path / "a")
    tinyc.compile(DIGITS, tmp_path / "b")
    for name in a.files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_each_layer_names_its_onnx_node(tmp_path):
    res = tinyc.compile(DIGITS, tmp_path / "p")
    src = (tmp_path / "p" / "digits_cnn.c").read_text()
    for node in ("/0/Conv", "/3/Conv", "/6/MaxPool", "/7/Conv", "/10/Gemm", "/13/Gemm"):
        assert re.search(rf"/\* layer \d+: \w+ '{re.escape(node)}'", src), node
    assert res.report["arena_bytes"] >= res.report["arena_lower_bound_bytes"] > 0


def _c_sources(out: Path) -> list[str]:
    return [str(p) for p in sorted(out.glob("*.c")) if p.name != "main.c"] + [str(out / "runtime/src/tinyc_rt.c")]


@pytest.mark.parametrize("cc", ["gcc", "arm-none-eabi-gcc"])
def test_strict_c99_no_malloc_one_mutable_global(tmp_path, cc):
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} not installed")
    out = tmp_path / "p"
    tinyc.compile(DIGITS, out)
    text = "".join(Path(s).read_text() for s in _c_sources(out))
    assert not re.search(r"\b(malloc|calloc|realloc|free)\s*\(", text)
    objs = []
    extra = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"] if cc.startswith("arm") else []
    for src in _c_sources(out):
        obj = tmp_path / (Path(src).stem + ".o")
        subprocess.run([cc, *STRICT, "-O2", *extra, "-I", str(out), "-I", str(out / "runtime/include"), "-c", src,
                        "-o", str(obj)], check=True, capture_output=True, text=True)
        objs.append(obj)
    nm = shutil.which("nm") if cc == "gcc" else shutil.which("arm-none-eabi-nm")
    if nm is None:
        return
    mutable = []
    for obj in objs:
        for line in subprocess.run([nm, str(obj)], capture_output=True, text=True, check=True).stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "bBdD":  # .bss/.data symbols: writable storage
                mutable.append(parts[2])
    assert mutable == ["digits_cnn_arena"], mutable


@pytest.mark.parametrize("model_name", ["digits", "padded_conv", "mlperf_ad_fc_autoencoder", "mlperf_kws_dscnn"])
def test_asan_ubsan_clean(tmp_path, model_name):
    if model_name == "digits":
        model, feeds = DIGITS, {"input": rng(2).random((1, 1, 8, 8), dtype=np.float32)}
    elif model_name == "padded_conv":
        model, feeds = padded_conv_model(), {"x": rng(3).normal(size=(1, 3, 9, 12)).astype(np.float32)}
    else:
        model = MLPERF / model_name / "model.onnx"
        x = np.load(MLPERF / model_name / "test.npz")["x"][:1]
        feeds = {tinyc.load(model).inputs[0]: x.reshape(tinyc.load(model).tensor(tinyc.load(model).inputs[0]).shape)}
    out = tmp_path / "p"
    res = tinyc.compile(model, out)
    graph = res.graph
    exe = tmp_path / "model_asan"
    cmd = ["gcc", *STRICT, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           "-fno-omit-frame-pointer", "-I", str(out), "-I", str(out / "runtime/include"),
           str(out / "main.c"), *_c_sources(out), "-o", str(exe), "-lm"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    args = []
    for k, name in enumerate(graph.inputs):
        p = tmp_path / f"in{k}.bin"
        np.ascontiguousarray(feeds[name], dtype=np.float32).tofile(p)
        args.append(str(p))
    outs = [tmp_path / f"out{k}.bin" for k in range(len(graph.outputs))]
    proc = subprocess.run([str(exe), *args, *map(str, outs), "3"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr
    expected = run_graph(graph, feeds)
    for (pub, internal), path in zip(graph.public_outputs(), outs):
        got = np.fromfile(path, dtype=np.float32).reshape(graph.tensor(internal).shape)
        np.testing.assert_allclose(got, expected[internal], rtol=1e-4, atol=1e-4)


def test_padded_conv_matches_onnxruntime(tmp_path):
    from util import ort_run
    model = padded_conv_model()
    x = rng(4).normal(size=(1, 3, 9, 12)).astype(np.float32)
    tinyc.compile(model, tmp_path / "p")
    got = tinyc.run(tmp_path / "p", {"x": x})["y"]
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_rebuild_is_skipped_when_unchanged(tmp_path):
    from tinyc.targets import host
    tinyc.compile(DIGITS, tmp_path / "p", build=True)
    lib = host.library_path(tmp_path / "p", host.load_manifest(tmp_path / "p"))
    before = lib.stat().st_mtime_ns
    tinyc.compile(DIGITS, tmp_path / "p", build=True)
    assert lib.stat().st_mtime_ns == before


def test_odd_node_names_survive_as_c_strings(tmp_path):
    import ctypes

    from util import make_model
    name = 'wéird "name" \\ ??= */'
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name=name)], [("x", [3])], [("y", [3])])
    tinyc.compile(model, tmp_path / "p", name="odd", build=True)
    lib = ctypes.CDLL(str(tmp_path / "p" / "build" / "libodd.so"))
    lib.odd_layer_name.restype = ctypes.c_char_p
    assert lib.odd_layer_name(0).decode("utf-8") == name
    assert lib.odd_layer_name(1) is None


@pytest.mark.parametrize("prefix", ["rt", "q", "m"])
def test_model_names_that_shadow_runtime_names_still_build(tmp_path, prefix):
    """Header guards and link targets must not collide with tinyc_rt.h, tinyc_q.h or libm."""
    from util import make_model
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [3])], [("y", [3])])
    tinyc.compile(model, tmp_path / prefix, name=prefix, build=True)
    out = tinyc.run(tmp_path / prefix, {"x": np.array([-1, 0, 2], np.float32)})["y"]
    np.testing.assert_array_equal(out, [0, 0, 2])
