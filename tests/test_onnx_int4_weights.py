"""int4 / uint4 weights behind DequantizeLinear for MatMul and Gemm (weight-only quantization):
compiled as MatMulInt4W (tinyc/ops/matmul_int4.py), the codes packed two per byte in flash, against
onnxruntime and against tinyc's own float path on the dequantized weights."""
from __future__ import annotations

import re
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinyc
from util import ort_run, sanitized_project

QTYPES = {"int4": (TensorProto.INT4, -8, 8), "uint4": (TensorProto.UINT4, 0, 16)}


def _layer(r, name, x, K, N, qtype, *, op="MatMul", trans_b=False, block=0, per="channel", zp=True, bias=False,
           flatten=False):
    """DequantizeLinear(W 4-bit, scale, zero point) -> MatMul / Gemm: nodes, initializers, dequantized B[K][N].
    per: "channel" (per output column), "tensor", or blocked (`block` > 0) along K ("k") or N ("n")."""
    et, lo, hi = QTYPES[qtype]
    shape = (N, K) if trans_b else (K, N)
    k_axis, n_axis = (1, 0) if trans_b else (0, 1)
    w = r.integers(lo, hi, size=shape)
    attrs: dict = {}
    if block:
        axis = k_axis if per == "k" else n_axis
        sshape = tuple(-(-d // block) if i == axis else d for i, d in enumerate(shape))
        attrs = {"axis": axis, "block_size": block}
    elif per == "channel":
        sshape, attrs = (N,), {"axis": n_axis}
    else:
        sshape = ()
    s = (r.random(sshape) * 0.05 + 0.01).astype(np.float32)
    z = r.integers(lo, hi, size=sshape) if zp else np.zeros(sshape, np.int64)
    inits = [helper.make_tensor(f"{name}_q", et, w.shape, w.reshape(-1).tolist()), numpy_helper.from_array(s, f"{name}_s"),
             helper.make_tensor(f"{name}_z", et, z.shape, np.reshape(z, -1).tolist())]
    nodes = [helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_w"], **attrs)]
    # the dequantized weight as onnx's reference computes it (the float model's initializer)
    from onnx.reference import ReferenceEvaluator
    dq = onnx.helper.make_model(helper.make_graph(nodes, "dq", [], [helper.make_tensor_value_info(f"{name}_w", 1, None)],
                                                  inits), opset_imports=[helper.make_opsetid("", 21)])
    wf = ReferenceEvaluator(dq).run(None, {})[0].astype(np.float32)
    pre = [helper.make_node("Flatten", [x], [f"{name}_x"], axis=2)] if flatten else []  # [B, S, K] -> [B*S, K]
    ins = [f"{name}_x" if flatten else x, f"{name}_w"]
    if bias:
        inits.append(numpy_helper.from_array(r.standard_normal(N).astype(np.float32), f"{name}_b"))
        ins.append(f"{name}_b")
    kw = {"transB": 1} if op == "Gemm" and trans_b else {}
    nodes.append(helper.make_node(op, ins, [f"{name}_y"], **kw))
    return pre + nodes, inits, wf, f"{name}_y"


def _model(layers, x_shape, qtype, seed=0):
    """A chain of 4-bit layers (Relu between them), and the same model with float32 weights."""
    r = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    float_nodes, float_inits = [], []
    for i, spec in enumerate(layers):
        if i:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
            float_nodes.append(nodes[-1])
            x = f"r{i}"
        n, ini, wf, x = _layer(r, f"l{i}", x, qtype=qtype, **spec)
        nodes += n
        inits += ini
        float_nodes += [k for k in n if k.op_type != "DequantizeLinear"]
        float_inits += [numpy_helper.from_array(wf, f"l{i}_w"), *ini[3:]]
    out = [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)]
    inp = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    models = []
    for nn, ii in ((nodes, inits), (float_nodes, float_inits)):
        m = helper.make_model(helper.make_graph(nn, "mlp4", inp, out, ii), opset_imports=[helper.make_opsetid("", 21)])
        m.ir_version = 10
        models.append(onnx.shape_inference.infer_shapes(m))
    return models[0], models[1]


#: a 2-layer MLP: int4 blocked (block_size 32 along K) MatMul, per-channel Gemm(transB=1) with bias
MLP = [dict(K=96, N=64, block=32, per="k"), dict(K=64, N=10, op="Gemm", trans_b=True, bias=True)]


def _packed_arrays(folder):
    """{constant name: byte count} of the uint8 arrays in the generated weights header."""
    (header,) = folder.glob("*_weights.h")
    return {m[1]: int(m[0]) for m in re.findall(r"const uint8_t \w+\[(\d+)\]; /\* '([^']+)'", header.read_text())}


@pytest.mark.parametrize("qtype", ["int4", "uint4"])
def test_int4_mlp_matches_onnxruntime_and_stays_packed(tmp_path, qtype):
    model, fmodel = _model(MLP, (2, 96), qtype)
    x = np.random.default_rng(1).standard_normal((2, 96)).astype(np.float32)
    ref = ort_run(model, {"x": x})[0]
    res = tinyc.compile(model, tmp_path / "q")
    assert [n.op for n in res.graph.nodes] == ["MatMulInt4W", "MatMulInt4W"]  # the Relu fused
    got = next(iter(tinyc.run(tmp_path / "q", {"x": x}).values()))
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
    # the float path (dequantized weights as float32 initializers) gives the same numbers
    fres = tinyc.compile(fmodel, tmp_path / "f")
    fgot = next(iter(tinyc.run(tmp_path / "f", {"x": x}).values()))
    assert np.abs(got - fgot).max() <= 1e-5 * np.abs(fgot).max()
    packed = _packed_arrays(tmp_path / "q")
    # each weight array holds ceil(K * N / 2) bytes: two codes per byte
    assert sorted(v for k, v in packed.items() if k.endswith("_w_int4")) == [64 * 10 // 2, 96 * 64 // 2], packed
    assert res.report["weights_bytes"] * 6 < fres.report["weights_bytes"], (res.report, fres.report)


ODD = [
    dict(K=45, N=7, per="tensor"),  # K * N odd: the last byte half used; per-tensor scale
    dict(K=7, N=33, block=16, per="n", zp=False),  # blocks along N, a tail block, no zero point
    dict(K=33, N=5, op="Gemm", block=8, per="k", bias=True, flatten=True),  # Gemm transB 0, a tail block along K
    dict(K=5, N=6, op="Gemm", trans_b=True, block=4, per="k"),  # transB 1, blocked along K
    dict(K=6, N=4, op="Gemm", block=2, per="k"),  # small even blocks: two codes per byte read, no table
]


@pytest.mark.parametrize("qtype", ["int4", "uint4"])
def test_int4_odd_shapes_and_scale_layouts(tmp_path, qtype):
    """Tail blocks, odd element counts, per-tensor / blocked along N, a 3-D input (MatMul's rows)."""
    model, _ = _model(ODD, (2, 3, 45), qtype, seed=3)
    x = np.random.default_rng(2).standard_normal((2, 3, 45)).astype(np.float32)
    ref = ort_run(model, {"x": x})[0]
    res = tinyc.compile(model, tmp_path / "q")
    assert sum(n.op == "MatMulInt4W" for n in res.graph.nodes) == len(ODD)
    # strict C99 (-Wall -Wextra -Werror -pedantic) under ASan + UBSan: no read past the packed arrays
    got = next(iter(sanitized_project(tmp_path / "q", res.graph, {"x": x}, tmp_path).values()))
    assert got.shape == ref.shape and np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
    assert sorted(v for k, v in _packed_arrays(tmp_path / "q").items() if k.endswith("_w_int4")) == sorted(
        -(-s["K"] * s["N"] // 2) for s in ODD)


def test_int4_weight_read_twice_keeps_float_for_other_consumers(tmp_path):
    """A dequantized weight that also feeds an Add: the MatMul packs it, the Add reads the float copy."""
    model, _ = _model([dict(K=8, N=8, per="channel")], (8, 8), "int4")
    g = model.graph
    g.node.append(helper.make_node("Add", ["l0_y", "l0_w"], ["z"]))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 8]))
    x = np.random.default_rng(4).standard_normal((8, 8)).astype(np.float32)
    ref = ort_run(model, {"x": x})[0]
    tinyc.compile(model, tmp_path / "q")
    got = tinyc.run(tmp_path / "q", {"x": x})["z"]
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None,
                    reason="needs qemu-system-arm and arm-none-eabi-gcc")
def test_int4_mlp_on_cortex_m4(tmp_path):
    """One firmware on the emulated mps2-an386: the device equals the golden model and onnxruntime."""
    model, _ = _model(MLP, (2, 96), "int4")
    onnx.save(model, tmp_path / "model.onnx")  # from a file, validate also runs onnxruntime on it
    res = tinyc.compile(tmp_path / "model.onnx", tmp_path / "fw", board="mps2-an386", build=True)
    x = np.random.default_rng(1).standard_normal((3, 2, 96)).astype(np.float32)
    v = tinyc.validate(tmp_path / "fw", {"x": x})
    (e,) = v["outputs"].values()
    print(v, res.report["flash_bytes"])
    assert e["max_abs_diff_vs_onnxruntime"] <= 1e-4 * float(np.abs(ort_run(model, {"x": x[0]})[0]).max()), v


def test_int4_mlp_on_opencl(tmp_path):
    """The kernel renders for the OpenCL dialect (one work-item per output column) and agrees."""
    from util import opencl_or_skip
    opencl_or_skip()
    model, _ = _model(MLP, (2, 96), "int4")
    x = np.random.default_rng(1).standard_normal((2, 96)).astype(np.float32)
    ref = ort_run(model, {"x": x})[0]
    tinyc.compile(model, tmp_path / "cl", target="opencl")
    got = next(iter(tinyc.run(tmp_path / "cl", {"x": x}).values()))
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()


def test_matmul_float64_batched(tmp_path):
    """MatMul in double (the serial loop nest with T = double): broadcast batches, a dynamic B."""
    r = np.random.default_rng(6)
    a, b = r.standard_normal((2, 3, 4, 5)), r.standard_normal((3, 5, 6))
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm64",
                          [helper.make_tensor_value_info("a", TensorProto.DOUBLE, list(a.shape)),
                           helper.make_tensor_value_info("b", TensorProto.DOUBLE, list(b.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 3, 4, 6])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    res = tinyc.compile(model, tmp_path / "d")
    got = sanitized_project(tmp_path / "d", res.graph, {"a": a, "b": b}, tmp_path)["y"]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)  # float32 arithmetic would miss by ~1e-7
