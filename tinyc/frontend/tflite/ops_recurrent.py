"""Converters of TFLite's stateful operators, UNIDIRECTIONAL_SEQUENCE_LSTM and SVDF (int8 with
TFLite Micro's integer semantics, float32 with its float ones; tinyc/ops/tflm_lstm.py, tflm_svdf.py).

Their state tensors (LSTM hidden and cell state, SVDF activation state) are TFLite variable
tensors, not graph inputs: tinyc keeps them inside the kernel. By default every inference starts
from the state TFLite Micro resets variables to (``MicroInterpreter::Reset()``: the zero point of
an int8 state, 0 otherwise, i.e. the real value 0); that makes the
compiled model a pure function of its inputs. For streaming use, `tinyc compile --keep-state`
(`tinyc.ops.state.set_keep_state`) switches a graph's
recurrent nodes to keeping their state across inferences (static arrays in the generated C),
which is TFLite Micro's behaviour when it is invoked repeatedly without a reset.

The multipliers are derived as TFLite Micro's Prepare derives them: the LSTM's gate fully connected
layers write Q3.12 (scale 2^-12) from float64 products of the float32 scales, its inter-gate
products take the Q0.15 (2^-15) nonlinearity outputs to the cell (int16, power-of-two scale) and
hidden (int8) grids; SVDF's two effective scales are float32 products, as svdf_common.cc computes.
"""

from __future__ import annotations

import numpy as np

from tinyc.frontend.tflite.context import ACTIVATIONS, TflContext, converts
from tinyc.numerics import fixed_point as arith
from tinyc.numerics.tflm_recurrent import SIGMOID_TABLE_UINT16
from tinyc.ops.tflm_svdf import FLOAT_ACTIVATIONS

#: TFLite's LSTM input indices: the state tensors and the variants TFLite Micro's kernel lacks
_LSTM_HIDDEN, _LSTM_CELL = 18, 19
_LSTM_VARIANTS = {
    "peephole (cell-to-gate weights)": (9, 10, 11),
    "projection": (16, 17),
    "layer normalization": (20, 21, 22, 23),
}
_TANH = 4  # ActivationFunctionType.TANH
_INT32_MAX = (1 << 31) - 1


def _qm(ctx: TflContext, real: float, what: str) -> tuple[int, int]:
    try:
        m, s = arith.quantize_multiplier(real)
    except ValueError as exc:
        ctx.unsupported(f"{what} multiplier {real:g}: {exc}")
    return int(m), int(s)


def _scale(ctx: TflContext, i: int, what: str, dtype: str) -> float:
    t = ctx.tensor(i)
    if t.dtype != dtype:
        ctx.unsupported(f"{what} '{t.name}' is {t.dtype} ({dtype} needed)")
    s, _ = ctx.require_per_tensor(t, what)
    return float(np.float32(s))


def _state(ctx: TflContext, i: int, what: str, dtype: str, size: int) -> tuple[float, int]:
    """(scale, zero point) of a variable state input; initial data other than zeros is refused (TFLite Micro
    resets variables itself, so tinyc starts from its reset values, not from data in the file)."""
    if not ctx.has_input(i):
        ctx.unsupported(f"the {what} (input {i}) is missing")
    t = ctx.tensor(i)
    if not t.is_variable:
        ctx.unsupported(f"the {what} '{t.name}' is not a variable tensor")
    if t.data is not None and np.any(t.data != 0):
        ctx.unsupported(f"the {what} '{t.name}' has non-zero initial values (TFLite Micro resets states itself)")
    if t.dtype != dtype:
        ctx.unsupported(f"the {what} '{t.name}' is {t.dtype} ({dtype} needed)")
    if int(np.prod(t.shape)) != size:
        ctx.unsupported(f"the {what} '{t.name}' has shape {list(t.shape)} ({size} values needed)")
    s, zp = ctx.require_per_tensor(t, what)
    return float(np.float32(s)), zp


