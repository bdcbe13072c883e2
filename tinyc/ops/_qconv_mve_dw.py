"""Compile-time facts of the Helium (MVE) depthwise QConv kernel (templates/kernels/qconv/mve_dw.c.j2).

Channel multiplier 1. Why this shape (QEMU instruction counts, MLPerf KWS / VWW depthwise layers):

* products in int16 lanes: one VLDRB.S16 loads 8 channels of a tap, VMULLB / VMULLT multiply the
  even / odd lanes into int32 (the weights are in [-127, 127], x in int8 or uint8 range: every
  product is exact) and two VADDs accumulate: 5 instructions per 8 channel-taps instead of 8 with
  4 int32 lanes (VLDRB.S32 + VMUL + VADD per 4). The even / odd accumulators hold channels
  c + 0, 2, 4, 6 and c + 1, 3, 5, 7; the per-channel tables are permuted to match, and VQMOVNB /
  VQMOVNT put the requantized halves back in channel order as one int16 vector (clamped in int16,
  stored with one narrowing VSTRB.16).
* tiles of JJ <= 2 output pixels along W share one row pointer per kernel row (both pixels' taps
  are constant offsets from it, centred so that they fit VLDRB's +-127 immediate when C is
  small) and one weight load per tap; the channel loop is innermost with pointer increments.
* padding: a kernel row outside the image reads a row of x_zp in the scratch buffer (a pointer
  select per tile and row); columns outside it are known per tile at compile time: the tiles at
  the left and right borders are generated apart ("static" tiles, their out-of-image taps use a
  vector of x_zp instead of a load), the interior runs as a loop of branch-free tiles.
* the folded bias (bias - x_zp * sum w, modulo 2^32: every sum is modular and the true
  accumulator fits int32) is the accumulators' start, so padded taps reading x_zp add nothing.
* requantization in vector registers (``rq``): TFLite rounding with ``tinyc_vmbqm_r``; half to
  even ("even_nt") as VQDMULH + VRSHL when no tie can occur (below), else ``tinyc_vmbqm_even_r``
  (1 <= r <= 30); a left shift or a shift outside those ranges stores the accumulators and
  runs the scalar ``rq_r`` per channel.

No tie (half-even equals half-up): with t = floor(acc * M / 2^31), the result for r >= 1 is
round(acc * M / 2^(31 + r)); half-up is floor((t + 2^(r-1)) / 2^r), i.e. VRSHL of t. The two
roundings differ only on an exact tie, acc * M = odd * 2^(30 + r), which needs
|acc| >= 2^(30 + r - tz(M)) (tz: trailing zero bits). The accumulator of channel c is bounded
at compile time by |bias[c]| + max|x - x_zp| * sum |w[c]|; when that bound is below the power
for every channel, ties cannot happen. (r == 0 needs VQRDMULH instead: such a layer takes the
scalar form.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: channels per vector pair (8 int16 lanes: 4 even + 4 odd int32 accumulators)
LANES = 8
#: the widest tile along W (2 pixels: 4 accumulators + weight + input + product = 7 of the 8 Q registers)
MAX_PIXELS = 2


def applies(m: dict[str, int]) -> bool:
    """Depthwise with channel multiplier 1 (lane c reads input channel c)."""
    return m["ICG"] == 1 and m["G"] > 1 and m["OCG"] == 1


def pixels(sched: dict[str, Any], m: dict[str, int]) -> int:
    return max(1, min(MAX_PIXELS, int(sched.get("px_tile", MAX_PIXELS)), m["OW"]))


def span(m: dict[str, int], jj: int) -> int:
    """Input columns a tile of jj pixels reads (from its first one)."""
    return (jj - 1) * m["SW"] + (m["KW"] - 1) * m["DW"] + 1


def padded(m: dict[str, int]) -> bool:
    return any(m[k] for k in ("PT", "PL", "PB", "PR"))


def zrow_len(m: dict[str, int], sched: dict[str, Any]) -> int:
    """Bytes of x_zp in the scratch buffer: one tile's row span (the reads of a kernel row outside
    the image), 16-byte rounded; 0 without vertical padding."""
    if not (m["PT"] or m["PB"]):
        return 0
    return (span(m, pixels(sched, m)) * m["C"] + 15) // 16 * 16


def _bad(m: dict[str, int], ow: int, jj: int) -> list[list[bool]]:
    """bad[j][kw]: tap column kw of pixel ow + j lies outside the image."""
    return [[not 0 <= (ow + j) * m["SW"] - m["PL"] + kw * m["DW"] < m["W"] for kw in range(m["KW"])] for j in range(jj)]


def columns(m: dict[str, int], jj: int) -> list[dict[str, Any]]:
    """A kernel row of a tile as its input columns in order: each column is loaded once and used
    by every (pixel j, tap kw) that reads it (j * SW + kw * DW == col); `load_w` are the taps whose
    weight vector is first needed there (so at most two weights are live with 2 pixels)."""
    uses: dict[int, list[tuple[int, int]]] = {}
    for j in range(jj):
        for kw in range(m["KW"]):
            uses.setdefault(j * m["SW"] + kw * m["DW"], []).append((j, kw))
    seen: set[int] = set()
    out = []
    for col, lst in sorted(uses.items()):
        new = sorted({kw for _, kw in lst} - seen)
        seen.update(new)
        out.append({"col": col, "uses": lst, "load_w": new})
    return out


def _static(m: dict[str, int], ow: int, jj: int) -> dict[str, Any]:
    bad = _bad(m, ow, jj)
    cols = sorted({j * m["SW"] + kw * m["DW"] for j in range(jj) for kw in range(m["KW"]) if not bad[j][kw]})
    cc = cols[len(cols) // 2] if cols else 0  # the row pointer's column: a valid one, in the middle
    anybad = any(any(r) for r in bad)
    return {
        "kind": "static",
        "ow": ow,
        "jj": jj,
        "bad": bad,
        "cc": cc,
        "any": bool(cols),
        "anybad": anybad,
        "cols": columns(m, jj),
    }


def plan(m: dict[str, int], jj: int) -> list[dict[str, Any]]:
    """The tiles of one output row, in order: static ones (compile-time ow) where a tap column can
    leave the image, and one loop of `count` interior tiles of jj pixels from ow0."""
    OW = m["OW"]
    inside = [not any(any(r) for r in _bad(m, ow, 1)) for ow in range(OW)]
    lo = next((ow for ow in range(OW) if inside[ow]), OW)
    hi = lo
    while hi < OW and inside[hi]:
        hi += 1
    if any(inside[hi:]):  # (interior not one run: cannot happen for a convolution; be safe)
        lo = hi = OW
    tiles: list[dict[str, Any]] = []
    ow = 0
    while ow < lo:  # left border tiles (may reach into the interior)
        w = min(jj, OW - ow)
        tiles.append(_static(m, ow, w))
        ow += w
    count = max(0, (hi - ow) // jj)
    if count:
        cc = span(m, jj) // 2
        tiles.append(
            {
                "kind": "loop",
                "ow": ow,
                "jj": jj,
                "count": count,
                "cc": cc,
                "any": True,
                "anybad": False,
                "bad": [[False] * m["KW"] for _ in range(jj)],
                "cols": columns(m, jj),
            }
        )
        ow += count * jj
    while ow < OW:  # the interior's tail and the right border
        w = min(jj, OW - ow)
        tiles.append(_static(m, ow, w))
        ow += w
    return tiles


def _tz(v: int) -> int:
    return (v & -v).bit_length() - 1 if v else 64


def requant_form(
    mult: list[int], rshifts: list[int], lshift: bool, half_even: bool, accbound: list[int]
) -> tuple[str, list[int], list[int]]:
    """("tflite" | "even_nt" | "even" | "scalar", multipliers, right shifts) (see the module doc)."""
    if lshift:
        return "scalar", mult, rshifts
    if not half_even:
        return ("tflite" if all(0 <= r <= 31 for r in rshifts) else "scalar"), mult, rshifts
    mu, rs = list(mult), list(rshifts)
    if all(1 <= r <= 31 and (mv == 0 or b < (1 << max(0, 30 + r - _tz(mv)))) for mv, r, b in zip(mu, rs, accbound)):
        return "even_nt", mu, rs
    if all(1 <= r <= 30 for r in rs):
        return "even", mu, rs
    return "scalar", mult, rshifts


def _eo(v: list[int], C8: int, pad: int = 0) -> list[int]:
    """Per 8-channel block: the even channels' values, then the odd ones' (`pad` past the channels:
    lanes computed and never stored, given values inside the helpers' domain)."""
    out: list[int] = []
    for b in range(C8):
        blk = [v[8 * b + i] if 8 * b + i < len(v) else pad for i in range(LANES)]
        out += blk[0::2] + blk[1::2]
    return out


def _wrap32(v: int) -> int:
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


def context(
    m: dict[str, int],
    sched: dict[str, Any],
    w: np.ndarray,
    bias: np.ndarray,
    x_zp: int,
    x_range: tuple[int, int],
    mult: list[int],
    rshifts: list[int],
    lshift: bool,
    half_even: bool,
) -> dict[str, Any]:
    """The template variables of mve_dw.c.j2: `dw_w` the weights [C/8][KH*KW][8] (zero past C),
    `dw_tab` per 8-channel block the folded bias, multipliers and right shifts (negated) in even /
    odd order (+ the masks of tinyc_vmbqm_even_r), `dw_rq` the requantization form, `dw_plan` the
    tiles of an output row."""
    C, KK = m["C"], m["KH"] * m["KW"]
    C8 = (C + LANES - 1) // LANES
    wk = np.asarray(w, np.int64).reshape(KK, C)  # [KH*KW][C] (NHWC weights [KH][KW][1][OC])
    wp = np.zeros((C8, KK, LANES), np.int64)
    for b in range(C8):
        n = min(LANES, C - LANES * b)
        wp[b, :, :n] = wk[:, LANES * b : LANES * b + n]
    b64 = np.asarray(bias, np.int64).reshape(-1)
    folded = [_wrap32(int(v)) for v in b64 - int(x_zp) * wk.sum(axis=0)]
    xmax = max(abs(x_range[0] - x_zp), abs(x_range[1] - x_zp))
    accbound = [int(abs(int(b64[c])) + xmax * int(np.abs(wk[:, c]).sum())) for c in range(C)]
    rq, mu, rs = requant_form(mult, rshifts, lshift, half_even, accbound)
    vecs = [_eo(folded, C8), _eo(mu, C8), _eo([-r for r in rs], C8, -1)]
    if rq == "even":
        vecs += [_eo([(1 << r) - 1 for r in rs], C8, 1), _eo([(1 << (r - 1)) - 1 for r in rs], C8)]
    nt = 2 * len(vecs)  # vectors of 4 int32 per block
    tab: list[int] = []
    for b in range(C8):
        for v in vecs:
            tab += v[8 * b : 8 * b + 8]
    jj = pixels(sched, m)
    return {
        "dw_w": ", ".join(str(int(v)) for v in wp.reshape(-1)),
        "dw_w_len": int(wp.size),
        "dw_tab": ", ".join(str(v) for v in tab),
        "dw_tab_len": len(tab),
        "dw_nt": nt,
        "dw_rq": rq,
        "dw_c8": C // LANES,
        "dw_ctail": C % LANES,
        "dw_jj": jj,
        "dw_plan": plan(m, jj),
        "dw_zlen": zrow_len(m, sched),
        "dw_scalar_mul": mult,
        "dw_scalar_rsh": rshifts,
    }
