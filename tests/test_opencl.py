"""The OpenCL target on a real OpenCL implementation (PoCL's CPU driver in CI): float models against
onnxruntime, int8 models bit for bit against the golden model, the runner's errors, the CLI, and a
deterministic sample of the ONNX backend node tests. Skipped only where pyopencl or an OpenCL
platform is absent."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

pyopencl = pytest.importorskip("pyopencl", reason="pyopencl is not installed (pip install 'tinyc[opencl]')")

import tinyc  # noqa: E402
import tinyc.reference  # noqa: E402
from tinyc.errors import BuildError, RunError, UsageError  # noqa: E402
from util import MLPERF, MLPERF_MODELS, REPO, ort_run  # noqa: E402

try:
    _PLATFORMS = pyopencl.get_platforms()
except pyopencl.Error:
    _PLATFORMS = []
if not any(p.get_devices() for p in _PLATFORMS):
    pytest.skip("no OpenCL platform with a device (install an OpenCL driver, e.g. pocl-opencl-icd)",
                allow_module_level=True)

sys.path.insert(0, str(REPO / "examples" / "digits"))
sys.path.insert(0, str(REPO / "tests"))
DIGITS = REPO / "examples/digits/digits_cnn.onnx"


def tinyc_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinyc", *args], capture_output=True, text=True, cwd=REPO)


def _digits():
    from data import load_split
    return load_split()


def _golden(graph, feeds: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    ref = tinyc.reference.run_graph(graph, {n: v[i:i + 1] if v.shape[0] > 1 else v for n, v in feeds.items()})
    if not isinstance(ref, dict):
        ref = dict(zip([p for p, _ in graph.public_outputs()], ref))
    return {pub: ref[pub] if pub in ref else ref[internal] for pub, internal in graph.public_outputs()}


def _assert_bit_exact(graph, project, feeds: dict[str, np.ndarray], k: int) -> None:
    got = tinyc.run(project, {n: v[:k] for n, v in feeds.items()})
    for i in range(k):
        ref = _golden(graph, feeds, i)
        for name, value in ref.items():
            np.testing.assert_array_equal(got[name][i:i + 1].reshape(np.shape(value)), value,
                                          err_msg=f"output {name}, sample {i}")


def _kernels(project) -> list[dict]:
    return json.loads((project / "tinyc.json").read_text())["opencl"]["kernels"]


# ------------------------------------------------------------------------------------------
# float models vs onnxruntime
def test_digits_float_matches_onnxruntime(tmp_path):
    _, _, x, y = _digits()
    x = x[:64]
    tinyc.compile(DIGITS, tmp_path / "d", target="opencl")
    assert (tmp_path / "d" / "digits_cnn.cl").is_file() and (tmp_path / "d" / "digits_cnn_weights.bin").is_file()
    logits = tinyc.run(tmp_path / "d", {"input": x})["logits"]
    ref = np.concatenate([ort_run(DIGITS, {"input": xi[None]})[0] for xi in x])
    np.testing.assert_allclose(logits, ref, rtol=1e-4, atol=1e-4)
    assert (logits.argmax(1) == ref.argmax(1)).all()
    # the big kernels run on many work-items: conv and gemm loops are parallel_for's
    by_op = {}
    for k in _kernels(tmp_path / "d"):
        by_op.setdefault(k["op"], []).append(k["global_size"])
    assert all(g > 1 for op in ("Conv", "Gemm", "Pool") for g in by_op[op]), by_op


@pytest.mark.parametrize("name", MLPERF_MODELS)
def test_mlperf_float_model(tmp_path, name):
    folder = MLPERF / name
    tinyc.compile(folder / "model.onnx", tmp_path / "m", target="opencl")
    k = 8
    x = np.load(folder / "test.npz")["x"][:k]
    got = next(iter(tinyc.run(tmp_path / "m", {"x": x}).values()))
    ref = np.load(folder / "ref.npz")["y"][:k]
    assert got.shape == ref.shape
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * scale)
    if ref.shape[-1] > 1 and name != "mlperf_ad_fc_autoencoder":
        assert (got.argmax(-1) == ref.argmax(-1)).all()
    assert max(k["global_size"] for k in _kernels(tmp_path / "m")) > 1


# ------------------------------------------------------------------------------------------
# int8 models: the golden arithmetic, bit for bit
def test_digits_int8_ptq_is_bit_exact(tmp_path):
    x_train, _, x, _ = _digits()
    calib = {"input": x_train[:64]}
    res = tinyc.compile(DIGITS, tmp_path / "q", target="opencl", quantize="int8", calib=calib)
    assert res.report["quantization"]["int8_nodes"] > 0
    _assert_bit_exact(res.graph, tmp_path / "q", {"input": x}, k=8)


@pytest.mark.parametrize("name", MLPERF_MODELS)
def test_mlperf_int8_qdq_is_bit_exact(tmp_path, name):
    folder = MLPERF / name
    res = tinyc.compile(folder / "model_int8_qdq.onnx", tmp_path / "m", target="opencl")
    x = np.load(folder / "test.npz")["x"][:4]
    _assert_bit_exact(res.graph, tmp_path / "m", {res.graph.inputs[0]: x}, k=4)
    ops = {k["op"]: k["global_size"] for k in _kernels(tmp_path / "m")}
    assert "QConv" in ops or "QMatMul" in ops
    assert max(ops.values()) > 1


# ------------------------------------------------------------------------------------------
# schedule knobs, profiling
def test_local_size_knob_and_profile(tmp_path):
    from tinyc.targets.opencl import OpenCLModel
    graph = tinyc.load(DIGITS)
    conv = next(n for n in graph.nodes if n.op == "Conv")
    tinyc.compile(graph, tmp_path / "a", target="opencl")
    tinyc.compile(graph, tmp_path / "b", target="opencl", schedules={conv.name: {"local_size": 32}})
    ks = _kernels(tmp_path / "b")
    assert [k["local_size"] for k in ks if k["op"] == "Conv"][0] == 32
    x = np.random.default_rng(0).random((1, 1, 8, 8), dtype=np.float32)
    ra = tinyc.run(tmp_path / "a", {"input": x})["logits"]
    model = OpenCLModel(tmp_path / "b", profile=True)
    rb = model({"input": x})["logits"]
    np.testing.assert_array_equal(ra, rb)
    times = model.kernel_times()
    assert len(times) == len(ks) and all(t["ns"] > 0 for t in times)
    first = next(t for t in times if t["op"] == "Conv")
    assert first["local_size"] == 32 and first["global_size"] % 32 == 0
    with pytest.raises(UsageError, match="local_size"):
        tinyc.compile(graph, tmp_path / "c", target="opencl", schedules={conv.name: {"local_size": 7}})
    with pytest.raises(UsageError, match="no knob 'local_size'"):
        tinyc.compile(graph, tmp_path / "d", schedules={conv.name: {"local_size": 32}})  # host: no such knob


def test_c_kernels_are_unchanged_by_the_opencl_dialect(tmp_path):
    """The host target's C never mentions OpenCL constructs (the dialect is per target)."""
    res = tinyc.compile(DIGITS, tmp_path / "h")
    text = "".join((tmp_path / "h" / f).read_text() for f in res.files if f.endswith(".c"))
    assert "get_global_id" not in text and "__global" not in text and "tinyc:parallel_for" not in text


