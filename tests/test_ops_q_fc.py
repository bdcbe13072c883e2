"""int8 fully connected layers on the extended QMatMul (bias input, fused clamp): ``build_qfc`` (the
int8 lowering of a float Gemm) and the com.microsoft ``QGemm`` importer. The compiled C equals the
integer golden model bit for bit (random shapes, tiles, product forms); the golden model is within
1 LSB of onnxruntime on the equivalent QDQ Gemm models (the model's own weight grid reused) and on
QGemm nodes (int8 and uint8, transA / transB, alpha, per-column scales, bias); one ASan/UBSan run;
clear UnsupportedErrors naming the node."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import tinyc
import tinyc.reference
from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, QuantParams, Tensor
from tinyc.ops import get_op
from tinyc.ops.qmatmul import build_qfc
from tinyc.numerics.qparams import add_qtensor
from util import compile_ir, ort_run, sanitized_project

HYP = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ONNX_T = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}
RANGE = {"int8": (-128, 127), "uint8": (0, 255)}


def fc_graph(seed: int, xs: tuple[int, ...], n: int, bias: bool = True, act: Any = None,
             schedules: list[dict[str, Any]] | None = None, quant_axis: int | None = None) -> tuple[Graph, dict]:
    """int8 x [.., K], one build_qfc node per schedule (same random float layer), outputs y<i>."""
    r = np.random.default_rng(seed)
    k = xs[-1]
    g = Graph(f"qfc{seed}")
    s_x = float(np.float32(r.uniform(0.01, 0.1)))
    add_qtensor(g, "x", xs, s_x, int(r.integers(-40, 40)))
    g.inputs = ["x"]
    w_std = 0.2
    wf = r.normal(0, w_std, (k, n)).astype(np.float32)
    if quant_axis is not None:  # a symmetric per-column grid (axis 1 of [K, N], or 0 of a [N, K] original)
        s_w = (np.abs(wf).max(axis=0) / 127 + 1e-3).astype(np.float32)
        wf = (np.clip(np.rint(wf / s_w), -127, 127) * s_w).astype(np.float32)
    g.add_constant("w", wf)
    if quant_axis is not None:
        g.tensors["w"].quant = QuantParams(s_w, np.zeros(n, np.int64), quant_axis)
    if bias:
        g.add_constant("b", r.normal(0, 0.5, n).astype(np.float32))
    s_y = float(np.float32(3 * s_x * 74 * w_std * np.sqrt(k) / 128))
    y_zp = int(r.integers(-30, 30))
    overrides = {}
    for i, sched in enumerate(schedules or [{}]):
        add_qtensor(g, f"y{i}", (*xs[:-1], n), s_y, y_zp)
        g.nodes.append(build_qfc(g, f"fc{i}", "x", "w", "b" if bias else None, f"y{i}", act, source=f"fc{i}"))
        g.outputs.append(f"y{i}")
        overrides[f"fc{i}"] = sched
    g.output_names = list(g.outputs)
    return g, overrides


def _x(seed: int, g: Graph) -> np.ndarray:
    return np.random.default_rng(seed + 7).integers(-128, 128, g.tensor("x").shape).astype(np.int8)


@settings(max_examples=10, **HYP)
@given(lead=st.lists(st.integers(1, 5), min_size=1, max_size=2), k=st.integers(1, 90), n=st.integers(1, 140),
       bias=st.booleans(), act=st.sampled_from([None, (0.0, None), (0.0, 6.0), (-0.3, 0.3)]),
       seed=st.integers(0, 2**16))
def test_build_qfc_golden_equals_c(tmp_path_factory: pytest.TempPathFactory, lead: list[int], k: int, n: int,
                                   bias: bool, act: Any, seed: int) -> None:
    """Random fully connected layers: every product form and random tiles equal the golden model."""
    r = np.random.default_rng(seed)
    g, _ = fc_graph(seed, (*lead, k), n, bias, act)
    ks = get_op("QMatMul").knobs(g.nodes[0], g)
    scheds = [dict(mac=m, n_tile=ks["n_tile"][int(r.integers(len(ks["n_tile"])))],
                   m_tile=ks["m_tile"][int(r.integers(len(ks["m_tile"])))]) for m in ks["mac"]] + [{}]
    g, overrides = fc_graph(seed, (*lead, k), n, bias, act, scheds)
    x = _x(seed, g)
    golden = tinyc.reference.run_graph(g, {"x": x})
    out = tmp_path_factory.mktemp("qfc")
    compile_ir(g, out, overrides)
    got = tinyc.run(out, {"x": x})
    for i, s in enumerate(scheds):
        np.testing.assert_array_equal(got[f"y{i}"], golden[f"y{i}"], err_msg=str(s))
    # the golden model itself: exact integer sums, then arith's requantization and the clamp
    node, w = g.nodes[0], g.tensor(g.nodes[0].inputs[1]).data
    acc = (x.astype(np.int64) - node.attrs["a_zp"]).reshape(-1, k) @ w.astype(np.int64)
    if bias:
        acc += g.tensor(node.inputs[2]).data.astype(np.int64)
    from tinyc.numerics import fixed_point as arith
    ref = arith.requantize(acc, np.asarray(node.attrs["multiplier"]), np.asarray(node.attrs["shift"]),
                           node.attrs["y_zp"], node.attrs["act_min"], node.attrs["act_max"])
    np.testing.assert_array_equal(golden["y0"].reshape(-1, n), ref)


def _qdq_gemm_model(seed: int, m: int, k: int, n: int, trans_b: bool, act: str | None
                    ) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """int8 x -> DQ; per-column int8 weights -> DQ (axis 1 of [K, N], or 0 of [N, K] with transB);
    int32 bias -> DQ (scale s_x * s_w); Gemm [-> Relu / Clip] -> QuantizeLinear."""
    r = np.random.default_rng(seed)
    s_x = np.float32(r.uniform(0.01, 0.05))
    w = r.integers(-127, 128, (n, k) if trans_b else (k, n)).astype(np.int8)
    s_w = r.uniform(0.002, 0.01, n).astype(np.float32)
    s_y = np.float32(3 * s_x * 74 * 73 * float(s_w.mean()) * np.sqrt(k) / 128)
    v = {"s_x": s_x, "x_zp": np.int8(r.integers(-20, 20)), "w": w, "s_w": s_w, "w_zp": np.zeros(n, np.int8),
         "b": r.integers(-3000, 3000, n).astype(np.int32), "s_b": (s_x * s_w).astype(np.float32),
         "b_zp": np.zeros(n, np.int32), "s_y": s_y, "y_zp": np.int8(r.integers(-20, 20)),
         "lo": np.float32(0), "hi": np.float32(6)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "s_x", "x_zp"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "s_w", "w_zp"], ["wf"], axis=0 if trans_b else 1),
             helper.make_node("DequantizeLinear", ["b", "s_b", "b_zp"], ["bf"], axis=0),
             helper.make_node("Gemm", ["xf", "wf", "bf"], ["yf"], transB=int(trans_b))]
    last = "yf"
    if act:
        nodes.append(helper.make_node("Relu", ["yf"], ["ya"]) if act == "relu"
                     else helper.make_node("Clip", ["yf", "lo", "hi"], ["ya"]))
        last = "ya"
    nodes.append(helper.make_node("QuantizeLinear", [last, "s_y", "y_zp"], ["y"]))
    graph = helper.make_graph(nodes, "qdq_gemm", [helper.make_tensor_value_info("x", TensorProto.INT8, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, [m, n])],
                              initializer=[numpy_helper.from_array(np.asarray(a), name) for name, a in v.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, v


def test_build_qfc_vs_onnxruntime_qdq(tmp_path: Path) -> None:
    """build_qfc with the model's weight grid (per column; also through transB's axis 0) and bias
    grid vs onnxruntime on the QDQ Gemm model: <= 1 LSB; C == golden."""
    off = total = clamped = 0
    for i, (m, k, n, tb, act) in enumerate([(4, 64, 32, False, "relu"), (1, 200, 70, True, None),
                                            (6, 33, 129, True, "relu6"), (3, 7, 5, False, None)]):
        model, v = _qdq_gemm_model(i, m, k, n, tb, act)
        x = np.random.default_rng(90 + i).integers(-128, 128, (m, k)).astype(np.int8)
        ref = ort_run(model, {"x": x})[0]
        g = Graph(f"qdq_fc{i}")
        add_qtensor(g, "x", (m, k), float(v["s_x"]), int(v["x_zp"]))
        g.inputs = ["x"]
        w_kn = v["w"].T if tb else v["w"]
        g.add_constant("w", (w_kn.astype(np.float32) * v["s_w"].reshape(1, n)).astype(np.float32))
        g.tensors["w"].quant = QuantParams(v["s_w"], np.zeros(n, np.int64), 0 if tb else 1)
        g.add_constant("b", v["b"].astype(np.float32) * v["s_b"])
        add_qtensor(g, "y", (m, n), float(v["s_y"]), int(v["y_zp"]))
        clamp = {None: None, "relu": (0.0, None), "relu6": (0.0, 6.0)}[act]
        node = build_qfc(g, "fc", "x", "w", "b", "y", clamp, source="fc")
        assert node.attrs["w_scale"] == [float(s) for s in v["s_w"]]
        np.testing.assert_array_equal(g.tensor(node.inputs[1]).data, w_kn)
        np.testing.assert_array_equal(g.tensor(node.inputs[2]).data, v["b"])
        g.nodes.append(node)
        g.outputs, g.output_names = ["y"], ["y"]
        golden = tinyc.reference.run_graph(g, {"x": x})["y"]
        tinyc.compile(g, tmp_path / f"c{i}", build=True)
        np.testing.assert_array_equal(tinyc.run(tmp_path / f"c{i}", {"x": x})["y"], golden)
        d = np.abs(golden.astype(np.int64) - ref.astype(np.int64))
        assert d.max() <= 1, (i, d.max())
        off += int(np.count_nonzero(d))
        total += d.size
        clamped += int(np.count_nonzero((golden == (int(v["y_zp"]) if act else -128)) | (golden == 127)))
    print(f"build_qfc vs onnxruntime QDQ Gemm: {off} of {total} outputs 1 LSB off, {clamped} at a clamp bound")
    assert off <= total // 50 and clamped < total // 2


# (A type, B type, M, K, N, transA, transB, alpha, per-column b, bias kind: None | "col" | "scalar")
QGEMM_CASES = [
    ("int8", "int8", 5, 40, 24, 0, 1, 1.0, True, "col"),
    ("int8", "int8", 3, 17, 70, 1, 0, 0.5, False, None),
    ("uint8", "uint8", 4, 64, 33, 0, 0, 1.0, False, "col"),
    ("uint8", "int8", 2, 30, 20, 1, 1, 2.0, True, "scalar"),
    ("uint8", "uint8", 6, 12, 9, 0, 1, 1.0, True, "col"),
]


def _qgemm_model(seed: int = 0, cases: list[tuple] = QGEMM_CASES) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    r = np.random.default_rng(seed)
    nodes, inputs, outputs, inits, feeds = [], [], [], [], {}
    for i, (at, bt, m, k, n, ta, tb, alpha, per_col, bias) in enumerate(cases):
        p = f"g{i}_"
        (alo, ahi), (blo, bhi) = RANGE[at], RANGE[bt]
        a_shape = (k, m) if ta else (m, k)
        feeds[p + "a"] = r.integers(alo, ahi + 1, a_shape).astype(at)
        b = r.integers(blo, bhi + 1, (n, k) if tb else (k, n)).astype(bt)
        a_s = np.float32(r.uniform(0.01, 0.05))
        b_s = r.uniform(0.002, 0.01, n if per_col else ()).astype(np.float32)
        mid_b = (blo + bhi + 1) // 2
        b_zp = (mid_b + r.integers(-10, 10, b_s.shape)).astype(bt) if bt == "uint8" else np.zeros(b_s.shape, bt)
        y_s = np.float32(alpha * 3 * a_s * 74 * 74 * float(np.mean(b_s)) * np.sqrt(k) / 128)
        consts: dict[str, Any] = {"a_s": a_s, "a_zp": np.array((alo + ahi + 1) // 2 + r.integers(-10, 10), at),
                                  "b": b, "b_s": b_s, "b_zp": b_zp}
        names = [p + "a", p + "a_s", p + "a_zp", p + "b", p + "b_s", p + "b_zp"]
        if bias == "col":
            consts["c"] = r.integers(-5000, 5000, n).astype(np.int32)
        elif bias == "scalar":
            consts["c"] = np.array([1234], np.int32)
        names.append(p + "c" if bias else "")
        consts["y_s"] = y_s
        consts["y_zp"] = np.array((alo + ahi + 1) // 2 + r.integers(-10, 10), at)
        names += [p + "y_s", p + "y_zp"]
        inits += [numpy_helper.from_array(np.asarray(v), p + name) for name, v in consts.items()]
        nodes.append(helper.make_node("QGemm", names, [p + "y"], domain="com.microsoft", name=f"qgemm{i}",
                                      transA=ta, transB=tb, alpha=alpha))
        inputs.append(helper.make_tensor_value_info(p + "a", ONNX_T[at], list(a_shape)))
        outputs.append(helper.make_tensor_value_info(p + "y", ONNX_T[at], [m, n]))
    g = helper.make_graph(nodes, "qgemm", inputs, outputs, initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model, feeds


def test_qgemm_vs_onnxruntime(tmp_path: Path) -> None:
    """com.microsoft QGemm: C == golden bit for bit; golden within 1 LSB of onnxruntime."""
    model, feeds = _qgemm_model()
    g = tinyc.load(model)
    ops = [n.op for n in g.nodes]
    assert ops.count("QMatMul") == len(QGEMM_CASES) and "QRequantize" in ops and "Transpose" in ops
    golden = tinyc.reference.run_graph(g, feeds)
    tinyc.compile(model, tmp_path / "p", build=True)
    got = tinyc.run(tmp_path / "p", feeds)
    ref = dict(zip([o.name for o in model.graph.output], ort_run(model, feeds)))
    off = total = 0
    for i, case in enumerate(QGEMM_CASES):
        k = f"g{i}_y"
        assert got[k].dtype == np.dtype(case[0]), k
        np.testing.assert_array_equal(got[k], golden[k], err_msg=k)
        d = np.abs(golden[k].astype(np.int64) - ref[k].astype(np.int64))
        assert d.max() <= 1, (k, d.max())
        off += int(np.count_nonzero(d))
        total += d.size
        lo, hi = RANGE[case[0]]
        assert np.mean((ref[k] == lo) | (ref[k] == hi)) < 0.3, k  # not a test of clamps only
    print(f"QGemm vs onnxruntime: {off} of {total} outputs 1 LSB off")
    assert off <= total // 20


def test_q_fc_sanitized(tmp_path: Path) -> None:
    """ASan + UBSan, strict C99: QGemm with uint8 / transposes / b_zp row sums, and build_qfc tiles."""
    model, feeds = _qgemm_model(3, [QGEMM_CASES[2], QGEMM_CASES[3]])
    g = tinyc.load(model)
    g2, ov = fc_graph(5, (3, 37), 70, True, (0.0, 6.0), [dict(mac="i16", n_tile=64, m_tile=2),
                                                           dict(mac="i32", n_tile=16, m_tile=4)])
    for gg, f, o, tag in ((g, feeds, {}, "qgemm"), (g2, {"x": _x(5, g2)}, ov, "fc")):
        golden = tinyc.reference.run_graph(gg, f)
        d = tmp_path / tag
        d.mkdir()
        compile_ir(gg, d / "p", o, build=False)
        outs = sanitized_project(d / "p", gg, f, d, ("-fopenmp-simd", "-DTINYC_OMP_SIMD"))
        for pub, got in outs.items():
            np.testing.assert_array_equal(got, golden[pub], err_msg=f"{tag} {pub}")


def _bad_qgemm(**kw: Any) -> onnx.ModelProto:
    model, _ = _qgemm_model(0, [QGEMM_CASES[0]])
    node, g = model.graph.node[0], model.graph
    if "drop" in kw:
        del node.input[kw["drop"]:]
    if "dynamic" in kw:  # an input made a graph input instead of a constant
        name = node.input[kw["dynamic"]]
        init = next(t for t in g.initializer if t.name == name)
        g.input.append(helper.make_tensor_value_info(name, init.data_type, list(init.dims)))
        g.initializer.remove(init)
    if "replace" in kw:
        idx, arr = kw["replace"]
        name = node.input[idx]
        g.initializer.remove(next(t for t in g.initializer if t.name == name))
        g.initializer.append(numpy_helper.from_array(arr, name))
    for a in node.attribute:
        if a.name in kw.get("attrs", {}):
            a.f = kw["attrs"][a.name]
    return model


@pytest.mark.parametrize("kw, msg", [
    ({"dynamic": 1}, "must be a constant"),
    ({"dynamic": 3}, "must be a constant"),
    ({"drop": 7}, "float output"),
    ({"drop": 8}, "float output"),
    ({"replace": (6, np.zeros((5, 24), np.int32))}, "C of shape"),
    ({"replace": (4, np.ones(7, np.float32))}, "per-column"),
    ({"replace": (6, np.zeros(24, np.int64))}, "int32 only"),
    ({"attrs": {"alpha": -1.0}}, "alpha"),
])
def test_qgemm_unsupported(kw: dict, msg: str) -> None:
    """What the kernel does not handle is refused naming the node, never a bare exception."""
    with pytest.raises(UnsupportedError, match=f"qgemm0.*{msg}"):
        tinyc.load(_bad_qgemm(**kw))


def test_build_qfc_unsupported() -> None:
    g, _ = fc_graph(1, (2, 8), 4)
    with pytest.raises(UnsupportedError, match="fc0.*shape"):
        build_qfc(g, "fc", "x", "w", "b", "x", None, source="fc0")
    g.add_tensor(Tensor("xf", (2, 8), "float32"))
    with pytest.raises(UnsupportedError, match="fc0.*int8 only"):
        build_qfc(g, "fc", "xf", "w", "b", "y0", None, source="fc0")
    g.add_constant("w3", np.ones((2, 8, 4), np.float32))
    with pytest.raises(UnsupportedError, match="constant matrix"):
        build_qfc(g, "fc", "x", "w3", "b", "y0", None, source="fc0")
    big = Graph("big")  # 255 * 127 * 70000 > 2^31: the int32 accumulator could overflow
    add_qtensor(big, "x", (1, 70000), 0.1, 0)
    add_qtensor(big, "y", (1, 1), 0.1, 0)
    big.add_constant("w", np.ones((70000, 1), np.float32))
    with pytest.raises(UnsupportedError, match="big0.*overflow"):
        build_qfc(big, "fc", "x", "w", None, "y", None, source="big0")


def test_qlinearmatmul_still_uses_qmatmul_without_bias() -> None:
    """The QLinearMatMul import is unchanged: no bias input, no act clamp beyond the type range."""
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    inits = {"as": np.float32(0.1), "az": np.int8(0), "b": np.ones((4, 3), np.int8), "bs": np.float32(0.1),
             "bz": np.int8(0), "ys": np.float32(0.1), "yz": np.int8(0)}
    gr = helper.make_graph([node], "u", [helper.make_tensor_value_info("a", TensorProto.INT8, [2, 4])],
                           [helper.make_tensor_value_info("y", TensorProto.INT8, [2, 3])],
                           initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    g = tinyc.load(helper.make_model(gr, opset_imports=[helper.make_opsetid("", 19)]))
    n = next(x for x in g.nodes if x.op == "QMatMul")
    assert len(n.inputs) == 2 and "act_min" not in n.attrs


def test_tuner_space_on_microcontrollers_keeps_the_forms_that_win() -> None:
    """QMatMul's searched space (tinyc.ops.qconv.searched_on_mcu with its own bound): the Helium form on
    the M55, the DSP form on the M4, the portable forms on the M3, each with at most 64
    accumulators outside Helium; the host's space whole."""
    from tinyc.ops.qmatmul import MCU_MAX_MATMUL_ACCUMULATORS
    from tinyc.tune.tasks import schedule_space

    g, _ = fc_graph(3, (4, 96), 128)
    node = next(n for n in g.nodes if n.op == "QMatMul")
    host = schedule_space(node, g, "host")
    assert any(s["n_tile"] * s["m_tile"] > MCU_MAX_MATMUL_ACCUMULATORS for s in host)
    assert {s["mac"] for s in schedule_space(node, g, "mcu+dsp+mve")} == {"mve"}
    m4, m3 = schedule_space(node, g, "mcu+dsp"), schedule_space(node, g, "mcu")
    assert {s["mac"] for s in m4} == {"dsp"} and {s["mac"] for s in m3} == {"i16", "i32"}
    for space in (m4, m3):
        assert max(s["n_tile"] * s["m_tile"] for s in space) <= MCU_MAX_MATMUL_ACCUMULATORS
