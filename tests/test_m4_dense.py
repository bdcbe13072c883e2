"""The Cortex-M4 "dsp" dense int8 convolutions (issue 19).

* simd_dot.j2's dsp micro-kernel: the SXTB16 / SMLAD steps fully unrolled (up to 16 steps of 4
  inputs: constant load offsets) or a loop of 2 / 4 / 8 unrolled steps with advancing pointers;
* "direct" convolutions with one group gather each output pixel's KH x KW x C inputs once per
  pixel tile into the scratch buffer (im2col, ``QConv._patch``), x_zp for padded taps, and run one
  contiguous dot product per channel tile over them;
* the dense dsp kernels are compiled without GCC's pre-RA scheduling (tiled.c.j2).

Host (fast): every form bit-exact against the golden model through the C emulation of the DSP
helpers (output-channel and pixel tails, IC not a multiple of 4, padding on every side, stride 2,
dilation, groups, 1D, 1 and 3 input channels, uint8 input, both roundings, both loop orders),
and ASan / UBSan clean. Slow (QEMU, mps2-an386): bit-exact, SMLAD in the ELF, and the KWS-like
first conv and 64 -> 64 pointwise layers reach the instruction counts measured with these kernels.
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
from tinyc.ops import get_op
from tinyc.schedule import default_schedules
from util import assert_sanitized_cases, compile_ir, schedule_copies

from test_ops_qconv import _input, _x, conv_graph, qconv_model

# (case, blocks): blocks are (oc_tile, px_tile, wide_weights, loop_order)
B_PW = [(2, 2, True, "pixels_outer"), (3, 1, True, "pixels_outer"), (4, 3, False, "pixels_outer"),
        (1, 4, True, "channels_outer"), (2, 2, False, "channels_outer")]
DENSE_CASES: list[dict[str, Any]] = [
    dict(xs=(1, 5, 5, 64), oc=7, k=(1, 1)),                                       # pointwise, 16 steps unrolled
    dict(xs=(1, 3, 5, 72), oc=5, k=(1, 1)),                                       # 18 steps: loop of 2
    dict(xs=(1, 3, 3, 100), oc=5, k=(1, 1)),                                      # 25 steps: loop of 1
    dict(xs=(1, 2, 3, 131), oc=6, k=(1, 1)),                                      # 32 steps (loop of 8), tail 3
    dict(xs=(2, 3, 4, 10), oc=9, k=(1, 1)),                                       # batch 2, IC tail 2
    dict(xs=(1, 13, 6, 1), oc=9, k=(10, 4), strides=(2, 2), pads=(4, 1, 5, 2)),   # KWS first conv: 1 channel
    dict(xs=(1, 9, 8, 3), oc=8, k=(3, 3), strides=(2, 2), pads=(0, 0, 1, 1)),     # VWW first conv: 3 channels
    dict(xs=(1, 7, 6, 3), oc=6, k=(3, 2), pads=(2, 0, 1, 1), act=(0.0, 6.0)),    # 3 channels, uneven pads
    dict(xs=(1, 6, 5, 16), oc=10, k=(3, 3), pads=(1, 1, 1, 1)),                   # ResNet 3x3 (patch 144)
    dict(xs=(1, 5, 4, 21), oc=9, k=(3, 3), pads=(1, 1, 1, 1), strides=(2, 1)),    # IC 21 (patch 189: tail 1)
    dict(xs=(1, 6, 7, 6), oc=5, k=(3, 3), dil=(2, 2), pads=(2, 1, 2, 3)),         # dilation, padded
    dict(xs=(1, 5, 6, 8), oc=5, k=(2, 2), dil=(1, 2)),                            # dilation along W only
    dict(xs=(1, 7, 7, 12), oc=6, k=(1, 1), strides=(2, 2)),                       # 1x1 stride 2 ("direct")
    dict(xs=(1, 6, 6, 8), oc=6, k=(3, 3), group=2, pads=(1, 1, 1, 1)),            # grouped: tap mode
    dict(xs=(1, 9, 13), oc=11, k=(5,), pads=(2, 1), strides=(2,)),                # 1D
    dict(xs=(1, 6, 5, 3), oc=4, k=(3, 3), pads=(1, 1, 1, 1)),                     # 4 channels: patch, no split
    dict(xs=(1, 4, 5, 18), oc=3, k=(1, 1)),                                       # 3 channels: no split
]


def _scheds(g: Any, rounding: str) -> list[dict[str, Any]]:
    ks = get_op("QConv").knobs(g.nodes[0], g)
    assert "dsp" in ks["mac"]
    variant = "pointwise" if "pointwise" in ks["variant"] else "direct"
    return [dict(variant=variant, mac="dsp", oc_tile=t, px_tile=p, wide_weights=w and True in ks["wide_weights"],
                 loop_order=o) for (t, p, w, o) in B_PW]


def _case_id(c: dict[str, Any]) -> str:
    return f"{c['xs']}x{c['oc']}k{c['k']}s{c.get('strides')}d{c.get('dil')}g{c.get('group', 1)}"


def _graph(seed: int, case: dict[str, Any], rounding: str, scheds: list[dict[str, Any]] | None = None) -> Any:
    g, ov = conv_graph(seed, **case, schedules=scheds)
    for n in g.nodes:
        n.attrs["rounding"] = rounding
    return g, ov


@pytest.mark.parametrize("rounding", ["tflite", "half_even"])
@pytest.mark.parametrize("case", DENSE_CASES, ids=_case_id)
def test_dsp_dense_bit_exact(tmp_path: Path, case: dict[str, Any], rounding: str) -> None:
    """Every block / weight form / loop order of the dsp dense kernels equals the golden model."""
    seed = 11 + DENSE_CASES.index(case)
    g, _ = _graph(seed, case, rounding)
    scheds = _scheds(g, rounding)
    g, ov = _graph(seed, case, rounding, scheds)
    q = get_op("QConv")
    ctx = q.kernel_context(g.nodes[0], g, scheds[0], "mcu+dsp")
    m = q.task_dims(g.nodes[0], g)
    assert ctx["simd"] == "dsp"
    assert ctx["patch"] == (ctx["variant"] == "direct" and m["G"] == 1)  # im2col for every one-group direct conv
    assert bool(ctx["xsplit"]) == (m["G"] == 1 and m["OCG"] > 4)  # inputs split once per pixel tile
    x = _x(seed, g)
    golden = tinyc.reference.run_graph(g, {"x": x})
    compile_ir(g, tmp_path, ov)
    got = tinyc.run(tmp_path, {"x": x})
    for i, s in enumerate(scheds):
        np.testing.assert_array_equal(got[f"y{i}"], golden[f"y{i}"], err_msg=str(s))


@pytest.mark.parametrize("rounding", ["tflite", "half_even"])
def test_dsp_dense_uint8(tmp_path: Path, rounding: str) -> None:
    """uint8 activations (x - 128: bit 7 flipped on load) through the im2col gather (the padding is
    the uint8 x_zp) and the pointwise kernel."""
    cases = [((1, 11, 7, 6), 10, (3, 3), dict(pads=[1, 1, 0, 1], strides=[1, 2])),
             ((1, 9, 8, 3), 7, (3, 3), dict(pads=[0, 0, 1, 1], strides=[2, 2])),
             ((1, 4, 5, 20), 9, (1, 1), {})]
    for ci, (xs, oc, k, attrs) in enumerate(cases):
        model = qconv_model(30 + ci, xs, oc, k, xdt=np.uint8, **attrs)
        g = tinyc.load(model)
        node = next(n for n in g.nodes if n.op == "QConv")
        node.attrs["rounding"] = rounding
        ks = get_op("QConv").knobs(node, g)
        assert "dsp" in ks["mac"]
        variant = ks["variant"][0]
        scheds = [dict(variant=variant, mac="dsp", oc_tile=t, px_tile=p, wide_weights=w, loop_order=o)
                  for (t, p, w, o) in B_PW[:4]]
        overrides = schedule_copies(g, node, scheds)
        feeds = {g.inputs[0]: _input(30 + ci, model)}
        golden = tinyc.reference.run_graph(g, feeds)
        d = tmp_path / str(ci)
        compile_ir(g, d, overrides)
        got = tinyc.run(d, feeds)
        for pub in g.output_names:
            np.testing.assert_array_equal(got[pub], golden[pub], err_msg=f"case {ci} {pub}")


def test_dsp_dense_sanitized(tmp_path: Path) -> None:
    """ASan + UBSan, strict C99: the im2col gather (word copies and fills, padding on every side,
    dilation) and the unrolled / looped SMLAD steps stay inside their buffers and never overflow."""
    cases = [
        conv_graph(40, (1, 13, 6, 1), 5, (10, 4), strides=(2, 2), pads=(4, 1, 5, 2),
                   schedules=[dict(variant="direct", mac="dsp", px_tile=2, oc_tile=2, wide_weights=True),
                              dict(variant="direct", mac="dsp", px_tile=3, oc_tile=3, loop_order="channels_outer")]),
        conv_graph(41, (1, 6, 7, 6), 5, (3, 3), dil=(2, 2), pads=(2, 1, 2, 3),
                   schedules=[dict(variant="direct", mac="dsp", px_tile=2, oc_tile=2, wide_weights=True)]),
        conv_graph(42, (1, 5, 4, 21), 7, (3, 3), pads=(1, 1, 1, 1), strides=(2, 1),
                   schedules=[dict(variant="direct", mac="dsp", px_tile=4, oc_tile=1, wide_weights=True)]),
        conv_graph(43, (1, 2, 3, 131), 5, (1, 1), schedules=[dict(variant="pointwise", mac="dsp", px_tile=2, oc_tile=2,
                                                                  wide_weights=True),
                                                             dict(variant="pointwise", mac="dsp", px_tile=3, oc_tile=1)]),
    ]
    assert_sanitized_cases(cases, _x, tmp_path)


def test_dsp_dense_defaults_and_scratch() -> None:
    """On an M4 target the dense convs default to dsp (2 x 2 block, pre-split weights), direct ones
    gather the patch (scratch: px_tile rows of KH*KW*C rounded up to 4 bytes, then their split
    words), pointwise only the split words; the MVE target keeps its own kernel."""
    q = get_op("QConv")
    g, _ = conv_graph(1, (1, 13, 6, 1), 8, (10, 4), strides=(2, 2), pads=(4, 1, 5, 2))
    node = g.nodes[0]
    s = default_schedules(g, "mcu+dsp")[node.name]
    assert (s["mac"], s["variant"], s["oc_tile"], s["px_tile"], s["wide_weights"]) == ("dsp", "direct", 2, 2, True)
    assert q.kernel_context(node, g, s, "mcu+dsp")["patch"]
    assert q.scratch_bytes(node, g, s, "mcu+dsp") == 2 * 40 + 2 * 4 * 20  # 2 patches, 2 x 20 split words
    mve = default_schedules(g, "mcu+dsp+mve")[node.name]
    ctx = q.kernel_context(node, g, mve, "mcu+dsp+mve")
    assert ctx["simd"] == "mve" and not ctx["patch"] and not ctx["xsplit"]
    gp, _ = conv_graph(2, (1, 5, 5, 64), 64, (1, 1))
    sp = default_schedules(gp, "mcu+dsp")[gp.nodes[0].name]
    assert (sp["mac"], sp["variant"]) == ("dsp", "pointwise")
    assert q.scratch_bytes(gp.nodes[0], gp, sp, "mcu+dsp") == 2 * 4 * 32  # the 2 pixels' split words


# -- QEMU (mps2-an386, Cortex-M4) ---------------------------------------------------------------

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None


def _kws_like_model() -> Any:
    """KWS DS-CNN's first conv (10x4, stride 2, 1 input channel -> 64) and a 64 -> 64 pointwise."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    r = np.random.default_rng(0)
    w0 = r.normal(0, 0.3, (64, 1, 10, 4)).astype(np.float32)
    w1 = r.normal(0, 0.1, (64, 64, 1, 1)).astype(np.float32)
    b0 = r.normal(0, 0.1, 64).astype(np.float32)
    b1 = r.normal(0, 0.1, 64).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["h"], name="first", kernel_shape=[10, 4],
                              strides=[2, 2], pads=[4, 1, 5, 2]),
             helper.make_node("Relu", ["h"], ["hr"]),
             helper.make_node("Conv", ["hr", "w1", "b1"], ["y"], name="pw", kernel_shape=[1, 1])]
    g = helper.make_graph(nodes, "kws1", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 49, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 25, 5])],
                          initializer=[numpy_helper.from_array(v, n) for n, v in
                                       (("w0", w0), ("b0", b0), ("w1", w1), ("b1", b1))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_dsp_dense_on_m4(tmp_path: Path) -> None:
    """Default schedules on mps2-an386: bit-exact, SMLAD in the firmware, and the instruction counts
    of the new kernels (before: first conv 1.45 M, pointwise 1.16 M for the same layers)."""
    r = np.random.default_rng(1)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=r.normal(0, 1, (4, 1, 49, 10)).astype(np.float32))
    x = r.normal(0, 1, (2, 1, 49, 10)).astype(np.float32)
    out = tmp_path / "m4"
    tinyc.compile(_kws_like_model(), out, board="mps2-an386", build=True, quantize="int8", calib=calib,
                  io_dtype="int8")
    v = tinyc.validate(out, {"x": x})
    assert all(o["bit_exact_vs_golden"] for o in v["outputs"].values()), v["outputs"]
    elf = next((out / "build").glob("*.elf"))
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], check=True, capture_output=True, text=True).stdout
    assert any("\tsmlad" in line for line in dis.splitlines())
    prof = tinyc.profile(out, {"x": x[:1]})
    convs = [lay for lay in prof["layers"] if lay["macs"] >= 300_000]
    assert len(convs) == 2, prof["layers"]
    first, pw = sorted(convs, key=lambda lay: lay["macs"])
    # measured with these kernels: ~0.56 M and ~0.74 M (the requantization is about a third of them)
    assert first[prof["units"]] < 0.9e6, first
    assert pw[prof["units"]] < 0.95e6, pw