def _weights(ctx: TflContext, i: int, what: str, shape: tuple[int, int]) -> np.ndarray:
    w = ctx.require_const(i, what)
    t = ctx.tensor(i)
    if t.dtype != "int8" or tuple(w.shape) != shape:
        ctx.unsupported(f"{what} '{t.name}' is {t.dtype} {list(w.shape)} (int8 {list(shape)} needed)")
    ctx.require_per_tensor(t, what)
    if t.zero_point is not None and np.any(t.zero_point != 0):
        ctx.unsupported(f"{what} '{t.name}' has a non-zero zero point (symmetric int8 weights needed)")
    return w.astype(np.int8)


def _bias(ctx: TflContext, i: int, what: str, n: int) -> np.ndarray:
    if not ctx.has_input(i):
        ctx.unsupported(f"{what} (input {i}) is missing (TFLite Micro requires it)")
    b = ctx.require_const(i, what)
    if b.dtype != np.int32 or b.size != n:
        ctx.unsupported(f"{what} is {b.dtype} with {b.size} values (int32 [{n}] needed)")
    return b.astype(np.int32).reshape(n)


def _check_acc(ctx: TflContext, w: np.ndarray, bias: np.ndarray | int, zp: int, what: str) -> None:
    """Refuse weights whose int32 dot products could overflow (undefined in C)."""
    xmax = max(abs(-128 - zp), abs(127 - zp))
    worst = np.abs(np.asarray(bias, np.int64)) + xmax * np.abs(w.astype(np.int64)).sum(axis=-1)
    if int(np.max(worst)) > _INT32_MAX:
        ctx.unsupported(f"the int32 accumulator of the {what} could overflow")


