"""Attention, LayerNormalization and Einsum in whole models: a small transformer encoder classifier
(2 layers, seq 16, d_model 32, 2 heads) written once with the opset-23 Attention op and once with
Einsum, against onnxruntime in float, in int8 (tinyc's quantization: QAttention, QLayerNorm) and on
the emulated Cortex-M4; the fused kernel's score scratch read from report.json."""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinyc
import tinyc.reference
from util import inferred_model, ort_run

SEQ, D, HEADS, FF, CLASSES, LAYERS = 16, 32, 2, 64, 4, 2
HAS_QEMU = shutil.which("qemu-system-arm") is not None and shutil.which("arm-none-eabi-gcc") is not None


def _encoder(einsum: bool, head: tuple[np.ndarray, np.ndarray] | None = None, seed: int = 0) -> onnx.ModelProto:
    """The encoder; without `head` its output is the pooled features (to fit a classifier head on)."""
    r = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def w(name: str, shape: list[int], scale: float | None = None, offset: float = 0.0) -> str:
        s = 1.0 / np.sqrt(shape[0]) if scale is None else scale
        return const(name, (r.standard_normal(shape) * s + offset).astype(np.float32))

    def proj(x: str, name: str, din: int, dout: int) -> str:
        wt = w(f"{name}_w", [din, dout])
        if einsum:
            nodes.append(helper.make_node("Einsum", [x, wt], [f"{name}_mm"], equation="bsd,de->bse"))
        else:
            nodes.append(helper.make_node("MatMul", [x, wt], [f"{name}_mm"]))
        nodes.append(helper.make_node("Add", [f"{name}_mm", w(f"{name}_b", [dout], 0.1)], [name]))
        return name

    def norm(x: str, name: str) -> str:
        nodes.append(helper.make_node("LayerNormalization", [x, w(f"{name}_g", [D], 0.1, 1.0), w(f"{name}_b", [D], 0.1)],
                                      [name], axis=-1, epsilon=1e-5))
        return name

    x, hd = "x", D // HEADS
    for layer in range(LAYERS):
        p = f"l{layer}"
        q, k, v = (proj(x, f"{p}_{t}", D, D) for t in "qkv")
        if einsum:
            shape = const(f"{p}_heads", np.array([1, SEQ, HEADS, hd], np.int64))
            for t in (q, k, v):
                nodes.append(helper.make_node("Reshape", [t, shape], [f"{t}_h"]))
            nodes.append(helper.make_node("Einsum", [f"{q}_h", f"{k}_h"], [f"{p}_s"], equation="bqhd,bkhd->bhqk"))
            nodes.append(helper.make_node("Mul", [f"{p}_s", const(f"{p}_scale", np.float32(1 / np.sqrt(hd)))], [f"{p}_ss"]))
            nodes.append(helper.make_node("Softmax", [f"{p}_ss"], [f"{p}_p"], axis=-1))
            nodes.append(helper.make_node("Einsum", [f"{p}_p", f"{v}_h"], [f"{p}_ah"], equation="bhqk,bkhd->bqhd"))
            nodes.append(helper.make_node("Reshape", [f"{p}_ah", const(f"{p}_merge", np.array([1, SEQ, D], np.int64))],
                                          [f"{p}_att"]))
        else:
            nodes.append(helper.make_node("Attention", [q, k, v], [f"{p}_att"], q_num_heads=HEADS, kv_num_heads=HEADS))
        o = proj(f"{p}_att", f"{p}_o", D, D)
        nodes.append(helper.make_node("Add", [x, o], [f"{p}_r1"]))
        n1 = norm(f"{p}_r1", f"{p}_n1")
        nodes.append(helper.make_node("Relu", [proj(n1, f"{p}_f1", D, FF)], [f"{p}_f1r"]))
        nodes.append(helper.make_node("Add", [n1, proj(f"{p}_f1r", f"{p}_f2", FF, D)], [f"{p}_r2"]))
        x = norm(f"{p}_r2", f"{p}_n2")
    nodes.append(helper.make_node("ReduceMean", [x, const("pool_axes", np.array([1], np.int64))], ["pooled"], keepdims=0))
    out, width = "pooled", D
    if head is not None:
        nodes.append(helper.make_node("Gemm", ["pooled", const("cls_w", head[0]), const("cls_b", head[1])], ["logits"]))
        out, width = "logits", CLASSES
    g = helper.make_graph(nodes, "encoder_einsum" if einsum else "encoder",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, D])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, width])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    return m


