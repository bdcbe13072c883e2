"""The generated plain-C OpenCL host program (tinyc.codegen.opencl_host) built with gcc -Werror and
through its CMakeLists, run on a real OpenCL device (PoCL's CPU driver in CI): its outputs must equal
the Python runner's bit for bit (same device, same program, same launches), int8 models the golden
model's bit for bit and float models onnxruntime's within tolerance; its errors must say what went
wrong. Skipped only where pyopencl, an OpenCL device or gcc is absent (cmake: that one test)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pytest

pyopencl = pytest.importorskip("pyopencl", reason="pyopencl is not installed (pip install 'tinyc[opencl]')")

# test_opencl skips this module too where no OpenCL platform has a device
from test_opencl import DIGITS, _digits, _golden  # noqa: E402

import tinyc  # noqa: E402
from tinyc.codegen.opencl_host import host_program_files  # noqa: E402
from tinyc.quantize.io import to_model_input  # noqa: E402
from tinyc.targets.opencl import OpenCLModel, list_devices  # noqa: E402
from util import MLPERF, make_model, ort_run  # noqa: E402

GCC = shutil.which("gcc")
if GCC is None:
    pytest.skip("gcc is not installed", allow_module_level=True)

CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"]
#: One device for both runners, so "bit for bit" compares the same driver's arithmetic.
DEVICE = next(d.id for d in list_devices() if d.default)


@dataclass
class Project:
    """A compiled OpenCL folder with its host program built in it."""

    folder: Path
    exe: Path
    manifest: dict[str, Any]

    @property
    def prefix(self) -> str:
        return self.manifest["prefix"]


def build(folder: Path, name: str | None = None, flags: Sequence[str] = ()) -> Path:
    """gcc on the generated library + runner; any warning fails (-Werror)."""
    prefix = json.loads((folder / "tinyc.json").read_text())["prefix"]
    exe = folder / (name or f"{prefix}_cl")
    p = subprocess.run([GCC, *CFLAGS, *flags, f"{prefix}_cl.c", f"{prefix}_cl_main.c", "-o", str(exe), "-lOpenCL"],
                       cwd=folder, capture_output=True, text=True)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr
    return exe


def compiled(folder: Path, **options: Any) -> Project:
    model = options.pop("model", DIGITS)
    tinyc.compile(model, folder, target="opencl", **options)
    return Project(folder, build(folder), json.loads((folder / "tinyc.json").read_text()))


def run_c(project: Project, inputs: Sequence[np.ndarray], *args: str, exe: Path | None = None,
          env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, list[np.ndarray]]:
    """Runs the program on `inputs` (each [samples, *shape]); the outputs as [samples, *shape]."""
    work = project.folder.parent / "io"
    work.mkdir(exist_ok=True)
    files = []
    for i, (spec, x) in enumerate(zip(project.manifest["inputs"], inputs)):
        assert x.dtype == np.dtype(spec["dtype"])
        files.append(work / f"in{i}.bin")
        np.ascontiguousarray(x).tofile(files[-1])
    outs = [work / f"out{i}.bin" for i in range(len(project.manifest["outputs"]))]
    for f in outs:
        f.unlink(missing_ok=True)
    p = subprocess.run([str(exe or project.exe), *args, *map(str, files + outs)], capture_output=True, text=True,
                       env=env, timeout=120)
    got = []
    if p.returncode == 0:
        n = len(inputs[0]) if inputs else 1
        for spec, f in zip(project.manifest["outputs"], outs):
            got.append(np.fromfile(f, dtype=spec["dtype"]).reshape(n, *spec["shape"]))
    return p, got


def python_runner(project: Project, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The pyopencl runner on the same device, one sample at a time, as [samples, *shape]."""
    model = OpenCLModel(project.folder, device=DEVICE)
    names = [s["name"] for s in project.manifest["inputs"]]
    results = [model(dict(zip(names, [x[i] for x in inputs]))) for i in range(len(inputs[0]))]
    return [np.stack([r[s["name"]] for r in results]) for s in project.manifest["outputs"]]