# ------------------------------------------------------------------------------------------
# clear errors
def test_no_platform_is_a_clear_error(tmp_path, monkeypatch):
    tinyc.compile(DIGITS, tmp_path / "d", target="opencl")
    monkeypatch.setattr(pyopencl, "get_platforms", lambda: [])
    with pytest.raises(RunError, match="no OpenCL platform found"):
        tinyc.run(tmp_path / "d", {"input": np.zeros((1, 1, 8, 8), np.float32)})
    with pytest.raises(RunError, match="no OpenCL platform found"):
        tinyc.devices()


def test_build_failure_shows_the_build_log(tmp_path):
    tinyc.compile(DIGITS, tmp_path / "d", target="opencl")
    cl_file = tmp_path / "d" / "digits_cnn.cl"
    cl_file.write_text(cl_file.read_text() + "\n__kernel void broken(void) { undeclared_thing = 1; }\n")
    with pytest.raises(BuildError) as err:
        tinyc.run(tmp_path / "d", {"input": np.zeros((1, 1, 8, 8), np.float32)})
    assert "failed to build" in str(err.value) and "undeclared_thing" in str(err.value)


def test_buffer_beyond_device_limits_is_refused(tmp_path):
    tinyc.compile(DIGITS, tmp_path / "d", target="opencl")
    manifest = json.loads((tmp_path / "d" / "tinyc.json").read_text())
    manifest["opencl"]["arena_bytes"] = 1 << 50
    (tmp_path / "d" / "tinyc.json").write_text(json.dumps(manifest))
    with pytest.raises(RunError, match="arena buffer needs .* allocates at most"):
        tinyc.run(tmp_path / "d", {"input": np.zeros((1, 1, 8, 8), np.float32)})


