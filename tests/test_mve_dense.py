"""The Helium (MVE) dense QConv kernel (templates/kernels/qconv/mve_dense.j2, tinyc/ops/_qconv_mve.py):
blocks of up to 4 pixels x 1 channel, gathered ("col") or direct ("ptr") input runs, the vector
requantization with a channel's scalar multiplier / shift, saturating or clamping output stage,
VSTRB.32 scatter.

Host (fast): the C emulations of tinyc_simd.h run the same kernel code; every form is bit-exact
against the golden model on pointwise / direct / first-layer (1 and 3 channels) / strided /
padded / dilated / grouped / 1D shapes with channel and pixel tails, uint8 activations, both
roundings (TFLite's and half-even), left shifts and zero shifts (the scalar / general fallbacks),
clamped activations; ASan + UBSan clean. Slow (QEMU, mps3-an547): bit-exact, the firmware holds
VMLAV(A) / VQRDMULH / VSTRB.32 scatter, and the layers take fewer instructions than the earlier
8-channel blocks with scalar requantization did.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tinyc
import tinyc.reference
from tinyc.ops import _qconv_mve, get_op
from util import assert_sanitized_cases, compile_ir, schedule_copies

from test_ops_q_fc import fc_graph
from test_ops_qconv import _input, _x, conv_graph, qconv_model

CASES: list[dict[str, Any]] = [
    dict(xs=(1, 5, 5, 19), oc=7, k=(1, 1)),                                       # pointwise, IC tail 3, OC tail
    dict(xs=(2, 3, 3, 33), oc=6, k=(1, 1)),                                       # batch 2, IC 33, 18 pixels
    dict(xs=(1, 4, 5, 8), oc=10, k=(1, 1)),                                       # VWW's 8 input channels
    dict(xs=(1, 3, 7, 64), oc=5, k=(1, 1), strides=(2, 2)),                       # 1x1 stride 2: "ptr", not pointwise
    dict(xs=(1, 6, 5, 21), oc=9, k=(3, 3), pads=(1, 1, 1, 1), strides=(2, 1)),    # direct, rows, borders
    dict(xs=(1, 8, 7, 16), oc=6, k=(3, 3), pads=(1, 1, 1, 1)),                    # ResNet-like, 144-input run
    dict(xs=(1, 9, 8, 3), oc=5, k=(3, 3), pads=(0, 0, 1, 1), strides=(2, 2)),     # first layer, 3 channels
    dict(xs=(1, 12, 6, 1), oc=7, k=(10, 4), pads=(4, 1, 5, 2), strides=(2, 2)),   # KWS's first layer, 1 channel
    dict(xs=(1, 7, 6, 3), oc=6, k=(3, 2), pads=(2, 0, 1, 1), act=(0.0, 6.0)),    # clamped activation
    dict(xs=(1, 4, 4, 35), oc=5, k=(2, 2), dil=(2, 1)),                           # dilated: tap gathers
    dict(xs=(1, 6, 6, 4), oc=6, k=(3, 3), group=2, pads=(1, 1, 1, 1)),            # grouped: tap gathers
    dict(xs=(1, 5, 7, 12), oc=9, k=(3, 3), group=3, strides=(1, 2)),              # grouped, no padding
    dict(xs=(1, 9, 16), oc=13, k=(3,), pads=(1, 1)),                              # 1D
    dict(xs=(1, 3, 4, 200), oc=3, k=(1, 1)),                                      # 13 blocks: pointers moved on
]
#: (oc_tile, px_tile, loop_order): the default block, pixel tails (1-3, 6 = 4 + 2), channel tiles
BLOCKS = [(64, 4, "pixels_outer"), (3, 3, "pixels_outer"), (64, 1, "pixels_outer"), (5, 6, "channels_outer"),
          (2, 2, "pixels_outer")]


def _scheds(g: Any) -> list[dict[str, Any]]:
    ks = get_op("QConv").knobs(g.nodes[0], g)
    assert "mve" in ks["mac"]
    variants = [v for v in ks["variant"] if v in ("pointwise", "direct")]
    return [dict(variant=variants[i % len(variants)], mac="mve", oc_tile=t, px_tile=p, loop_order=o)
            for i, (t, p, o) in enumerate(BLOCKS)]


def _run(tmp_path: Path, g: Any, ov: dict[str, Any], feeds: dict[str, np.ndarray]) -> None:
    golden = tinyc.reference.run_graph(g, feeds)
    compile_ir(g, tmp_path, ov)
    got = tinyc.run(tmp_path, feeds)
    for name in g.output_names:
        node = next(n for n in g.nodes if n.outputs[0] == name)
        np.testing.assert_array_equal(got[name], golden[name], err_msg=f"{ov.get(node.name)} {node.attrs}")


def _mve_source(d: Path) -> str:
    return "\n".join(p.read_text() for p in d.glob("*.c"))


@pytest.mark.parametrize("rounding", ["tflite", "half_even"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['xs']}x{c['oc']}k{c['k']}g{c.get('group', 1)}")
def test_mve_dense_bit_exact(tmp_path: Path, case: dict[str, Any], rounding: str) -> None:
    g, _ = conv_graph(4, **case)
    g, ov = conv_graph(4, **case, schedules=_scheds(g))
    for n in g.nodes:
        n.attrs["rounding"] = rounding
    _run(tmp_path, g, ov, {"x": _x(4, g)})
    src = _mve_source(tmp_path)
    assert "tinyc_vmladav_s8" in src and "tinyc_vscatter_s32_s8" in src
    assert ("tinyc_vmbqm_even_r_s" if rounding == "half_even" else "tinyc_vmbqm_r_n") in src


def test_mve_dense_requant_fallbacks(tmp_path: Path) -> None:
    """A channel that shifts left (the scalar path with the saturating pre-multiply), one with a
    zero right shift (TFLite: the general tinyc_vmbqm_r; half-even: scalar); a dead channel
    (multiplier 0, shift 0: the vector forms with r = 1) and one with r = 31 stay vectorised."""
    case = dict(xs=(1, 5, 6, 20), oc=7, k=(3, 3), pads=(1, 1, 1, 1))
    g, _ = conv_graph(9, **case)
    scheds = _scheds(g)[:3] * 6
    g, ov = conv_graph(9, **case, schedules=scheds)
    modes = []
    for i, n in enumerate(g.nodes):
        sh, mu = list(n.attrs["shift"]), list(n.attrs["multiplier"])
        kind = i // 3
        if kind in (0, 2):
            sh[2] = 0
        if kind in (1, 3):
            sh[1] = 1
        if kind in (4, 5):
            mu[3], sh[3] = 0, 0
            mu[5], sh[5] = (1 << 30) + 12345, -31
        n.attrs["shift"], n.attrs["multiplier"] = sh, mu
        n.attrs["rounding"] = "half_even" if kind in (2, 3, 4) else "tflite"
        rs = [max(-s, 0) for s in sh]
        modes.append(_qconv_mve.requant_mode(rs, any(s > 0 for s in sh), kind in (2, 3, 4), mu))
    assert modes == ["tflite_v"] * 3 + ["scalar"] * 9 + ["even_n"] * 3 + ["tflite_n"] * 3
    _run(tmp_path, g, ov, {"x": _x(9, g)})


def test_mve_dense_uint8_qlinearconv(tmp_path: Path) -> None:
    """uint8 activations in and out (x - 128 as int8, VQSHLU output stage), padded and strided."""
    model = qconv_model(8, (1, 6, 11, 7), 10, (3, 3), xdt=np.uint8, pads=[1, 1, 0, 1], strides=[1, 2])
    g = tinyc.load(model)
    node = next(n for n in g.nodes if n.op == "QConv")
    assert "mve" in get_op("QConv").knobs(node, g)["mac"]
    scheds = [dict(mac="mve", variant="direct", oc_tile=t, px_tile=p) for t, p in ((64, 4), (3, 3), (64, 1))]
    overrides = schedule_copies(g, node, scheds)
    feeds = {g.inputs[0]: _input(8, model)}
    golden = tinyc.reference.run_graph(g, feeds)
    compile_ir(g, tmp_path, overrides)
    got = tinyc.run(tmp_path, feeds)
    for pub in g.output_names:
        np.testing.assert_array_equal(got[pub], golden[pub], err_msg=pub)
    src = _mve_source(tmp_path)
    assert "tinyc_vld_u8_off" in src and "tinyc_vscatter_s32_u8" in src


def test_mve_dense_sanitized(tmp_path: Path) -> None:
    """ASan + UBSan, strict C99: gathers at every border, predicated tails of the direct runs (the
    last pixel's run ends at the end of the input), scatters of pixel tails stay inside; the fully
    connected column tails (predicated VSTRB.32, padded tables)."""
    cases = [
        conv_graph(5, (1, 5, 6, 5), 6, (3, 3), strides=(2, 1), pads=(1, 2, 0, 1), act=(0.0, 6.0),
                   schedules=[dict(variant="direct", mac="mve", px_tile=p, oc_tile=t) for t, p in ((64, 4), (4, 3))]),
        conv_graph(6, (1, 3, 3, 17), 9, (1, 1), schedules=[dict(variant="pointwise", mac="mve", px_tile=p,
                                                                oc_tile=9) for p in (4, 2)]),
        conv_graph(7, (1, 7, 5, 1), 5, (4, 3), pads=(2, 1, 1, 1), schedules=[dict(variant="direct", mac="mve",
                                                                                  px_tile=4, oc_tile=5)]),
        conv_graph(8, (1, 4, 6, 6), 4, (3, 3), group=2, dil=(1, 2), pads=(1, 2, 1, 2),
                   schedules=[dict(variant="direct", mac="mve", px_tile=3, oc_tile=2)]),
        fc_graph(2, (3, 21), 7, True, None, [dict(mac="mve", n_tile=t, m_tile=r) for t, r in ((8, 1), (6, 2))]),
    ]
    for n in cases[1][0].nodes:  # the second case with half-even rounding
        n.attrs["rounding"] = "half_even"
    assert_sanitized_cases(cases, _x, tmp_path)


def test_mve_dense_schedules() -> None:
    """The M55 default is 4 pixels x all of a group's channels; canonical schedules fold the MVE
    dense blocks to <= 4 pixels and the whole group (other px / oc tiles only redo the gathers)."""
    from tinyc.schedule import default_schedules
    q = get_op("QConv")
    g, _ = conv_graph(1, (1, 8, 8, 16), 24, (3, 3), pads=(1, 1, 1, 1))
    node = g.nodes[0]
    d = default_schedules(g, "mcu+dsp+mve")[node.name]
    assert (d["mac"], d["oc_tile"], d["px_tile"]) == ("mve", 24, 4)
    c = q.canonical_schedule(node, g, dict(d, oc_tile=8, px_tile=16))
    assert (c["oc_tile"], c["px_tile"]) == (24, 4)
    c = q.canonical_schedule(node, g, dict(d, oc_tile=8, px_tile=2))
    assert (c["oc_tile"], c["px_tile"]) == (24, 2)
    m = q._dims(node, g)
    assert _qconv_mve.mode(m) == "col" and _qconv_mve.run_lengths(m) == (144, 144)
    assert q.scratch_bytes(node, g, d, "mcu+dsp+mve") == 16 * 3 + 4 * 144   # x_zp row + 4 gathered runs
    gp, _ = conv_graph(1, (1, 8, 8, 20), 24, (1, 1))
    assert _qconv_mve.mode(q._dims(gp.nodes[0], gp)) == "ptr"
    assert q.scratch_bytes(gp.nodes[0], gp, default_schedules(gp, "mcu+dsp+mve")[gp.nodes[0].name],
                           "mcu+dsp+mve") == 0


@pytest.mark.parametrize("rounding", ["tflite", "half_even"])
@pytest.mark.parametrize("lead,k,n,act", [((3,), 37, 11, (0.0, None)), ((1,), 640, 12, None),
                                          ((2, 3), 16, 33, (0.0, 6.0)), ((1,), 3, 2, None), ((1,), 128, 130, None)])
def test_mve_fc_bit_exact(tmp_path: Path, lead: tuple[int, ...], k: int, n: int, act: Any, rounding: str) -> None:
    """The MVE fully connected form: 4 output columns per vector requantization (column tails
    predicated), both roundings, a dead column (multiplier 0) and one with r = 31 vectorised."""
    rows = int(np.prod(lead))
    scheds = [dict(mac="mve", n_tile=t, m_tile=r) for (t, r) in ((8, 1), (4, 2), (3, 1), (6, 3), (2, 1))
              if r <= rows and t <= n]
    g, ov = fc_graph(1, (*lead, k), n, True, act, scheds)
    for node in g.nodes:
        node.attrs["rounding"] = rounding
        if n > 2:
            mu, sh = list(node.attrs["multiplier"]), list(node.attrs["shift"])
            mu = mu * (n if len(mu) == 1 else 1)
            sh = sh * (n if len(sh) == 1 else 1)
            mu[1], sh[1] = 0, 0
            mu[2], sh[2] = (1 << 30) + 777, -31
            node.attrs["multiplier"], node.attrs["shift"] = mu, sh
    x = _x(1, g)
    golden = tinyc.reference.run_graph(g, {"x": x})
    compile_ir(g, tmp_path, ov)
    got = tinyc.run(tmp_path, {"x": x})
    for i, s in enumerate(scheds):
        np.testing.assert_array_equal(got[f"y{i}"], golden[f"y{i}"], err_msg=str(s))
    src = _mve_source(tmp_path)
    assert ("tinyc_vmbqm_even_r_v" if rounding == "half_even" else "tinyc_vmbqm_r(") in src


# -- QEMU ------------------------------------------------------------------------------------------------

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None


def _conv_model(xs: tuple[int, ...], oc: int, k: tuple[int, int], **attrs: Any) -> Any:
    from onnx import TensorProto, helper, numpy_helper
    r = np.random.default_rng(0)
    w = r.normal(0, 0.2, (oc, xs[1], *k)).astype(np.float32)
    b = r.normal(0, 0.1, oc).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", kernel_shape=list(k), **attrs)
    pads, st = attrs.get("pads", [0, 0, 0, 0]), attrs.get("strides", [1, 1])
    ys = [xs[0], oc] + [(xs[2 + i] + pads[i] + pads[i + 2] - k[i]) // st[i] + 1 for i in range(2)]
    g = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ys)],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm")
@pytest.mark.parametrize("xs,oc,k,attrs,limit", [
    ((1, 16, 12, 10), 20, (3, 3), dict(pads=[1, 1, 1, 1]), 34.0),     # gathered runs, OC tail, pixel tail
    ((1, 24, 9, 9), 30, (1, 1), {}, 14.0),                             # pointwise, IC tail 8, pixel tail 1
    ((1, 3, 13, 11), 8, (3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), 30.0),  # a first layer (gathers)
])
def test_mve_dense_on_board(tmp_path: Path, xs: tuple[int, ...], oc: int, k: tuple[int, int], attrs: dict[str, Any],
                            limit: float) -> None:
    """The M55 default: bit-exact, VMLAV(A) / VQRDMULH / VSTRB.32 scatter in the firmware, and fewer
    instructions per output than `limit` (the 8-channel scalar-requantization blocks took ~41 per
    output on VWW's pointwise layers with 8-16 input channels, ~76 on ResNet-8's 3x3 convolutions
    with 16 channels and ~59 on its 3-channel first layer; ~20 of them for the requantization)."""
    r = np.random.default_rng(1)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=r.normal(0, 1, (4, *xs[1:])).astype(np.float32))
    x = r.normal(0, 1, xs).astype(np.float32)
    out = tmp_path / "m"
    tinyc.compile(_conv_model(xs, oc, k, **attrs), out, board="mps3-an547", build=True, quantize="int8",
                  calib=calib, io_dtype="int8")
    assert "mac=mve" in (out / "report.md").read_text()
    v = tinyc.validate(out, {"x": x})
    assert all(o["bit_exact_vs_golden"] for o in v["outputs"].values()), v["outputs"]
    prof = tinyc.profile(out, {"x": x})
    layer = max(prof["layers"], key=lambda lay: lay["macs"])
    outputs = layer["macs"] / (k[0] * k[1] * xs[1])
    assert float(layer[prof["units"]]) / outputs < limit, (layer, outputs)
    elf = next((out / "build").glob("*.elf"))
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", str(elf)], check=True,
                         capture_output=True, text=True).stdout
    for mnemonic in ("vmlav.s8", "vmlava.s8", "vqrdmulh.s32", "vrshl.s32", "vstrb.32"):
        assert f"\t{mnemonic}" in dis, mnemonic
    assert any("\tvstrb.32" in line and ", q" in line.split("[")[-1] for line in dis.splitlines())  # scatter


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_mve_fc_on_board(tmp_path: Path) -> None:
    """A fully connected layer (Gemm -> QMatMul, 26 columns: a column tail) on the M55: bit-exact,
    the vector requantization (VQRDMULH, VSTRB.32) in the firmware, fewer than 52 instructions per
    output column (with the scalar requantization ~70 per column at K = 128: MLPerf AD's layers)."""
    from onnx import TensorProto, helper, numpy_helper
    r = np.random.default_rng(2)
    w = r.normal(0, 0.1, (128, 26)).astype(np.float32)
    b = r.normal(0, 0.1, 26).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc")], "f",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 26])],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=r.normal(0, 1, (4, 128)).astype(np.float32))
    x = r.normal(0, 1, (1, 128)).astype(np.float32)
    out = tmp_path / "fc"
    tinyc.compile(m, out, board="mps3-an547", build=True, quantize="int8", calib=calib, io_dtype="int8")
    v = tinyc.validate(out, {"x": x})
    assert all(o["bit_exact_vs_golden"] for o in v["outputs"].values())
    prof = tinyc.profile(out, {"x": x})
    layer = max(prof["layers"], key=lambda lay: lay["macs"])
    assert float(layer[prof["units"]]) / 26 < 52, layer
    elf = next((out / "build").glob("*.elf"))
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", str(elf)], check=True,
                         capture_output=True, text=True).stdout
    for mnemonic in ("vmlava.s8", "vqrdmulh.s32", "vrshl.s32", "vstrb.32"):
        assert f"\t{mnemonic}" in dis, mnemonic