def assert_same_as_python(project: Project, inputs: Sequence[np.ndarray], got: list[np.ndarray]) -> None:
    for spec, c_out, py_out in zip(project.manifest["outputs"], got, python_runner(project, inputs)):
        np.testing.assert_array_equal(c_out, py_out, err_msg=f"output {spec['name']}: C host program vs pyopencl")


def assert_golden(project: Project, graph: Any, inputs: Sequence[np.ndarray], got: list[np.ndarray]) -> None:
    names = [s["name"] for s in project.manifest["inputs"]]
    feeds = {n: x.reshape(len(x), *x.shape[2:]) for n, x in zip(names, inputs)}  # [samples, ...]: batch dim 1
    for i in range(len(inputs[0])):
        ref = _golden(graph, feeds, i)
        for spec, c_out in zip(project.manifest["outputs"], got):
            np.testing.assert_array_equal(c_out[i], np.reshape(ref[spec["name"]], spec["shape"]),
                                          err_msg=f"output {spec['name']}, sample {i}: C host program vs golden")


def per_sample(x: np.ndarray, spec: dict[str, Any]) -> np.ndarray:
    """[samples, ...] data as [samples, *shape] in the input's dtype (a batch-1 model)."""
    return np.ascontiguousarray(x).astype(spec["dtype"], copy=False).reshape(len(x), *spec["shape"])


# ------------------------------------------------------------------------------------------
# one compile + gcc build per model for the whole module
@pytest.fixture(scope="module")
def digits_float(tmp_path_factory) -> Project:
    """The float digits CNN; two kernels get a local size so the launch rounding is exercised."""
    graph = tinyc.load(DIGITS)
    conv = next(n for n in graph.nodes if n.op == "Conv")
    gemm = next(n for n in graph.nodes if n.op == "Gemm")
    return compiled(tmp_path_factory.mktemp("float") / "d", model=graph,
                    schedules={conv.name: {"local_size": 16}, gemm.name: {"local_size": 16}})


@pytest.fixture(scope="module")
def digits_int8(tmp_path_factory) -> tuple[Project, Any]:
    """Digits PTQ with int8 I/O: the program takes and gives raw int8 bytes."""
    x_train, _, _, _ = _digits()
    folder = tmp_path_factory.mktemp("int8") / "q"
    res = tinyc.compile(DIGITS, folder, target="opencl", quantize="int8", calib={"input": x_train[:64]},
                        io_dtype="int8")
    return Project(folder, build(folder), json.loads((folder / "tinyc.json").read_text())), res.graph


@pytest.fixture(scope="module")
def digits_x() -> np.ndarray:
    return _digits()[2]


# ------------------------------------------------------------------------------------------
# the files
def test_folder_holds_the_host_program(digits_float):
    p = digits_float
    spec = p.manifest["opencl"]
    assert spec["host_program"] == {"header": f"{p.prefix}_cl.h", "library": f"{p.prefix}_cl.c",
                                    "main": f"{p.prefix}_cl_main.c", "cmake": "CMakeLists.txt",
                                    "executable": f"{p.prefix}_cl"}
    header = (p.folder / f"{p.prefix}_cl.h").read_text()
    source = (p.folder / f"{p.prefix}_cl.c").read_text()
    assert "#define CL_TARGET_OPENCL_VERSION 120" in header
    assert f"#define {p.prefix.upper()}_CL_NUM_KERNELS {len(spec['kernels'])}" in header
    assert '"-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt"' in source
    # the kernel table is the manifest's, in launch order
    rows = re.findall(r'^    \{(\d+), "(\w+)", "[^"]*", "(\w+)", (\d+)u, (\d+)u, (\d+)u\},$', source, re.M)
    assert [(int(i), fn, op, int(g), int(loc), int(lb)) for i, fn, op, g, loc, lb in rows] == \
           [(k["index"], k["fn"], k["op"], k["global_size"], k["local_size"], k.get("local_bytes", 0))
            for k in spec["kernels"]]
    assert f"{p.prefix}_cl_arena_bytes = {spec['arena_bytes']}ULL;" in source
    cmake = (p.folder / "CMakeLists.txt").read_text()
    assert "find_package(OpenCL REQUIRED)" in cmake and "CMAKE_C_STANDARD 99" in cmake


