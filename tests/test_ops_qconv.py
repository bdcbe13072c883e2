"""QLinearConv -> QConv: the C kernel equals the integer golden model bit for bit, and onnxruntime
(which requantizes in float) within 1 LSB."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinyc
import tinyc.reference
from tinyc.errors import UnsupportedError
from util import compile_ir, ort_run, sanitized_project, sanitized_run, schedule_copies

_ET = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}


def qconv_model(seed: int, xshape: tuple[int, ...], oc: int, k: tuple[int, ...], group: int = 1,
                per_channel: bool = True, bias: bool = True, xdt: type = np.int8, wdt: type = np.int8,
                w_zp: int = 0, **attrs: object) -> onnx.ModelProto:
    """A one-node QLinearConv model with random constant int weights / scales / zero points."""
    r = np.random.default_rng(seed)
    c = xshape[1]
    lo, hi = (-127, 128) if wdt == np.int8 else (0, 256)
    w = r.integers(lo, hi, (oc, c // group, *k)).astype(wdt)
    ws = (r.uniform(0.002, 0.02, oc) if per_channel else np.array([0.01])).astype(np.float32)
    x_zp, y_zp = (-3, 5) if xdt == np.int8 else (120, 128)
    inits = {"x_scale": np.array(0.05, np.float32), "x_zp": np.array(x_zp, xdt), "w": w, "w_scale": ws,
             "w_zp": np.full(ws.shape, w_zp, wdt), "y_scale": np.array(r.uniform(0.1, 0.3), np.float32),
             "y_zp": np.array(y_zp, xdt)}
    names = ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"]
    if bias:
        inits["B"] = r.integers(-2000, 2000, oc).astype(np.int32)
        names.append("B")
    if group > 1:
        attrs["group"] = group
    node = helper.make_node("QLinearConv", names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "qconv_model", [helper.make_tensor_value_info("x", _ET[xdt], list(xshape))],
        [helper.make_tensor_value_info("y", _ET[xdt], [f"d{i}" for i in range(len(xshape))])],
        initializer=[numpy_helper.from_array(v, n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _input(seed: int, model: onnx.ModelProto) -> np.ndarray:
    vi = model.graph.input[0]
    dt = np.int8 if vi.type.tensor_type.elem_type == TensorProto.INT8 else np.uint8
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    info = np.iinfo(dt)
    return np.random.default_rng(seed + 100).integers(info.min, info.max + 1, shape).astype(dt)


CASES = {
    "pads_per_channel": (1, (1, 8, 9, 9), 16, (3, 3), dict(pads=[1, 1, 1, 1])),
    "depthwise_stride2": (2, (1, 8, 9, 9), 8, (3, 3), dict(group=8, strides=[2, 2], pads=[1, 0, 1, 1])),
    "depthwise_mult2_same": (3, (1, 4, 7, 7), 8, (3, 3), dict(group=4, auto_pad="SAME_UPPER", strides=[2, 2])),
    "grouped_1d_dilated": (4, (2, 6, 10), 4, (3,), dict(group=2, dilations=[2], per_channel=False)),
    "wide_tail_tiles": (5, (1, 5, 4, 4), 40, (1, 1), dict(bias=False)),
    "uint8_wzp": (6, (1, 3, 8, 8), 5, (2, 2), dict(xdt=np.uint8, wdt=np.uint8, w_zp=128, per_channel=False,
                                                    pads=[0, 1, 1, 0])),
}


def test_qconv_bit_exact_vs_golden_and_ort(tmp_path: Path) -> None:
    total = diff1 = 0
    for name, (seed, xs, oc, k, kw) in CASES.items():
        model = qconv_model(seed, xs, oc, k, **kw)
        x = _input(seed, model)
        golden = tinyc.reference.run_graph(tinyc.load(model), {"x": x})
        golden = golden["y"] if isinstance(golden, dict) else golden[0]
        out = tmp_path / name
        tinyc.compile(model, out, build=True)
        y = tinyc.run(out, {"x": x})["y"]
        assert y.dtype == x.dtype and y.shape == golden.shape, name
        np.testing.assert_array_equal(y, golden, err_msg=name)
        ref = ort_run(model, {"x": x})[0]
        d = np.abs(y.astype(np.int64) - ref.astype(np.int64))
        assert d.max() <= 1, (name, d.max())
        total += d.size
        diff1 += int((d == 1).sum())
    assert diff1 <= total // 20  # float vs fixed-point rounding: off by one only rarely


def test_qconv_sanitized(tmp_path: Path) -> None:
    seed, xs, oc, k, kw = CASES["depthwise_stride2"]
    model = qconv_model(seed, xs, oc, k, **kw)
    x = _input(seed, model)
    golden = tinyc.reference.run_graph(tinyc.load(model), {"x": x})
    golden = golden["y"] if isinstance(golden, dict) else golden[0]
    np.testing.assert_array_equal(sanitized_run(model, {"x": x}, tmp_path)["y"], golden)


def test_qconv_layout_and_requant_params() -> None:
    g = tinyc.load(qconv_model(1, (1, 8, 9, 9), 16, (3, 3), pads=[1, 1, 1, 1]))
    node = next(n for n in g.nodes if n.op == "QConv")
    assert node.attrs["layout"] == "NHWC"
    assert g.tensor(node.inputs[1]).shape == (3, 3, 8, 16)
    assert len(node.attrs["multiplier"]) == 16 and all(2**30 <= m < 2**31 for m in node.attrs["multiplier"])


def test_qconv_unsupported() -> None:
    m = qconv_model(1, (1, 2, 4, 4), 2, (1, 1))
    m.graph.input.append(helper.make_tensor_value_info("w_scale_rt", TensorProto.FLOAT, [2]))
    m.graph.node[0].input[4] = "w_scale_rt"
    with pytest.raises(UnsupportedError, match="must be a constant"):
        tinyc.load(m)
    m = qconv_model(1, (1, 2, 4, 4, 4), 2, (1, 1, 1))
    with pytest.raises(UnsupportedError, match="1D and 2D"):
        tinyc.load(m)


# -- build_qconv (the int8 lowering's builder) and the tiled kernel variants ----------------------------
from typing import Any  # noqa: E402

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tinyc.ir import Graph, Node, QuantParams  # noqa: E402
from tinyc.ops import get_op  # noqa: E402
from tinyc.ops.qconv import build_qconv, reuse_weight_grid  # noqa: E402
from tinyc.numerics.qparams import add_qtensor  # noqa: E402

HYP = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
AGREE: dict[str, list[int]] = {}  # test -> [outputs 1 LSB off onnxruntime, outputs compared]


def sanitized_ir(graph: Graph, feeds: dict[str, np.ndarray], tmp: Path,
                 overrides: dict[str, dict[str, Any]]) -> dict[str, np.ndarray]:
    """util.sanitized_run for an IR graph with schedule overrides (ASan + UBSan, strict C99)."""
    compile_ir(graph, tmp / "p", overrides, build=False)
    return sanitized_project(tmp / "p", graph, feeds, tmp, ("-fopenmp-simd", "-DTINYC_OMP_SIMD"))


def _out_size(size: int, k: int, s: int, d: int, pb: int, pe: int) -> int:
    return (size + pb + pe - (k - 1) * d - 1) // s + 1


def conv_graph(seed: int, xs: tuple[int, ...], oc: int, k: tuple[int, ...], group: int = 1,
               strides: tuple[int, ...] | None = None, pads: tuple[int, ...] | None = None,
               dil: tuple[int, ...] | None = None, act: Any = None, schedules: list[dict[str, Any]] | None = None,
               quant: bool = False) -> tuple[Graph, dict[str, dict[str, Any]]]:
    """One int8 NHWC (or NWC) input and one build_qconv node per schedule in `schedules` (all the
    same convolution, random float weights), each writing its own output y<i>."""
    r = np.random.default_rng(seed)
    n_sp = len(k)
    strides = strides or (1,) * n_sp
    pads = pads or (0,) * (2 * n_sp)
    dil = dil or (1,) * n_sp
    c = xs[-1]
    g = Graph(f"qconv{seed}")
    s_x = float(np.float32(r.uniform(0.01, 0.1)))
    add_qtensor(g, "x", xs, s_x, int(r.integers(-40, 40)))
    g.inputs = ["x"]
    w_std = 0.3
    wf = r.normal(0, w_std, (*k, c // group, oc)).astype(np.float32)
    if r.random() < 0.3:  # a channel of zeros and one with a huge weight: degenerate scales
        wf[..., 0] = 0
        wf[(0,) * (n_sp + 1) + (oc - 1,)] = 5.0
    g.add_constant("w", wf)
    g.add_constant("b", r.normal(0, 0.5, oc).astype(np.float32))
    if quant:  # a symmetric per-channel grid in ONNX's OIHW axis 0
        s_w = (np.abs(wf).reshape(-1, oc).max(axis=0) / 127).astype(np.float32) + np.float32(1e-3)
        q = np.clip(np.rint(wf / s_w), -127, 127)
        g.tensors["w"].data = (q * s_w).astype(np.float32)
        g.tensors["w"].quant = QuantParams(s_w, np.zeros(oc, np.int64), 0)
    fan = int(np.prod(k)) * c // group
    s_y = float(np.float32(3 * s_x * 74 * w_std * np.sqrt(fan) / 128))
    out_sp = [_out_size(xs[1 + i], k[i], strides[i], dil[i], pads[i], pads[i + n_sp]) for i in range(n_sp)]
    attrs = dict(kernel=list(k), strides=list(strides), pads=list(pads), dilations=list(dil), group=group,
                 layout="NHWC")
    y_zp = int(r.integers(-30, 30))
    overrides = {}
    for i, sched in enumerate(schedules or [{}]):
        add_qtensor(g, f"y{i}", (xs[0], *out_sp, oc), s_y, y_zp)
        g.nodes.append(build_qconv(g, f"conv{i}", "x", "w", "b", f"y{i}", attrs, act, source=f"conv{i}"))
        g.outputs.append(f"y{i}")
        overrides[f"conv{i}"] = sched
    g.output_names = list(g.outputs)
    return g, overrides


def _x(seed: int, g: Graph) -> np.ndarray:
    return np.random.default_rng(seed + 7).integers(-128, 128, g.tensor("x").shape).astype(np.int8)


def _variant_schedules(g: Graph, r: np.random.Generator, node: Node | None = None) -> list[dict[str, Any]]:
    """Every kernel variant x product form of the node, with random tiles / weight widths / orders."""
    ks = get_op("QConv").knobs(node or g.nodes[0], g)
    out = []
    for v in ks["variant"]:
        for mac in (ks["mac"] if v != "baseline" else ["i32"]):
            out.append(dict(variant=v, mac=mac, **{k: ks[k][int(r.integers(len(ks[k])))]
                                                   for k in ("oc_tile", "px_tile", "wide_weights", "loop_order")}))
    return out


@st.composite
def conv_cases(draw: st.DrawFn) -> dict[str, Any]:
    n_sp = draw(st.sampled_from([2, 2, 2, 1]))
    kind = draw(st.sampled_from(["dense", "depthwise", "grouped", "pointwise"]))
    k = (1,) * n_sp if kind == "pointwise" else tuple(draw(st.integers(1, 3)) for _ in range(n_sp))
    if kind == "depthwise":
        c = draw(st.integers(1, 40))
        group, oc = c, c * draw(st.sampled_from([1, 1, 2]))
    elif kind == "grouped":
        group = draw(st.integers(2, 3))
        c, oc = group * draw(st.integers(1, 5)), group * draw(st.integers(1, 9))
    else:
        group, c, oc = 1, draw(st.integers(1, 40)), draw(st.integers(1, 70))
    sp = tuple(draw(st.integers(1, 7)) for _ in range(n_sp))
    strides = tuple(draw(st.integers(1, 2)) for _ in range(n_sp)) if kind != "pointwise" else (1,) * n_sp
    dil = tuple(draw(st.integers(1, 2)) for _ in range(n_sp))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(2 * n_sp)) if kind != "pointwise" else (0,) * (2 * n_sp)
    for i in range(n_sp):  # at least one output pixel
        if _out_size(sp[i], k[i], strides[i], dil[i], pads[i], pads[i + n_sp]) < 1:
            sp = sp[:i] + ((k[i] - 1) * dil[i] + 1,) + sp[i + 1:]
    act = draw(st.sampled_from([None, (0.0, None), (0.0, 6.0), (-0.5, 0.5), (None, 1.0)]))
    return dict(xs=(draw(st.integers(1, 2)), *sp, c), oc=oc, k=k, group=group, strides=strides, pads=pads,
                dil=dil, act=act, quant=draw(st.booleans()))


@settings(max_examples=12, **HYP)
@given(case=conv_cases(), seed=st.integers(0, 2**16))
# found in CI: a depthwise channel tail whose every tap reads padding, scalar requantization
@example(case=dict(xs=(1, 1, 1, 2), oc=2, k=(1, 1), group=2, strides=(1, 1), pads=(0, 0, 0, 1), dil=(1, 1),
                   act=None, quant=False), seed=325)
def test_build_qconv_golden_equals_c(tmp_path_factory: pytest.TempPathFactory, case: dict[str, Any],
                                     seed: int) -> None:
    """build_qconv on random float convolutions (dense / grouped / depthwise with multiplier /
    pointwise, 1D and 2D, strides, pads, dilations, fused clamps): every kernel variant and product
    form (random tiles, int8/int16 weights, loop orders) equals the integer golden model bit for bit."""
    g, _ = conv_graph(seed, **case)
    scheds = _variant_schedules(g, np.random.default_rng(seed))
    g, overrides = conv_graph(seed, **case, schedules=scheds)
    x = _x(seed, g)
    golden = tinyc.reference.run_graph(g, {"x": x})
    out = tmp_path_factory.mktemp("bqc")
    compile_ir(g, out, overrides)
    got = tinyc.run(out, {"x": x})
    for i, s in enumerate(scheds):
        np.testing.assert_array_equal(got[f"y{i}"], golden[f"y{i}"], err_msg=f"{case} {s}")


def test_qconv_variants_on_qlinearconv(tmp_path: Path) -> None:
    """The tiled variants on QLinearConv graphs (uint8 activations, int16 weights, per-tensor
    scales): every variant / product form the node allows equals the golden model."""
    for name, (seed, xs, oc, k, kw) in CASES.items():
        g = tinyc.load(qconv_model(seed, xs, oc, k, **kw))
        node = next(n for n in g.nodes if n.op == "QConv")
        scheds = _variant_schedules(g, np.random.default_rng(seed), node)
        overrides = schedule_copies(g, node, scheds)
        x = _input(seed, qconv_model(seed, xs, oc, k, **kw))
        feeds = {g.inputs[0]: x}
        golden = tinyc.reference.run_graph(g, feeds)
        compile_ir(g, tmp_path / name, overrides)
        got = tinyc.run(tmp_path / name, feeds)
        for pub in g.output_names:
            np.testing.assert_array_equal(got[pub], golden[pub], err_msg=f"{name} {pub}")


def test_build_qconv_sanitized(tmp_path: Path) -> None:
    """ASan + UBSan, strict C99: padded direct (odd channels), depthwise with multiplier, depthwise
    rows (lanes of pixels x channels, border pixels), pointwise with int16 weights, and the
    baseline kernel."""
    g, ov = conv_graph(3, (1, 5, 6, 5), 6, (3, 3), strides=(2, 1), pads=(1, 2, 0, 1), act=(0.0, 6.0),
                       schedules=[dict(variant="direct", px_tile=3, oc_tile=4, wide_weights=True),
                                  dict(variant="direct", mac="i16", px_tile=4, loop_order="channels_outer"),
                                  dict(variant="baseline")])
    g2, ov2 = conv_graph(4, (1, 5, 5, 3), 6, (3, 3), group=3, pads=(1, 1, 1, 1), dil=(2, 1),
                         schedules=[dict(variant="depthwise", px_tile=3), dict(variant="depthwise", mac="i32")])
    g3, ov3 = conv_graph(5, (2, 3, 3, 9), 20, (1, 1), schedules=[dict(variant="pointwise", wide_weights=True,
                                                                      px_tile=4, oc_tile=8)])
    g4, ov4 = conv_graph(6, (1, 4, 7, 4), 4, (3, 3), group=4, pads=(1, 1, 1, 1),
                         schedules=[dict(variant="depthwise_rows", px_tile=2),
                                    dict(variant="depthwise_rows", px_tile=3, mac="i16")])
    for gg, o, tag in ((g, ov, "a"), (g2, ov2, "b"), (g3, ov3, "c"), (g4, ov4, "d")):
        x = _x(7, gg)
        golden = tinyc.reference.run_graph(gg, {"x": x})
        d = tmp_path / tag
        d.mkdir()
        got = sanitized_ir(gg, {"x": x}, d, o)
        for k2, v in golden.items():
            np.testing.assert_array_equal(got[k2], v, err_msg=f"{tag} {k2}")


def test_build_qconv_left_shift_multiplier(tmp_path: Path) -> None:
    """A multiplier > 1 (shift > 0: s_x * s_w / s_y >= 1) takes the saturating left-shift path."""
    g, ov = conv_graph(11, (1, 4, 4, 8), 8, (3, 3), pads=(1, 1, 1, 1),
                       schedules=[{}, dict(variant="baseline")])
    for name in ("y0", "y1"):
        g.tensor(name).quant = QuantParams(np.array(np.float32(1e-5)), np.array(0, np.int64), None)
    for i, n in enumerate(g.nodes):  # rebuild with the new output grid
        g.nodes[i] = build_qconv(g, n.name, "x", "w", "b", n.outputs[0], {**n.attrs, "layout": "NHWC"},
                                 None, source=n.name)
    assert any(s > 0 for s in g.nodes[0].attrs["shift"])
    x = _x(11, g)
    golden = tinyc.reference.run_graph(g, {"x": x})
    compile_ir(g, tmp_path / "p", ov)
    got = tinyc.run(tmp_path / "p", {"x": x})
    for k2, v in golden.items():
        np.testing.assert_array_equal(got[k2], v, err_msg=k2)
    assert np.any(golden["y0"] == 127) and np.any(golden["y0"] == -128)


def _qdq_conv_model(seed: int, xs: tuple[int, ...], oc: int, k: tuple[int, int], group: int, act: str | None,
                    **attrs: Any) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """int8 x -> DequantizeLinear; per-channel int8 weights -> DequantizeLinear(axis 0); int32 bias ->
    DequantizeLinear (scale s_x * s_w); Conv [-> Relu / Clip] -> QuantizeLinear -> int8 y."""
    r = np.random.default_rng(seed)
    c = xs[1]
    s_x = np.float32(r.uniform(0.01, 0.05))
    x_zp = np.int8(r.integers(-20, 20))
    w = r.integers(-127, 128, (oc, c // group, *k)).astype(np.int8)
    s_w = r.uniform(0.002, 0.01, oc).astype(np.float32)
    b = r.integers(-3000, 3000, oc).astype(np.int32)
    s_b = (s_x * s_w).astype(np.float32)
    fan = c // group * k[0] * k[1]
    s_y = np.float32(3 * s_x * 74 * 73 * float(s_w.mean()) * np.sqrt(fan) / 128)
    y_zp = np.int8(r.integers(-20, 20))
    inits = {"s_x": s_x, "x_zp": x_zp, "w": w, "s_w": s_w, "w_zp": np.zeros(oc, np.int8), "b": b, "s_b": s_b,
             "b_zp": np.zeros(oc, np.int32), "s_y": s_y, "y_zp": y_zp, "lo": np.float32(0), "hi": np.float32(6)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "s_x", "x_zp"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "s_w", "w_zp"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "s_b", "b_zp"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["yf"], group=group, **attrs)]
    last = "yf"
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["yf"], ["ya"]))
        last = "ya"
    elif act == "relu6":
        nodes.append(helper.make_node("Clip", ["yf", "lo", "hi"], ["ya"]))
        last = "ya"
    nodes.append(helper.make_node("QuantizeLinear", [last, "s_y", "y_zp"], ["y"]))
    graph = helper.make_graph(nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.INT8, list(xs))],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, None)],
                              initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m, inits


QDQ_CASES = [
    ((1, 16, 9, 9), 24, (3, 3), 1, "relu", dict(pads=[1, 1, 1, 1])),
    ((1, 32, 7, 7), 32, (3, 3), 32, "relu6", dict(pads=[1, 0, 1, 1], strides=[2, 2])),
    ((2, 64, 5, 5), 48, (1, 1), 1, None, {}),
    ((1, 12, 8, 6), 18, (2, 3), 3, "relu", dict(pads=[0, 1, 1, 0], dilations=[2, 1])),
    ((1, 3, 12, 12), 8, (3, 3), 1, "relu6", dict(strides=[2, 2], pads=[1, 1, 1, 1])),
]


def test_build_qconv_vs_onnxruntime_qdq(tmp_path: Path) -> None:
    """build_qconv with the model's own weight grid (per-channel scales on ONNX's axis 0, reused
    after the NHWC transpose) and bias grid vs onnxruntime on the QDQ Conv model: <= 1 LSB."""
    off = total = clamped = 0
    for i, (xs, oc, k, group, act, attrs) in enumerate(QDQ_CASES):
        m, v = _qdq_conv_model(i, xs, oc, k, group, act, **attrs)
        x = np.random.default_rng(50 + i).integers(-128, 128, xs).astype(np.int8)
        ref = ort_run(m, {"x": x})[0]
        g = Graph(f"qdq{i}")
        add_qtensor(g, "x", (xs[0], *xs[2:], xs[1]), float(v["s_x"]), int(v["x_zp"]))
        g.inputs = ["x"]
        wf = v["w"].astype(np.float32) * v["s_w"].reshape(-1, 1, 1, 1)          # DequantizeLinear, OIHW
        g.add_constant("w", np.ascontiguousarray(np.transpose(wf, (2, 3, 1, 0))))  # the NHWC Conv's layout
        g.tensors["w"].quant = QuantParams(v["s_w"], np.zeros(oc, np.int64), 0)
        g.add_constant("b", v["b"].astype(np.float32) * v["s_b"])
        add_qtensor(g, "y", (ref.shape[0], *ref.shape[2:], ref.shape[1]), float(v["s_y"]), int(v["y_zp"]))
        conv = dict(kernel=list(k), strides=attrs.get("strides", [1, 1]), pads=attrs.get("pads", [0] * 4),
                    dilations=attrs.get("dilations", [1, 1]), group=group, layout="NHWC")
        clamp = {None: None, "relu": (0.0, None), "relu6": (0.0, 6.0)}[act]
        node = build_qconv(g, "conv", "x", "w", "b", "y", conv, clamp, source="conv")
        assert node.attrs["w_scale"] == [float(s) for s in v["s_w"]]  # the model's grid, reused
        np.testing.assert_array_equal(g.tensor(node.inputs[1]).data, np.transpose(v["w"], (2, 3, 1, 0)))
        np.testing.assert_array_equal(g.tensor(node.inputs[2]).data, v["b"])
        g.nodes.append(node)
        g.outputs, g.output_names = ["y"], ["y"]
        xn = np.ascontiguousarray(np.transpose(x, (0, 2, 3, 1)))
        golden = tinyc.reference.run_graph(g, {"x": xn})["y"]
        tinyc.compile(g, tmp_path / f"c{i}", build=True)
        got = tinyc.run(tmp_path / f"c{i}", {"x": xn})["y"]
        np.testing.assert_array_equal(got, golden)
        d = np.abs(np.transpose(golden, (0, 3, 1, 2)).astype(np.int64) - ref.astype(np.int64))
        assert d.max() <= 1, (i, d.max())
        off += int(np.count_nonzero(d))
        total += d.size
        lo = int(v["y_zp"]) if act else -128
        clamped += int(np.count_nonzero((golden == lo) | (golden == 127)))
    AGREE["build_qconv vs onnxruntime QDQ"] = [off, total]
    print(f"build_qconv vs onnxruntime QDQ Conv: {off} of {total} outputs 1 LSB off, {clamped} at a clamp bound")
    assert off <= total // 50
    assert clamped < total // 2  # most outputs are real values, not clamps


def test_weight_grid_reuse_rules() -> None:
    """The model's grid is reused only when symmetric, mappable to the output-channel axis and on
    grid; otherwise the weights are re-quantized per channel (max|w| / 127)."""
    r = np.random.default_rng(0)
    s = r.uniform(0.01, 0.02, 8).astype(np.float32)
    q = r.integers(-128, 128, (3, 3, 4, 8))
    wf = (q * s).astype(np.float32)
    on = QuantParams(s, np.zeros(8, np.int64), 0)
    np.testing.assert_array_equal(reuse_weight_grid(wf, on, 3, (0, 3)), s)
    assert reuse_weight_grid(wf, QuantParams(s, np.ones(8, np.int64), 0), 3, (0, 3)) is None  # asymmetric
    assert reuse_weight_grid(wf, QuantParams(s, np.zeros(8, np.int64), 2), 3, (0, 3)) is None  # other axis
    assert reuse_weight_grid(wf * 1.37, on, 3, (0, 3)) is None                                # stale grid
    per_t = reuse_weight_grid((q * s[0]).astype(np.float32), QuantParams(s[:1], np.zeros(1, np.int64), None), 3, (0, 3))
    np.testing.assert_array_equal(per_t, np.full(8, s[0]))
    assert reuse_weight_grid(wf, None, 3, (0, 3)) is None


def test_build_qconv_unsupported() -> None:
    g, _ = conv_graph(1, (1, 4, 4, 4), 4, (3, 3))
    attrs = dict(g.nodes[0].attrs, layout="NHWC")
    with pytest.raises(UnsupportedError, match="conv0.*shape"):
        build_qconv(g, "c", "x", "w", "b", "y0", dict(attrs, pads=[1, 1, 1, 1]), source="conv0")
    with pytest.raises(UnsupportedError, match="do not match"):
        build_qconv(g, "c", "x", "w", "b", "y0", dict(attrs, group=2), source="conv0")
    g.add_tensor(type(g.tensor("x"))("xf", (1, 4, 4, 4), "float32"))
    with pytest.raises(UnsupportedError, match="int8 only"):
        build_qconv(g, "c", "xf", "w", "b", "y0", attrs, source="conv0")
    big = Graph("big")  # 255 * 127 * 70000 taps > 2^31: no int8 kernel can sum that in int32
    add_qtensor(big, "x", (1, 1, 1, 70000), 0.1, 0)
    add_qtensor(big, "y", (1, 1, 1, 1), 0.1, 0)
    big.add_constant("w", np.ones((1, 1, 70000, 1), np.float32))
    with pytest.raises(UnsupportedError, match="big0.*overflow"):
        build_qconv(big, "c", "x", "w", None, "y", dict(attrs, kernel=[1, 1], pads=[0] * 4), source="big0")


def test_build_qconv_near_dead_channel() -> None:
    """A channel with near-zero weights and a real bias: its weight scale grows so that the bias
    fits int32 (|bias| <= 2^30 steps), instead of refusing the layer."""
    g, _ = conv_graph(2, (1, 4, 4, 4), 4, (3, 3))
    g.tensors["w"].data = g.tensors["w"].data.copy()
    g.tensors["w"].data[..., 1] *= np.float32(1e-9)
    node = build_qconv(g, "c", "x", "w", "b", "y0", dict(g.nodes[0].attrs, layout="NHWC"), source="c")
    bias = g.tensor(node.inputs[2]).data
    s_x = float(g.tensor("x").quant.scale)
    assert abs(int(bias[1])) <= 2**30
    np.testing.assert_allclose(bias[1] * s_x * node.attrs["w_scale"][1], g.tensor("b").data[1], rtol=1e-6)


def test_tuner_space_on_microcontrollers_keeps_the_forms_that_win():
    """What the tuner searches (tinyc.ops.qconv.searched_on_mcu): on the M55 only the Helium form
    (and the baseline kernel), on the M4 only the DSP form with at most 16 accumulators, on the M3
    the portable forms with at most 16; the host's space is the legal space, whole. A candidate
    left out stays legal: a log or a hand-written schedule may still name it."""
    from tinyc.ops import get_op
    from tinyc.ops.qconv import MCU_MAX_CONV_ACCUMULATORS
    from tinyc.tune.tasks import knobs_problem, schedule_space

    for case in [((1, 8, 8, 16), 32, (3, 3), 1), ((1, 8, 8, 32), 32, (3, 3), 32), ((1, 6, 6, 16), 64, (1, 1), 1)]:
        xs, oc, k, group = case
        g, _ = conv_graph(7, xs, oc, k, group=group, pads=(1, 1, 1, 1) if k == (3, 3) else None)
        node = next(n for n in g.nodes if n.op == "QConv")
        host = schedule_space(node, g, "host")
        forms = {s.get("mac") for s in host}
        assert {"i16", "i32"} <= forms, forms
        m55 = schedule_space(node, g, "mcu+dsp+mve")
        assert {s.get("mac") for s in m55} == {"mve", None}, case
        m4 = schedule_space(node, g, "mcu+dsp")
        assert {s.get("mac") for s in m4} == {"dsp", None}, case
        m3 = schedule_space(node, g, "mcu")
        assert "dsp" not in {s.get("mac") for s in m3} and "i16x2" in {s.get("mac") for s in m3}
        for space in (m4, m3):
            tiles = [s["oc_tile"] * s["px_tile"] for s in space if "oc_tile" in s]
            assert tiles and max(tiles) <= MCU_MAX_CONV_ACCUMULATORS == 16
            assert any(t > 4 for t in tiles), "the tiles that win (up to 8) stay searched"
        assert any(s["oc_tile"] * s["px_tile"] > MCU_MAX_CONV_ACCUMULATORS for s in host if "oc_tile" in s)
        assert len(m55) < len(m4) < len(host)
        legal = get_op("QConv").knobs(node, g)
        portable = next(s for s in host if s.get("mac") == "i16")
        assert knobs_problem(portable, legal, get_op("QConv"), "mcu+dsp+mve") is None
