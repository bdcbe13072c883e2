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
requantized when calibration gave Y_h a grid of its own. A GRU, an RNN, or an LSTM outside that
form stays float (the reason goes to the quantization report).
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
    if tuple(act["name"] for act in a["acts"][0]) != _DEFAULT_ACTS:
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
    for i in (5, 6):
        if len(node.inputs) > i and node.inputs[i]:
            v = graph.constant(node.inputs[i])
            if v is None or np.any(v != 0):
                return "int8 LSTM: non-zero initial states (TFLite Micro starts from zero states)"
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
        return why
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
