"""The int8 lowering of an ONNX LSTM (tinyc/ops/rnn.py) onto TFLite Micro's integer LSTM.

A standard LSTM (one forward direction, default activations, no peepholes, no clip, no
input_forget, zero initial states, all T steps) becomes a ``TflmLstm`` node (tinyc/ops/tflm_lstm.py):
TFLite Micro's 8x8->16 arithmetic, whose numpy golden model and C kernel are already bit-exact with
TFLite Micro. Nothing of that arithmetic is repeated here; this module only derives its constants
the way TFLite's converter and TFLite Micro's Prepare do (tinyc/frontend/tflite/ops_recurrent.py):

* weights int8 symmetric, one scale per gate matrix (TFLite's LSTM takes per-tensor weights:
  its multipliers are per gate), in TFLite's gate order input, forget, cell, output (ONNX's is
  i, o, f, c); the two ONNX biases are summed into the int32 input-side bias (scale s_x s_w);
* the hidden state (int8) is on Y's calibrated grid (Y_h's when Y is not read), the cell state
  int16 on 2^-11 (|c| < 16, the scale TFLite's converter gives a Keras LSTM's cell);
* gate pre-activations Q3.12, nonlinearities Q0.15, TFLite's multipliers from float64 products of
  the float32 scales.

Y ([T][1][B][H] or [B][T][1][H]) is the kernel's output reshaped; Y_h its last step (a Slice),
requantized when calibration gave Y_h a grid of its own.

An LSTM with the standard cell but reverse, bidirectional or with constant initial states
becomes ``QLSTM`` (tinyc/ops/rnn_q.py): the same constants and arithmetic per direction. A GRU or
an RNN (tanh / relu) becomes ``QGRU`` / ``QRNN`` (same module): the same int16-gate arithmetic,
per-output-channel int8 weights. Any other form stays float (the reason goes to the
quantization report).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.numerics import fixed_point as arith
from tinyc.numerics.qparams import add_qtensor, qparams_of
from tinyc.numerics.tflm_recurrent import SIGMOID_TABLE_UINT16
from tinyc.ops.base import Int8Lowering

CELL_POWER = -11
_ONNX_TO_TFLM = (0, 2, 3, 1)  # ONNX gates i, o, f, c -> TFLite i, f, c, o
_INT32_MAX = (1 << 31) - 1
_DEFAULT_ACTS = ("sigmoid", "tanh", "tanh")


def why_not_tflm(node: Node, graph: Graph) -> str | None:
    """Why the LSTM has no TFLite Micro integer form, or None."""
    a = node.attrs
    if a["direction"] != "forward":
        return f"int8 LSTM: direction {a['direction']} (forward only, as TFLite Micro's kernel)"
    why = _why_not_standard(node)
    if why:
        return why
    for i in (5, 6):
        if len(node.inputs) > i and node.inputs[i]:
            v = graph.constant(node.inputs[i])
            if v is None or np.any(v != 0):
                return "int8 LSTM: non-zero initial states (TFLite Micro starts from zero states)"
    return None


def why_not_qlstm(node: Node, graph: Graph) -> str | None:
    """Why the LSTM has no QLSTM form (TFLite Micro's arithmetic, any direction, constant
    initial states; tinyc/ops/rnn_q.py), or None."""
    why = _why_not_standard(node)
    if why:
        return why
    for i in (5, 6):
        if len(node.inputs) > i and node.inputs[i] and graph.constant(node.inputs[i]) is None:
            return "int8 LSTM: runtime initial states"
    if len(node.inputs) > 6 and node.inputs[6]:
        c0 = graph.constant(node.inputs[6])
        if c0 is not None and np.max(np.abs(c0)) >= 2.0 ** (15 + CELL_POWER):
            return f"int8 LSTM: an initial cell state beyond the int16 cell grid (|c| < {2 ** (15 + CELL_POWER)})"
    return None


def _why_not_standard(node: Node) -> str | None:
    """Why the LSTM is not the standard one TFLite Micro's integer arithmetic computes, or None."""
    a = node.attrs
    if any(tuple(act["name"] for act in per_dir) != _DEFAULT_ACTS for per_dir in a["acts"]):
        return "int8 LSTM: activations other than Sigmoid, Tanh, Tanh"
    checks = [
        (len(node.inputs) > 7 and bool(node.inputs[7]), "peepholes"),
        (a["clip"] is not None, "clip"),
        (a["input_forget"], "input_forget"),
        (a["seq_lens"] is not None, "sequence_lens"),
        (2 in a["outs"], "a Y_c output (the int16 cell state is internal)"),
    ]
    for bad, what in checks:
        if bad:
            return f"int8 LSTM with {what}: TFLite Micro's integer LSTM is the standard LSTM only"
    return None


