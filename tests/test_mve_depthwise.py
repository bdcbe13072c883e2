"""The Helium (MVE) depthwise QConv kernel (templates/kernels/qconv/mve_dw.c.j2, tinyc/ops/_qconv_mve_dw.py).

Host (fast): its new tinyc_simd.h helpers (8 int16 lanes, VMULLB / VMULLT, VQMOVNB / VQMOVNT, the
tie-free VQDMULH + VRSHL requantization) equal an independent Python model of the instructions;
the compile-time proof that no half-to-even tie can occur holds on brute force; the kernel (run
through the C emulations) is bit-exact against the golden model with channel tails, padding on
every side, strides, dilation, batch 2, 1 or 2 pixels per tile, uint8 input, TFLite and half-even
rounding and every requantization form; clean under ASan + UBSan. Slow (QEMU, mps3-an547): exact,
the firmware has the intended MVE instructions, and the layer takes far fewer instructions.
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
from tinyc.ops import _qconv_mve_dw as mdw
from tinyc.ops import get_op
from tinyc.resources import runtime_dir
from tinyc.schedule import default_schedules
from util import assert_sanitized_cases, compile_ir, sanitized_project

from test_ops_qconv import _input, _x, conv_graph, qconv_model


def _s(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


HELPERS_C = r"""
#include <stdio.h>
#include <stdint.h>
#include "tinyc_simd.h"
static uint32_t s = 987654321u;
static uint32_t rnd(void) { s = s * 1103515245u + 12345u; return s >> 8; }
int main(void)
{
    int i, k;
    for (i = 0; i < 300; ++i) {
        int8_t a[8], b[8];
        uint8_t u[8];
        int32_t e[4], o[4], mul[4], nr[4];
        tinyc_s32x4 ve, vo, vm, vn, q;
        tinyc_s16x8 v16, c16;
        int8_t st[8];
        uint8_t su[8];
        const uint32_t n = rnd() % 10u;
        for (k = 0; k < 8; ++k) {
            a[k] = (int8_t)((int32_t)(rnd() & 0xFF) - 128);
            b[k] = (int8_t)((int32_t)(rnd() % 255u) - 127);
            u[k] = (uint8_t)(rnd() & 0xFF);
            st[k] = 0;
            su[k] = 0;
        }
        for (k = 0; k < 4; ++k) {
            const uint32_t r = rnd();
            e[k] = (r % 3u == 0u) ? (int32_t)(rnd() % 60000u) - 30000 : (int32_t)(rnd() * 255u);
            o[k] = (r % 3u == 1u) ? (int32_t)(rnd() % 60000u) - 30000 : -(int32_t)(rnd() * 255u);
            mul[k] = (int32_t)(rnd() << 7) & 0x7FFFFFFF;
            nr[k] = -(int32_t)(1u + rnd() % 31u);
        }
        ve = tinyc_vld_s32(e);
        vo = tinyc_vld_s32(o);
        vm = tinyc_vld_s32(mul);
        vn = tinyc_vld_s32(nr);
        {
            const tinyc_s16x8 xa = tinyc_vld_s8_s16(a), xb = tinyc_vld_s8_s16(b);
            const tinyc_s16x8 xz = tinyc_vld_s8_s16_z(a, tinyc_vctp16(n)), xu = tinyc_vld_u8_s16_z(u, tinyc_vctp16(n));
            const tinyc_s32x4 pb = tinyc_vmullb_s16(xa, xb), pt = tinyc_vmullt_s16(xz, xb);
            const tinyc_s32x4 pu = tinyc_vmullb_s16(xu, xb), pv = tinyc_vmullt_s16(tinyc_vld_u8_s16(u), xb);
            int32_t t[4];
            tinyc_vst_s32(t, pb); printf("%d %d %d %d ", (int)t[0], (int)t[1], (int)t[2], (int)t[3]);
            tinyc_vst_s32(t, pt); printf("%d %d %d %d ", (int)t[0], (int)t[1], (int)t[2], (int)t[3]);
            tinyc_vst_s32(t, pu); printf("%d %d %d %d ", (int)t[0], (int)t[1], (int)t[2], (int)t[3]);
            tinyc_vst_s32(t, pv); printf("%d %d %d %d\n", (int)t[0], (int)t[1], (int)t[2], (int)t[3]);
        }
        q = tinyc_vmbqm_even_nt(ve, vm, vn);
        {
            int32_t t[4];
            tinyc_vst_s32(t, q);
            printf("%d %d %d %d\n", (int)t[0], (int)t[1], (int)t[2], (int)t[3]);
        }
        v16 = tinyc_vqmovn_eo_s32(ve, vo);
        c16 = tinyc_vclamp_add_s16(v16, -100, 90, 7);
        tinyc_vst_s16_s8(st, c16);
        tinyc_vst_s16_u8_p(su, tinyc_vclamp_add_s16(v16, -5, 200, 50), tinyc_vctp16(n));
        for (k = 0; k < 8; ++k) {
            printf("%d %d %d %d %d ", (int)a[k], (int)b[k], (int)u[k], (int)st[k], (int)su[k]);
        }
        printf("\n%u", (unsigned)n);
        for (k = 0; k < 4; ++k) {
            printf(" %d %d %d %d", (int)e[k], (int)o[k], (int)mul[k], (int)nr[k]);
        }
        printf("\n");
    }
    return 0;
}
"""


def test_helpers_match_instruction_model(tmp_path: Path) -> None:
    """The new helpers' C emulations (strict C99, ASan + UBSan) equal a Python model of VLDRB.S16 /
    .U16 (zeroing predication), VMULLB / VMULLT.S16, VQDMULH + VRSHL, VQMOVNB / VQMOVNT.S32 (saturating),
    VMAX / VMIN / VADD.I16 and the (predicated) VSTRB.16."""
    src = tmp_path / "h.c"
    src.write_text(HELPERS_C)
    exe = tmp_path / "h"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-g",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-I", str(runtime_dir() / "include"),
                    str(src), "-o", str(exe)], check=True, capture_output=True, text=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    assert len(lines) == 4 * 300
    sat = 0
    for i in range(0, len(lines), 4):
        prods = [int(v) for v in lines[i].split()]
        q = [int(v) for v in lines[i + 1].split()]
        raw = [int(v) for v in lines[i + 2].split()]
        a, b, u, st, su = raw[0::5], raw[1::5], raw[2::5], raw[3::5], raw[4::5]
        tail = [int(v) for v in lines[i + 3].split()]
        n, rest = tail[0], tail[1:]
        e, o, mul, nr = rest[0::4], rest[1::4], rest[2::4], rest[3::4]
        az = [a[k] if k < n else 0 for k in range(8)]
        uz = [u[k] if k < n else 0 for k in range(8)]
        assert prods[0:4] == [a[2 * k] * b[2 * k] for k in range(4)]
        assert prods[4:8] == [az[2 * k + 1] * b[2 * k + 1] for k in range(4)]
        assert prods[8:12] == [uz[2 * k] * b[2 * k] for k in range(4)]
        assert prods[12:16] == [u[2 * k + 1] * b[2 * k + 1] for k in range(4)]
        for k in range(4):
            t = (e[k] * mul[k]) >> 31  # VQDMULH (floor), then VRSHL by -r: half up
            r = -nr[k]
            assert q[k] == _s((t + (1 << (r - 1))) >> r, 32)
        v16 = []
        for k in range(4):
            v16 += [max(-32768, min(32767, e[k])), max(-32768, min(32767, o[k]))]
            sat += abs(e[k]) > 32767 or abs(o[k]) > 32767
        assert st == [_s(max(-100, min(90, v)) + 7, 8) for v in v16]
        assert su == [(max(-5, min(200, v)) + 50) & 0xFF if k < n else 0 for k, v in enumerate(v16)]
    assert sat  # the saturating narrowing was exercised


def test_no_tie_proof_brute_force() -> None:
    """`requant_form`'s "even_nt": where |acc| <= bound < 2^(30 + r - tz(M)), half-even of
    acc * M / 2^(31 + r) equals VRSHL(VQDMULH(acc, M), -r) for every acc; the bound is tight (at
    2^(30 + r - tz(M)) ties exist, half of them rounding differently) and then the form is not used."""
    from tinyc.numerics import fixed_point as arith
    rng = np.random.default_rng(0)
    differs = 0
    for _ in range(40):
        r = int(rng.integers(1, 8))
        tz = int(rng.integers(r + 4, 24))
        mv = (int(rng.integers(1 << 6, 1 << (30 - tz))) | 1) << tz
        bound = (1 << (30 + r - tz)) - 1
        form, mu, rs = mdw.requant_form([mv], [r], False, True, [bound])
        assert form == "even_nt" and (mu, rs) == ([mv], [r])
        accs = np.unique(np.concatenate([rng.integers(-bound, bound + 1, 4000), [-bound, bound, 0, 1, -1]]))
        want = arith.multiply_by_quantized_multiplier(accs, mv, -r, "half_even")
        got = (((accs.astype(np.int64) * mv) >> 31) + (1 << (r - 1))) >> r
        np.testing.assert_array_equal(got, want)
        assert mdw.requant_form([mv], [r], False, True, [bound + 1])[0] == "even"
        ties = np.array([k << (30 + r - tz) for k in (1, -1, 3, -3, 5, 7)], np.int64)
        want = arith.multiply_by_quantized_multiplier(ties, mv, -r, "half_even")
        got = (((ties * mv) >> 31) + (1 << (r - 1))) >> r
        differs += int(np.sum(got != want))
    assert differs
    # a channel with r == 0 (no vector form rounds p / 2^31 half to even), a left shift: scalar
    assert mdw.requant_form([3 << 20, 1 << 30], [4, 0], False, True, [1000, 1000])[0] == "scalar"
    assert mdw.requant_form([1 << 30], [3], True, True, [1000])[0] == "scalar"       # a left shift
    assert mdw.requant_form([1 << 30], [3], False, False, [1000])[0] == "tflite"
    assert mdw.requant_form([1 << 30], [32], False, False, [1000])[0] == "scalar"


CASES: list[dict[str, Any]] = [
    dict(xs=(1, 25, 5, 64), oc=64, k=(3, 3), group=64, pads=(1, 1, 1, 1)),                        # KWS
    dict(xs=(2, 5, 6, 13), oc=13, k=(3, 3), group=13, pads=(1, 0, 1, 2)),                         # batch 2, tail 5
    dict(xs=(1, 7, 9, 21), oc=21, k=(3, 3), group=21, strides=(2, 2), pads=(1, 1, 1, 1)),         # stride 2
    dict(xs=(1, 8, 8, 3), oc=3, k=(3, 3), group=3, strides=(2, 2), pads=(0, 0, 1, 1)),            # SAME-like, 3 ch
    dict(xs=(1, 6, 9, 12), oc=12, k=(2, 3), group=12, dil=(1, 2), pads=(2, 2, 0, 1), act=(0.0, 6.0)),
    dict(xs=(1, 3, 4, 16), oc=16, k=(5, 5), group=16, pads=(2, 2, 2, 2)),                         # no interior
    dict(xs=(1, 11, 24), oc=24, k=(3,), group=24, pads=(1, 1)),                                    # 1D
]


def _ids(c: dict[str, Any]) -> str:
    return f"{c['xs']}k{c['k']}s{c.get('strides', 1)}p{c.get('pads', 0)}".replace(" ", "")


def _run_cases(tmp_path: Path, case: dict[str, Any], seed: int = 3) -> list[str]:
    """One project: the convolution with 1 and 2 pixels per tile, each with TFLite and half-even
    rounding (4 nodes); returns the requantization forms its code uses."""
    runs = [(p, rnd) for rnd in ("tflite", "half_even") for p in (1, 2)]
    scheds = [dict(variant="depthwise", mac="mve", px_tile=p, oc_tile=8) for p, _ in runs]
    g, ov = conv_graph(seed, **case, schedules=scheds)
    for n, (_, rnd) in zip(g.nodes, runs):
        n.attrs["rounding"] = rnd
    x = _x(seed, g)
    golden = tinyc.reference.run_graph(g, {"x": x})
    compile_ir(g, tmp_path, ov)
    src = "\n".join(p.read_text() for p in tmp_path.glob("*.c"))
    assert src.count("dw_tab[") == len(runs)  # the Helium depthwise kernel ran (through the emulations)
    got = tinyc.run(tmp_path, {"x": x})
    for i, s in enumerate(runs):
        np.testing.assert_array_equal(got[f"y{i}"], golden[f"y{i}"], err_msg=str(s))
    return [f for f in ("tinyc_vmbqm_r", "tinyc_vmbqm_even_nt", "tinyc_vmbqm_even_r(", "dw_rsh") if f in src]


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_mve_depthwise_bit_exact(tmp_path: Path, case: dict[str, Any]) -> None:
    forms = _run_cases(tmp_path, case)
    assert "tinyc_vmbqm_r" in forms or "dw_rsh" in forms  # TFLite rounding
    assert {"tinyc_vmbqm_even_nt", "tinyc_vmbqm_even_r("} & set(forms) or "dw_rsh" in forms


@pytest.mark.parametrize("form", ["even", "scalar"])
def test_mve_depthwise_every_requant_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """The generic half-even form (tinyc_vmbqm_even_r) and the scalar fallback, forced."""
    real = mdw.requant_form

    def forced(mult, rsh, lshift, half_even, bound):  # type: ignore[no-untyped-def]
        got = real(mult, rsh, lshift, half_even, bound)
        if form == "even":
            return ("even", mult, rsh) if half_even and all(1 <= r <= 30 for r in rsh) and not lshift else got
        return "scalar", mult, rsh

    monkeypatch.setattr(mdw, "requant_form", forced)
    seen: set[str] = set()
    for i, case in enumerate(CASES[1:3]):
        seen.update(_run_cases(tmp_path / str(i), case, seed=11 + i))
    assert ("tinyc_vmbqm_even_r(" if form == "even" else "dw_rsh") in seen, seen


def test_mve_depthwise_uint8_qlinearconv(tmp_path: Path) -> None:
    """A uint8 depthwise QLinearConv (VLDRB.U16, the fold without the 128 offset), padded and strided,
    and a uint8 output."""
    from tinyc.ir import Node
    model = qconv_model(9, (2, 11, 10, 7), 11, (3, 3), group=11, xdt=np.uint8, pads=[1, 1, 0, 1], strides=[1, 2])
    g = tinyc.load(model)
    node = next(n for n in g.nodes if n.op == "QConv")
    ks = get_op("QConv").knobs(node, g)
    assert "mve" in ks["mac"] and "dsp" not in ks["mac"]
    assert default_schedules(g, "mcu+dsp+mve")[node.name]["mac"] == "mve"
    scheds = [dict(mac="mve", variant="depthwise", px_tile=2), dict(mac="mve", variant="depthwise", px_tile=1)]
    overrides = {node.name: scheds[0]}
    t = g.tensor(node.outputs[0])
    g.tensors["extra"] = type(t)("extra", t.shape, t.dtype)
    g.nodes.append(Node(f"{node.name}_v", "QConv", list(node.inputs), ["extra"], dict(node.attrs)))
    g.outputs.append("extra")
    g.output_names.append("extra")
    overrides[f"{node.name}_v"] = scheds[1]
    feeds = {g.inputs[0]: _input(9, model)}
    golden = tinyc.reference.run_graph(g, feeds)
    compile_ir(g, tmp_path, overrides)
    assert "tinyc_vld_u8_s16" in "\n".join(p.read_text() for p in tmp_path.glob("*.c"))
    got = tinyc.run(tmp_path, feeds)
    for pub in g.output_names:
        np.testing.assert_array_equal(got[pub], golden[pub], err_msg=pub)


def test_mve_depthwise_sanitized(tmp_path: Path) -> None:
    """ASan + UBSan, strict C99: predicated tails, the x_zp row, border tiles, uint8."""
    cases = [
        conv_graph(5, (2, 5, 6, 13), 13, (3, 3), group=13, strides=(2, 1), pads=(1, 2, 0, 1), act=(0.0, 6.0),
                   schedules=[dict(variant="depthwise", mac="mve", px_tile=2),
                              dict(variant="depthwise", mac="mve", px_tile=1)]),
        conv_graph(6, (1, 4, 4, 21), 21, (3, 3), group=21, pads=(1, 1, 1, 1),
                   schedules=[dict(variant="depthwise", mac="mve", px_tile=2)]),
    ]
    for n in cases[1][0].nodes:  # the second case with half-even rounding
        n.attrs["rounding"] = "half_even"
    assert_sanitized_cases(cases, _x, tmp_path)
    model = qconv_model(4, (1, 10, 6, 5), 10, (3, 3), group=10, xdt=np.uint8, pads=[1, 1, 1, 1])
    g = tinyc.load(model)
    node = next(n for n in g.nodes if n.op == "QConv")
    feeds = {g.inputs[0]: _input(4, model)}
    golden = tinyc.reference.run_graph(g, feeds)
    d = tmp_path / "u8"
    d.mkdir()
    compile_ir(g, d / "p", {node.name: dict(mac="mve", variant="depthwise", px_tile=2)}, build=False)
    got = sanitized_project(d / "p", g, feeds, d)
    for pub in g.output_names:
        np.testing.assert_array_equal(got[pub], golden[pub], err_msg=pub)


def test_mve_depthwise_schedule() -> None:
    """The M55 default is the Helium kernel with 2 pixels per tile; the knobs it ignores canonicalise."""
    g, _ = conv_graph(1, (1, 8, 8, 16), 16, (3, 3), group=16, pads=(1, 1, 1, 1))
    node = g.nodes[0]
    q = get_op("QConv")
    sched = default_schedules(g, "mcu+dsp+mve")[node.name]
    assert (sched["mac"], sched["variant"], sched["px_tile"]) == ("mve", "depthwise", 2)
    a = q.canonical_schedule(node, g, dict(sched, oc_tile=4, px_tile=8, loop_order="channels_outer"))
    b = q.canonical_schedule(node, g, dict(sched, oc_tile=16, px_tile=2))
    assert a == b
    assert q.canonical_schedule(node, g, dict(sched, px_tile=1))["px_tile"] == 1


# -- QEMU ------------------------------------------------------------------------------------------------

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None


def _dw_model(c: int = 64, h: int = 25, w: int = 5) -> Any:
    """MLPerf KWS's depthwise layer shape: 3x3, pad 1, C channels (float, PTQ-quantized)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    r = np.random.default_rng(0)
    wt = r.normal(0, 1 / 3, (c, 1, 3, 3)).astype(np.float32)
    b = r.normal(0, 0.1, c).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="dw", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                            group=c)
    g = helper.make_graph([node], "d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, h, w])],
                          initializer=[numpy_helper.from_array(wt, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_mve_depthwise_on_board(tmp_path: Path) -> None:
    """mps3-an547 (Cortex-M55): the default depthwise kernel is bit-exact, its firmware has the
    Helium instructions (VLDRB.S16, VMULLB / VMULLT, VQRDMULH, VQMOVNB / VQMOVNT, VSTRB.16) and the layer
    runs in under 0.8x CMSIS-NN's 0.17 M instructions (it took 0.40 M with the 4-int32-lane form) and
    in far fewer than the portable "i16x2" form; a 13-channel stride-2 variant (tails) is exact too."""
    r = np.random.default_rng(1)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=r.normal(0, 1, (4, 64, 25, 5)).astype(np.float32))
    x = r.normal(0, 1, (1, 64, 25, 5)).astype(np.float32)
    counts = {}
    for mac in ("mve", "i16x2"):
        out = tmp_path / mac
        tinyc.compile(_dw_model(), out, board="mps3-an547", build=True, quantize="int8", calib=calib,
                      io_dtype="int8", schedules=None if mac == "mve" else {"dw": {"mac": mac}})
        v = tinyc.validate(out, {"x": x})
        assert all(o["bit_exact_vs_golden"] for o in v["outputs"].values()), (mac, v["outputs"])
        prof = tinyc.profile(out, {"x": x})
        counts[mac] = float(max(prof["layers"], key=lambda lay: lay["macs"])[prof["units"]])
        if mac == "mve":
            assert "mac=mve" in (out / "report.md").read_text()
            elf = next((out / "build").glob("*.elf"))
            dis = subprocess.run(["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", str(elf)], check=True,
                                 capture_output=True, text=True).stdout
            mnemonics = {line.split("\t")[2].split()[0] for line in dis.splitlines() if line.count("\t") >= 2}
            for want in ("vldrb.s16", "vmullb.s16", "vmullt.s16", "vqrdmulh.s32", "vqmovnb.s32", "vqmovnt.s32",
                         "vstrb.16"):
                assert want in mnemonics, want
    assert counts["mve"] < 0.8 * 170_000, counts
    assert counts["mve"] < counts["i16x2"] / 5, counts
    # channel tails (13), stride 2, half-even rounding through an int8 QDQ-free QLinearConv on the board
    model = qconv_model(12, (1, 13, 9, 7), 13, (3, 3), group=13, pads=[1, 1, 1, 1], strides=[2, 2])
    out = tmp_path / "q"
    tinyc.compile(model, out, board="mps3-an547", build=True)
    xq = _input(12, model)
    v = tinyc.validate(out, {"x": xq})
    assert all(o["bit_exact_vs_golden"] for o in v["outputs"].values()), v["outputs"]
    assert "mac=mve" in (out / "report.md").read_text()