def test_names_that_are_not_c_stay_strings(tmp_path):
    """Node and tensor names go into C string literals escaped (quotes, backslashes, trigraphs)."""
    manifest = {"prefix": "m", "model": "a */ b", "inputs": [{"name": 'in"??/\\', "dtype": "float32", "shape": [2]}],
                "outputs": [{"name": "out", "dtype": "float32", "shape": [2]}],
                "opencl": {"program": "m.cl", "weights": "m_weights.bin", "arena_bytes": 16, "weights_bytes": 1,
                           "kernels": [{"index": 0, "fn": "layer0_relu", "name": 'node "x"', "op": "Relu",
                                        "global_size": 2, "local_size": 0}],
                           "inputs": [{"offset": 0, "bytes": 8}], "outputs": [{"offset": 8, "bytes": 8, "buffer": "arena"}]}}
    files = host_program_files(manifest)
    assert set(files) == {"m_cl.h", "m_cl.c", "m_cl_main.c", "CMakeLists.txt"}
    assert '"in\\"\\?\\?/\\\\"' in files["m_cl.c"] and '"node \\"x\\""' in files["m_cl.c"]
    assert "a * / b" in files["m_cl.h"] and "a */ b" not in files["m_cl.h"]
    assert '{0, "layer0_relu", "node \\"x\\"", "Relu", 2u, 0u, 0u},' in files["m_cl.c"]  # local_bytes: 0 if absent
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    p = subprocess.run([GCC, *CFLAGS, "-fsyntax-only", "m_cl.c", "m_cl_main.c"], cwd=tmp_path, capture_output=True,
                       text=True)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr


# ------------------------------------------------------------------------------------------
# numerics: the same as the Python runner, bit for bit
def test_digits_float_same_as_python_runner_and_close_to_onnxruntime(digits_float, digits_x):
    p = digits_float
    x = per_sample(digits_x[:64], p.manifest["inputs"][0])
    run, got = run_c(p, [x], "--device", DEVICE, "--repeat", "5", "--profile")
    assert run.returncode == 0, run.stderr
    assert_same_as_python(p, [x], got)
    ref = np.stack([ort_run(DIGITS, {"input": xi})[0] for xi in x])
    np.testing.assert_allclose(got[0], ref, rtol=1e-4, atol=1e-4)
    assert (got[0].argmax(-1) == ref.argmax(-1)).all()
    # --repeat: a median latency; --profile: one row per kernel with the Python runner's launch sizes
    assert re.search(r"latency: median [0-9.]+ us \(min [0-9.]+, max [0-9.]+\) over 5 runs", run.stdout), run.stdout
    model = OpenCLModel(p.folder, device=DEVICE)
    launches = [(entry[0]["fn"], entry[2][0][0], entry[2][1][0] if entry[2][1] else 0) for entry in model.kernels]
    rows = re.findall(r"^\s*\d+\s+(\w+)\s+\w+\s+(\d+)\s+(\d+)\s+([0-9.]+)$", run.stdout, re.M)
    assert [(fn, int(g), int(loc)) for fn, g, loc, _ in rows] == launches
    assert any(loc == 16 and g % 16 == 0 and g > 8 for _, g, loc in launches)  # rounded up to the local size
    assert sum(float(us) for *_, us in rows) > 0