def _ort_batch(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """onnxruntime (one session, optimisations off) on each of the inputs x[i]."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, {"x": xi})[0] for xi in x])


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequences drawn around one of CLASSES fixed patterns (the label) with noise."""
    protos = np.random.default_rng(99).standard_normal((CLASSES, 1, SEQ, D))
    r = np.random.default_rng(seed)
    y = r.integers(0, CLASSES, n)
    return (protos[y] + 0.8 * r.standard_normal((n, 1, SEQ, D))).astype(np.float32), y


@pytest.fixture(scope="module", params=["attention", "einsum"])
def encoder(request):
    """(name, model): the classifier head is ridge regression on the float encoder's pooled features
    (so its logits are well conditioned, as a trained head's are)."""
    einsum = request.param == "einsum"
    features = _encoder(einsum)
    x, y = _data(200, 1)
    f = _ort_batch(features, x).astype(np.float64)
    a = np.concatenate([f, np.ones((len(f), 1))], axis=1)
    sol = np.linalg.solve(a.T @ a + 0.1 * len(a) * np.eye(a.shape[1]), a.T @ (4.0 * np.eye(CLASSES)[y]))
    sol = sol.astype(np.float32)
    return request.param, _encoder(einsum, (sol[:-1], sol[-1]))


def test_float_encoder_matches_onnxruntime(tmp_path, encoder):
    name, model = encoder
    x, _ = _data(8, 2)
    tinyc.compile(model, tmp_path / "f", build=True)
    got = tinyc.run(tmp_path / "f", {"x": x})["logits"].reshape(len(x), CLASSES)
    ref = _ort_batch(model, x)
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-4


def test_attention_scratch_is_one_row_block(tmp_path, encoder):
    """report.json: each Attention layer's scratch is one block of score rows, and no tensor of the
    compiled model is a whole [heads, seq, seq] score matrix (the Einsum model, unfused, has them)."""
    name, model = encoder
    from tinyc.ops.attention import ROW_BLOCK

    tinyc.compile(model, tmp_path / "p")
    report = json.loads((tmp_path / "p" / "report.json").read_text())
    scores = [layer for layer in report["layers"] if sorted(layer["output_shape"])[-2:] == [SEQ, SEQ]]
    if name == "einsum":
        assert scores and all(layer["arena_size"] >= HEADS * SEQ * SEQ * 4 for layer in scores)
        return
    att = [layer for layer in report["layers"] if layer["op"] == "Attention"]
    assert len(att) == LAYERS and not scores
    for layer in att:
        assert layer["scratch_bytes"] == ROW_BLOCK * (SEQ + D // HEADS) * 4 < HEADS * SEQ * SEQ * 4


def _golden_equals_c(graph, project, x: np.ndarray) -> None:
    got = tinyc.run(project, {"x": x})["logits"].reshape(len(x), CLASSES)
    for i, xi in enumerate(x):
        ref = tinyc.reference.run_graph(graph, {"x": xi})
        np.testing.assert_array_equal(got[i], np.asarray(next(iter(ref.values()))).reshape(CLASSES))


def test_int8_encoder_agrees_with_float_and_is_bit_exact(tmp_path, encoder):
    name, model = encoder
    calib, _ = _data(64, 3)
    x, _ = _data(300, 4)
    np.savez(tmp_path / "calib.npz", x=calib)
    res = tinyc.compile(model, tmp_path / "q", quantize="int8", calib=tmp_path / "calib.npz", build=True)
    ops = {n.op for n in res.graph.nodes}
    assert "QLayerNorm" in ops and "LayerNormalization" not in ops
    if name == "attention":
        assert "QAttention" in ops and "Attention" not in ops
    got = tinyc.run(tmp_path / "q", {"x": x})["logits"].reshape(len(x), CLASSES)
    ref = _ort_batch(model, x)
    assert (got.argmax(1) == ref.argmax(1)).mean() >= 0.99
    _golden_equals_c(res.graph, tmp_path / "q", x[:4])


@pytest.mark.slow
@pytest.mark.skipif(not HAS_QEMU, reason="qemu-system-arm / arm-none-eabi-gcc not installed")
def test_int8_encoder_on_cortex_m4(tmp_path, encoder):
    """One firmware per model on the emulated mps2-an386: bit-exact with the golden model."""
    name, model = encoder
    calib, _ = _data(64, 3)
    x, _ = _data(4, 5)
    np.savez(tmp_path / "calib.npz", x=calib)
    onnx.save(model, tmp_path / "model.onnx")  # from a file, validate also runs onnxruntime on it
    tinyc.compile(tmp_path / "model.onnx", tmp_path / "fw", board="mps2-an386", quantize="int8", calib=tmp_path / "calib.npz",
                  build=True)
    v = tinyc.validate(tmp_path / "fw", {"x": x})
    e = v["outputs"]["logits"]
    assert v["integer"] and e["bit_exact_vs_golden"], v
    assert e["top1_agreement_vs_onnxruntime"] >= 0.75 and v["per_inference"] > 10_000


# -- Einsum equations against numpy -----------------------------------------------------------
EQUATIONS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("i,i", [(5,), (5,)]),
    ("ii->i", [(4, 4)]), ("...ij,...jk", [(2, 1, 3, 4), (2, 5, 4, 2)]), ("bhqk,bhkd->bqhd", [(2, 2, 5, 6), (2, 2, 6, 4)]),
    ("i,j->ij", [(3,), (4,)]), ("ijk,jl,lk->i", [(2, 3, 4), (3, 5), (5, 4)]), ("iij->ji", [(3, 3, 2)]),
    ("ij,ij->ij", [(3, 4), (1, 4)]), ("ab,cd->", [(2, 3), (4, 5)]), ("ij->", [(3, 4)]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_einsum_equations_match_numpy(tmp_path, dtype):
    """Every equation in one model (one compile): matmuls, traces, diagonals, ellipsis broadcasting,
    outer products, three operands, implicit outputs; float32 through MatMul, the others through Mul."""
    r = np.random.default_rng(0)
    feeds, nodes, want = {}, [], {}
    for k, (eq, shapes) in enumerate(EQUATIONS):
        names = []
        for i, s in enumerate(shapes):
            feeds[f"x{k}_{i}"] = (r.standard_normal(s) * 3).astype(dtype)
            names.append(f"x{k}_{i}")
        nodes.append(helper.make_node("Einsum", names, [f"y{k}"], equation=eq))
        want[f"y{k}"] = np.einsum(eq, *[feeds[n] for n in names])
    model = inferred_model(nodes, feeds, list(want), opset=18)
    tinyc.compile(model, tmp_path / "e", build=True)
    got = tinyc.run(tmp_path / "e", feeds)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name].reshape(ref.shape), ref, rtol=1e-5, atol=1e-4, err_msg=name)


def test_einsum_with_constant_weights_becomes_gemm(tmp_path):
    """A constant operand without batch labels (either side) makes the contraction a Gemm, so int8
    turns Einsum projections into quantized fully connected layers."""
    r = np.random.default_rng(1)
    x = r.standard_normal((2, 5, 8)).astype(np.float32)
    w, w2 = r.standard_normal((8, 6)).astype(np.float32), r.standard_normal((6, 8)).astype(np.float32)
    cases = [("bsd,de->bse", ["x", "w"]), ("ed,bsd->bse", ["w2", "x"]), ("bsd,de->eb", ["x", "w"])]
    nodes = [helper.make_node("Einsum", ins, [f"y{k}"], equation=eq) for k, (eq, ins) in enumerate(cases)]
    model = inferred_model(nodes, {"x": x}, ["y0", "y1", "y2"], opset=18,
                           inits=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")])
    res = tinyc.compile(model, tmp_path / "g", build=True)
    assert [n.op for n in res.graph.nodes].count("Gemm") == 3 and "MatMul" not in {n.op for n in res.graph.nodes}
    got = tinyc.run(tmp_path / "g", {"x": x})
    values = {"x": x, "w": w, "w2": w2}
    for k, (eq, ins) in enumerate(cases):
        ref = np.einsum(eq, *[values[i] for i in ins])
        np.testing.assert_allclose(got[f"y{k}"].reshape(ref.shape), ref, rtol=1e-5, atol=1e-5)


def test_einsum_refuses_mismatched_labels_clearly():
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")
    g = helper.make_graph([node], "bad", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 4]),
                                          helper.make_tensor_value_info("b", TensorProto.FLOAT, [5, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(tinyc.errors.TinycError, match="Einsum.*label 'j'"):
        tinyc.load(m)


# -- int8 variants of the fused kernel ----------------------------------------------------------
@pytest.mark.parametrize("variant", ["gqa_causal_3d", "bool_mask_int8"])
def test_int8_attention_variants_close_to_float(tmp_path, variant):
    """QAttention against the float op on one node: GQA with 3-D inputs and is_causal, and 4-D with a
    constant boolean mask (one fully masked row); golden == C bit for bit."""
    r = np.random.default_rng(7)
    if variant == "gqa_causal_3d":
        feeds = {"q": r.standard_normal((1, 6, 32)), "k": r.standard_normal((1, 6, 16)), "v": r.standard_normal((1, 6, 16))}
        node = helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=4, kv_num_heads=2, is_causal=1)
        inits = []
    else:
        feeds = {"q": r.standard_normal((1, 2, 5, 8)), "k": r.standard_normal((1, 2, 7, 8)), "v": r.standard_normal((1, 2, 7, 8))}
        mask = r.random((5, 7)) > 0.3
        mask[2] = False
        inits = [numpy_helper.from_array(mask, "m")]
        node = helper.make_node("Attention", ["q", "k", "v", "m"], ["y"])
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    model = inferred_model([node], feeds, ["y"], inits=inits, opset=23)
    np.savez(tmp_path / "c.npz", **{k: np.stack([v * s for s in (0.5, 1.0, 1.5)]) for k, v in feeds.items()})
    res = tinyc.compile(model, tmp_path / "q", quantize="int8", calib=tmp_path / "c.npz", build=True)
    assert "QAttention" in {n.op for n in res.graph.nodes}
    got = tinyc.run(tmp_path / "q", feeds)["y"]
    ref = ort_run(model, feeds)[0]
    assert np.abs(got.reshape(ref.shape) - ref).max() < 0.08 * np.abs(ref).max()
    golden = tinyc.reference.run_graph(res.graph, feeds)
    np.testing.assert_array_equal(got.reshape(ref.shape), np.asarray(next(iter(golden.values()))).reshape(ref.shape))


# -- onnxruntime's contrib ops (com.microsoft) -----------------------------------------------------
def test_com_microsoft_attention_ops_match_onnxruntime(tmp_path):
    """MultiHeadAttention (plain, packed bias + runtime key_padding_mask, attention_bias, causal) and
    Attention (packed QKV weights; 2-D mask_index; unidirectional) in one model, one compile."""
    r = np.random.default_rng(0)
    b, s, heads, hd, din = 2, 5, 2, 4, 12
    d = heads * hd
    f32 = lambda *shape: r.standard_normal(shape).astype(np.float32)  # noqa: E731
    feeds = {"q": f32(b, s, d), "k": f32(b, s, d), "v": f32(b, s, d), "x": f32(b, s, din),
             "kpm": np.array([[1] * s, [1, 1, 1, 0, 0]], np.int32)}
    inits = [numpy_helper.from_array(f32(3 * d), "bias"), numpy_helper.from_array(f32(1, heads, s, s), "ab"),
             numpy_helper.from_array(f32(din, 3 * d) * 0.3, "w")]
    ms = dict(domain="com.microsoft", num_heads=heads)
    nodes = [
        helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y0"], **ms),
        helper.make_node("MultiHeadAttention", ["q", "k", "v", "bias", "kpm"], ["y1"], **ms),
        helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "ab"], ["y2"], **ms),
        helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y3"], unidirectional=1, **ms),
        helper.make_node("Attention", ["x", "w", "bias", "kpm"], ["y4"], **ms),
        helper.make_node("Attention", ["x", "w", "bias"], ["y5"], unidirectional=1, **ms),
    ]
    types = {"kpm": TensorProto.INT32}
    g = helper.make_graph(nodes, "ms", [helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), v.shape)
                                        for n, v in feeds.items()],
                          [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [b, s, d]) for i in range(6)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    ref = ort_run(model, feeds)
    res = tinyc.compile(model, tmp_path / "ms", build=True)
    assert sum(n.op == "Attention" for n in res.graph.nodes) == 6
    got = tinyc.run(tmp_path / "ms", feeds)
    for i, want in enumerate(ref):
        np.testing.assert_allclose(got[f"y{i}"].reshape(want.shape), want, rtol=1e-5, atol=1e-5, err_msg=f"y{i}")


