"""int8 UNIDIRECTIONAL_SEQUENCE_LSTM exactly as TFLite Micro computes it (IR op ``TflmLstm``).

TFLite Micro's LSTM (``lstm_eval.h``, the 8x8->16 path) supports the standard LSTM only: all four
gates, no peephole, no projection, no layer norm. Per time step and batch row, with the previous
hidden state h (int8) and cell state c (int16, scale 2^p)::

    gate_g = sat16(sat16(MBQM(W_in_g (x - x_zp) + bias_g, in_g)) + sat16(MBQM(W_rec_g (h - h_zp), rec_g)))
                                                         Q3.12 for g in input, forget, cell, output
    i, f, o = sigmoid16(gate_i, gate_f, gate_o)          Q0.15 (TFLite's int16 interpolated table)
    g       = tanh16(gate_c)                             Q0.15
    c       = clip(sat16(sat16(MBQM(f c, fc)) + sat16(MBQM(i g, ig))))
    h       = clamp8(MBQM(tanh16(c, p) o, oh) + h_zp)     also the step's output row

MBQM is TFLite's MultiplyByQuantizedMultiplier; the multipliers are what TFLite Micro's Prepare
derives (tinyc/frontend/tflite/ops_recurrent.py). The states are not graph tensors: they live in
the kernel's arena scratch, reset at the start of every inference to TFLite Micro's state after
``reset()`` (an int8 variable tensor holds its zero point, i.e. the real value 0; an int16 one
holds 0) — or, with the node attribute ``keep_state``, in static arrays of the generated C that
carry over from one inference to the next (streaming use; the golden model then keeps them too, per
node, across calls). The time loop is a C loop.

``TflmLstmF32`` is the float32 LSTM of TFLite Micro's float path: the same steps in float32, with
TFLite's float logistic (its cut-offs at -9 and 16.62) and tanhf.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.numerics import tflm_recurrent as rq
from tinyc.numerics.gemmlowp import wrap32
from tinyc.numerics.tflm_unary import mbqm
from tinyc.ops.base import OpDef, OutputType, register

#: gate order of the weight, bias and multiplier arrays (TFLite's input tensor order)
GATES = ("input", "forget", "cell", "output")


class StateStore:
    """The golden model's states of ``keep_state`` nodes, carried across calls of ``reference``.

    Keyed by the node object (held weakly, so a dropped graph forgets its state); a node without
    ``keep_state`` never reads or writes it, so each of its inferences starts from the reset state."""

    def __init__(self) -> None:
        self._states: dict[int, tuple[weakref.ref[Node], tuple[np.ndarray, ...]]] = {}

    def get(self, node: Node, fresh: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        if not node.attrs.get("keep_state", False):
            return fresh
        entry = self._states.get(id(node))
        if entry is None or entry[0]() is not node:
            return fresh
        return entry[1]

    def put(self, node: Node, state: tuple[np.ndarray, ...]) -> None:
        if node.attrs.get("keep_state", False):
            self._states[id(node)] = (weakref.ref(node), tuple(np.copy(s) for s in state))


STATES = StateStore()


def lstm_golden(
    x: np.ndarray,
    w_in: np.ndarray,
    w_rec: np.ndarray,
    bias: np.ndarray,
    attrs: dict[str, Any],
    h: np.ndarray,
    c: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y int8, final h int8 [B, S], final c int16 [B, S]) from states h, c; the module docstring's steps."""
    xb = np.asarray(x, np.int64)
    if attrs["time_major"]:
        xb = xb.transpose(1, 0, 2)  # [T, B, I] -> [B, T, I]
    n_b, n_t, _ = xb.shape
    h = np.asarray(h, np.int64).copy()
    c = np.asarray(c, np.int64).copy()
    wi, wr, b = (np.asarray(a, np.int64) for a in (w_in, w_rec, bias))
    ys = []
    for t in range(n_t):
        xt = xb[:, t] - attrs["x_zp"]
        hp = h - attrs["h_zp"]
        gates = []
        for g in range(4):
            fi = rq.sat16(mbqm(wrap32(xt @ wi[g].T + b[g]), attrs["in_mult"][g], attrs["in_shift"][g]))
            fr = rq.sat16(mbqm(wrap32(hp @ wr[g].T), attrs["rec_mult"][g], attrs["rec_shift"][g]))
            gates.append(rq.sat16(fi + fr))
        ig, fg, og = (rq.sigmoid_int16(gates[k]) for k in (0, 1, 3))
        cg = rq.tanh_int16(gates[2], -12)
        cf = rq.sat16(mbqm(fg * c, attrs["fc_mult"], attrs["fc_shift"]))
        ic = rq.sat16(mbqm(ig * cg, attrs["ig_mult"], attrs["ig_shift"]))
        c = rq.sat16(cf + ic)
        clip = attrs["cell_clip"]
        if clip > 0:
            c = np.clip(c, -clip, clip)
        th = rq.tanh_int16(c, attrs["cell_power"])
        h = np.clip(mbqm(th * og, attrs["oh_mult"], attrs["oh_shift"]) + attrs["h_zp"], -128, 127)
        ys.append(h)
    y = np.stack(ys, axis=1)  # [B, T, S]
    if attrs["time_major"]:
        y = y.transpose(1, 0, 2)
    return y.astype(np.int8), h.astype(np.int8), c.astype(np.int16)


def _align16(n: int) -> int:
    return (n + 15) // 16 * 16