def test_digits_int8_io_is_bit_exact(digits_int8, digits_x):
    p, graph = digits_int8
    spec = p.manifest["inputs"][0]
    assert spec["dtype"] == "int8" and p.manifest["outputs"][0]["dtype"] == "int8"
    x = per_sample(to_model_input(spec, digits_x[:16]), spec)
    run, got = run_c(p, [x], "--device", DEVICE)
    assert run.returncode == 0, run.stderr
    assert_same_as_python(p, [x], got)
    assert_golden(p, graph, [x], got)


def test_mlperf_kws_int8_qdq_is_bit_exact(tmp_path):
    folder = MLPERF / "mlperf_kws_dscnn"
    res = tinyc.compile(folder / "model_int8_qdq.onnx", tmp_path / "m", target="opencl")
    p = Project(tmp_path / "m", build(tmp_path / "m"), json.loads((tmp_path / "m" / "tinyc.json").read_text()))
    assert any(k["op"] == "QConv" for k in p.manifest["opencl"]["kernels"])
    x = per_sample(np.load(folder / "test.npz")["x"][:8], p.manifest["inputs"][0])
    run, got = run_c(p, [x], "--device", DEVICE)
    assert run.returncode == 0, run.stderr
    assert_same_as_python(p, [x], got)
    assert_golden(p, res.graph, [x], got)


@pytest.mark.parametrize("case", ["constant_output", "no_kernels"])
def test_outputs_from_the_weights_buffer_and_models_without_kernels(tmp_path, case):
    """A constant model output is read from the weights buffer; a model that only copies (no
    kernel) still runs: ISO C's lack of empty arrays must not show."""
    from onnx import helper
    const = np.array([[1.5, 2.5, -3.0]], np.float32)
    if case == "constant_output":
        model = make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["c"], ["k"])],
                           [("x", [1, 4])], [("y", [1, 4]), ("k", [1, 3])], {"c": const})
    else:
        model = make_model([helper.make_node("Identity", ["x"], ["y"])], [("x", [1, 4])], [("y", [1, 4])])
    p = compiled(tmp_path / "m", model=model)
    spec = p.manifest["opencl"]
    assert (case == "no_kernels") == (not spec["kernels"])
    assert (case == "constant_output") == any(o["buffer"] == "weights" for o in spec["outputs"])
    x = np.array([[[-1.0, 0.5, 2.0, -0.0]], [[3.0, -2.0, 0.0, 1.0]]], np.float32)
    run, got = run_c(p, [x], "--device", DEVICE)
    assert run.returncode == 0, run.stderr
    assert_same_as_python(p, [x], got)
    np.testing.assert_array_equal(got[0], np.maximum(x, 0) if case == "constant_output" else x)
    if case == "constant_output":
        np.testing.assert_array_equal(got[1], np.stack([const, const]))


def test_local_memory_argument(digits_float, digits_x, tmp_path):
    """A kernel whose manifest entry has local_bytes gets a __local buffer of that size as its third
    argument (the driver refuses to launch a kernel with an unset argument)."""
    folder = tmp_path / "d"
    shutil.copytree(digits_float.folder, folder)
    manifest = json.loads((folder / "tinyc.json").read_text())
    cl = folder / manifest["opencl"]["program"]

    def head(k: dict[str, Any]) -> str:
        return f"__kernel void {k['fn']}(__global uchar *tinyc_arena, __global const uchar *tinyc_weights)\n{{"
    # a kernel without local memory yet: it gains the argument here
    first = next(k for k in manifest["opencl"]["kernels"] if not k.get("local_bytes") and head(k) in cl.read_text())
    first["local_bytes"] = 64
    cl.write_text(cl.read_text().replace(head(first), head(first)[:-3] + ", __local uchar *tinyc_local)\n{\n"
                                         "    tinyc_local[get_local_id(0) % 64] = (uchar)1;\n"
                                         "    barrier(CLK_LOCAL_MEM_FENCE);"))
    for name, text in host_program_files(manifest).items():
        (folder / name).write_text(text)
    row = f'"{first["fn"]}", "{first["name"]}", "{first["op"]}", {first["global_size"]}u, {first["local_size"]}u, 64u}}'
    assert row in (folder / f"{manifest['prefix']}_cl.c").read_text()
    p = Project(folder, build(folder), manifest)
    x = per_sample(digits_x[:4], manifest["inputs"][0])
    run, got = run_c(p, [x], "--device", DEVICE)
    assert run.returncode == 0, run.stderr
    _, ref = run_c(digits_float, [x], "--device", DEVICE)
    np.testing.assert_array_equal(got[0], ref[0])


