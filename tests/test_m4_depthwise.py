"""The Cortex-M4 DSP depthwise kernel (mac "dsp", variant "depthwise": templates/kernels/qconv/simd.j2
`dsp_dw`): taps unrolled at constant offsets for tiles that read no padding, x_zp's row per tap on the
border, weights pre-split into the int16 pairs SMLABB / SMLATT take, the per-tap loop for large tiles;
then the requantization (tinyc_q_mbqm_r / tinyc_q_mbqm_even_r) and SSAT #8 on the full output range.

Host (fast): bit-exact against the golden model through the C emulation of the DSP helpers on channel
tails (C % 4 != 0), padding on every side, stride 2, dilation, batch 2, both requantization roundings,
a kernel larger than the image, every path of the macro (unrolled interior / border, loop), uint8 input
(the template's x - 128 path; the knob offers "dsp" for int8 input only, so it is forced here);
ASan + UBSan clean. Slow (QEMU, mps2-an386): bit-exact on the board, SMLABB / SMLATT in the ELF,
fewer instructions than before (the 8-channel per-tap form) and than CMSIS-NN's 0.60 M on the
kernels.py dw3x3 shape; MLPerf KWS (an ONNX QDQ model: half-even requantization) bit-exact."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tinyc
import tinyc.reference
from tinyc.ops import get_op
from tinyc.schedule import default_schedules
from util import REPO, compile_ir, sanitized_project, schedule_copies

from test_ops_qconv import _input, _x, conv_graph, qconv_model

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None

# (xs NHWC, kernel, strides, pads (top, left, bottom, right), dilations)
CASES = [
    ((1, 7, 6, 21), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),     # channel tail 21 = 5 x 4 + 1
    ((2, 6, 7, 10), (3, 3), (2, 2), (1, 0, 2, 1), (1, 1)),     # batch 2, stride 2, uneven padding, tail 2
    ((1, 9, 5, 8), (3, 3), (1, 2), (0, 1, 1, 2), (1, 1)),      # stride along W only
    ((1, 8, 8, 6), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),      # dilated
    ((1, 4, 3, 7), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),      # kernel larger than the image: no interior
    ((1, 6, 6, 36), (3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),     # no padding: interior only
    ((1, 5, 4, 3), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),      # fewer than 4 channels: scalar only
]
TILES = [(4, 1), (8, 1), (2, 1), (4, 3), (64, 1), (16, 2)]  # (64, 1) / (16, 2): the per-tap loop on wide C


def _dw_graph(seed: int, case: tuple, rounding: str, act: Any = None) -> tuple[Any, dict[str, dict[str, Any]]]:
    xs, k, st, pads, dil = case
    c = xs[-1]
    scheds = [dict(variant="depthwise", mac="dsp", oc_tile=t, px_tile=p) for t, p in TILES]
    g, ov = conv_graph(seed, xs, c, k, group=c, strides=st, pads=(pads[0], pads[1], pads[2], pads[3]), dil=dil,
                       act=act, schedules=scheds)
    for n in g.nodes:
        n.attrs["rounding"] = rounding
    return g, ov


@pytest.mark.parametrize("rounding", ["tflite", "half_even"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}k{c[1]}s{c[2]}p{c[3]}d{c[4]}")
def test_dsp_depthwise_bit_exact(tmp_path: Path, case: tuple, rounding: str) -> None:
    g, ov = _dw_graph(3, case, rounding, act=(0.0, 6.0) if case[0][-1] == 10 else None)
    ks = get_op("QConv").knobs(g.nodes[0], g)
    assert "dsp" in ks["mac"] and "depthwise" in ks["variant"]
    x = _x(3, g)
    golden = tinyc.reference.run_graph(g, {"x": x})
    compile_ir(g, tmp_path, ov)
    src = "\n".join(p.read_text() for p in tmp_path.glob("*.c"))
    assert "tinyc_smlabb" in src or case[0][-1] < 4
    got = tinyc.run(tmp_path, {"x": x})
    for i, t in enumerate(TILES):
        np.testing.assert_array_equal(got[f"y{i}"], golden[f"y{i}"], err_msg=f"tile {t}")


def test_dsp_depthwise_paths_generated(tmp_path: Path) -> None:
    """The unrolled form (pre-split weight table, interior test, border branch) for small tiles, the
    per-tap loop for large ones; SSAT on the full output range only."""
    g, ov = _dw_graph(5, ((1, 7, 6, 40), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), "half_even")
    compile_ir(g, tmp_path, ov, build=False)
    src = "\n".join(p.read_text() for p in tmp_path.glob("*.c"))
    assert "wsp[" in src and "ws[" in src and "<= 4u && (uint32_t)pw[0] <= 3u" in src
    assert "for (int32_t q = 0; q < 9; ++q)" in src  # (64, 1) -> 40 channels: 9 x 10 lanes > 64
    assert "tinyc_sat_s8(" in src


def test_dsp_depthwise_uint8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """uint8 depthwise: the board default (no "dsp" for uint8 input) stays exact; the template's
    x - 128 path (tinyc_read_u8x4_off), forced into the knob, is exact too, with a uint8 output."""
    from tinyc.ops import qconv
    model = qconv_model(9, (2, 11, 7, 10), 11, (3, 3), group=11, xdt=np.uint8, pads=[1, 1, 0, 1], strides=[1, 2])
    g = tinyc.load(model)
    node = next(n for n in g.nodes if n.op == "QConv")
    assert default_schedules(g, "mcu+dsp")[node.name]["mac"] != "dsp"
    orig = qconv._mac_forms

    def with_dsp(n: Any, gr: Any, want_bias: bool = False) -> Any:
        res = orig(n, gr, want_bias)
        forms = res[0] if want_bias else res
        if "mve" in forms and "dsp" not in forms:
            forms.insert(forms.index("mve"), "dsp")
        return res

    monkeypatch.setattr(qconv, "_mac_forms", with_dsp)
    assert "dsp" in get_op("QConv").knobs(node, g)["mac"]
    scheds = [dict(mac="dsp", variant="depthwise", oc_tile=4, px_tile=1), dict(mac="dsp", variant="depthwise",
                                                                                oc_tile=8, px_tile=2),
              dict(mac="i16x2", variant="depthwise")]
    overrides = schedule_copies(g, node, scheds)
    feeds = {g.inputs[0]: _input(9, model)}
    golden = tinyc.reference.run_graph(g, feeds)
    compile_ir(g, tmp_path, overrides)
    assert "tinyc_read_u8x4_off" in "\n".join(p.read_text() for p in tmp_path.glob("*.c"))
    got = tinyc.run(tmp_path, feeds)
    for pub in g.output_names:
        np.testing.assert_array_equal(got[pub], golden[pub], err_msg=pub)


def test_dsp_depthwise_sanitized(tmp_path: Path) -> None:
    """ASan + UBSan, strict C99: no read outside the input / x_zp row, no overflow, on border tiles,
    tails and the loop form."""
    for i, case in enumerate([CASES[0], CASES[1], CASES[4]]):
        g, ov = _dw_graph(4 + i, case, "half_even" if i % 2 else "tflite")
        x = _x(i, g)
        golden = tinyc.reference.run_graph(g, {"x": x})
        d = tmp_path / str(i)
        d.mkdir()
        compile_ir(g, d / "p", ov, build=False)
        got = sanitized_project(d / "p", g, {"x": x}, d)
        for k, v in golden.items():
            np.testing.assert_array_equal(got[k], v, err_msg=f"case {i} {k}")


# -- QEMU ------------------------------------------------------------------------------------------------

def _dw_model(c: int = 64, h: int = 25, w: int = 5) -> Any:
    from onnx import TensorProto, helper, numpy_helper
    r = np.random.default_rng(0)
    wt = r.normal(0, 0.3, (c, 1, 3, 3)).astype(np.float32)
    b = r.normal(0, 0.1, c).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="dw", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                            group=c)
    relu = helper.make_node("Relu", ["y"], ["z"], name="relu")
    g = helper.make_graph([node, relu], "d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, c, h, w])],
                          initializer=[numpy_helper.from_array(wt, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_dsp_depthwise_on_m4(tmp_path: Path) -> None:
    r = np.random.default_rng(1)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=r.normal(0, 1, (4, 64, 25, 5)).astype(np.float32))
    x = r.normal(0, 1, (1, 64, 25, 5)).astype(np.float32)
    counts = {}
    for name, sched in (("dsp", {"mac": "dsp", "variant": "depthwise"}),
                        ("dsp_loop", {"mac": "dsp", "variant": "depthwise", "oc_tile": 32}),
                        ("i16x2", {"mac": "i16x2", "variant": "depthwise"})):
        out = tmp_path / name
        tinyc.compile(_dw_model(), out, board="mps2-an386", build=True, quantize="int8", calib=calib,
                      io_dtype="int8", schedules={"dw": sched})
        v = tinyc.validate(out, {"x": x})
        assert all(o["bit_exact_vs_golden"] for o in v["outputs"].values()), (name, v["outputs"])
        prof = tinyc.profile(out, {"x": x})
        counts[name] = float(max(prof["layers"], key=lambda lay: lay["macs"])[prof["units"]])
        if name == "dsp":
            elf = next((out / "build").glob("*.elf"))
            dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], check=True, capture_output=True,
                                 text=True).stdout
            for mn in ("smlabb", "smlatt", "ssat"):
                assert f"\t{mn}" in dis, mn
            assert "mac=dsp" in (out / "report.md").read_text()
    # 8000 outputs x 9 MACs: CMSIS-NN 0.60 M on this shape; the per-tap 8-channel form was 0.66 M
    assert counts["dsp"] < 0.75 * 600_000 and counts["dsp"] < counts["dsp_loop"] < counts["i16x2"], counts


KWS = REPO.parent / "shared" / "models" / "mlperf_tiny" / "mlperf_kws_dscnn" / "model_int8_qdq.onnx"


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ARM or not KWS.exists(), reason="needs the ARM tools and the MLPerf KWS model")
def test_kws_on_m4_bit_exact(tmp_path: Path) -> None:
    """MLPerf KWS (ONNX QDQ: half-even requantization) with the board's default schedules, the DSP
    depthwise kernel among them, equals the golden model on the emulated M4."""
    out = tmp_path / "kws"
    tinyc.compile(str(KWS), out, board="mps2-an386", build=True, io_dtype="int8")
    assert "mac=dsp" in (out / "report.md").read_text().replace("'", "").replace(": ", "=")
    x = np.load(KWS.parent / "test.npz")["x"][:2]
    v = tinyc.validate(out, x)
    assert all(o["bit_exact_vs_golden"] for o in v["outputs"].values()), v["outputs"]