@converts("UNIDIRECTIONAL_SEQUENCE_LSTM")
def unidirectional_sequence_lstm(ctx: TflContext) -> None:
    if ctx.n_inputs != 24:
        ctx.unsupported(f"{ctx.n_inputs} inputs (TFLite Micro's kernel takes the 24-input form)")
    x = ctx.tensor(0)
    if x.dtype not in ("int8", "float32"):
        ctx.unsupported(f"input '{x.name}' is {x.dtype} (int8 or float32 LSTMs)")
    if len(x.shape) != 3:
        ctx.unsupported(f"input shape {list(x.shape)} (3-D needed)")
    for what, idx in _LSTM_VARIANTS.items():
        if any(ctx.has_input(i) for i in idx):
            ctx.unsupported(f"LSTM with {what}: TFLite Micro's LSTM kernel supports the standard LSTM only")
    if not ctx.has_input(1) or not ctx.has_input(5):
        ctx.unsupported("LSTM without an input gate (CIFG): TFLite Micro's LSTM kernel supports the standard LSTM only")
    if int(ctx.opt("fused_activation_function", 0)) != _TANH:
        ctx.unsupported("cell activation other than TANH (TFLite Micro's LSTM gates compute tanh or sigmoid only)")
    time_major = bool(ctx.opt("time_major", False))
    n_b = int(x.shape[1] if time_major else x.shape[0])
    n_i = int(x.shape[2])
    w0 = ctx.require_const(2, "input-to-forget weights")
    n_s = int(w0.shape[0])
    y = ctx.out_tensor(0)
    if y.dtype != x.dtype or tuple(y.shape) != (x.shape[0], x.shape[1], n_s):
        need = [x.shape[0], x.shape[1], n_s]
        ctx.unsupported(f"output '{y.name}' is {y.dtype} {list(y.shape)} ({x.dtype} {need} needed)")
    if x.dtype == "float32":
        _lstm_float(ctx, time_major, n_b, n_i, n_s)
        return
    s_x, zp_x = ctx.require_per_tensor(x, "input")
    s_x = float(np.float32(s_x))
    s_h, zp_h = _state(ctx, _LSTM_HIDDEN, "hidden (output) state", "int8", n_b * n_s)
    s_c, _ = _state(ctx, _LSTM_CELL, "cell state", "int16", n_b * n_s)
    power = int(np.round(np.log2(s_c)))
    if s_c != 2.0**power:
        ctx.unsupported(f"cell state scale {s_c:g} is not a power of two")
    if power > -3:
        ctx.unsupported(f"cell state scale 2^{power} is too coarse (2^-3 or finer needed)")

    w_in = np.stack([_weights(ctx, 1 + g, "input-to-gate weights", (n_s, n_i)) for g in range(4)])
    w_rec = np.stack([_weights(ctx, 5 + g, "recurrent-to-gate weights", (n_s, n_s)) for g in range(4)])
    bias = np.stack([_bias(ctx, 12 + g, "gate bias", n_s) for g in range(4)])
    _check_acc(ctx, w_in, bias, zp_x, "input fully connected layers")
    _check_acc(ctx, w_rec, 0, zp_h, "recurrent fully connected layers")

    gate_scale = 2.0**-12  # Q3.12, the nonlinearities' input
    act_scale = 2.0**-15  # Q0.15, their output
    in_q = [_qm(ctx, s_x * _scale(ctx, 1 + g, "weights", "int8") / gate_scale, "input gate") for g in range(4)]
    rec_q = [_qm(ctx, s_h * _scale(ctx, 5 + g, "weights", "int8") / gate_scale, "recurrent gate") for g in range(4)]
    fc_q = _qm(ctx, act_scale * s_c / s_c, "forget x cell")
    ig_q = _qm(ctx, act_scale * act_scale / s_c, "input x cell gate")
    oh_q = _qm(ctx, act_scale * act_scale / s_h, "output x tanh(cell)")
    clip = float(np.float32(ctx.opt("cell_clip", 0.0) or 0.0))
    q_clip = 0
    if clip > 0:
        q_clip = int(min(max(clip / s_c, -32768.0), 32767.0))
        if q_clip <= 0:
            ctx.unsupported(f"cell clip {clip:g} quantizes to {q_clip} on the cell grid")
    node = ctx.node(
        "TflmLstm",
        [
            ctx.input_name(0),
            ctx.constant("w_in", w_in),
            ctx.constant("w_rec", w_rec),
            ctx.constant("bias", bias),
            ctx.constant("sigmoid_lut", SIGMOID_TABLE_UINT16.astype(np.int32)),
        ],
        [ctx.output(0)],
        time_major=time_major,
        x_zp=zp_x,
        h_zp=zp_h,
        in_mult=[m for m, _ in in_q],
        in_shift=[s for _, s in in_q],
        rec_mult=[m for m, _ in rec_q],
        rec_shift=[s for _, s in rec_q],
        fc_mult=fc_q[0],
        fc_shift=fc_q[1],
        ig_mult=ig_q[0],
        ig_shift=ig_q[1],
        oh_mult=oh_q[0],
        oh_shift=oh_q[1],
        cell_power=power,
        cell_clip=q_clip,
        keep_state=False,
    )
    ctx.add(node)


def _float_const(ctx: TflContext, i: int, what: str, shape: tuple[int, ...]) -> np.ndarray:
    v = ctx.require_const(i, what)
    t = ctx.tensor(i)
    if t.dtype != "float32" or tuple(v.shape) != shape:
        ctx.unsupported(f"{what} '{t.name}' is {t.dtype} {list(v.shape)} (float32 {list(shape)} needed)")
    return v.astype(np.float32)


def _float_state(ctx: TflContext, i: int, what: str, size: int) -> None:
    if not ctx.has_input(i):
        ctx.unsupported(f"the {what} (input {i}) is missing")
    t = ctx.tensor(i)
    if not t.is_variable or t.dtype != "float32" or int(np.prod(t.shape)) != size:
        ctx.unsupported(f"the {what} '{t.name}' must be a float32 variable tensor of {size} values")
    if t.data is not None and np.any(t.data != 0):
        ctx.unsupported(f"the {what} '{t.name}' has non-zero initial values (TFLite Micro resets states to zero)")