# ------------------------------------------------------------------------------------------
# builds: CMake, sanitizers
def test_cmake_build_runs_from_its_build_folder(digits_float, digits_x, tmp_path):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not installed")
    build_dir = tmp_path / "build"
    for cmd in ([cmake, "-S", str(digits_float.folder), "-B", str(build_dir)], [cmake, "--build", str(build_dir)]):
        p = subprocess.run(cmd, capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    exe = build_dir / f"{digits_float.prefix}_cl"
    assert (build_dir / digits_float.manifest["opencl"]["weights"]).is_file()  # copied next to the program
    x = per_sample(digits_x[:8], digits_float.manifest["inputs"][0])
    run, got = run_c(digits_float, [x], "--device", DEVICE, exe=exe)  # no --dir: the program's own folder
    assert run.returncode == 0, run.stderr
    _, ref = run_c(digits_float, [x], "--device", DEVICE)
    np.testing.assert_array_equal(got[0], ref[0])


def test_address_and_undefined_sanitizers(digits_float, digits_x, tmp_path):
    """ASan/UBSan on a run and on a failed init, and LeakSanitizer on the program's own allocations
    (the driver's are suppressed; where LSan cannot run, e.g. without ptrace, leaks go unchecked)."""
    exe = build(digits_float.folder, f"{digits_float.prefix}_cl_asan",
                ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", "-g"])
    supp = tmp_path / "lsan.supp"
    supp.write_text("".join(f"leak:{lib}\n" for lib in ("libOpenCL", "libpocl", "libLLVM", "libclang", "libhwloc")))
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", LSAN_OPTIONS=f"suppressions={supp}",
               UBSAN_OPTIONS="print_stacktrace=1")
    x = per_sample(digits_x[:8], digits_float.manifest["inputs"][0])

    def sanitized(*args: str) -> tuple[subprocess.CompletedProcess, list[np.ndarray]]:
        run, got = run_c(digits_float, [x], *args, exe=exe, env=env)
        if "LeakSanitizer has encountered a fatal error" in run.stderr:
            env["ASAN_OPTIONS"] = "detect_leaks=0"
            run, got = run_c(digits_float, [x], *args, exe=exe, env=env)
        assert "runtime error" not in run.stderr and "Sanitizer" not in run.stderr, run.stderr
        return run, got

    run, got = sanitized("--device", DEVICE, "--repeat", "2", "--profile")
    assert run.returncode == 0, run.stderr
    _, ref = run_c(digits_float, [x], "--device", DEVICE)
    np.testing.assert_array_equal(got[0], ref[0])
    # a failed init frees what it made too
    (tmp_path / "program_only").mkdir()
    shutil.copy(digits_float.folder / digits_float.manifest["opencl"]["program"], tmp_path / "program_only")
    run, _ = sanitized("--dir", str(tmp_path / "program_only"))
    assert run.returncode == 1 and "cannot open" in run.stderr


# ------------------------------------------------------------------------------------------
# errors
@pytest.fixture
def scratch(digits_float, tmp_path) -> Project:
    """A copy of the float folder (program built in it) that a test may break."""
    folder = tmp_path / "d"
    shutil.copytree(digits_float.folder, folder)
    return Project(folder, folder / digits_float.exe.name, digits_float.manifest)


def test_corrupted_program_shows_the_build_log(scratch, digits_x):
    cl = scratch.folder / scratch.manifest["opencl"]["program"]
    cl.write_text(cl.read_text() + "\n__kernel void broken(void) { undeclared_thing = 1; }\n")
    run, _ = run_c(scratch, [per_sample(digits_x[:1], scratch.manifest["inputs"][0])])
    assert run.returncode == 1
    assert f"OpenCL program {cl} failed to build on" in run.stderr and "undeclared_thing" in run.stderr


def test_missing_or_wrong_weights_name_the_path(scratch, digits_x):
    weights = scratch.folder / scratch.manifest["opencl"]["weights"]
    x = [per_sample(digits_x[:1], scratch.manifest["inputs"][0])]
    weights.write_bytes(weights.read_bytes()[:-8])
    run, _ = run_c(scratch, x)
    assert run.returncode == 1 and f"{weights} holds" in run.stderr and "different compiles" in run.stderr
    weights.unlink()
    run, _ = run_c(scratch, x)
    assert run.returncode == 1 and f"cannot open {weights}" in run.stderr


def test_bad_device_and_arguments(scratch, digits_x):
    x = [per_sample(digits_x[:2], scratch.manifest["inputs"][0])]
    n_platforms = len(pyopencl.get_platforms())
    run, _ = run_c(scratch, x, "--device", "99:0")
    assert run.returncode == 2 and f"device 99:0: there are {n_platforms} OpenCL platform(s)" in run.stderr
    run, _ = run_c(scratch, x, "--device", "0:99")
    assert run.returncode == 2 and re.search(r"device 0:99: platform 0 \(.+\) has \d+ device\(s\)", run.stderr)
    run, _ = run_c(scratch, x, "--device", "gpu")
    assert run.returncode == 2 and "expected PLATFORM:DEVICE" in run.stderr
    p = subprocess.run([str(scratch.exe), "only_one.bin"], capture_output=True, text=True)
    assert p.returncode == 2 and "expected 1 input and 1 output file(s), got 1" in p.stderr and "usage:" in p.stderr
    run, _ = run_c(scratch, [x[0].reshape(-1)[:-1]])  # not a whole number of samples
    assert run.returncode == 2 and "not a whole number of samples of input 'input' (256 B each)" in run.stderr
    p = subprocess.run([str(scratch.exe), "--devices"], capture_output=True, text=True)
    assert p.returncode == 0 and f"* {DEVICE} " in p.stdout


def test_no_platform_is_a_clear_error(scratch, digits_x, tmp_path):
    """The ICD loader finds no driver where OCL_ICD_VENDORS names an empty folder."""
    (tmp_path / "no_vendors").mkdir()
    env = dict(os.environ, OCL_ICD_VENDORS=str(tmp_path / "no_vendors"))
    run, _ = run_c(scratch, [per_sample(digits_x[:1], scratch.manifest["inputs"][0])], env=env)
    assert run.returncode == 1 and "no OpenCL platform found" in run.stderr


def test_buffer_beyond_the_device_is_refused(scratch, digits_x):
    manifest = json.loads(json.dumps(scratch.manifest))
    manifest["opencl"]["arena_bytes"] = 1 << 50
    for name, text in host_program_files(manifest).items():
        (scratch.folder / name).write_text(text)
    build(scratch.folder)
    run, _ = run_c(scratch, [per_sample(digits_x[:1], scratch.manifest["inputs"][0])])
    assert run.returncode == 1
    assert re.search(r"the model's arena buffer needs 1125899906842624 B but .+ allocates at most \d+ B per buffer "
                     r"\(CL_DEVICE_MAX_MEM_ALLOC_SIZE\)", run.stderr), run.stderr