def test_bad_device_and_wrong_folder(tmp_path):
    tinyc.compile(DIGITS, tmp_path / "d", target="opencl")
    x = {"input": np.zeros((1, 1, 8, 8), np.float32)}
    with pytest.raises(UsageError, match="there are .* OpenCL platform"):
        tinyc.run(tmp_path / "d", x, device="99:0")
    with pytest.raises(UsageError, match="PLATFORM:DEVICE"):
        tinyc.run(tmp_path / "d", x, device="gpu")
    tinyc.compile(DIGITS, tmp_path / "h")
    with pytest.raises(UsageError, match="--target opencl"):
        tinyc.run(tmp_path / "h", x, device="0:0")


# ------------------------------------------------------------------------------------------
# the command line
def test_cli_compile_run_devices(tmp_path):
    p = tinyc_cli("devices")
    assert p.returncode == 0, p.stderr
    assert "* 0:0" in p.stdout and "default" in p.stdout
    p = tinyc_cli("compile", str(DIGITS), "-o", str(tmp_path / "o"), "--target", "opencl")
    assert p.returncode == 0, p.stderr
    assert "for opencl" in p.stdout
    _, _, x, _ = _digits()
    np.savez(tmp_path / "x.npz", input=x[:3])
    p = tinyc_cli("run", str(tmp_path / "o"), "--input", str(tmp_path / "x.npz"), "--output", str(tmp_path / "y.npz"),
                  "--device", "0:0")
    assert p.returncode == 0, p.stderr
    y = np.load(tmp_path / "y.npz")["logits"]
    ref = np.concatenate([ort_run(DIGITS, {"input": xi[None]})[0] for xi in x[:3]])
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    p = tinyc_cli("run", str(tmp_path / "o"), "--input", str(tmp_path / "x.npz"), "--device", "5:5")
    assert p.returncode == 2 and "OpenCL platform" in p.stderr and "Traceback" not in p.stderr


# ------------------------------------------------------------------------------------------
# ONNX backend node tests on this target
def test_onnx_backend_sample_on_opencl():
    """A fixed spread of the node tests (every 12th by name), compiled for OpenCL and run on the
    device: no case may give a wrong output or fail to build/run."""
    import onnx_suite
    t0 = time.time()
    run = onnx_suite.run_opencl(onnx_suite.opencl_sample(12))
    counts = run.counts()
    print(f"\nOpenCL backend sample: {counts} in {time.time() - t0:.0f} s")
    bad = run.by_status("fail", "error")
    assert not bad, "\n".join(f"{r.status} {r.key}: {r.reason}" for r in bad)
    assert counts["pass"] >= 90, counts
