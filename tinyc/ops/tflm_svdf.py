"""int8 SVDF exactly as TFLite Micro computes it (IR op ``TflmSvdf``; svdf_common.cc's integer path).

One call is one time step. The activation state S [B][F][M] (F = units * rank filters, M memory
columns, int16 or int8 like weights_time) is shifted left one column, then per batch b and filter f::

    S[b, f, M-1] = state_zp + clamp_T(MBQM(sum_i Wf[f, i] (x[b, i] - x_zp), scale_1))
    acc[b, u]    = bias[u] + sum_{r < rank} sum_m Wt[u*rank + r, m] (S[b, u*rank + r, m] - state_zp)
    y[b, u]      = clamp8(MBQM(acc[b, u], scale_2) + y_zp)

(int32 sums, MBQM = TFLite's MultiplyByQuantizedMultiplier). TFLite Micro applies no fused
activation on this integer path, so none is applied here either. The state lives in arena scratch
reset at every inference to TFLite Micro's state after ``reset()`` (an int8 state holds its zero
point, an int16 one 0), or with the node attribute
``keep_state`` in a static array of the generated C kept across inferences (the golden model keeps
it per node too; see tinyc/ops/tflm_lstm.py's StateStore).

``TflmSvdfF32`` is the float32 SVDF of TFLite Micro's float path, which does apply the fused activation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.numerics.gemmlowp import wrap32
from tinyc.numerics.tflm_unary import mbqm
from tinyc.ops.base import CTYPES, OpDef, OutputType, register
from tinyc.ops.tflm_lstm import STATES

_RANGE = {"int8": (-128, 127), "int16": (-32768, 32767)}


def svdf_golden(
    x: np.ndarray, wf: np.ndarray, wt: np.ndarray, bias: np.ndarray, attrs: dict[str, Any], state: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(y int8 [B, U], the new state [B, F, M]) from `state`; the module docstring's steps."""
    lo, hi = _RANGE[attrs["state_dtype"]]
    s = np.asarray(state, np.int64).copy()
    s[:, :, :-1] = s[:, :, 1:]
    dot = (np.asarray(x, np.int64) - attrs["x_zp"]) @ np.asarray(wf, np.int64).T  # [B, F]
    feat = np.clip(mbqm(wrap32(dot), attrs["mult_1"], attrs["shift_1"]), lo, hi) + attrs["state_zp"]
    s[:, :, -1] = feat.astype(attrs["state_dtype"]).astype(np.int64)  # the C store into T wraps
    per_filter = wrap32(((s - attrs["state_zp"]) * np.asarray(wt, np.int64)[None]).sum(axis=-1))  # [B, F]
    n_b, n_f = per_filter.shape
    rank = int(attrs["rank"])
    acc = wrap32(np.asarray(bias, np.int64)[None] + per_filter.reshape(n_b, n_f // rank, rank).sum(axis=-1))
    y = np.clip(mbqm(acc, attrs["mult_2"], attrs["shift_2"]) + attrs["y_zp"], -128, 127)
    return y.astype(np.int8), s.astype(attrs["state_dtype"])


@register
class TflmSvdf(OpDef):
    """inputs: x int8 [B, I], weights_feature int8 [F, I], weights_time int16/int8 [F, M], bias
    int32 [U]; attrs: rank, x_zp, state_zp, y_zp, mult_1/shift_1 (feature -> state), mult_2/shift_2
    (state x time -> output), state_dtype, keep_state."""

    op = "TflmSvdf"
    template = "tflm_svdf.c.j2"
    stateful = True
    dtypes = ("int8",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        n_b = graph.tensor(node.inputs[0]).shape[0]
        return [((n_b, graph.tensor(node.inputs[3]).shape[0]), "int8")]

    def _sizes(self, node: Node, graph: Graph) -> tuple[int, int, int, int]:
        """(B, I, F, M)."""
        n_b, n_i = graph.tensor(node.inputs[0]).shape
        n_f, n_m = graph.tensor(node.inputs[2]).shape
        return int(n_b), int(n_i), int(n_f), int(n_m)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        n_b, _, n_f, n_m = self._sizes(node, graph)
        (state,) = STATES.get(node, (self.initial_state(node, n_b, n_f, n_m),))
        y, state = svdf_golden(inputs[0], inputs[1], inputs[2], inputs[3], node.attrs, state)
        STATES.put(node, (state,))
        return [y]

    @staticmethod
    def initial_state(node: Node, n_b: int, n_f: int, n_m: int) -> np.ndarray:
        """TFLite Micro's state after reset(): an int8 state holds its zero point, an int16 one 0."""
        zp = node.attrs["state_zp"] if node.attrs["state_dtype"] == "int8" else 0
        return np.full((n_b, n_f, n_m), zp, node.attrs["state_dtype"])

    def macs(self, node: Node, graph: Graph) -> int:
        n_b, n_i, n_f, n_m = self._sizes(node, graph)
        return n_b * n_f * (n_i + n_m)

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        if node.attrs.get("keep_state", False):
            return 0  # the state is a static array of the generated C
        n_b, _, n_f, n_m = self._sizes(node, graph)
        return n_b * n_f * n_m * (2 if node.attrs["state_dtype"] == "int16" else 1)

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        n_b, n_i, n_f, n_m = self._sizes(node, graph)
        lo, hi = _RANGE[node.attrs["state_dtype"]]
        return {
            "B": n_b,
            "I": n_i,
            "F": n_f,
            "M": n_m,
            "U": n_f // int(node.attrs["rank"]),
            "ST": CTYPES[node.attrs["state_dtype"]],
            "st_min": lo,
            "st_max": hi,
            "keep": bool(node.attrs.get("keep_state", False)),
            "st_init": node.attrs["state_zp"] if node.attrs["state_dtype"] == "int8" else 0,
        }


#: fused activations of the float path (TFLite Micro's ActivationValFloat), as numpy
FLOAT_ACTIVATIONS: dict[str, Any] = {
    "NONE": lambda v: v,
    "RELU": lambda v: np.maximum(v, np.float32(0)),
    "RELU_N1_TO_1": lambda v: np.clip(v, np.float32(-1), np.float32(1)),
    "RELU6": lambda v: np.clip(v, np.float32(0), np.float32(6)),
    "TANH": np.tanh,
}


def svdf_golden_f32(
    x: np.ndarray, wf: np.ndarray, wt: np.ndarray, bias: np.ndarray, attrs: dict[str, Any], state: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The float SVDF step: shift, feature products into the newest column, time products summed
    over each unit's rank filters plus bias, then the fused activation."""
    f32 = np.float32
    s = np.asarray(state, f32).copy()
    s[:, :, :-1] = s[:, :, 1:]
    s[:, :, -1] = np.asarray(x, f32) @ np.asarray(wf, f32).T
    per_filter = (s * np.asarray(wt, f32)[None]).sum(axis=-1)
    n_b, n_f = per_filter.shape
    rank = int(attrs["rank"])
    out = np.asarray(bias, f32)[None] + per_filter.reshape(n_b, n_f // rank, rank).sum(axis=-1)
    return FLOAT_ACTIVATIONS[attrs["act"]](out).astype(f32), s


@register
class TflmSvdfF32(TflmSvdf):
    """The float32 SVDF (TFLite Micro's float path): inputs as TflmSvdf's, all float32; attrs rank,
    act (the fused activation: NONE, RELU, RELU_N1_TO_1, RELU6, TANH), keep_state."""

    op = "TflmSvdfF32"
    template = "tflm_svdf_f32.c.j2"
    dtypes = ("float32",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(super().infer(node, graph)[0][0], "float32")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        n_b, _, n_f, n_m = self._sizes(node, graph)
        (state,) = STATES.get(node, (np.zeros((n_b, n_f, n_m), np.float32),))
        y, state = svdf_golden_f32(inputs[0], inputs[1], inputs[2], inputs[3], node.attrs, state)
        STATES.put(node, (state,))
        return [y]

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        if node.attrs.get("keep_state", False):
            return 0
        n_b, _, n_f, n_m = self._sizes(node, graph)
        return 4 * n_b * n_f * n_m

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        n_b, n_i, n_f, n_m = self._sizes(node, graph)
        return {
            "B": n_b,
            "I": n_i,
            "F": n_f,
            "M": n_m,
            "U": n_f // int(node.attrs["rank"]),
            "keep": bool(node.attrs.get("keep_state", False)),
        }
