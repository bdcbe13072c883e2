"""int8 GRU and RNN with int16 gates, TFLite Micro's LSTM arithmetic applied to them (IR ops
``QGRU``, ``QRNN``; built by the int8 lowering in tinyc/ops/rnn_int8.py).

TFLite Micro has no integer GRU or vanilla RNN; these kernels run them the way its int8 LSTM runs
its gates (tinyc/ops/tflm_lstm.py): x and h int8, weights int8 with one scale per output channel,
int32 accumulators, each fully connected part requantized to int16 Q3.12 with a fixed-point
multiplier (MBQM, TFLite's MultiplyByQuantizedMultiplier) and saturated, the gate sum saturated,
then TFLite's int16 sigmoid / tanh (Q0.15 out; one implementation, templates/kernels/tflm_gates.j2,
and its numpy twin tinyc/numerics/tflm_recurrent.py). Zero points are folded into the int32 biases
at lowering (``x_zp`` times each weight row's sum), so the kernel's dot products are raw int8.
Per direction, batch row and step (ONNX gate order z, r, h; ``fc(acc) = sat16(MBQM(acc))``)::

    z, r = sigmoid16(sat16(fc(W_g x + bx_g) + fc(R_g h + bh_g)))            g = z, r
    lbr 0: u = rdbpot(r (h - h_zp), 15)       (r*h on h's scale, zero point 0)
           n = tanh16(sat16(fc(W_n x + bx_n) + fc(R_n u)))
    lbr 1: n = tanh16(sat16(fc(W_n x + bx_n) + rdbpot(r fc(R_n h + bh_n), 15)))
    h'     = clamp8(rdbpot(z (h - h_zp) + MBQM((2^15 - z) n, out), 15) + h_zp)

``out`` is 2^-15 / s_h: (1 - z) n (Q0.30) in units of s_h 2^-15, the scale of z (h - h_zp); the
one rounding shift puts the sum on h's int8 grid. The RNN (tanh): h' = clamp8(MBQM(tanh16(sat16(
fc(W x + bx) + fc(R h + bh))), out) + h_zp); with relu the two accumulators go straight to h's
scale (the multipliers are s_x s_w / s_h and s_r), are clamped to the int16 range, summed and
h' = clamp8(max(v, 0) + h_zp). The states live in the kernel's arena scratch; the time loop is a
C loop; constant initial states are int8 constants on h's grid.

``QLSTM`` is TFLite Micro's LSTM step itself (tflm_lstm.lstm_golden, per-gate weight scales) in
the forms TFLite Micro's kernel lacks: reverse and bidirectional, constant initial h and c.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.numerics import fixed_point as arith
from tinyc.numerics import tflm_recurrent as rq
from tinyc.numerics.gemmlowp import rdbpot, wrap32
from tinyc.numerics.tflm_unary import mbqm
from tinyc.ops.base import OpDef, OutputType, register_instance


def _fc(acc: np.ndarray, mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """sat16(MBQM(acc)) with one multiplier per output channel (the last axis)."""
    return rq.sat16(np.asarray(arith.multiply_by_quantized_multiplier(wrap32(acc), mult, shift), np.int64))


def _gate(
    x: np.ndarray, h: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray, m: np.ndarray, s: np.ndarray
) -> np.ndarray:
    """sat16(fc(W x + bx) + fc(R h + bh)) for one gate: the int16 Q3.12 pre-activation [B][H]."""
    return rq.sat16(_fc(x @ w.T + b[0], m[0], s[0]) + _fc(h @ r.T + b[1], m[1], s[1]))


def gru_step(a: dict[str, Any], x: np.ndarray, h: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    """One GRU step of one direction on all batch rows: int8 x, h [B][*] (int64) -> the new h."""
    w, r, b, m, s = p["w"], p["r"], p["b"], p["m"], p["s"]
    z, rg = (rq.sigmoid_int16(_gate(x, h, w[g], r[g], b[:, g], m[:, g], s[:, g])) for g in (0, 1))
    hs = h - a["h_zp"]
    ax = _fc(x @ w[2].T + b[0, 2], m[0, 2], s[0, 2])
    if a["lbr"]:
        hn = _fc(h @ r[2].T + b[1, 2], m[1, 2], s[1, 2])
        pre = rq.sat16(ax + rdbpot(rg * hn, 15))
    else:
        u = rdbpot(rg * hs, 15)
        pre = rq.sat16(ax + _fc(u @ r[2].T + b[1, 2], m[1, 2], s[1, 2]))
    n = rq.tanh_int16(pre, -12)
    acc = z * hs + mbqm((32768 - z) * n, a["out_mult"], a["out_shift"])
    return np.clip(rdbpot(acc, 15) + a["h_zp"], -128, 127)


def rnn_step(a: dict[str, Any], act: str, x: np.ndarray, h: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    """One RNN step (tanh or relu) of one direction on all batch rows -> the new h."""
    w, r, b, m, s = p["w"][0], p["r"][0], p["b"][:, 0], p["m"][:, 0], p["s"][:, 0]
    if act == "tanh":
        n = rq.tanh_int16(_gate(x, h, w, r, b, m, s), -12)
        return np.clip(mbqm(n, a["out_mult"], a["out_shift"]) + a["h_zp"], -128, 127)
    v = _fc(x @ w.T + b[0], m[0], s[0]) + _fc(h @ r.T + b[1], m[1], s[1])
    return np.clip(np.maximum(v, 0) + a["h_zp"], -128, 127)


def _align16(n: int) -> int:
    return (n + 15) // 16 * 16


class QRecurrent(OpDef):
    """inputs: x int8 ([T][B][I], layout 1 [B][T][I]); W int8 [D][G][H][I]; R int8 [D][G][H][H];
    bias int32 [D][2][G][H] (x side, h side; zero points folded in); mult, shift int32 [D][2][G][H]
    (x side, h side); h0 int8 [D][B][H] or "" (h_zp); the sigmoid table int32 [256].
    outputs: those of Y, Y_h the model reads (attr outs), on h's grid. attrs: direction, layout,
    hidden, acts (per direction: "gru", "tanh" or "relu"), lbr, x_zp, h_zp, out_mult, out_shift."""

    template = "rnn_q.c.j2"
    dtypes = ("int8",)

    def __init__(self, op: str, gates: int) -> None:
        self.op = op
        self.gates = gates

    def sizes(self, node: Node, graph: Graph) -> tuple[int, int, int, int, int]:
        """(D, T, B, I, H)."""
        x0, x1, n_i = graph.tensor(node.inputs[0]).shape
        n_t, n_b = (x1, x0) if node.attrs["layout"] else (x0, x1)
        return len(node.attrs["acts"]), int(n_t), int(n_b), int(n_i), int(node.attrs["hidden"])

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        n_d, n_t, n_b, _, n_h = self.sizes(node, graph)
        y, st = (
            ((n_b, n_t, n_d, n_h), (n_b, n_d, n_h)) if node.attrs["layout"] else ((n_t, n_d, n_b, n_h), (n_d, n_b, n_h))
        )
        return [[(y, "int8"), (st, "int8")][k] for k in node.attrs["outs"]]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        n_d, n_t, n_b, _, n_h = self.sizes(node, graph)
        x = np.asarray(inputs[0], np.int64)
        if a["layout"]:
            x = x.transpose(1, 0, 2)
        y = np.zeros((n_t, n_d, n_b, n_h), np.int64)
        yh = np.zeros((n_d, n_b, n_h), np.int64)
        for d in range(n_d):
            p = {k: np.asarray(inputs[i][d], np.int64) for k, i in (("w", 1), ("r", 2), ("b", 3), ("m", 4), ("s", 5))}
            h = np.full((n_b, n_h), a["h_zp"], np.int64) if not node.inputs[6] else np.asarray(inputs[6][d], np.int64)
            rev = a["direction"] == "reverse" or d == 1
            for step in range(n_t):
                t = n_t - 1 - step if rev else step
                act = a["acts"][d]
                h = gru_step(a, x[t], h, p) if act == "gru" else rnn_step(a, act, x[t], h, p)
                y[t, d] = h
            yh[d] = h
        if a["layout"]:
            y, yh = y.transpose(2, 0, 1, 3), yh.transpose(1, 0, 2)
        outs = [np.ascontiguousarray(v.astype(np.int8)) for v in (y, yh)]
        return [outs[k] for k in a["outs"]]

    def macs(self, node: Node, graph: Graph) -> int:
        n_d, n_t, n_b, n_i, n_h = self.sizes(node, graph)
        return n_d * n_t * n_b * self.gates * n_h * (n_i + n_h)

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        """z and r (or r * h) int32 [H] each, h and the new h int8 [H] each, then r * h as int16
        [H] in the order the DSP dot product reads it."""
        n_h = int(node.attrs["hidden"])
        return _align16(12 * n_h)

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a = node.attrs
        n_d, n_t, n_b, n_i, n_h = self.sizes(node, graph)
        if a["layout"]:  # x [B][T][I]; y [B][T][D][H]; y_h [B][D][H]
            xs, ys, hs = (n_i, n_t * n_i), (n_d * n_h, n_h, n_t * n_d * n_h), (n_h, n_d * n_h)
        else:  # x [T][B][I]; y [T][D][B][H]; y_h [D][B][H]
            xs, ys, hs = (n_b * n_i, n_i), (n_d * n_b * n_h, n_b * n_h, n_h), (n_b * n_h, n_h)
        return {
            "D": n_d,
            "T": n_t,
            "B": n_b,
            "I": n_i,
            "H": n_h,
            "G": self.gates,
            "dirs": [{"d": d, "rev": a["direction"] == "reverse" or d == 1, "act": a["acts"][d]} for d in range(n_d)],
            "x_st": xs,
            "y_st": ys,
            "yh_st": hs,
            "out": {k: f"out{j}" for j, k in enumerate(a["outs"])},
            "has_h0": bool(node.inputs[6]),
            "tanh_gate": rq.tanh_params(-12),
        }


register_instance(QRecurrent("QGRU", 3))
register_instance(QRecurrent("QRNN", 1))


class QLstm(QRecurrent):
    """TFLite Micro's int8 LSTM arithmetic (tinyc/ops/tflm_lstm.py, its golden model reused step
    for step) in the forms its kernel lacks: reverse and bidirectional (each direction the same
    integer LSTM, a reverse one walking the steps backwards) and constant initial states.
    inputs: x int8; W int8 [D][4][H][I], R int8 [D][4][H][H], bias int32 [D][4][H] (TFLite gate
    order input, forget, cell, output; per-gate weight scales); "", ""; h0 int8 [D][B][H] or "";
    the sigmoid table int32 [256]; c0 int16 [D][B][H] (scale 2^cell_power) or "". attrs as
    QRecurrent's (acts "lstm"), plus per_dir: TflmLstm's multipliers for each direction."""

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        from tinyc.ops.tflm_lstm import lstm_golden

        a = node.attrs
        n_d, n_t, n_b, _, n_h = self.sizes(node, graph)
        x = np.asarray(inputs[0], np.int64)
        x = x if a["layout"] else x.transpose(1, 0, 2)  # [B][T][I]
        y = np.zeros((n_b, n_t, n_d, n_h), np.int64)
        yh = np.zeros((n_b, n_d, n_h), np.int64)
        for d in range(n_d):
            rev = a["direction"] == "reverse" or d == 1
            h = np.full((n_b, n_h), a["h_zp"], np.int64) if not node.inputs[6] else np.asarray(inputs[6][d])
            c = (
                np.zeros((n_b, n_h), np.int64)
                if len(node.inputs) < 9 or not node.inputs[8]
                else np.asarray(inputs[8][d])
            )
            attrs = dict(a["per_dir"][d], x_zp=a["x_zp"], h_zp=a["h_zp"], time_major=False)
            xd = x[:, ::-1] if rev else x
            yd, h_last, _ = lstm_golden(xd, inputs[1][d], inputs[2][d], inputs[3][d], attrs, h, c)
            y[:, :, d] = yd[:, ::-1] if rev else yd
            yh[:, d] = h_last
        if not a["layout"]:
            y, yh = y.transpose(1, 2, 0, 3), yh.transpose(1, 0, 2)
        outs = [np.ascontiguousarray(v.astype(np.int8)) for v in (y, yh)]
        return [outs[k] for k in a["outs"]]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        ctx = super().kernel_context(node, graph, schedule, target)
        a = node.attrs
        ctx["has_c0"] = len(node.inputs) > 8 and bool(node.inputs[8])
        ctx["tanh_cell"] = rq.tanh_params(int(a["per_dir"][0]["cell_power"]))
        return ctx


register_instance(QLstm("QLSTM", 4))