@register
class TflmLstm(OpDef):
    """inputs: x int8 [B, T, I] ([T, B, I] when time_major), input weights int8 [4, S, I], recurrent
    weights int8 [4, S, S], biases int32 [4, S] (gate order input, forget, cell, output), the sigmoid
    table int32 [256]. attrs: time_major, batch, x_zp, h_zp, per-gate in_/rec_ mult and shift, the
    three inter-gate multipliers (fc_, ig_, oh_), cell_power (p of the cell scale 2^p), cell_clip
    (quantized, 0: none), keep_state."""

    op = "TflmLstm"
    template = "tflm_lstm.c.j2"
    stateful = True
    dtypes = ("int8",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x = graph.tensor(node.inputs[0]).shape
        n_cell = graph.tensor(node.inputs[1]).shape[1]
        return [((x[0], x[1], n_cell), "int8")]

    def _sizes(self, node: Node, graph: Graph) -> tuple[int, int, int, int]:
        """(B, T, I, S)."""
        x = graph.tensor(node.inputs[0]).shape
        n_b, n_t = (x[1], x[0]) if node.attrs["time_major"] else (x[0], x[1])
        return int(n_b), int(n_t), int(x[2]), int(graph.tensor(node.inputs[1]).shape[1])

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        n_b, _, _, n_s = self._sizes(node, graph)
        fresh = (np.full((n_b, n_s), node.attrs["h_zp"], np.int8), np.zeros((n_b, n_s), np.int16))
        h, c = STATES.get(node, fresh)
        y, h, c = lstm_golden(inputs[0], inputs[1], inputs[2], inputs[3], node.attrs, h, c)
        STATES.put(node, (h, c))
        return [y]

    def macs(self, node: Node, graph: Graph) -> int:
        n_b, n_t, n_i, n_s = self._sizes(node, graph)
        return 4 * n_b * n_t * n_s * (n_i + n_s)

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        if node.attrs.get("keep_state", False):
            return 0  # the states are static arrays of the generated C
        n_b, _, _, n_s = self._sizes(node, graph)
        return _align16(2 * n_b * n_s) + n_b * n_s

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        from tinyc.errors import UnsupportedError
        from tinyc.ir.isa import Isa

        if Isa.parse(target).work_items:  # its template addresses memory as plain C pointers
            raise UnsupportedError(
                f"node '{node.source or node.name}' (LSTM as TFLite Micro's integer LSTM): compiles to C targets "
                "only, not OpenCL; compile the float model for OpenCL, or the int8 one for a board or the host"
            )
        n_b, n_t, n_i, n_s = self._sizes(node, graph)
        a = node.attrs
        tanh_mult, tanh_shift = rq.tanh_params(int(a["cell_power"]))
        return {
            "B": n_b,
            "T": n_t,
            "I": n_i,
            "S": n_s,
            "h_offset": _align16(2 * n_b * n_s),
            "keep": bool(a.get("keep_state", False)),
            "tanh_cell_mult": tanh_mult,
            "tanh_cell_shift": tanh_shift,
            "tanh_gate": rq.tanh_params(-12),
        }


def sigmoid_f32(v: np.ndarray) -> np.ndarray:
    """TFLite's float Logistic: 1 above 16.619..., exp(x) below -9, else 1 / (1 + exp(-x)) (float32)."""
    v = np.asarray(v, np.float32)
    with np.errstate(over="ignore"):
        mid = np.float32(1) / (np.float32(1) + np.exp(-v))
    return np.where(v > np.float32(16.619047164916992), np.float32(1), np.where(v < np.float32(-9), np.exp(v), mid))


def lstm_golden_f32(
    x: np.ndarray,
    w_in: np.ndarray,
    w_rec: np.ndarray,
    bias: np.ndarray,
    attrs: dict[str, Any],
    h: np.ndarray,
    c: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The float32 LSTM of TFLite Micro's float path: the same steps in float, cell clip ±cell_clip."""
    f32 = np.float32
    xb = np.asarray(x, f32)
    if attrs["time_major"]:
        xb = xb.transpose(1, 0, 2)
    h, c = np.asarray(h, f32).copy(), np.asarray(c, f32).copy()
    ys = []
    for t in range(xb.shape[1]):
        gates = [(xb[:, t] @ w_in[g].T + bias[g]) + h @ w_rec[g].T for g in range(4)]
        ig, fg, og = (sigmoid_f32(gates[k]) for k in (0, 1, 3))
        cg = np.tanh(gates[2])
        c = fg * c + ig * cg
        clip = f32(attrs["cell_clip_f"])
        if clip > 0:
            c = np.clip(c, -clip, clip)
        h = (np.tanh(c) * og).astype(f32)
        ys.append(h)
    y = np.stack(ys, axis=1)
    if attrs["time_major"]:
        y = y.transpose(1, 0, 2)
    return y.astype(f32), h, c.astype(f32)


@register
class TflmLstmF32(TflmLstm):
    """The float32 LSTM (TFLite Micro's float path): inputs as TflmLstm's, all float32, no table;
    attrs time_major, cell_clip_f (0: none), keep_state."""

    op = "TflmLstmF32"
    template = "tflm_lstm_f32.c.j2"
    dtypes = ("float32",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(super().infer(node, graph)[0][0], "float32")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        n_b, _, _, n_s = self._sizes(node, graph)
        fresh = (np.zeros((n_b, n_s), np.float32), np.zeros((n_b, n_s), np.float32))
        h, c = STATES.get(node, fresh)
        y, h, c = lstm_golden_f32(inputs[0], inputs[1], inputs[2], inputs[3], node.attrs, h, c)
        STATES.put(node, (h, c))
        return [y]

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        if node.attrs.get("keep_state", False):
            return 0
        n_b, _, _, n_s = self._sizes(node, graph)
        return 2 * 4 * n_b * n_s

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        n_b, n_t, n_i, n_s = self._sizes(node, graph)
        return {"B": n_b, "T": n_t, "I": n_i, "S": n_s, "keep": bool(node.attrs.get("keep_state", False))}