def _lstm_float(ctx: TflContext, time_major: bool, n_b: int, n_i: int, n_s: int) -> None:
    """The float32 LSTM (TflmLstmF32): weights, biases and states float32."""
    w_in = np.stack([_float_const(ctx, 1 + g, "input-to-gate weights", (n_s, n_i)) for g in range(4)])
    w_rec = np.stack([_float_const(ctx, 5 + g, "recurrent-to-gate weights", (n_s, n_s)) for g in range(4)])
    if not all(ctx.has_input(12 + g) for g in range(4)):
        ctx.unsupported("a gate bias is missing (TFLite Micro requires all four)")
    bias = np.stack([_float_const(ctx, 12 + g, "gate bias", (n_s,)) for g in range(4)])
    _float_state(ctx, _LSTM_HIDDEN, "hidden (output) state", n_b * n_s)
    _float_state(ctx, _LSTM_CELL, "cell state", n_b * n_s)
    clip = float(np.float32(ctx.opt("cell_clip", 0.0) or 0.0))
    node = ctx.node(
        "TflmLstmF32",
        [ctx.input_name(0), ctx.constant("w_in", w_in), ctx.constant("w_rec", w_rec), ctx.constant("bias", bias)],
        [ctx.output(0)],
        time_major=time_major,
        cell_clip_f=max(clip, 0.0),
        keep_state=False,
    )
    ctx.add(node)


@converts("SVDF")
def svdf(ctx: TflContext) -> None:
    if ctx.n_inputs != 5:
        ctx.unsupported(f"{ctx.n_inputs} inputs (5 needed)")
    x = ctx.tensor(0)
    if x.dtype not in ("int8", "float32"):
        ctx.unsupported(f"input '{x.name}' is {x.dtype} (int8 or float32 SVDF)")
    if len(x.shape) != 2:
        ctx.unsupported(f"input shape {list(x.shape)} (2-D [batch, input] needed)")
    n_b, n_i = (int(d) for d in x.shape)
    rank = int(ctx.opt("rank", 1))
    wf = ctx.require_const(1, "weights_feature")
    wt = ctx.require_const(2, "weights_time")
    wt_t = ctx.tensor(2)
    if x.dtype == "float32":
        _svdf_float(ctx, n_b, n_i, rank, wf, wt)
        return
    if ctx.tensor(1).dtype != "int8" or wf.ndim != 2 or wf.shape[1] != n_i:
        ctx.unsupported(f"weights_feature is {ctx.tensor(1).dtype} {list(wf.shape)} (int8 [filters, {n_i}] needed)")
    n_f = int(wf.shape[0])
    if rank < 1 or n_f % rank:
        ctx.unsupported(f"{n_f} filters do not divide into rank {rank}")
    n_u = n_f // rank
    if wt_t.dtype not in ("int8", "int16") or wt.ndim != 2 or wt.shape[0] != n_f:
        ctx.unsupported(f"weights_time is {wt_t.dtype} {list(wt.shape)} (int16 or int8 [{n_f}, memory] needed)")
    n_m = int(wt.shape[1])
    st_dtype = wt_t.dtype
    s_st, zp_st = _state(ctx, 4, "activation state", st_dtype, n_b * n_f * n_m)
    if tuple(ctx.tensor(4).shape) != (n_b, n_m * n_f):
        ctx.unsupported(f"activation state shape {list(ctx.tensor(4).shape)} ([{n_b}, {n_m * n_f}] needed)")
    bias = _bias(ctx, 3, "bias", n_u)
    y = ctx.out_tensor(0)
    if y.dtype != "int8" or tuple(y.shape) != (n_b, n_u):
        ctx.unsupported(f"output '{y.name}' is {y.dtype} {list(y.shape)} (int8 [{n_b}, {n_u}] needed)")
    s_x, zp_x = ctx.require_per_tensor(x, "input")
    s_y, zp_y = ctx.require_per_tensor(y, "output")
    f32 = np.float32
    s_wf = f32(_scale(ctx, 1, "weights_feature", "int8"))
    s_wt = f32(_scale(ctx, 2, "weights_time", st_dtype))
    b_t = ctx.tensor(3)
    s_b = f32(b_t.scale[0]) if b_t.quantized and b_t.scale is not None else f32(0.0)  # TFLM reads 0 when absent
    if abs(float(s_b) - float(f32(s_st) * s_wt)) >= 1e-5:
        ctx.unsupported(f"bias scale {float(s_b):g} is not state scale x weights_time scale (TFLite Micro requires it)")
    # svdf_common.cc forms both effective scales in float32, then widens them
    eff_1 = float(f32(f32(s_x) * s_wf) / f32(s_st))
    eff_2 = float(f32(f32(s_st) * s_wt) / f32(s_y))
    m1, sh1 = _qm(ctx, eff_1, "feature")
    m2, sh2 = _qm(ctx, eff_2, "output")
    node = ctx.node(
        "TflmSvdf",
        [
            ctx.input_name(0),
            ctx.constant("weights_feature", wf.astype(np.int8)),
            ctx.constant("weights_time", wt.astype(st_dtype)),
            ctx.constant("bias", bias),
        ],
        [ctx.output(0)],
        rank=rank,
        x_zp=zp_x,
        state_zp=zp_st,
        y_zp=zp_y,
        mult_1=m1,
        shift_1=sh1,
        mult_2=m2,
        shift_2=sh2,
        state_dtype=st_dtype,
        keep_state=False,
    )
    ctx.add(node)