def _per_gate(w: np.ndarray, n_h: int) -> tuple[np.ndarray, list[float]]:
    """[4H][K] float (ONNX gate order) -> int8 [4][H][K] (TFLite order) and the gate scales."""
    gates = [w[g * n_h : (g + 1) * n_h] for g in _ONNX_TO_TFLM]
    scales = [float(np.float32(max(float(np.max(np.abs(m))), 1e-12) / 127.0)) for m in gates]
    q = [np.clip(np.round(m / np.float32(s)), -127, 127).astype(np.int8) for m, s in zip(gates, scales)]
    return np.stack(q), scales


def _overflows(w: np.ndarray, bias: np.ndarray | int, zp: int) -> bool:
    xmax = max(abs(-128 - zp), abs(127 - zp))
    worst = np.abs(np.asarray(bias, np.int64)) + xmax * np.abs(w.astype(np.int64)).sum(axis=-1)
    return int(np.max(worst)) > _INT32_MAX


def lstm_attrs(s_x: float, zp_x: int, s_h: float, zp_h: int, s_wi: list[float], s_wr: list[float]) -> dict[str, Any]:
    """TflmLstm's multipliers, as TFLite Micro's Prepare derives them (float64 of float32 scales)."""
    gate, act, cell = 2.0**-12, 2.0**-15, 2.0**CELL_POWER
    in_q = [arith.quantize_multiplier(s_x * s / gate) for s in s_wi]
    rec_q = [arith.quantize_multiplier(s_h * s / gate) for s in s_wr]
    fc = arith.quantize_multiplier(act * cell / cell)
    ig = arith.quantize_multiplier(act * act / cell)
    oh = arith.quantize_multiplier(act * act / s_h)
    return {
        "x_zp": zp_x,
        "h_zp": zp_h,
        "in_mult": [int(m) for m, _ in in_q],
        "in_shift": [int(s) for _, s in in_q],
        "rec_mult": [int(m) for m, _ in rec_q],
        "rec_shift": [int(s) for _, s in rec_q],
        "fc_mult": int(fc[0]),
        "fc_shift": int(fc[1]),
        "ig_mult": int(ig[0]),
        "ig_shift": int(ig[1]),
        "oh_mult": int(oh[0]),
        "oh_shift": int(oh[1]),
        "cell_power": CELL_POWER,
        "cell_clip": 0,
        "keep_state": False,
    }


def lower_lstm(node: Node, low: Int8Lowering) -> str | None:
    """Replace the LSTM by TflmLstm (+ Reshape to Y, Slice to Y_h); None when done, else why not."""
    g = low.g
    why = why_not_tflm(node, g)
    if why:
        return lower_qlstm(node, low)
    outs = dict(zip(node.attrs["outs"], node.outputs))
    main = outs.get(0, outs.get(1))
    if main is None or g.tensor(main).quant is None:
        return f"output '{main}' has no int8 grid"
    s_h, zp_h = qparams_of(g, main)
    x_q = low.as_int8(node.inputs[0])
    s_x, zp_x = qparams_of(g, x_q)
    n_h = int(node.attrs["hidden"])
    wt, rt = g.constant(node.inputs[1]), g.constant(node.inputs[2])
    bias = g.constant(node.inputs[3])
    assert wt is not None and rt is not None and bias is not None
    w_in, s_wi = _per_gate(np.asarray(wt[0], np.float32).T, n_h)
    w_rec, s_wr = _per_gate(np.asarray(rt[0], np.float32).T, n_h)
    b = np.stack([np.asarray(bias[0][k * n_h : (k + 1) * n_h], np.float64) for k in _ONNX_TO_TFLM])
    b_q = np.round(b / (np.float64(np.float32(s_x)) * np.asarray(s_wi, np.float64)[:, None]))
    if np.any(np.abs(b_q) > _INT32_MAX):
        return "int8 LSTM: a bias does not fit int32"
    b_q = b_q.astype(np.int32)
    if _overflows(w_in, b_q, zp_x) or _overflows(w_rec, 0, zp_h):
        return "int8 LSTM: the int32 gate accumulator could overflow"
    try:
        attrs = lstm_attrs(float(np.float32(s_x)), zp_x, float(np.float32(s_h)), zp_h, s_wi, s_wr)
    except ValueError as exc:
        return f"int8 LSTM: multiplier out of range: {exc}"
    layout = int(node.attrs["layout"])
    x_shape = g.tensor(node.inputs[0]).shape
    raw = g.unique_name(f"{node.name}_y_q")
    add_qtensor(g, raw, (x_shape[0], x_shape[1], n_h), s_h, zp_h)
    consts = [
        g.add_constant(g.unique_name(f"{node.name}_{k}"), v)
        for k, v in (
            ("w_in_q", w_in),
            ("w_rec_q", w_rec),
            ("bias_q", b_q),
            ("sigmoid_lut", SIGMOID_TABLE_UINT16.astype(np.int32)),
        )
    ]
    src = node.source
    lstm = Node(node.name, "TflmLstm", [x_q, *consts], [raw], dict(attrs, time_major=layout == 0), source=src)
    low.emit(lstm, main, raw)
    if 0 in outs:
        y = outs[0]
        y_q = low.int8_output(y, (s_h, zp_h))
        reshape = Node(g.unique_name(f"{node.name}_y"), "Reshape", [raw], [y_q], {"shape": list(g.tensor(y).shape)})
        low.emit(reshape, y, y_q)
    if 1 in outs:
        _last_step(node, low, raw, outs[1], layout, (s_h, zp_h))
    return None


