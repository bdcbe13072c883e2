"""ONNX LSTM / GRU / RNN (tinyc/ops/rnn.py): every attribute against onnxruntime on host C, real
recurrent models (a GRU keyword spotter, a 2-layer LSTM regressor, a bidirectional GRU) float vs
onnxruntime, and their int8 forms (PTQ with calibration data: TflmLstm, and the QGRU / QRNN /
QLSTM kernels of tinyc/ops/rnn_q.py) against float and bit for bit between the golden model and
C, on the host, on OpenCL and on the emulated Cortex-M4 board mps2-an386."""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinyc
import tinyc.reference
from util import ort_run

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-6))


def _layer(op: str, x: str, outs: list[str], n_i: int, n_h: int, n_d: int, r: np.random.Generator,
           inits: list, name: str, scale: float = 0.5, bias: bool = True, extra_inputs: tuple = (), **attrs):
    """One recurrent node with random constant weights (appended to `inits`)."""
    g = GATES[op]
    w = (r.standard_normal((n_d, g * n_h, n_i)) * scale / np.sqrt(n_i)).astype(np.float32)
    rr = (r.standard_normal((n_d, g * n_h, n_h)) * scale / np.sqrt(n_h)).astype(np.float32)
    inits += [numpy_helper.from_array(w, f"{name}_W"), numpy_helper.from_array(rr, f"{name}_R")]
    ins = [x, f"{name}_W", f"{name}_R"]
    if bias:
        b = (r.standard_normal((n_d, 2 * g * n_h)) * 0.2).astype(np.float32)
        inits.append(numpy_helper.from_array(b, f"{name}_B"))
        ins.append(f"{name}_B")
    ins += list(extra_inputs)
    while ins and ins[-1] == "":
        ins.pop()
    return helper.make_node(op, ins, outs, name=name, hidden_size=n_h, **attrs)


