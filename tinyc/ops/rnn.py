"""ONNX's recurrent layers RNN, GRU and LSTM as float32 kernels (IR ops ``RNN``, ``GRU``, ``LSTM``).

All three share one shape: for each direction, batch row and time step, the gate pre-activations
``g = b + x_t W^T + h R^T`` ([G*H], G = 1, 3, 4 gates) followed by the cell's update of the
hidden state h (and the LSTM's cell state c). The time loop is a C loop; h, c and the gate
vector live in the kernel's arena scratch, so the kernel holds one [H] state at a time.

Weights are packed at import: W [D][G*H][I] and R [D][G*H][H] are transposed to [D][I][G*H]
and [D][H][G*H], so the inner loop ``g[j] += Wt[k][j] * x[k]`` runs along contiguous gates and
weights (one axpy per input element, vectorisable); the two biases are summed into one [D][G*H]
(GRU with ``linear_before_reset`` keeps its recurrent hidden-gate bias apart, since the reset
gate scales it). Constant initial states are packed to [D][B][H]; runtime ones are read where
they are (layout 0 [D][B][H], layout 1 [B][D][H]).

Semantics follow onnx's reference implementation (onnx/reference/ops/op_lstm.py, op_gru.py,
op_rnn.py) and, where that one ignores an attribute, the ONNX specification as onnxruntime runs
it: a constant ``sequence_lens`` stops each batch row after its length (a reverse direction
starts at its last valid step), writes zeros to the rest of Y, and Y_h / Y_c hold the state
after the last valid step; ``clip`` bounds every gate pre-activation before its activation;
``activation_alpha`` / ``activation_beta`` are taken in order by the activations that use them;
LSTM ``input_forget`` couples the forget gate to the input gate (f = 1 - i).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.numerics.literals import c_float
from tinyc.ops.base import Int8Lowering, OpDef, OutputType, register_instance
from tinyc.ops.elementwise import UNARY
from tinyc.ops.rnn_int8 import lower_lstm, lower_qrecurrent

#: the ONNX activations a recurrent layer may name, and which of alpha / beta each takes
_TAKES = {
    "relu": (),
    "tanh": (),
    "sigmoid": (),
    "softsign": (),
    "softplus": (),
    "affine": ("alpha", "beta"),
    "leakyrelu": ("alpha",),
    "thresholdedrelu": ("alpha",),
    "scaledtanh": ("alpha", "beta"),
    "hardsigmoid": ("alpha", "beta"),
    "elu": ("alpha",),
}
_DEFAULTS = {
    "affine": {"alpha": 1.0, "beta": 0.0},
    "leakyrelu": {"alpha": 0.01},
    "thresholdedrelu": {"alpha": 1.0},
    "scaledtanh": {"alpha": 1.0, "beta": 1.0},
    "hardsigmoid": {"alpha": 0.2, "beta": 0.5},
    "elu": {"alpha": 1.0},
}
_UNARY = {s.name.lower(): s for s in UNARY}


@dataclass(frozen=True)
class Cell:
    """What distinguishes the three layers: gate count, default activations, ONNX input count."""

    op: str
    gates: int
    activations: tuple[str, ...]


CELLS = {
    "RNN": Cell("RNN", 1, ("Tanh",)),
    "GRU": Cell("GRU", 3, ("Sigmoid", "Tanh")),
    "LSTM": Cell("LSTM", 4, ("Sigmoid", "Tanh", "Tanh")),
}


# -- activations ---------------------------------------------------------------------------------
def act_numpy(act: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """One activation (name, alpha, beta) on a float32 array."""
    name, f32 = act["name"], np.float32
    with np.errstate(all="ignore"):
        if name == "affine":
            return (f32(act["alpha"]) * x + f32(act["beta"])).astype(np.float32)
        if name == "scaledtanh":
            return (f32(act["alpha"]) * np.tanh(f32(act["beta"]) * x)).astype(np.float32)
        return np.asarray(_UNARY[name].np_fn(x, act), np.float32)


def act_c(act: dict[str, Any], v: str) -> str:
    """The same activation as a C expression of the identifier `v`."""
    name = act["name"]
    if name == "affine":
        return f"({c_float(act['alpha'])} * {v} + {c_float(act['beta'])})"
    if name == "scaledtanh":
        return f"({c_float(act['alpha'])} * tanhf({c_float(act['beta'])} * {v}))"
    return str(_UNARY[name].c_fn(v, act))


def parse_activations(
    names: list[str], alphas: list[float], betas: list[float], n: int, where: Callable[[str], Any]
) -> list[dict[str, Any]]:
    """The activation list with each alpha / beta given to the next activation that takes one."""
    if len(names) != n:
        where(f"{len(names)} activations given, {n} needed")
    out, ia, ib = [], 0, 0
    for raw in names:
        name = str(raw).lower()
        if name not in _TAKES:
            where(f"activation '{raw}' is not one ONNX defines for recurrent layers")
        act: dict[str, Any] = {"name": name, **_DEFAULTS.get(name, {})}
        if "alpha" in _TAKES[name] and ia < len(alphas):
            act["alpha"], ia = float(alphas[ia]), ia + 1
        if "beta" in _TAKES[name] and ib < len(betas):
            act["beta"], ib = float(betas[ib]), ib + 1
        out.append(act)
    return out


# -- import ---------------------------------------------------------------------------------------
def _const_or_none(ctx: Any, i: int, what: str) -> np.ndarray | None:
    return None if not ctx.has_input(i) else np.asarray(ctx.require_const(i, what), np.float32)


def _seq_lens(ctx: Any, n_t: int, n_b: int) -> list[int] | None:
    """The constant sequence lengths, or None when every row runs all T steps."""
    if not ctx.has_input(4):
        return None
    lens = np.asarray(ctx.require_const(4, "sequence_lens")).reshape(-1).astype(np.int64)
    if lens.size != n_b:
        ctx.invalid(f"sequence_lens has {lens.size} values for batch {n_b}")
    if np.any(lens < 1) or np.any(lens > n_t):
        ctx.unsupported(f"sequence_lens {lens.tolist()} outside 1..{n_t}")
    return None if np.all(lens == n_t) else [int(v) for v in lens]


def _state_input(ctx: Any, i: int, layout: int, dbh: tuple[int, int, int], what: str) -> str:
    """A constant initial state packed to [D][B][H]; a runtime one is read in place."""
    if not ctx.has_input(i):
        return ""
    if ctx.dtype(i) != "float32":
        ctx.unsupported(f"{what} is {ctx.dtype(i)} (float32 needed)")
    d, b, h = dbh
    want = (b, d, h) if layout else (d, b, h)
    if tuple(ctx.shape(i)) != want:
        ctx.invalid(f"{what} has shape {list(ctx.shape(i))}, {list(want)} expected")
    v = ctx.const(i)
    if v is None:
        return str(ctx.inputs[i])
    v = np.asarray(v, np.float32)
    if layout:
        v = v.transpose(1, 0, 2)
    return str(ctx.add_constant(what, np.ascontiguousarray(v)))


def _runtime(ctx: Any, i: int) -> bool:
    return bool(ctx.has_input(i) and ctx.const(i) is None)


class Recurrent(OpDef):
    """inputs: x, Wt [D][I][G*H], Rt [D][H][G*H], bias [D][G*H], rbh [D][H] (GRU with
    linear_before_reset, else ""), h0, c0 (LSTM), P [D][3][H] (LSTM peepholes; "" when absent).
    outputs: those of Y, Y_h, Y_c (LSTM) the model reads, attr outs (0, 1, 2: which). attrs: direction, layout,
    hidden, acts (per direction, the activation dicts), clip (None: none), lbr, input_forget,
    seq_lens (None: all T), batch_major_states ([h0, c0]: True where that input is [B][D][H], a
    runtime state of a layout-1 node; constant ones are packed to [D][B][H])."""

    template = "rnn.c.j2"
    dtypes = ("float32",)
    int8_kernel = True

    def __init__(self, cell: Cell) -> None:
        self.cell = cell
        self.op = cell.op
        self.onnx_ops = (cell.op,)

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        cell, gates = self.cell, self.cell.gates
        if len(ctx.shape(0)) != 3:
            ctx.invalid(f"X has rank {len(ctx.shape(0))} (3 needed)")
        layout = int(ctx.attr("layout", 0))
        if layout not in (0, 1):
            ctx.invalid(f"layout {layout}")
        direction = str(ctx.attr("direction", "forward"))
        if direction not in ("forward", "reverse", "bidirectional"):
            ctx.invalid(f"direction '{direction}'")
        n_d = 2 if direction == "bidirectional" else 1
        x0, x1, n_i = (int(v) for v in ctx.shape(0))
        n_t, n_b = (x1, x0) if layout else (x0, x1)
        w = np.asarray(ctx.require_const(1, "W"), np.float32)
        r = np.asarray(ctx.require_const(2, "R"), np.float32)
        n_h = int(r.shape[-1])
        if ctx.has_attr("hidden_size") and int(ctx.attr("hidden_size")) != n_h:
            ctx.invalid(f"hidden_size {ctx.attr('hidden_size')} but R has {n_h} columns")
        if w.shape != (n_d, gates * n_h, n_i) or r.shape != (n_d, gates * n_h, n_h):
            ctx.invalid(f"W {list(w.shape)} / R {list(r.shape)} do not fit {n_d} directions, H={n_h}, I={n_i}")
        if n_t == 0 or n_b == 0 or n_i == 0:
            ctx.unsupported("zero-size input")
        bias = _const_or_none(ctx, 3, "B")
        if bias is None:
            bias = np.zeros((n_d, 2 * gates * n_h), np.float32)
        if bias.shape != (n_d, 2 * gates * n_h):
            ctx.invalid(f"B has shape {list(bias.shape)}")
        wb, rb = bias[:, : gates * n_h], bias[:, gates * n_h :].copy()
        lbr = cell.op == "GRU" and bool(int(ctx.attr("linear_before_reset", 0)))
        rbh = ""
        if lbr:
            rbh = ctx.add_constant("rbh", rb[:, 2 * n_h :].copy())  # a copy: rb is zeroed there next
            rb[:, 2 * n_h :] = 0
        acts = parse_activations(
            list(ctx.attr("activations", list(cell.activations) * n_d)),
            [float(v) for v in ctx.attr("activation_alpha", [])],
            [float(v) for v in ctx.attr("activation_beta", [])],
            len(cell.activations) * n_d,
            ctx.unsupported,
        )
        k = len(cell.activations)
        clip = ctx.attr("clip", None)
        inputs = [
            ctx.inputs[0],
            ctx.add_constant("Wt", np.ascontiguousarray(w.transpose(0, 2, 1))),
            ctx.add_constant("Rt", np.ascontiguousarray(r.transpose(0, 2, 1))),
            ctx.add_constant("bias", np.ascontiguousarray(wb + rb)),
            rbh,
            _state_input(ctx, 5, layout, (n_d, n_b, n_h), "initial_h"),
        ]
        input_forget = False
        if cell.op == "LSTM":
            inputs.append(_state_input(ctx, 6, layout, (n_d, n_b, n_h), "initial_c"))
            p = _const_or_none(ctx, 7, "P")
            if p is not None and p.shape != (n_d, 3 * n_h):
                ctx.invalid(f"P has shape {list(p.shape)}")
            inputs.append("" if p is None else ctx.add_constant("P", p.reshape(n_d, 3, n_h)))
            input_forget = bool(int(ctx.attr("input_forget", 0)))
        n_out = 3 if cell.op == "LSTM" else 2
        kinds = [k for k, o in enumerate(ctx.outputs[:n_out]) if o]
        if not kinds:
            return []
        return ctx.make_node(
            cell.op,
            inputs=inputs,
            outputs=[ctx.outputs[k] for k in kinds],
            outs=kinds,
            direction=direction,
            layout=layout,
            hidden=n_h,
            acts=[acts[d * k : (d + 1) * k] for d in range(n_d)],
            clip=None if clip is None else float(clip),
            lbr=lbr,
            input_forget=input_forget,
            seq_lens=_seq_lens(ctx, n_t, n_b),
            batch_major_states=[_runtime(ctx, 5) and layout == 1, _runtime(ctx, 6) and layout == 1],
        )

    # -- semantics ---------------------------------------------------------------------------
    def sizes(self, node: Node, graph: Graph) -> tuple[int, int, int, int, int]:
        """(D, T, B, I, H)."""
        x0, x1, n_i = graph.tensor(node.inputs[0]).shape
        n_t, n_b = (x1, x0) if node.attrs["layout"] else (x0, x1)
        return len(node.attrs["acts"]), int(n_t), int(n_b), int(n_i), int(node.attrs["hidden"])

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        n_d, n_t, n_b, _, n_h = self.sizes(node, graph)
        if node.attrs["layout"]:
            y, st = (n_b, n_t, n_d, n_h), (n_b, n_d, n_h)
        else:
            y, st = (n_t, n_d, n_b, n_h), (n_d, n_b, n_h)
        return [[(y, "float32"), (st, "float32"), (st, "float32")][k] for k in node.attrs["outs"]]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        n_d, n_t, n_b, _, n_h = self.sizes(node, graph)
        f32 = np.float32
        x = np.asarray(inputs[0], f32)
        if a["layout"]:
            x = x.transpose(1, 0, 2)
        ins: list[Any] = list(inputs) + [None] * (8 - len(inputs))
        h0, c0 = ins[5], ins[6]
        if h0 is not None and a["batch_major_states"][0]:
            h0 = np.asarray(h0).transpose(1, 0, 2)
        if c0 is not None and a["batch_major_states"][1]:
            c0 = np.asarray(c0).transpose(1, 0, 2)
        y = np.zeros((n_t, n_d, n_b, n_h), f32)
        yh = np.zeros((n_d, n_b, n_h), f32)
        yc = np.zeros((n_d, n_b, n_h), f32)
        lens = a["seq_lens"] or [n_t] * n_b
        for d in range(n_d):
            rev = a["direction"] == "reverse" or d == 1
            for b in range(n_b):
                h = np.zeros(n_h, f32) if h0 is None else np.asarray(h0[d, b], f32).copy()
                c = np.zeros(n_h, f32) if c0 is None else np.asarray(c0[d, b], f32).copy()
                for s in range(lens[b]):
                    t = lens[b] - 1 - s if rev else s
                    h, c = self.step(a, d, x[t, b], h, c, ins)
                    y[t, d, b] = h
                yh[d, b], yc[d, b] = h, c
        if a["layout"]:
            y, yh, yc = y.transpose(2, 0, 1, 3), yh.transpose(1, 0, 2), yc.transpose(1, 0, 2)
        outs = [np.ascontiguousarray(v) for v in (y, yh, yc)]
        return [outs[k] for k in a["outs"]]

    def step(
        self, a: dict[str, Any], d: int, xt: np.ndarray, h: np.ndarray, c: np.ndarray, ins: list[Any]
    ) -> tuple[np.ndarray, np.ndarray]:
        """One time step of one direction and batch row: the new (h, c)."""
        acts = a["acts"][d]
        n_h = a["hidden"]

        def act(k: int, v: np.ndarray) -> np.ndarray:
            if a["clip"] is not None:
                v = np.clip(v, -np.float32(a["clip"]), np.float32(a["clip"])).astype(np.float32)
            return act_numpy(acts[k], v)

        wt, rt, bias = ins[1][d], ins[2][d], ins[3][d]
        g = (bias + xt @ wt).astype(np.float32)
        if self.cell.op == "RNN":
            return act(0, (g + h @ rt).astype(np.float32)), c
        if self.cell.op == "GRU":
            zr = g[: 2 * n_h] + h @ rt[:, : 2 * n_h]
            z, r = act(0, zr[:n_h]), act(0, zr[n_h:])
            if a["lbr"]:
                hg = g[2 * n_h :] + r * (h @ rt[:, 2 * n_h :] + ins[4][d])
            else:
                hg = g[2 * n_h :] + (r * h).astype(np.float32) @ rt[:, 2 * n_h :]
            ht = act(1, hg.astype(np.float32))
            return ((np.float32(1) - z) * ht + z * h).astype(np.float32), c
        g = (g + h @ rt).astype(np.float32)
        gi, go, gf, gc = (g[k * n_h : (k + 1) * n_h] for k in range(4))
        p = ins[7][d] if ins[7] is not None else np.zeros((3, n_h), np.float32)
        i = act(0, gi + p[0] * c)
        f = (np.float32(1) - i) if a["input_forget"] else act(0, gf + p[2] * c)
        c = (f * c + i * act(1, gc)).astype(np.float32)
        o = act(0, go + p[1] * c)
        return (o * act_numpy(acts[2], c)).astype(np.float32), c

    def macs(self, node: Node, graph: Graph) -> int:
        n_d, n_t, n_b, n_i, n_h = self.sizes(node, graph)
        return n_d * n_t * n_b * self.cell.gates * n_h * (n_i + n_h)

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """LSTM: TFLite Micro's integer LSTM; GRU and RNN: int16-gate kernels in its arithmetic
        (tinyc/ops/rnn_int8.py, tinyc/ops/rnn_q.py)."""
        if self.cell.op != "LSTM":
            return lower_qrecurrent(node, low)
        return lower_lstm(node, low)

    # -- code generation -------------------------------------------------------------------
    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        """h, c, the gate vector [G*H] and one more [H] (GRU: r*h or the recurrent hidden gate)."""
        n_h = node.attrs["hidden"]
        return 4 * n_h * (3 + self.cell.gates)

    def check_supported(self, node: Node, graph: Graph) -> None:
        super().check_supported(node, graph)
        for name in node.inputs[1:]:
            if name and not graph.tensor(name).is_constant and graph.tensor(name).dtype != "float32":
                raise UnsupportedError(f"node '{node.source or node.name}' ({node.op}): {name} must be float32")

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a = node.attrs
        n_d, n_t, n_b, n_i, n_h = self.sizes(node, graph)
        clip = a["clip"]

        def expr(d: int, k: int, v: str) -> str:
            if clip is not None:
                lim = c_float(clip)
                v = f"({v} < -{lim} ? -{lim} : ({v} > {lim} ? {lim} : {v}))"
            return act_c(a["acts"][d][k], v)

        lay = a["layout"]
        dbh, bdh = (n_b * n_h, n_h), (n_h, n_d * n_h)  # (direction, batch) strides of [D][B][H], [B][D][H]
        if lay:  # x [B][T][I]; y [B][T][D][H]; y_h [B][D][H]
            xs, ys, hs = (n_i, n_t * n_i), (n_d * n_h, n_h, n_t * n_d * n_h), (n_h, n_d * n_h)
        else:  # x [T][B][I]; y [T][D][B][H]; y_h [D][B][H]
            xs, ys, hs = (n_b * n_i, n_i), (n_d * n_b * n_h, n_b * n_h, n_h), (n_b * n_h, n_h)

        return {
            "cell": self.cell.op,
            "D": n_d,
            "T": n_t,
            "B": n_b,
            "I": n_i,
            "H": n_h,
            "G": self.cell.gates,
            "dirs": [{"d": d, "rev": a["direction"] == "reverse" or d == 1} for d in range(n_d)],
            "act": expr,
            "act_noclip": lambda d, k, v: act_c(a["acts"][d][k], v),
            "x_st": xs,
            "y_st": ys,
            "yh_st": hs,
            "h0_st": bdh if a["batch_major_states"][0] else dbh,
            "c0_st": bdh if a["batch_major_states"][1] else dbh,
            "seq": a["seq_lens"],
            "out": {k: f"out{j}" for j, k in enumerate(a["outs"])},
            "has_in": [len(node.inputs) > i and bool(node.inputs[i]) for i in range(8)],
        }


for _cell in CELLS.values():
    register_instance(Recurrent(_cell))
