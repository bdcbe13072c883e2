"""The SIMD micro-kernels (mac "dsp": Cortex-M DSP extension, "mve": Helium) of the int8 convolution
and fully connected / matmul kernels.

Host (fast): runtime_c/include/tinyc_simd.h's portable emulations equal an independent Python
model of SXTB16 / SMLAD / VLDRB / VCTP / VMLADAVA; every new form is bit-exact against the golden
model on shapes with odd channel tails, padding, strides, dilation, groups, uint8 inputs; and clean
under ASan + UBSan. Slow (QEMU): on mps2-an386 (Cortex-M4) "dsp" and on mps3-an547 (Cortex-M55)
"mve" equal the golden model bit for bit, run a conv layer in fewer instructions than the portable
form, and the firmware really contains SMLAD / VMLADAV (the intrinsics path ran, not the emulation).
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
from tinyc.resources import runtime_dir
from tinyc.schedule import default_schedules, knob_allowed
from util import assert_sanitized_cases, compile_ir, schedule_copies

from test_ops_q_fc import fc_graph
from test_ops_qconv import _input, _x, conv_graph, qconv_model

# -- an independent model of the instructions (ARM ARM pseudocode, in Python integers) ---------------


def _s(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def sxtb16(x: int, rot: int = 0) -> int:
    r = ((x & 0xFFFFFFFF) >> rot | (x & 0xFFFFFFFF) << (32 - rot)) & 0xFFFFFFFF if rot else x & 0xFFFFFFFF
    return ((_s(r, 8) & 0xFFFF) | (_s(r >> 16, 8) & 0xFFFF) << 16) & 0xFFFFFFFF


def smlad(x: int, y: int, acc: int) -> int:
    return _s(acc + _s(x, 16) * _s(y, 16) + _s(x >> 16, 16) * _s(y >> 16, 16), 32)


def vmladava(acc: int, a: list[int], b: list[int], n: int = 16) -> int:
    return _s(acc + sum(a[i] * b[i] for i in range(min(n, 16))), 32)


HELPERS_C = r"""
#include <stdio.h>
#include <stdint.h>
#include "tinyc_simd.h"
int main(void)
{
    uint32_t s = 12345u;
    int i, k;
    for (i = 0; i < 400; ++i) {
        int8_t a[16], b[16];
        uint8_t u[16];
        int32_t acc, n;
        for (k = 0; k < 16; ++k) {
            s = s * 1103515245u + 12345u; a[k] = (int8_t)((int32_t)((s >> 16) & 0xFF) - 128);
            s = s * 1103515245u + 12345u; b[k] = (int8_t)((int32_t)((s >> 16) & 0xFF) - 128);
            u[k] = (uint8_t)(a[k] ^ 0x55);
        }
        s = s * 1103515245u + 12345u;
        /* accumulators near both ends of int32 (the sums wrap) or anywhere in between */
        acc = (s % 3u == 0u) ? INT32_MAX - (int32_t)((s >> 2) % 300000u)
            : (s % 3u == 1u) ? INT32_MIN + (int32_t)((s >> 2) % 300000u) : (int32_t)((s >> 2) % 2000000000u) - 1000000000;
        n = (int32_t)(s % 17u);
        {
            const int32_t xa = tinyc_read_s8x4(a), xb = tinyc_read_s8x4(b);
            printf("%d %d %d %d %d %d %d %d %d\n", (int)xa, (int)xb, (int)tinyc_sxtb16(xa), (int)tinyc_sxtb16_ror8(xa),
                   (int)tinyc_smlad(xa, xb, acc), (int)tinyc_read_u8x4_off(u), (int)acc, (int)n,
                   (int)tinyc_smlad(tinyc_sxtb16(xa), tinyc_sxtb16(xb),
                                    tinyc_smlad(tinyc_sxtb16_ror8(xa), tinyc_sxtb16_ror8(xb), acc)));
            printf("%d %d %d\n", (int)tinyc_vmladava_s8(acc, tinyc_vld_s8(a), tinyc_vld_s8(b)),
                   (int)tinyc_vmladava_s8(acc, tinyc_vld_s8_z(a, tinyc_vctp8((uint32_t)n)), tinyc_vld_s8(b)),
                   (int)tinyc_vmladava_s8(acc, tinyc_vld_u8_off_z(u, tinyc_vctp8((uint32_t)n)), tinyc_vld_s8(b)));
            for (k = 0; k < 16; ++k) {
                printf("%d %d %d ", (int)a[k], (int)b[k], (int)u[k]);
            }
            printf("\n");
        }
    }
    return 0;
}
"""


def test_helpers_match_instruction_model(tmp_path: Path) -> None:
    """The C emulations (gcc, strict C99, ASan + UBSan) equal the Python model of the instructions,
    including accumulators that wrap (SMLAD / VMLADAVA modulo 2^32) and partial VCTP predicates."""
    src = tmp_path / "h.c"
    src.write_text(HELPERS_C)
    exe = tmp_path / "h"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-g",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-I", str(runtime_dir() / "include"),
                    str(src), "-o", str(exe)], check=True, capture_output=True, text=True)
    proc = subprocess.run([str(exe)], check=True, capture_output=True, text=True)
    lines = proc.stdout.splitlines()
    wrapped = 0
    for i in range(0, len(lines), 3):
        xa, xb, e, o, sm, uoff, acc, n, dot4 = (int(v) for v in lines[i].split())
        v0, v1, v2 = (int(v) for v in lines[i + 1].split())
        raw = [int(v) for v in lines[i + 2].split()]
        a, b, u = raw[0::3], raw[1::3], raw[2::3]
        assert xa == _s(sum((a[k] & 0xFF) << 8 * k for k in range(4)), 32)
        assert xb == _s(sum((b[k] & 0xFF) << 8 * k for k in range(4)), 32)
        assert e & 0xFFFFFFFF == sxtb16(xa) and o & 0xFFFFFFFF == sxtb16(xa, 8)
        assert sm == smlad(xa, xb, acc)
        assert uoff == _s(sum(((u[k] - 128) & 0xFF) << 8 * k for k in range(4)), 32)
        assert dot4 == _s(acc + sum(a[k] * b[k] for k in range(4)), 32)
        assert v0 == vmladava(acc, a, b)
        assert v1 == vmladava(acc, a, b, n)
        assert v2 == vmladava(acc, [x - 128 for x in u], b, n)
        wrapped += abs(acc + sum(a[k] * b[k] for k in range(16))) > 2**31 - 1
    assert wrapped  # the wrap-around path was exercised


# -- kernels on the host: the emulations run the same kernel code ------------------------------------

CONV_CASES: list[dict[str, Any]] = [
    dict(xs=(1, 5, 5, 19), oc=7, k=(1, 1)),                                      # pointwise, IC tail 3
    dict(xs=(2, 3, 4, 33), oc=5, k=(1, 1)),                                      # batch 2, IC 33 (mve tail 1)
    dict(xs=(1, 6, 5, 21), oc=9, k=(3, 3), pads=(1, 1, 1, 1), strides=(2, 1)),   # direct, row mode, borders
    dict(xs=(1, 7, 6, 3), oc=6, k=(3, 2), pads=(2, 0, 1, 1), act=(0.0, 6.0)),   # 3 channels (first layer)
    dict(xs=(1, 4, 4, 35), oc=5, k=(2, 2), dil=(2, 1)),                          # dilated: tap mode
    dict(xs=(1, 6, 6, 4), oc=6, k=(3, 3), group=2, pads=(1, 1, 1, 1)),           # grouped: tap mode
    dict(xs=(1, 9, 16), oc=16, k=(3,), pads=(1, 1)),                             # 1D
    dict(xs=(2, 5, 6, 8), oc=8, k=(3, 3), group=8, pads=(1, 0, 1, 2)),           # depthwise (mve)
    dict(xs=(1, 5, 7, 21), oc=21, k=(3, 3), group=21, strides=(2, 2), pads=(1, 1, 1, 1)),  # dw, lane tail
]
BLOCKS = [(2, 2, False), (4, 3, True), (1, 1, True), (3, 2, False), (8, 1, False)]


def _conv_scheds(case: dict[str, Any], g: Any) -> list[dict[str, Any]]:
    ks = get_op("QConv").knobs(g.nodes[0], g)
    variants = [v for v in ks["variant"] if v in ("pointwise", "direct", "depthwise")]
    out = []
    for mac in ("dsp", "mve"):
        if mac not in ks["mac"]:
            continue
        for i, (t, p, w) in enumerate(BLOCKS):
            out.append(dict(variant=variants[i % len(variants)], mac=mac, oc_tile=t, px_tile=p,
                            wide_weights=w and True in ks["wide_weights"]))
    return out


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c['xs']}x{c['oc']}k{c['k']}g{c.get('group', 1)}")
def test_conv_simd_forms_bit_exact(tmp_path: Path, case: dict[str, Any]) -> None:
    g, _ = conv_graph(3, **case)
    scheds = _conv_scheds(case, g)
    assert {s["mac"] for s in scheds} == {"dsp", "mve"}   # depthwise too (channel multiplier 1, int8)
    g, ov = conv_graph(3, **case, schedules=scheds)
    x = _x(3, g)
    golden = tinyc.reference.run_graph(g, {"x": x})
    compile_ir(g, tmp_path, ov)
    got = tinyc.run(tmp_path, {"x": x})
    for i, s in enumerate(scheds):
        np.testing.assert_array_equal(got[f"y{i}"], golden[f"y{i}"], err_msg=str(s))


def test_conv_simd_uint8_qlinearconv(tmp_path: Path) -> None:
    """uint8 activations (x - 128 as int8: bit 7 flipped) on a QLinearConv, padded and strided."""
    model = qconv_model(8, (1, 11, 7, 6), 10, (3, 3), xdt=np.uint8, pads=[1, 1, 0, 1], strides=[1, 2])
    g = tinyc.load(model)
    node = next(n for n in g.nodes if n.op == "QConv")
    ks = get_op("QConv").knobs(node, g)
    assert "dsp" in ks["mac"] and "mve" in ks["mac"]
    scheds = [dict(mac="dsp", oc_tile=2, px_tile=2, wide_weights=True), dict(mac="dsp", oc_tile=3, px_tile=1),
              dict(mac="mve", oc_tile=4, px_tile=2)]
    overrides = schedule_copies(g, node, scheds)
    feeds = {g.inputs[0]: _input(8, model)}
    golden = tinyc.reference.run_graph(g, feeds)
    compile_ir(g, tmp_path, overrides)
    got = tinyc.run(tmp_path, feeds)
    for pub in g.output_names:
        np.testing.assert_array_equal(got[pub], golden[pub], err_msg=pub)


FC_CASES = [((3,), 37, 11, True), ((1,), 640, 12, True), ((5,), 19, 7, False), ((2, 3), 16, 33, True),
            ((1,), 3, 2, True)]


@pytest.mark.parametrize("lead,k,n,bias", FC_CASES)
def test_fc_simd_forms_bit_exact(tmp_path: Path, lead: tuple[int, ...], k: int, n: int, bias: bool) -> None:
    rows = int(np.prod(lead))
    scheds = [dict(mac=m, n_tile=t, m_tile=r, wide_weights=w) for m in ("dsp", "mve")
              for (t, r, w) in ((2, 2, True), (4, 1, False), (3, 2, True), (1, 4, False)) if r <= rows and t <= n]
    g, ov = fc_graph(1, (*lead, k), n, bias, (0.0, None), scheds)
    ks = get_op("QMatMul").knobs(g.nodes[0], g)
    assert ks["mac"][:3] == ["i16", "dsp", "mve"]
    x = _x(1, g)
    golden = tinyc.reference.run_graph(g, {"x": x})
    compile_ir(g, tmp_path, ov)
    got = tinyc.run(tmp_path, {"x": x})
    for i, s in enumerate(scheds):
        np.testing.assert_array_equal(got[f"y{i}"], golden[f"y{i}"], err_msg=str(s))


def test_simd_sanitized(tmp_path: Path) -> None:
    """ASan + UBSan, strict C99: the emulated kernels never read outside their buffers (VCTP tails,
    assembled border rows, uint8 flips) and never overflow."""
    cases = [
        conv_graph(5, (1, 5, 6, 5), 6, (3, 3), strides=(2, 1), pads=(1, 2, 0, 1), act=(0.0, 6.0),
                   schedules=[dict(variant="direct", mac="dsp", px_tile=3, oc_tile=4, wide_weights=True),
                              dict(variant="direct", mac="mve", px_tile=2, oc_tile=3)]),
        conv_graph(6, (2, 3, 3, 17), 9, (1, 1), schedules=[dict(variant="pointwise", mac="dsp", px_tile=4, oc_tile=2),
                                                          dict(variant="pointwise", mac="mve", px_tile=3, oc_tile=4)]),
        conv_graph(7, (1, 5, 5, 6), 6, (3, 3), group=6, pads=(1, 1, 1, 1),
                   schedules=[dict(variant="depthwise", mac="mve", px_tile=3, oc_tile=5)]),
        fc_graph(2, (3, 21), 5, True, None, [dict(mac="dsp", n_tile=2, m_tile=2, wide_weights=True),
                                             dict(mac="mve", n_tile=4, m_tile=1)]),
    ]
    assert_sanitized_cases(cases, _x, tmp_path)


def test_defaults_and_isa() -> None:
    """Host defaults are unchanged; board targets pick the SIMD form their core has; knob_isa."""
    g, _ = conv_graph(1, (1, 8, 8, 16), 16, (3, 3), pads=(1, 1, 1, 1))
    q = get_op("QConv")
    node = g.nodes[0]
    assert q.knob_isa("mac", "dsp") == "dsp" and q.knob_isa("mac", "mve") == "mve"
    assert q.knob_isa("mac", "i16x2") is None and q.knob_isa("oc_tile", 4) is None
    assert default_schedules(g, "host")[node.name]["mac"] == "i16x2"
    assert default_schedules(g, "mcu")[node.name]["mac"] == "i16x2"
    assert default_schedules(g, "mcu+dsp")[node.name]["mac"] == "dsp"
    assert default_schedules(g, "mcu+dsp+mve")[node.name]["mac"] == "mve"
    assert not knob_allowed(q, "mac", "mve", "mcu+dsp")
    gd, _ = conv_graph(1, (1, 8, 8, 16), 16, (3, 3), group=16, pads=(1, 1, 1, 1))
    assert "dsp" in q.knobs(gd.nodes[0], gd)["mac"]
    assert default_schedules(gd, "mcu+dsp")[gd.nodes[0].name]["mac"] == "dsp"
    assert default_schedules(gd, "mcu+dsp+mve")[gd.nodes[0].name]["mac"] == "mve"
    gu, _ = conv_graph(1, (1, 8, 8, 16), 32, (3, 3), group=16, pads=(1, 1, 1, 1))   # channel multiplier 2
    assert "dsp" not in q.knobs(gu.nodes[0], gu)["mac"] and "mve" not in q.knobs(gu.nodes[0], gu)["mac"]
    gf, _ = fc_graph(1, (1, 64), 10, True, None)
    m = get_op("QMatMul")
    assert default_schedules(gf, "host")[gf.nodes[0].name]["mac"] == "i16"
    assert default_schedules(gf, "mcu+dsp")[gf.nodes[0].name]["mac"] == "dsp"
    assert default_schedules(gf, "mcu+dsp+mve")[gf.nodes[0].name]["mac"] == "mve"
    assert m.knob_isa("mac", "mve") == "mve" and m.knob_isa("n_tile", 4) is None


# -- QEMU ------------------------------------------------------------------------------------------------

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None


def _one_conv_model() -> Any:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    r = np.random.default_rng(0)
    w = r.normal(0, 0.2, (16, 12, 3, 3)).astype(np.float32)
    b = r.normal(0, 0.1, 16).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, 10, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 10, 9])],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _layer_count(out: Path, x: np.ndarray) -> float:
    prof = tinyc.profile(out, {"x": x})
    return float(max(prof["layers"], key=lambda lay: lay["macs"])[prof["units"]])


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm")
@pytest.mark.parametrize("board,simd,portable,mnemonic", [("mps2-an386", "dsp", "i16x2", "smlad"),
                                                          ("mps3-an547", "mve", "i16x2", "vmlava")])
def test_simd_on_board(tmp_path: Path, board: str, simd: str, portable: str, mnemonic: str) -> None:
    r = np.random.default_rng(1)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=r.normal(0, 1, (4, 12, 10, 9)).astype(np.float32))
    x = r.normal(0, 1, (1, 12, 10, 9)).astype(np.float32)
    counts = {}
    for mac in (simd, portable):
        out = tmp_path / mac
        tinyc.compile(_one_conv_model(), out, board=board, build=True, quantize="int8", calib=calib, io_dtype="int8",
                      schedules={"conv": {"mac": mac, "variant": "direct"}})
        v = tinyc.validate(out, {"x": x})
        assert all(o["bit_exact_vs_golden"] for o in v["outputs"].values()), (mac, v["outputs"])
        counts[mac] = _layer_count(out, x)
        elf = next((out / "build").glob("*.elf"))
        arch = ["-m", "armv8.1-m.main"] if simd == "mve" else []  # (objdump decodes MVE only when told)
        dis = subprocess.run(["arm-none-eabi-objdump", "-d", *arch, str(elf)], check=True, capture_output=True,
                             text=True).stdout
        if mac == simd:  # VMLADAVA disassembles as vmlava.s8
            assert any(f"\t{mnemonic}" in line for line in dis.splitlines()), f"no {mnemonic} in the {simd} firmware"
    assert counts[simd] < counts[portable], counts
    # the default schedule of the board is the SIMD form, and equally exact
    out = tmp_path / "default"
    res = tinyc.compile(_one_conv_model(), out, board=board, build=True, quantize="int8", calib=calib,
                        io_dtype="int8")
    report = (out / "report.md").read_text()
    assert f"mac={simd}" in report
    v = tinyc.validate(out, {"x": x})
    assert all(o["bit_exact_vs_golden"] for o in v["outputs"].values())
    assert res.graph is not None


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm")
@pytest.mark.parametrize("board,simd", [("mps2-an386", "dsp"), ("mps3-an547", "mve")])
def test_simd_fc_on_board(tmp_path: Path, board: str, simd: str) -> None:
    """A fully connected layer (Gemm -> QMatMul) with the board's SIMD form: bit-exact, fewer
    instructions than the portable "i16" form."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    r = np.random.default_rng(2)
    w = r.normal(0, 0.1, (100, 24)).astype(np.float32)
    b = r.normal(0, 0.1, 24).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc")], "f",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 100])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24])],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=r.normal(0, 1, (4, 100)).astype(np.float32))
    x = r.normal(0, 1, (1, 100)).astype(np.float32)
    counts = {}
    for mac in (simd, "i16"):
        out = tmp_path / mac
        tinyc.compile(m, out, board=board, build=True, quantize="int8", calib=calib, io_dtype="int8",
                      schedules={"fc": {"mac": mac}})
        v = tinyc.validate(out, {"x": x})
        assert all(o["bit_exact_vs_golden"] for o in v["outputs"].values()), mac
        counts[mac] = _layer_count(out, x)
    assert counts[simd] < counts["i16"], counts