def _model(nodes, inputs: dict[str, tuple[int, ...]], outputs: list[str], inits) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "rnn", [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    del m.graph.output[:]
    m.graph.output.extend(inferred.graph.output)
    return m


# -- attributes against onnxruntime -------------------------------------------------------------
T, B, I, H = 5, 3, 4, 6

CASES = {
    "rnn_relu_bidir_layout1": ("RNN", dict(direction="bidirectional", layout=1, activations=["Relu", "Tanh"]), 2),
    "rnn_seq_lens_reverse": ("RNN", dict(direction="reverse", seq=[5, 2, 3]), 2),
    "gru_lbr_bidir": ("GRU", dict(direction="bidirectional", linear_before_reset=1), 2),
    "gru_lbr_forward": ("GRU", dict(linear_before_reset=1), 2),
    "gru_seq_lens_init_h_layout1": ("GRU", dict(layout=1, seq=[3, 5, 1], init_h=True), 2),
    "gru_hardsigmoid_softsign": ("GRU", dict(activations=["HardSigmoid", "Softsign"], activation_alpha=[0.3],
                                             activation_beta=[0.4]), 2),
    "lstm_peephole_init_states_reverse": ("LSTM", dict(direction="reverse", peep=True, init_h=True, init_c=True), 3),
    "lstm_bidir_layout1_all_outputs": ("LSTM", dict(direction="bidirectional", layout=1, init_h=True), 3),
    "lstm_clip_input_forget_seq": ("LSTM", dict(clip=0.7, input_forget=1, seq=[2, 5, 4]), 3),
    "lstm_runtime_h0_layout1": ("LSTM", dict(layout=1, runtime_h0=True), 3),
    "lstm_only_y_c": ("LSTM", dict(outs=["", "", "Y_c"]), 3),
}


def _case_model(op: str, spec: dict, n_out: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    r = np.random.default_rng(abs(hash(op + str(sorted(spec)))) % 2**32)
    spec = dict(spec)
    n_d = 2 if spec.get("direction") == "bidirectional" else 1
    layout = spec.get("layout", 0)
    inits: list = []
    xs = (B, T, I) if layout else (T, B, I)
    st = (B, n_d, H) if layout else (n_d, B, H)
    feeds = {"X": r.standard_normal(xs).astype(np.float32)}
    extra = ["", "", "", "", ""]  # sequence_lens, initial_h, initial_c, P
    if "seq" in spec:
        inits.append(numpy_helper.from_array(np.array(spec.pop("seq"), np.int32), "seq"))
        extra[0] = "seq"
    if spec.pop("init_h", False):
        inits.append(numpy_helper.from_array(r.standard_normal(st).astype(np.float32), "h0"))
        extra[1] = "h0"
    inputs = {"X": xs}
    if spec.pop("runtime_h0", False):
        feeds["h0"] = r.standard_normal(st).astype(np.float32)
        inputs["h0"] = st
        extra[1] = "h0"
    if spec.pop("init_c", False):
        inits.append(numpy_helper.from_array(r.standard_normal(st).astype(np.float32), "c0"))
        extra[2] = "c0"
    if spec.pop("peep", False):
        inits.append(numpy_helper.from_array(r.standard_normal((n_d, 3 * H)).astype(np.float32), "P"))
        extra[3] = "P"
    outs = spec.pop("outs", ["Y", "Y_h", "Y_c"][:n_out])
    node = _layer(op, "X", outs, I, H, n_d, r, inits, "L", scale=1.0, extra_inputs=tuple(extra[: 3 if op != "LSTM" else 4]),
                  **spec)
    return _model([node], inputs, [o for o in outs if o], inits), feeds


def _ort_any_layout(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs; a layout-1 node (which onnxruntime refuses) runs as its layout-0 twin
    on transposed inputs, initial states and outputs."""
    node = model.graph.node[0]
    if not any(a.name == "layout" and a.i == 1 for a in node.attribute):
        return ort_run(model, feeds)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    n = m.graph.node[0]
    for a in n.attribute:
        if a.name == "layout":
            a.i = 0
    swap = {"X": (1, 0, 2), "h0": (1, 0, 2), "c0": (1, 0, 2)}
    for k, init in enumerate(m.graph.initializer):
        if init.name in swap:
            m.graph.initializer[k].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).transpose(1, 0, 2), init.name))
    for vi in list(m.graph.input) + list(m.graph.output):
        vi.type.tensor_type.ClearField("shape")
    outs = ort_run(m, {k: v.transpose(swap[k]) for k, v in feeds.items()})
    return [o.transpose(2, 0, 1, 3) if o.ndim == 4 else o.transpose(1, 0, 2) for o in outs]


@pytest.mark.parametrize("case", sorted(CASES))
def test_recurrent_attributes_match_onnxruntime(tmp_path, case):
    op, spec, n_out = CASES[case]
    model, feeds = _case_model(op, spec, n_out)
    want = _ort_any_layout(model, feeds)
    tinyc.compile(model, tmp_path / "m")
    got = tinyc.run(tmp_path / "m", feeds)
    names = [o.name for o in model.graph.output]
    for name, w in zip(names, want):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5, err_msg=f"{case}: {name}")


def test_time_loop_is_a_c_loop_and_state_in_scratch(tmp_path):
    """The kernel does not grow with T (a loop, not unrolled steps); its state is arena scratch."""
    sizes = []
    for n_t in (4, 40):
        r = np.random.default_rng(0)
        inits: list = []
        node = _layer("LSTM", "X", ["Y"], I, H, 1, r, inits, "L")
        res = tinyc.compile(_model([node], {"X": (n_t, 1, I)}, ["Y"], inits), tmp_path / f"t{n_t}")
        src = "".join(p.read_text() for p in (tmp_path / f"t{n_t}").glob("*.c") if "weights" not in p.name)
        sizes.append(len(src))
        assert res.report["arena_bytes"] >= 4 * n_t * H + 4 * H * (3 + 4)
    assert abs(sizes[0] - sizes[1]) < 40


def test_unsupported_forms_are_refused_with_the_node_name(tmp_path):
    r = np.random.default_rng(1)
    inits: list = []
    node = _layer("GRU", "X", ["Y"], I, H, 1, r, inits, "odd", activations=["Sigmoid", "Gelu"])
    with pytest.raises(tinyc.errors.UnsupportedError, match="node 'odd' \\(GRU\\).*Gelu"):
        tinyc.compile(_model([node], {"X": (T, B, I)}, ["Y"], inits), tmp_path / "m")


# -- real models -------------------------------------------------------------------------------
def _gru_kws() -> onnx.ModelProto:
    """49 MFCC frames x 10 -> GRU(64) -> last hidden state -> Gemm -> 12 keyword logits."""
    r = np.random.default_rng(10)
    inits: list = [numpy_helper.from_array(np.array([1, 64], np.int64), "flat"),
                   numpy_helper.from_array((r.standard_normal((64, 12)) / 8).astype(np.float32), "fc_w"),
                   numpy_helper.from_array((r.standard_normal(12) * 0.1).astype(np.float32), "fc_b")]
    nodes = [helper.make_node("Transpose", ["mfcc"], ["tm"], perm=[1, 0, 2]),
             _layer("GRU", "tm", ["", "h"], 10, 64, 1, r, inits, "gru", scale=1.2),
             helper.make_node("Reshape", ["h", "flat"], ["hf"]),
             helper.make_node("Gemm", ["hf", "fc_w", "fc_b"], ["logits"])]
    return _fit_head(_model(nodes, {"mfcc": (1, 49, 10)}, ["logits"], inits), "mfcc")


def _lstm_regressor() -> onnx.ModelProto:
    """20 steps x 8 features -> LSTM(32) -> LSTM(32) -> last hidden state -> Gemm -> 1 value."""
    r = np.random.default_rng(11)
    inits: list = [numpy_helper.from_array(np.array([1], np.int64), "ax1"),
                   numpy_helper.from_array(np.array([1, 32], np.int64), "flat"),
                   numpy_helper.from_array((r.standard_normal((32, 1)) / 4).astype(np.float32), "fc_w"),
                   numpy_helper.from_array(np.zeros(1, np.float32), "fc_b")]
    nodes = [_layer("LSTM", "x", ["y1"], 8, 32, 1, r, inits, "lstm1", scale=1.2),
             helper.make_node("Squeeze", ["y1", "ax1"], ["s1"]),
             _layer("LSTM", "s1", ["", "h2"], 32, 32, 1, r, inits, "lstm2", scale=1.2),
             helper.make_node("Reshape", ["h2", "flat"], ["hf"]),
             helper.make_node("Gemm", ["hf", "fc_w", "fc_b"], ["value"])]
    return _model(nodes, {"x": (20, 1, 8)}, ["value"], inits)


def _bigru() -> onnx.ModelProto:
    """16 steps x 12 -> bidirectional GRU(24) -> both final states -> Gemm -> 12 classes."""
    r = np.random.default_rng(12)
    inits: list = [numpy_helper.from_array(np.array([1, 48], np.int64), "flat"),
                   numpy_helper.from_array((r.standard_normal((48, 12)) / 5).astype(np.float32), "fc_w"),
                   numpy_helper.from_array(np.zeros(12, np.float32), "fc_b")]
    nodes = [_layer("GRU", "x", ["", "h"], 12, 24, 2, r, inits, "bigru", scale=1.2, direction="bidirectional"),
             helper.make_node("Transpose", ["h"], ["ht"], perm=[1, 0, 2]),
             helper.make_node("Reshape", ["ht", "flat"], ["hf"]),
             helper.make_node("Gemm", ["hf", "fc_w", "fc_b"], ["logits"])]
    return _fit_head(_model(nodes, {"x": (16, 1, 12)}, ["logits"], inits), "x")


def _structured(shape: tuple[int, ...], n: int, seed: int, classes: int = 12,
                labels: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """n inputs of `shape` ([.., T, F] sequence last-but-one): one of `classes` fixed templates (smooth
    random trajectories over time, the same for every seed) plus noise, so a classifier sees distinct,
    realistic-looking sequences; with `labels`, also each input's template index."""
    r = np.random.default_rng(seed)
    t_axis = [i for i, d in enumerate(shape) if d > 1][0]
    n_t, n_f = shape[t_axis], int(np.prod(shape)) // shape[t_axis]
    tpl = np.cumsum(np.random.default_rng(1000 + classes).standard_normal((classes, n_t, n_f)) * 0.3, axis=1)
    lab = r.integers(0, classes, n)
    x = tpl[lab] + r.standard_normal((n, n_t, n_f)) * 0.3
    x = x.reshape((n, n_t) + tuple(d for i, d in enumerate(shape) if i != t_axis))
    x = np.moveaxis(x, 1, 1 + t_axis).astype(np.float32).reshape((n,) + shape)
    return (x, lab) if labels else x


def _fit_head(model: onnx.ModelProto, inp: str) -> onnx.ModelProto:
    """Fit the classifier head (fc_w, fc_b of the final Gemm, reading 'hf') by ridge regression on
    the float recurrent features of labelled structured inputs: logits as well separated as a trained
    keyword spotter's, so int8-vs-float agreement measures quantization, not ties of a random head."""
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    n_out = next(numpy_helper.to_array(t).shape[1] for t in model.graph.initializer if t.name == "fc_w")
    x, y = _structured(shape, 400, 20, labels=True)
    feats = onnx.ModelProto()
    feats.CopyFrom(model)
    del feats.graph.output[:]
    feats.graph.output.append(helper.make_tensor_value_info("hf", TensorProto.FLOAT, None))
    f = np.stack([ort_run(feats, {inp: v})[0].reshape(-1) for v in x]).astype(np.float64)
    a = np.concatenate([f, np.ones((len(f), 1))], axis=1)
    target = 4.0 * np.eye(n_out)[y % n_out]
    sol = np.linalg.solve(a.T @ a + 0.1 * len(a) * np.eye(a.shape[1]), a.T @ target).astype(np.float32)
    for t in model.graph.initializer:
        if t.name in ("fc_w", "fc_b"):
            t.CopyFrom(numpy_helper.from_array(sol[:-1] if t.name == "fc_w" else sol[-1], t.name))
    return model


MODELS = {"gru_kws": (_gru_kws, "mfcc", True), "lstm_regressor": (_lstm_regressor, "x", False),
          "bigru": (_bigru, "x", True)}


def _batch_ort(model: onnx.ModelProto, name: str, x: np.ndarray) -> np.ndarray:
    return np.stack([ort_run(model, {name: v})[0] for v in x])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_real_recurrent_models_float_and_int8(tmp_path, name):
    """Float C vs onnxruntime (relative error < 1e-4); int8 PTQ (calibrated on other inputs of
    the same structure) vs float: top-1 agreement >= 99% for the classifiers, output correlation
    for the regressor; the int8 golden model equals the int8 C bit for bit."""
    make, inp, classifies = MODELS[name]
    model = make()
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    x, calib = _structured(shape, 300, 1), _structured(shape, 100, 2)
    out = model.graph.output[0].name
    want = _batch_ort(model, inp, x)
    tinyc.compile(model, tmp_path / "f")
    got = tinyc.run(tmp_path / "f", {inp: x})[out].reshape(want.shape)
    rel = _rel(got, want)
    assert rel < 1e-4, rel
    np.savez(tmp_path / "calib.npz", **{inp: calib})
    res = tinyc.compile(model, tmp_path / "q", quantize="int8", calib=tmp_path / "calib.npz")
    q = tinyc.run(tmp_path / "q", {inp: x})[out].reshape(want.shape)
    ops = [n.op for n in res.graph.nodes]
    if name == "lstm_regressor":
        assert ops.count("TflmLstm") == 2 and "LSTM" not in ops, ops
    else:
        assert ops.count("QGRU") == 1 and "GRU" not in ops, ops
    if classifies:
        agree = float(np.mean(q.reshape(len(x), -1).argmax(1) == want.reshape(len(x), -1).argmax(1)))
        assert agree >= 0.99, agree
    else:
        agree = float(np.corrcoef(q.reshape(-1), want.reshape(-1))[0, 1])
        assert agree > 0.98 and np.mean(np.abs(q - want)) < 0.1 * np.std(want), agree
    for v, c_out in zip(x[:8], q[:8]):
        gold = tinyc.reference.run_graph(res.graph, {inp: v})[out]
        np.testing.assert_array_equal(gold.reshape(c_out.shape), c_out)
    print(f"{name}: float rel err {rel:.2e}; int8 {'top-1 agreement' if classifies else 'correlation'} {agree:.4f}, "
          f"mean |int8 - float| {np.mean(np.abs(q - want)):.4f}; int8 arena {res.report['arena_bytes']} B; ops {ops}")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None,
                    reason="needs qemu-system-arm and arm-none-eabi-gcc")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_real_recurrent_models_int8_on_cortex_m4(tmp_path, name):
    """The int8 models on the emulated Cortex-M4 (mps2-an386): the board's outputs equal the
    golden model bit for bit (validate); one firmware per model."""
    make, inp, _ = MODELS[name]
    model = make()
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    np.savez(tmp_path / "calib.npz", **{inp: _structured(shape, 100, 2)})
    res = tinyc.compile(model, tmp_path / "fw", board="mps2-an386", quantize="int8", calib=tmp_path / "calib.npz",
                        build=True)
    v = tinyc.validate(tmp_path / "fw", {inp: _structured(shape, 2, 3)})
    (_, e), = v["outputs"].items()
    assert e["bit_exact_vs_golden"], v
    print(f"{name} on mps2-an386: {v['per_inference']:,.0f} instructions, arena {res.report['arena_bytes']:,} B, "
          f"flash {res.report['flash_bytes']:,} B, max diff vs onnxruntime {e.get('max_abs_diff_vs_onnxruntime')}")


@pytest.mark.parametrize("layout, direction", [(1, "forward"), (0, "bidirectional")])
def test_int8_lstm_is_tflm_lstm_or_qlstm(tmp_path, layout, direction):
    """A standard LSTM (here batch-major, Y and Y_h read) lowers to TFLite Micro's integer LSTM, a
    bidirectional one to QLSTM (the same arithmetic per direction); the C equals the golden model
    bit for bit."""
    r = np.random.default_rng(5)
    inits: list = []
    n_d = 2 if direction == "bidirectional" else 1
    node = _layer("LSTM", "X", ["Y", "Y_h"], I, H, n_d, r, inits, "L", layout=layout, direction=direction)
    xs = (B, T, I) if layout else (T, B, I)
    model = _model([node], {"X": xs}, ["Y", "Y_h"], inits)
    x = r.standard_normal((40,) + xs).astype(np.float32)
    np.savez(tmp_path / "calib.npz", X=x[:30])
    res = tinyc.compile(model, tmp_path / "q", quantize="int8", calib=tmp_path / "calib.npz")
    ops = [n.op for n in res.graph.nodes]
    got = tinyc.run(tmp_path / "q", {"X": x[30:]})
    want = [np.stack(v) for v in zip(*(_ort_any_layout(model, {"X": v}) for v in x[30:]))]
    assert ("TflmLstm" if direction == "forward" else "QLSTM") in ops and "LSTM" not in ops, ops
    for k, v in enumerate(x[30:33]):
        gold = tinyc.reference.run_graph(res.graph, {"X": v})
        for name in ("Y", "Y_h"):
            np.testing.assert_array_equal(gold[name], got[name][k])
    if direction == "forward":
        y_last = want[0][:, :, -1] if layout else want[0][:, -1]
        np.testing.assert_allclose(want[1], y_last.reshape(want[1].shape), rtol=1e-6)
    for name, w in zip(("Y", "Y_h"), want):
        assert np.max(np.abs(got[name] - w)) < 0.1, name


INT8_FORMS = {
    "gru_bidir_layout1_init_h": ("GRU", dict(direction="bidirectional", layout=1, init_h=True), ["Y", "Y_h"]),
    "gru_lbr_reverse": ("GRU", dict(direction="reverse", linear_before_reset=1), ["Y", "Y_h"]),
    "gru_lbr_bidir_y_h_only": ("GRU", dict(direction="bidirectional", linear_before_reset=1), ["", "Y_h"]),
    "rnn_tanh_forward": ("RNN", dict(), ["Y", "Y_h"]),
    "lstm_reverse_init_states": ("LSTM", dict(direction="reverse", init_h=True), ["Y", "Y_h"]),
    "lstm_bidir_layout1": ("LSTM", dict(direction="bidirectional", layout=1), ["Y", "Y_h"]),
    "rnn_relu_tanh_bidir_layout1": ("RNN", dict(direction="bidirectional", layout=1, activations=["Relu", "Tanh"]),
                                    ["Y", "Y_h"]),
}


@pytest.mark.parametrize("case", sorted(INT8_FORMS))
def test_int8_gru_rnn_lstm_kernels(tmp_path, case):
    """GRU / RNN forms lower to the int16-gate kernels (QGRU / QRNN), LSTMs outside TFLite Micro's
    kernel (reverse, bidirectional, initial states) to QLSTM; no float layer is left; the C
    equals the golden model bit for bit; every output is within a few steps of its int8 grid of
    onnxruntime's float result (calibrated on the tested inputs, so that no state is clipped)."""
    from tinyc.numerics.qparams import qparams_of

    op, spec, outs = INT8_FORMS[case]
    r = np.random.default_rng(7)
    spec = dict(spec)
    n_d = 2 if spec.get("direction") == "bidirectional" else 1
    layout = spec.get("layout", 0)
    xs = (B, T, I) if layout else (T, B, I)
    inits: list = []
    extra: tuple = ()
    if spec.pop("init_h", False):
        st = (B, n_d, H) if layout else (n_d, B, H)
        inits.append(numpy_helper.from_array((r.standard_normal(st) * 0.5).astype(np.float32), "h0"))
        extra = ("", "h0")
        if op == "LSTM":
            inits.append(numpy_helper.from_array((r.standard_normal(st) * 0.8).astype(np.float32), "c0"))
            extra = ("", "h0", "c0")
    node = _layer(op, "X", outs, I, H, n_d, r, inits, "L", extra_inputs=extra, **spec)
    names = [o for o in outs if o]
    model = _model([node], {"X": xs}, names, inits)
    x = r.standard_normal((40,) + xs).astype(np.float32)
    np.savez(tmp_path / "calib.npz", X=x)  # the tested inputs among them: no state leaves its grid
    res = tinyc.compile(model, tmp_path / "q", quantize="int8", calib=tmp_path / "calib.npz")
    ops = [n.op for n in res.graph.nodes]
    assert f"Q{op}" in ops and op not in ops, ops
    got = tinyc.run(tmp_path / "q", {"X": x[30:]})
    for k, v in enumerate(x[30:34]):
        gold = tinyc.reference.run_graph(res.graph, {"X": v})
        for name in names:
            np.testing.assert_array_equal(gold[name], got[name][k], err_msg=name)
    want = [np.stack(v) for v in zip(*(_ort_any_layout(model, {"X": v}) for v in x[30:]))]
    final = {n.outputs[0]: n.inputs[0] for n in res.graph.nodes if n.op == "DequantizeLinear"}
    for name, w in zip(names, want):
        s, zp = qparams_of(res.graph, final[name])
        err = float(np.max(np.abs(got[name] - w))) / s
        print(f"{case} {name}: max |int8 - float| {err:.2f} steps of the int8 grid")
        assert err < 4, (name, err)


@pytest.mark.parametrize("op, attrs, reason", [("GRU", dict(clip=0.5), "int8 GRU with clip"),
                                               ("LSTM", dict(direction="reverse", input_forget=1),
                                                "int8 LSTM with input_forget")])
def test_int8_recurrent_outside_the_kernels_stays_float_with_the_reason(tmp_path, op, attrs, reason):
    r = np.random.default_rng(8)
    inits: list = []
    node = _layer(op, "X", ["Y"], I, H, 1, r, inits, "L", **attrs)
    model = _model([node], {"X": (T, B, I)}, ["Y"], inits)
    np.savez(tmp_path / "calib.npz", X=r.standard_normal((20, T, B, I)).astype(np.float32))
    res = tinyc.compile(model, tmp_path / "q", quantize="int8", calib=tmp_path / "calib.npz")
    assert op in [n.op for n in res.graph.nodes]
    assert reason in json.dumps(res.report)


def _three_layers() -> tuple[onnx.ModelProto, np.ndarray]:
    """A GRU (bidirectional, linear_before_reset), an RNN (Relu / Tanh directions) and an LSTM
    (reverse) side by side on one input, and 20 inputs (H = 8: the DSP dot products' 4-wide path
    and no tail; I = 4)."""
    r = np.random.default_rng(9)
    inits: list = []
    nodes = [_layer("GRU", "X", ["", "hg"], I, 8, 2, r, inits, "gru", direction="bidirectional", linear_before_reset=1),
             _layer("GRU", "X", ["", "hg0"], I, 7, 1, r, inits, "gru0"),
             _layer("RNN", "X", ["", "hr"], I, 8, 2, r, inits, "rnn", direction="bidirectional",
                    activations=["Relu", "Tanh"]),
             _layer("LSTM", "X", ["yl"], I, 8, 1, r, inits, "lstm", direction="reverse")]
    model = _model(nodes, {"X": (T, B, I)}, ["hg", "hg0", "hr", "yl"], inits)
    return model, r.standard_normal((20, T, B, I)).astype(np.float32)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None,
                    reason="needs qemu-system-arm and arm-none-eabi-gcc")
def test_int8_recurrent_kernels_on_cortex_m4(tmp_path):
    """The same layers on the emulated Cortex-M4 (its DSP dot products: SMLAD, with and without a
    tail, linear_before_reset both ways): bit for bit equal to the golden model."""
    model, x = _three_layers()
    np.savez(tmp_path / "calib.npz", X=x)
    res = tinyc.compile(model, tmp_path / "fw", board="mps2-an386", quantize="int8", calib=tmp_path / "calib.npz",
                        build=True)
    assert {"QGRU", "QRNN", "QLSTM"} <= {n.op for n in res.graph.nodes}
    v = tinyc.validate(tmp_path / "fw", {"X": x[:2]})
    for name, e in v["outputs"].items():
        assert e["bit_exact_vs_golden"], (name, v)


def _opencl_device() -> bool:
    try:
        import pyopencl as cl
        return any(p.get_devices() for p in cl.get_platforms())
    except Exception:  # no pyopencl, or no platform
        return False


@pytest.mark.skipif(not _opencl_device(), reason="needs pyopencl and an OpenCL device (e.g. PoCL)")
def test_int8_recurrent_kernels_on_opencl(tmp_path):
    """QGRU, QRNN and QLSTM (_three_layers) render for the OpenCL dialect and equal the golden
    model bit for bit there (one program)."""
    model, x = _three_layers()
    np.savez(tmp_path / "calib.npz", X=x)
    res = tinyc.compile(model, tmp_path / "q", target="opencl", quantize="int8", calib=tmp_path / "calib.npz")
    ops = [n.op for n in res.graph.nodes]
    assert {"QGRU", "QRNN", "QLSTM"} <= set(ops) and not {"GRU", "RNN", "LSTM"} & set(ops), ops
    got = tinyc.run(tmp_path / "q", {"X": x[:3]})
    for k in range(3):
        gold = tinyc.reference.run_graph(res.graph, {"X": x[k]})
        for name in ("hg", "hg0", "hr", "yl"):
            np.testing.assert_array_equal(gold[name], got[name][k], err_msg=name)


def test_tflm_lstm_refuses_opencl_clearly(tmp_path):
    """A plain forward int8 LSTM lowers to TFLite Micro's integer LSTM, whose kernel is C only: the
    OpenCL target refuses it in one line naming the node (not an OpenCL build error)."""
    r = np.random.default_rng(9)
    inits: list = []
    model = _model([_layer("LSTM", "X", ["Y"], I, 8, 1, r, inits, "lstm")], {"X": (T, B, I)}, ["Y"], inits)
    np.savez(tmp_path / "calib.npz", X=r.standard_normal((20, T, B, I)).astype(np.float32))
    with pytest.raises(tinyc.errors.UnsupportedError, match=r"node 'lstm' .*C targets only, not OpenCL"):
        tinyc.compile(model, tmp_path / "q", target="opencl", quantize="int8", calib=tmp_path / "calib.npz")