def _last_step(node: Node, low: Int8Lowering, raw: str, y_h: str, layout: int, grid: tuple[float, int]) -> None:
    """Y_h: the last time step of the kernel's output, on Y_h's own grid (requantized) if it has one."""
    from tinyc.ops.qelementwise import build_qrequantize

    g = low.g
    a, b, n_h = g.tensor(raw).shape
    starts, counts = ([a - 1, 0, 0], [1, b, n_h]) if layout == 0 else ([0, b - 1, 0], [a, 1, n_h])
    want = g.tensor(y_h).quant
    own = want is not None and qparams_of(g, y_h) != grid
    sliced = low.int8_output(y_h, grid)  # [1][B][H] (layout 0) or [B][1][H]: Y_h's shape (D = 1)
    sl = Node(
        g.unique_name(f"{node.name}_y_h"),
        "Slice",
        [raw],
        [sliced],
        {"starts": starts, "steps": [1, 1, 1], "counts": counts},
        source=node.source,
    )
    low.emit(sl, y_h, sliced)
    if own:
        final = low.int8_output(y_h)
        low.emit(
            build_qrequantize(g, g.unique_name(f"{node.name}_y_h_rq"), sliced, final, source=node.source), y_h, final
        )


# -- GRU and RNN: int16-gate kernels of their own (tinyc/ops/rnn_q.py) ---------------------------
_GATE = 2.0**-12  # Q3.12, the int16 gate pre-activations
_QCELLS = {"GRU": ("QGRU", 3), "RNN": ("QRNN", 1)}


def _direction_acts(node: Node) -> list[str] | str:
    """Per direction "gru", "tanh" or "relu" (the kernel's forms), or why the activations have none."""
    acts = []
    for per_dir in node.attrs["acts"]:
        names = tuple(act["name"] for act in per_dir)
        if node.op == "GRU" and names == ("sigmoid", "tanh"):
            acts.append("gru")
        elif node.op == "RNN" and names[0] in ("tanh", "relu"):
            acts.append(names[0])
        else:
            return f"int8 {node.op}: activations {', '.join(names)} (the integer kernel has the default ones{', or Relu' if node.op == 'RNN' else ''})"
    return acts


def why_not_qrecurrent(node: Node, graph: Graph) -> str | None:
    """Why the GRU / RNN has no int8 form, or None."""
    a = node.attrs
    acts = _direction_acts(node)
    if isinstance(acts, str):
        return acts
    if a["clip"] is not None:
        return f"int8 {node.op} with clip"
    if a["seq_lens"] is not None:
        return f"int8 {node.op} with sequence_lens"
    if len(node.inputs) > 5 and node.inputs[5] and graph.constant(node.inputs[5]) is None:
        return f"int8 {node.op}: a runtime initial_h"
    return None