def test_com_microsoft_attention_refuses_caches_by_name():
    node = helper.make_node("Attention", ["x", "w", "", "", "past"], ["y"], domain="com.microsoft", num_heads=2)
    g = helper.make_graph([node], "ms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4]),
                                         helper.make_tensor_value_info("past", TensorProto.FLOAT, [2, 1, 2, 2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4])],
                          [numpy_helper.from_array(np.ones((4, 12), np.float32), "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(tinyc.errors.UnsupportedError, match=r"node 'Attention_0' \(Attention\): past"):
        tinyc.load(model)


def test_int8_layer_and_rms_norm_close_to_float_and_bit_exact(tmp_path):
    """QLayerNorm: LayerNormalization over the last axis (gammas of both signs) then RMSNormalization
    over the two trailing axes; within a few output steps of onnxruntime, golden == C."""
    r = np.random.default_rng(3)
    x = (r.standard_normal((2, 6, 16)) * 3 + 1).astype(np.float32)
    inits = [numpy_helper.from_array(r.standard_normal(16).astype(np.float32), "g"),
             numpy_helper.from_array((r.standard_normal(16) * 0.5).astype(np.float32), "b"),
             numpy_helper.from_array((r.random((6, 16)) + 0.5).astype(np.float32), "g2")]
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
             helper.make_node("RMSNormalization", ["ln", "g2"], ["y"], axis=1, epsilon=1e-6)]
    model = inferred_model(nodes, {"x": x}, ["y"], inits=inits, opset=23)
    calib = np.stack([x * s + o for s in (0.5, 1.0, 1.3) for o in (-1.0, 0.0, 1.0)])
    np.savez(tmp_path / "c.npz", x=calib)
    res = tinyc.compile(model, tmp_path / "q", quantize="int8", calib=tmp_path / "c.npz", build=True)
    assert [n.op for n in res.graph.nodes].count("QLayerNorm") == 2
    got = tinyc.run(tmp_path / "q", {"x": x})["y"].reshape(x.shape)
    ref = ort_run(model, {"x": x})[0]
    from tinyc.numerics.qparams import qparams_of
    step = qparams_of(res.graph, [n for n in res.graph.nodes if n.op == "QLayerNorm"][-1].outputs[0])[0]
    assert np.abs(got - ref).max() < 4 * step
    golden = tinyc.reference.run_graph(res.graph, {"x": x})
    np.testing.assert_array_equal(got, np.asarray(next(iter(golden.values()))).reshape(x.shape))
