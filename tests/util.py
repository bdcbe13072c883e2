"""Helpers shared by tests: tiny ONNX model builders and paths to shared data."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
MLPERF = REPO.parent / "shared" / "models" / "mlperf_tiny"
ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
MLPERF_MODELS = ["mlperf_kws_dscnn", "mlperf_vww_mobilenetv1_025", "mlperf_ic_resnet8", "mlperf_ad_fc_autoencoder"]


def make_model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, list[int | str]]],
               outputs: list[tuple[str, list[int | str] | None]], initializers: dict[str, np.ndarray] | None = None,
               opset: int = 17, name: str = "test") -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def inferred_model(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], outputs: list[str],
                   inits=(), opset: int = 18, ir_version: int = 8, name: str = "t",
                   check: bool = False) -> onnx.ModelProto:
    """A model whose input types come from numpy arrays and whose output shapes/types come
    from onnx's own (strict) shape inference, so tests need not spell them out."""
    g = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype),
                                                    np.asarray(v).shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir_version
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    del m.graph.output[:]
    m.graph.output.extend(inferred.graph.output)
    if check:
        onnx.checker.check_model(m)
    return m


def ort_run(model: onnx.ModelProto | str | Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def compile_ir(graph, out: Path, overrides: dict | None = None, build: bool = True) -> None:
    """tinyc.compile for an IR graph, with per-node schedule knobs overriding the defaults."""
    from tinyc.codegen import generate
    from tinyc.schedule import default_schedules
    from tinyc.targets import host
    sched = default_schedules(graph)
    for name, knobs in (overrides or {}).items():
        sched[name] = {**sched[name], **knobs}
    gen = generate(graph, schedules=sched)
    host.write_project(out, gen.files, gen.manifest, host.default_cflags())
    if build:
        host.build(out)


def schedule_copies(graph, node, scheds: list[dict]) -> dict:
    """Per-node schedule overrides running `node` under every schedule of `scheds` in one project:
    the first on the node itself, each other one on a copy of it (same inputs and attributes)
    whose output is an extra graph output ``extra<i>``."""
    from tinyc.ir.graph import Node
    overrides = {node.name: scheds[0]}
    for i, s in enumerate(scheds[1:]):
        t = graph.tensor(node.outputs[0])
        out = f"extra{i}"
        graph.tensors[out] = type(t)(out, t.shape, t.dtype)
        graph.nodes.append(Node(f"{node.name}_v{i}", node.op, list(node.inputs), [out], dict(node.attrs)))
        graph.outputs.append(out)
        graph.output_names.append(out)
        overrides[f"{node.name}_v{i}"] = s
    return overrides


def sanitized_project(out: Path, graph, feeds: dict[str, np.ndarray], tmp: Path,
                      extra_cflags: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Build the generated project in `out` with its CLI runner under ASan+UBSan and strict C99,
    run it on `feeds` (one inference) and return the outputs by public name. Fails on any report."""
    import subprocess
    srcs = [str(p) for p in sorted(out.glob("*.c")) if p.name != "main.c"] + [str(out / "runtime/src/tinyc_rt.c")]
    exe = tmp / "model_san"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-g",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
                    *extra_cflags, "-I", str(out), "-I", str(out / "runtime/include"), str(out / "main.c"), *srcs,
                    "-o", str(exe), "-lm"], check=True, capture_output=True, text=True)
    args = []
    for k, name in enumerate(graph.inputs):
        np.ascontiguousarray(feeds[name], dtype=graph.tensor(name).dtype).tofile(tmp / f"in{k}.bin")
        args.append(str(tmp / f"in{k}.bin"))
    outs = [tmp / f"out{k}.bin" for k in range(len(graph.outputs))]
    proc = subprocess.run([str(exe), *args, *map(str, outs)], capture_output=True, text=True)
    assert proc.returncode == 0 and "runtime error" not in proc.stderr, proc.stderr
    assert "AddressSanitizer" not in proc.stderr, proc.stderr
    return {pub: np.fromfile(path, dtype=graph.tensor(t).dtype).reshape(graph.tensor(t).shape)
            for (pub, t), path in zip(graph.public_outputs(), outs)}



def assert_sanitized_cases(cases: list, make_x, tmp: Path) -> None:
    """Each (graph, schedule overrides) of `cases`, its input from make_x(i, graph), built for the
    host with ASan + UBSan (sanitized_project): every output equals the golden model bit for bit."""
    import tinyc.reference
    for i, (g, ov) in enumerate(cases):
        x = make_x(i, g)
        golden = tinyc.reference.run_graph(g, {"x": x})
        d = tmp / str(i)
        d.mkdir()
        compile_ir(g, d / "p", ov, build=False)
        got = sanitized_project(d / "p", g, {"x": x}, d)
        for k, v in golden.items():
            np.testing.assert_array_equal(got[k], v, err_msg=f"case {i} {k}")

def sanitized_run(model, feeds: dict[str, np.ndarray], tmp: Path) -> dict[str, np.ndarray]:
    """Compile `model` and run it once under ASan+UBSan (see `sanitized_project`)."""
    import tinyc
    out = tmp / "p"
    graph = tinyc.compile(model, out).graph
    return sanitized_project(out, graph, feeds, tmp)


def opencl_or_skip():
    """pyopencl, or skip the calling test module: where pyopencl or an OpenCL device is absent the
    OpenCL tests cannot run (CI has PoCL, so there they always run)."""
    import pytest
    cl = pytest.importorskip("pyopencl", reason="pyopencl is not installed (pip install 'tinyc[opencl]')")
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    if not any(p.get_devices() for p in platforms):
        pytest.skip("no OpenCL platform with a device (install an OpenCL driver, e.g. pocl-opencl-icd)",
                    allow_module_level=True)
    return cl
