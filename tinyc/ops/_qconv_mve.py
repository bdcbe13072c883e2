"""Compile-time facts of the Helium (MVE) dense QConv kernel (templates/kernels/qconv/mve_dense.j2).

The kernel is CMSIS-NN's matrix-multiply shape (arm_nn_mat_mult_nt_t_s8: 4 LHS rows x 1 RHS row),
generated per layer: a group of up to 4 output pixels is gathered once, then every output channel
of the tile is 4 VMLADAV(A) sums per 16 inputs (one weight load serves the 4 pixels), moved into one
vector and requantized with the channel's scalar multiplier / shift (VQRDMULH / VQDMULH with a
scalar operand), clamped and scattered to the 4 pixels with one VSTRB.32. Why this shape:
VMLADAVA's accumulator is an even core register, so only ~6 scalar accumulators fit, and the
scalar requantization (~20 instructions per output) was the largest cost of the older
channels-x-pixels blocks; here it is ~4 instructions per output.

The inputs of a pixel are one contiguous run of R = KH * KW * ICG values: the input itself for
1x1 taps without padding ("ptr": a pointer per pixel), else gathered ("col": im2col into the
scratch buffer, kernel rows copied whole where the taps are contiguous). Weights are repacked
[OC][KH][KW][ICG], each channel's run zero-padded to RLP (a multiple of 16) so that every weight
load is whole; a gathered run is padded with x_zp (products with zero weights).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: pixels per block (4 scalar accumulators, one VSTRB.32 scatter per channel)
MVE_DENSE_PIXELS = 4


def channel_tile(ocg: int) -> int:
    """The channel tile: all of a group's channels, at most 64 (the largest oc_tile knob value)."""
    return min(ocg, 64)


def padded(m: dict[str, int]) -> bool:
    return any(m[k] for k in ("PT", "PL", "PB", "PR"))


def mode(m: dict[str, int]) -> str:
    """ "ptr" (1x1 taps, no padding: a pixel's ICG inputs are contiguous in the input) or "col"."""
    return "ptr" if m["KH"] * m["KW"] == 1 and not padded(m) else "col"


def rowcopy(m: dict[str, int]) -> bool:
    """A kernel row's KW taps are KW * C contiguous inputs (one group, no dilation along W)."""
    return m["G"] == 1 and m["DW"] == 1


def run_lengths(m: dict[str, int]) -> tuple[int, int]:
    """(R, RLP): a pixel's run of inputs and the same rounded up to whole 16-byte vectors."""
    r = m["KH"] * m["KW"] * m["ICG"]
    return r, (r + 15) // 16 * 16


def _zrow(m: dict[str, int]) -> int:
    """Bytes of x_zp in front of the gathered runs (the padding source), 16-byte rounded."""
    if not padded(m):
        return 0
    n = m["KW"] * m["C"] if rowcopy(m) else m["ICG"]
    return (n + 15) // 16 * 16


def patches(m: dict[str, int], sched: dict[str, Any]) -> int:
    pixels = m["N"] * m["OH"] * m["OW"]
    return max(1, min(MVE_DENSE_PIXELS, int(sched["px_tile"]), pixels))


def scratch_layout(m: dict[str, int], sched: dict[str, Any]) -> tuple[int, int, int]:
    """QConv._scratch_layout's (wide weight bytes, x_zp row offset, its length) for this kernel:
    the x_zp row, then one gathered run per pixel of a block (all filled with x_zp per call)."""
    if mode(m) == "ptr":
        return 0, 0, 0
    return 0, 0, _zrow(m) + patches(m, sched) * run_lengths(m)[1]


def weights(w: np.ndarray, m: dict[str, int]) -> np.ndarray:
    """[KH*KW*ICG, OC] weights as [OC][RLP]: a channel's run, zero-padded to whole vectors."""
    r, rlp = run_lengths(m)
    runs = np.zeros((m["OC"], rlp), dtype=w.dtype)
    runs[:, :r] = np.asarray(w).reshape(r, m["OC"]).T
    return runs.reshape(-1)


def _literals(values: Any, per_line: int = 24) -> str:
    items = [str(int(v)) for v in np.asarray(values).reshape(-1)]
    return ",\n        ".join(", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line))


def requant_mode(rshifts: list[int], lshift: bool, half_even: bool, multipliers: list[int] | None = None) -> str:
    """How the 4 sums of a channel are requantized (compile-time, per layer): "tflite_n" (TFLite's
    rounding, every r in [1, 31]: VQRDMULH + VRSHL with scalar operands), "tflite_v" (some r == 0:
    the general tinyc_vmbqm_r), "even_n" (half to even, every r in [1, 31]: tinyc_vmbqm_even_r_s),
    else "scalar" (tinyc_q.h per output: left shifts; half-even with r == 0). A channel whose
    multiplier is 0 (TFLite flushes M < 2^-32 to (0, 0)) gives 0 with any right shift: it counts
    as r = 1 (`table_shifts`), so dead channels do not force the scalar path."""
    if lshift:
        return "scalar"
    rs = table_shifts(rshifts, multipliers)
    if all(1 <= r <= 31 for r in rs):
        return "even_n" if half_even else "tflite_n"
    return "scalar" if half_even else ("tflite_v" if all(0 <= r <= 31 for r in rs) else "scalar")


def table_shifts(rshifts: list[int], multipliers: list[int] | None) -> list[int]:
    """The right shifts the vector requantization uses: 1 for channels with multiplier 0."""
    if multipliers is None:
        return list(rshifts)
    return [1 if m == 0 and r == 0 else r for r, m in zip(rshifts, multipliers)]


def out_stage(int8_out: bool, act_min: int, act_max: int) -> str:
    """ "s8" / "u8": the activation clamp is the whole output range (saturating shifts, no clamp
    constants), else "clamp" (VMAX / VMIN)."""
    if int8_out and (act_min, act_max) == (-128, 127):
        return "s8"
    if not int8_out and (act_min, act_max) == (0, 255):
        return "u8"
    return "clamp"


def context(
    m: dict[str, int],
    sched: dict[str, Any],
    w: np.ndarray,
    bias: list[int] | None,
    multipliers: list[int],
    rshifts: list[int],
    lshift: bool,
    half_even: bool,
    int8_out: bool,
    act_min: int,
    act_max: int,
) -> dict[str, Any]:
    """The template variables of mve_dense.j2 (wr / wr_len replace the [OC][KH][KW][ICG] runs; md_q:
    per channel the folded bias, multiplier and -r)."""
    r, rlp = run_lengths(m)
    wr = weights(w, m)
    rq = requant_mode(rshifts, lshift, half_even, multipliers)
    if bias is None:  # (the "mve" form exists only where the zero point folds into the bias)
        raise ValueError("the MVE dense kernel needs the folded bias")
    k = 3
    q = [v for c, rs in enumerate(table_shifts(rshifts, multipliers)) for v in (bias[c], multipliers[c], -rs)]
    return dict(
        md_q=_literals(q),
        md_q_len=len(q),
        md_k=k,
        md_mode=mode(m),
        md_rowcopy=rowcopy(m),
        md_r=r,
        md_rlp=rlp,
        md_zr=_zrow(m),
        md_rq=rq,
        md_out=out_stage(int8_out, act_min, act_max),
        wr=_literals(wr),
        wr_len=int(wr.size),
    )
