"""Integer building blocks of TFLite Micro's recurrent kernels (int8 LSTM, SVDF), in numpy.

TFLite Micro's 8x8->16 LSTM (``lstm_eval.h``) runs its gates on int16: the fully connected outputs
are Q3.12, the gate nonlinearities give Q0.15, and sigmoid / tanh are not gemmlowp's polynomials but
TFLite's interpolated look-up table (``reference_integer_ops::Logistic`` / ``Tanh`` for int16): a
256-entry table of sigmoid(i / 24) in unsigned 0.16 fixed point, read at |x| with the low bits of
|x| interpolating linearly between two entries, mirrored for negative x (tanh uses the same table
through tanh(x) = 2 sigmoid(2x) - 1). The table values are data of that implementation (they are
not exactly ``round(65536 sigmoid(i / 24))``), so they are listed here as TFLite ships them; the C
kernels receive them as a constant input (one source of truth).

All functions take and return int64 arrays holding the exact integers the C code computes.
"""

from __future__ import annotations

import numpy as np


#: TFLite's sigmoid_table_uint16: sigmoid(i / 24) in 0.16 fixed point, i = 0..255.
SIGMOID_TABLE_UINT16 = np.array(
    [
        32768,
        33451,
        34133,
        34813,
        35493,
        36169,
        36843,
        37513,
        38180,
        38841,
        39498,
        40149,
        40794,
        41432,
        42064,
        42688,
        43304,
        43912,
        44511,
        45102,
        45683,
        46255,
        46817,
        47369,
        47911,
        48443,
        48964,
        49475,
        49975,
        50464,
        50942,
        51409,
        51865,
        52311,
        52745,
        53169,
        53581,
        53983,
        54374,
        54755,
        55125,
        55485,
        55834,
        56174,
        56503,
        56823,
        57133,
        57433,
        57724,
        58007,
        58280,
        58544,
        58800,
        59048,
        59288,
        59519,
        59743,
        59959,
        60168,
        60370,
        60565,
        60753,
        60935,
        61110,
        61279,
        61441,
        61599,
        61750,
        61896,
        62036,
        62172,
        62302,
        62428,
        62549,
        62666,
        62778,
        62886,
        62990,
        63090,
        63186,
        63279,
        63368,
        63454,
        63536,
        63615,
        63691,
        63765,
        63835,
        63903,
        63968,
        64030,
        64090,
        64148,
        64204,
        64257,
        64308,
        64357,
        64405,
        64450,
        64494,
        64536,
        64576,
        64614,
        64652,
        64687,
        64721,
        64754,
        64786,
        64816,
        64845,
        64873,
        64900,
        64926,
        64950,
        64974,
        64997,
        65019,
        65039,
        65060,
        65079,
        65097,
        65115,
        65132,
        65149,
        65164,
        65179,
        65194,
        65208,
        65221,
        65234,
        65246,
        65258,
        65269,
        65280,
        65291,
        65301,
        65310,
        65319,
        65328,
        65337,
        65345,
        65352,
        65360,
        65367,
        65374,
        65381,
        65387,
        65393,
        65399,
        65404,
        65410,
        65415,
        65420,
        65425,
        65429,
        65433,
        65438,
        65442,
        65445,
        65449,
        65453,
        65456,
        65459,
        65462,
        65465,
        65468,
        65471,
        65474,
        65476,
        65479,
        65481,
        65483,
        65485,
        65488,
        65489,
        65491,
        65493,
        65495,
        65497,
        65498,
        65500,
        65501,
        65503,
        65504,
        65505,
        65507,
        65508,
        65509,
        65510,
        65511,
        65512,
        65513,
        65514,
        65515,
        65516,
        65517,
        65517,
        65518,
        65519,
        65520,
        65520,
        65521,
        65522,
        65522,
        65523,
        65523,
        65524,
        65524,
        65525,
        65525,
        65526,
        65526,
        65526,
        65527,
        65527,
        65528,
        65528,
        65528,
        65529,
        65529,
        65529,
        65529,
        65530,
        65530,
        65530,
        65530,
        65531,
        65531,
        65531,
        65531,
        65531,
        65532,
        65532,
        65532,
        65532,
        65532,
        65532,
        65533,
        65533,
        65533,
        65533,
        65533,
        65533,
        65533,
        65533,
        65534,
        65534,
        65534,
        65534,
        65534,
        65534,
        65534,
        65534,
        65534,
        65534,
        65535,
    ],
    dtype=np.int64,
)


def sat16(x: np.ndarray) -> np.ndarray:
    """Clamp to the int16 range (TFLM's saturating int16 add and int16 output clamps)."""
    return np.clip(np.asarray(x, np.int64), -32768, 32767)


def to_int16(x: np.ndarray) -> np.ndarray:
    """The C cast ``(int16_t)`` of an int32 value: two's complement wrap."""
    return np.asarray(x, np.int64).astype(np.int16).astype(np.int64)


def sigmoid_int16(x: np.ndarray) -> np.ndarray:
    """TFLite's int16 Logistic with input_multiplier 0 and left shift 0 (Q3.12 in, Q0.15 out), as
    the LSTM calls it: v = 3x, so |v| / 2^9 = 24 |x_real| indexes the 1/24-step table; the low 9
    bits interpolate, 2^25 - r mirrors negative inputs, and the result is r / 2^10."""
    v = np.asarray(x, np.int64) * 3
    a = np.abs(v)
    uh = a >> 9
    idx = np.minimum(uh, 254)
    ua = SIGMOID_TABLE_UINT16[idx]
    ub = SIGMOID_TABLE_UINT16[idx + 1]
    r = np.where(uh >= 255, 0x7FFF << 10, (ua << 9) + (a & 0x1FF) * (ub - ua))
    r = np.where(v >= 0, r + (1 << 9), (1 << 25) - r + (1 << 9) - 1)
    return to_int16(r >> 10)


def tanh_params(scale_power: int) -> tuple[int, int]:
    """(input_multiplier, input_left_shift) the LSTM passes to TFLite's int16 Tanh for an input of
    scale 2^scale_power: left shift 15 + power - 3, or a multiplier of 3 and a right shift when
    that is negative; a zero multiplier means 3 << shift with no shift (the power-of-two case)."""
    shift = 15 + scale_power - 3
    mult = 0
    if shift < 0:
        shift = -shift
        mult = 3
    if mult == 0:
        return 3 << shift, 0
    return mult, shift


def tanh_int16(x: np.ndarray, scale_power: int) -> np.ndarray:
    """TFLite's int16 Tanh as the LSTM calls it for an input of scale 2^scale_power (Q0.15 out):
    the rescaled input's |v| >> 8 picks the table entry, the low 8 bits interpolate."""
    mult, shift = tanh_params(scale_power)
    rnd = (1 << (shift - 1)) if shift > 0 else 0
    v = (np.asarray(x, np.int64) * mult + rnd) >> shift
    a = np.abs(v)
    uh = a >> 8
    idx = np.minimum(uh, 254)
    ua = SIGMOID_TABLE_UINT16[idx]
    ub = SIGMOID_TABLE_UINT16[idx + 1]
    r = np.where(uh >= 255, 0xFFFF << 8, (ua << 8) + (a & 0xFF) * (ub - ua))
    r = np.where(v >= 0, r - (1 << 23) + (1 << 7), -r + (1 << 23) + (1 << 7) - 1)
    return to_int16(r >> 8)