def _per_channel(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float [..][K] -> int8 and float32 scales [..], one per output row (symmetric, +-127)."""
    flat = w.reshape(-1, w.shape[-1])
    q, s = arith.quantize_weights_per_channel(flat, axis=0)
    return np.asarray(q, np.int8).reshape(w.shape), np.asarray(s, np.float32).reshape(w.shape[:-1])


def _qmult(real: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's QuantizeMultiplier of every (float64) real, as int32 arrays; ValueError out of range."""
    if np.any(real <= 0) or np.any(real >= 2.0**31):
        raise ValueError(f"real multipliers in [{float(np.min(real)):.3g}, {float(np.max(real)):.3g}]")
    m, s = arith.quantize_multiplier(real)
    return np.asarray(m, np.int32), np.asarray(s, np.int32)


def _quantized_parts(
    node: Node, g: Graph, s_x: float, zp_x: int, s_h: float, zp_h: int, acts: list[str]
) -> tuple[np.ndarray, ...] | str:
    """(W, R int8 [D][G][H][K], bias, mult, shift int32 [D][2][G][H]) or why not: per-channel
    weights; biases at s_x s_w (x side) and s_h s_r (h side) with the zero points folded in
    (``- zp * row sum``); multipliers to Q3.12, or to h's scale for a Relu RNN direction."""
    n_h, gates = int(node.attrs["hidden"]), _QCELLS[node.op][1]
    wt, rt, bias = (g.constant(node.inputs[i]) for i in (1, 2, 3))
    assert wt is not None and rt is not None and bias is not None
    n_d = wt.shape[0]
    w = np.asarray(wt, np.float32).transpose(0, 2, 1).reshape(n_d, gates, n_h, -1)
    r = np.asarray(rt, np.float32).transpose(0, 2, 1).reshape(n_d, gates, n_h, n_h)
    w_q, s_w = _per_channel(w)
    r_q, s_r = _per_channel(r)
    f64 = np.float64
    b_x = np.asarray(bias, f64).reshape(n_d, gates, n_h) / (f64(s_x) * s_w.astype(f64))
    b_h = np.zeros((n_d, gates, n_h), f64)
    if node.attrs.get("lbr"):
        rbh = g.constant(node.inputs[4])
        assert rbh is not None
        b_h[:, 2] = np.asarray(rbh, f64) / (f64(s_h) * s_r[:, 2].astype(f64))
    b_x = np.round(b_x) - zp_x * w_q.astype(np.int64).sum(-1)
    b_h = np.round(b_h) - zp_h * r_q.astype(np.int64).sum(-1)
    if node.op == "GRU" and not node.attrs["lbr"]:
        b_h[:, 2] = 0  # the n gate's recurrent input is r (h - h_zp): zero point 0, no bias
    if node.op == "GRU":
        bound = np.abs(b_h[:, 2]) + 32768 * np.abs(r_q[:, 2].astype(np.int64)).sum(-1)
        if np.max(bound) > _INT32_MAX:
            return "the int32 accumulator of r * h could overflow"
    xmax = 128 * np.abs(w_q.astype(np.int64)).sum(-1) + np.abs(b_x)
    hmax = 128 * np.abs(r_q.astype(np.int64)).sum(-1) + np.abs(b_h)
    if max(float(np.max(xmax)), float(np.max(hmax))) > _INT32_MAX:
        return "the int32 gate accumulator could overflow"
    bias_q = np.stack([b_x, b_h], axis=1).astype(np.int32)
    to = np.array([_GATE if act != "relu" else s_h for act in acts], f64)[:, None, None]
    real = np.stack([f64(s_x) * s_w.astype(f64) / to, f64(s_h) * s_r.astype(f64) / to], axis=1)
    try:
        mult, shift = _qmult(real)
    except ValueError as exc:
        return f"multiplier out of range: {exc}"
    return w_q, r_q, bias_q, mult, shift


def lower_qrecurrent(node: Node, low: Int8Lowering) -> str | None:
    """Replace the GRU / RNN by QGRU / QRNN (tinyc/ops/rnn_q.py); None when done, else why not.

    h's grid is Y's (Y_h's when Y is not read); Y_h on a grid of its own is requantized."""
    g = low.g
    why = why_not_qrecurrent(node, g)
    if why:
        return why
    acts = _direction_acts(node)
    assert isinstance(acts, list)
    grid = _hidden_grid(node, g, acts)
    if isinstance(grid, str):
        return grid
    s_h, zp_h = grid
    if s_h < 2.0**-15:
        return f"int8 {node.op}: hidden-state scale {s_h:.3g} below 2^-15"
    x_q = low.as_int8(node.inputs[0])
    s_x, zp_x = qparams_of(g, x_q)
    parts = _quantized_parts(node, g, float(np.float32(s_x)), zp_x, s_h, zp_h, acts)
    if isinstance(parts, str):
        return f"int8 {node.op}: {parts}"
    try:
        out_mult, out_shift = _qmult(np.array([2.0**-15 / s_h]))
    except ValueError as exc:
        return f"int8 {node.op}: multiplier out of range: {exc}"
    h0 = ""
    if len(node.inputs) > 5 and node.inputs[5]:
        v = g.constant(node.inputs[5])
        assert v is not None
        h0_q = np.clip(np.round(np.asarray(v, np.float64) / s_h) + zp_h, -128, 127).astype(np.int8)
        h0 = g.add_constant(g.unique_name(f"{node.name}_h0_q"), h0_q)
    names = ("w_q", "r_q", "bias_q", "mult", "shift")
    consts = [g.add_constant(g.unique_name(f"{node.name}_{k}"), v) for k, v in zip(names, parts)]
    lut = g.add_constant(g.unique_name(f"{node.name}_sigmoid_lut"), SIGMOID_TABLE_UINT16.astype(np.int32))
    attrs = {
        "outs": list(node.attrs["outs"]),
        "direction": node.attrs["direction"],
        "layout": int(node.attrs["layout"]),
        "hidden": int(node.attrs["hidden"]),
        "acts": acts,
        "lbr": bool(node.attrs.get("lbr", False)),
        "x_zp": int(zp_x),
        "h_zp": int(zp_h),
        "out_mult": int(out_mult[0]),
        "out_shift": int(out_shift[0]),
    }
    raw = [low.int8_output(o, (s_h, zp_h)) for o in node.outputs]
    op = _QCELLS[node.op][0]
    low.emit(Node(node.name, op, [x_q, *consts, h0, lut], raw, attrs, source=node.source), node.outputs[0], raw[0])
    for k, (out, q_out) in enumerate(zip(node.outputs, raw)):
        _output(node, low, out, q_out, (s_h, zp_h), k)
    return None


def _hidden_grid(node: Node, g: Graph, acts: list[str]) -> tuple[float, int] | str:
    """h's int8 grid. Y's calibrated one when Y is read (it covers every step's state); else a
    tanh / GRU state, which stays in [-1, 1], gets the symmetric grid of that range, since Y_h's
    calibrated range (the final states only) may not cover the states on the way; a Relu RNN's
    gets Y_h's grid. Widened, when a constant initial state lies outside, to cover it too."""
    outs = dict(zip(node.attrs["outs"], node.outputs))
    main = outs.get(0, outs.get(1))
    if main is None or g.tensor(main).quant is None:
        return f"output '{main}' has no int8 grid"
    s_h, zp_h = qparams_of(g, main)
    lo, hi = (-128 - zp_h) * s_h, (127 - zp_h) * s_h
    if 0 not in outs and "relu" not in acts:
        lo, hi = -1.0, 1.0
    h0 = g.constant(node.inputs[5]) if len(node.inputs) > 5 and node.inputs[5] else None
    if h0 is not None and (float(np.min(h0)) < lo or float(np.max(h0)) > hi):
        lo, hi = min(lo, float(np.min(h0))), max(hi, float(np.max(h0)))
    elif 0 in outs or "relu" in acts:
        return float(np.float32(s_h)), zp_h
    s, zp = arith.choose_qparams(np.float32(lo), np.float32(hi))
    return float(np.float32(s)), int(zp)


def _output(node: Node, low: Int8Lowering, out: str, raw: str, grid: tuple[float, int], k: int) -> None:
    """Output `out` of the kernel (`raw`, on h's grid): requantized to its own calibrated grid
    when it has another one; else, past the first, the kernel's tensor as is (an alias Reshape)."""
    from tinyc.ops.qelementwise import build_qrequantize

    g = low.g
    if g.tensor(out).quant is not None and qparams_of(g, out) != grid:
        final = low.int8_output(out)
        low.emit(
            build_qrequantize(g, g.unique_name(f"{node.name}_out{k}_rq"), raw, final, source=node.source), out, final
        )
    elif k > 0:
        final = low.int8_output(out, grid)
        shape = list(g.tensor(out).shape)
        low.emit(Node(g.unique_name(f"{node.name}_out{k}"), "Reshape", [raw], [final], {"shape": shape}), out, final)


def lower_qlstm(node: Node, low: Int8Lowering) -> str | None:
    """An LSTM outside TFLite Micro's kernel (reverse, bidirectional, constant initial states) as
    QLSTM: per direction the constants lower_lstm derives, h on the grid of _hidden_grid, the
    initial cell on the cell's 2^-11 grid."""
    g = low.g
    why = why_not_qlstm(node, g)
    if why:
        return why
    grid = _hidden_grid(node, g, ["lstm"])
    if isinstance(grid, str):
        return grid
    s_h, zp_h = grid
    x_q = low.as_int8(node.inputs[0])
    s_x, zp_x = qparams_of(g, x_q)
    s_x = float(np.float32(s_x))
    n_h = int(node.attrs["hidden"])
    wt, rt, bias = (g.constant(node.inputs[i]) for i in (1, 2, 3))
    assert wt is not None and rt is not None and bias is not None
    ws: list[np.ndarray] = []
    rs: list[np.ndarray] = []
    bs: list[np.ndarray] = []
    per_dir: list[dict[str, Any]] = []
    for d in range(wt.shape[0]):
        w_in, s_wi = _per_gate(np.asarray(wt[d], np.float32).T, n_h)
        w_rec, s_wr = _per_gate(np.asarray(rt[d], np.float32).T, n_h)
        b = np.stack([np.asarray(bias[d][k * n_h : (k + 1) * n_h], np.float64) for k in _ONNX_TO_TFLM])
        b_q = np.round(b / (np.float64(s_x) * np.asarray(s_wi, np.float64)[:, None]))
        if np.any(np.abs(b_q) > _INT32_MAX):
            return "int8 LSTM: a bias does not fit int32"
        b_q = b_q.astype(np.int32)
        if _overflows(w_in, b_q, zp_x) or _overflows(w_rec, 0, zp_h):
            return "int8 LSTM: the int32 gate accumulator could overflow"
        try:
            attrs = lstm_attrs(s_x, zp_x, s_h, zp_h, s_wi, s_wr)
        except ValueError as exc:
            return f"int8 LSTM: multiplier out of range: {exc}"
        ws, rs, bs = ws + [w_in], rs + [w_rec], bs + [b_q]
        per_dir.append({k: v for k, v in attrs.items() if k not in ("x_zp", "h_zp", "keep_state")})
    states = []
    for i, what in ((5, "h0_q"), (6, "c0_q")):
        v = g.constant(node.inputs[i]) if len(node.inputs) > i and node.inputs[i] else None
        if v is None:
            states.append("")
            continue
        v = np.asarray(v, np.float64)
        q = np.round(v / s_h) + zp_h if i == 5 else np.round(v * 2.0**-CELL_POWER)
        lim = (-128, 127) if i == 5 else (-32768, 32767)
        states.append(
            g.add_constant(
                g.unique_name(f"{node.name}_{what}"), np.clip(q, *lim).astype(np.int8 if i == 5 else np.int16)
            )
        )
    consts = [
        g.add_constant(g.unique_name(f"{node.name}_{k}"), np.stack(v))
        for k, v in (("w_in_q", ws), ("w_rec_q", rs), ("bias_q", bs))
    ]
    lut = g.add_constant(g.unique_name(f"{node.name}_sigmoid_lut"), SIGMOID_TABLE_UINT16.astype(np.int32))
    attrs = {
        "outs": list(node.attrs["outs"]),
        "direction": node.attrs["direction"],
        "layout": int(node.attrs["layout"]),
        "hidden": n_h,
        "acts": ["lstm"] * len(ws),
        "lbr": False,
        "x_zp": int(zp_x),
        "h_zp": int(zp_h),
        "per_dir": per_dir,
    }
    raw = [low.int8_output(o, (s_h, zp_h)) for o in node.outputs]
    inputs = [x_q, *consts, "", "", states[0], lut, states[1]]
    low.emit(Node(node.name, "QLSTM", inputs, raw, attrs, source=node.source), node.outputs[0], raw[0])
    for k, (out, q_out) in enumerate(zip(node.outputs, raw)):
        _output(node, low, out, q_out, (s_h, zp_h), k)
    return None