def _svdf_float(ctx: TflContext, n_b: int, n_i: int, rank: int, wf: np.ndarray, wt: np.ndarray) -> None:
    """The float32 SVDF (TflmSvdfF32), its fused activation applied as TFLite Micro's float path does."""
    if wf.ndim != 2 or wt.ndim != 2 or wf.shape[1] != n_i or wt.shape[0] != wf.shape[0]:
        ctx.unsupported(f"weights_feature {list(wf.shape)} and weights_time {list(wt.shape)} do not match input {n_i}")
    n_f, n_m = int(wf.shape[0]), int(wt.shape[1])
    if rank < 1 or n_f % rank:
        ctx.unsupported(f"{n_f} filters do not divide into rank {rank}")
    n_u = n_f // rank
    wf = _float_const(ctx, 1, "weights_feature", (n_f, n_i))
    wt = _float_const(ctx, 2, "weights_time", (n_f, n_m))
    bias = _float_const(ctx, 3, "bias", (n_u,)) if ctx.has_input(3) else np.zeros(n_u, np.float32)
    _float_state(ctx, 4, "activation state", n_b * n_f * n_m)
    act = ACTIVATIONS.get(int(ctx.opt("fused_activation_function", 0)), "?")
    if act not in FLOAT_ACTIVATIONS:
        ctx.unsupported(f"fused activation {act} is not supported")
    y = ctx.out_tensor(0)
    if y.dtype != "float32" or tuple(y.shape) != (n_b, n_u):
        ctx.unsupported(f"output '{y.name}' is {y.dtype} {list(y.shape)} (float32 [{n_b}, {n_u}] needed)")
    node = ctx.node(
        "TflmSvdfF32",
        [
            ctx.input_name(0),
            ctx.constant("weights_feature", wf),
            ctx.constant("weights_time", wt),
            ctx.constant("bias", bias),
        ],
        [ctx.output(0)],
        rank=rank,
        act=act,  # not "activation": that attr names a fused tinyc activation node
        keep_state=False,
    )
    ctx.add(node)
