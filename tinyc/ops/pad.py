"""Pad (constant / reflect / edge / wrap). Each axis gets a compile-time table mapping an
output index to the input index it copies (-1: the constant value), so every mode is the same
gather; the middle run of the innermost axis, where the table is the identity, is a plain
contiguous copy. Negative pads crop (constant mode). Any dtype."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.numerics.qparams import quantize_constant
from tinyc.ops.base import Int8Lowering, OpDef, OutputType, normalize_axis, register
from tinyc.ops.slice_gather import ALL_DTYPES, _check_dtype, _ints, _where, empty_output, is_empty, _remap

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext

MODES = ("constant", "reflect", "edge", "wrap")


def index_table(n: int, pb: int, pe: int, mode: str) -> np.ndarray:
    """Input index read by each output position along one axis (-1: constant fill)."""
    o = np.arange(n + pb + pe, dtype=np.int64) - pb
    if mode == "constant":
        return np.where((o >= 0) & (o < n), o, -1)
    if mode == "edge":
        return np.clip(o, 0, n - 1)
    if mode == "wrap":
        return np.mod(o, n)
    if n == 1:  # reflect
        return np.zeros_like(o)
    period = 2 * (n - 1)
    m = np.mod(o, period)
    return np.where(m < n, m, period - m)


def _fill_value(value: Any, dtype: str) -> float | int | bool:
    if dtype == "bool":
        return bool(value)
    if dtype.startswith("float"):
        return float(value)
    return int(np.asarray(value).astype(dtype))


@register
class Pad(OpDef):
    """attrs: `mode`, `pads` ([begin per axis] + [end per axis], full rank), `value`."""

    op = "Pad"
    onnx_ops = ("Pad",)
    int8_passthrough = True
    qdq_shares_qparams = ("Pad",)
    template = "pad.c.j2"
    dtypes = ALL_DTYPES

    def import_onnx(self, ctx: ImportContext) -> Node | list[Node]:
        _check_dtype(ctx)
        shape = ctx.shape(0)
        rank = len(shape)
        mode = ctx.attr("mode", "constant")
        if mode not in MODES:
            ctx.unsupported(f"mode '{mode}' is not supported (supported: {', '.join(MODES)})")
        value: Any = 0
        axes = list(range(rank))
        if ctx.opset < 11:
            raw = ctx.attr("pads") if ctx.has_attr("pads") else ctx.attr("paddings")
            if raw is None:
                ctx.unsupported("pads attribute is required")
            pads = _ints(raw)
            value = float(ctx.attr("value", 0.0))
        else:
            pads = _ints(ctx.require_const(1, "pads"))
            if ctx.has_input(2):
                cv = np.asarray(ctx.require_const(2, "constant_value")).reshape(-1)
                if cv.size:
                    value = cv[0].item()
            if ctx.has_input(3):
                axes = [normalize_axis(a, rank, _where(ctx)) for a in _ints(ctx.require_const(3, "axes"))]
                if len(set(axes)) != len(axes):
                    ctx.unsupported(f"repeated axes {axes}")
        if len(pads) != 2 * len(axes):
            ctx.unsupported(f"{len(pads)} pads for {len(axes)} axes")
        begin, end = [0] * rank, [0] * rank
        for k, a in enumerate(axes):
            begin[a], end[a] = pads[k], pads[len(axes) + k]
        out = [n + b + e for n, b, e in zip(shape, begin, end)]
        if any(d < 0 for d in out):
            ctx.unsupported(f"pads {pads} crop more than the input shape {shape}")
        if mode != "constant":
            if any(p < 0 for p in begin + end):
                ctx.unsupported(f"negative pads with mode '{mode}'")
            if any(n == 0 and (b or e) for n, b, e in zip(shape, begin, end)):
                ctx.unsupported(f"mode '{mode}' cannot pad an empty axis")
        if is_empty(out):
            return empty_output(ctx, 0, out)
        return ctx.make_node(
            "Pad",
            inputs=ctx.inputs[:1],
            outputs=ctx.outputs[:1],
            mode=mode,
            pads=begin + end,
            value=_fill_value(value, ctx.dtype(0)),
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        r = len(t.shape)
        p = node.attrs["pads"]
        return [(tuple(n + p[k] + p[r + k] for k, n in enumerate(t.shape)), t.dtype)]

    def _tables(self, node: Node, shape: tuple[int, ...]) -> list[np.ndarray]:
        r = len(shape)
        p = node.attrs["pads"]
        return [index_table(n, p[k], p[r + k], node.attrs["mode"]) for k, n in enumerate(shape)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        tabs = self._tables(node, x.shape)
        out_shape = tuple(len(t) for t in tabs)
        value = np.asarray(node.attrs["value"]).astype(x.dtype)
        if x.size == 0:
            return [np.full(out_shape, value, dtype=x.dtype)]
        y = x[np.ix_(*[np.clip(t, 0, None) for t in tabs])] if tabs else x.copy()
        mask = np.zeros(out_shape, dtype=bool)
        for k, t in enumerate(tabs):
            shp = [1] * len(tabs)
            shp[k] = len(t)
            mask |= (t < 0).reshape(shp)
        y = np.where(mask, value, y).astype(x.dtype)
        return [np.ascontiguousarray(y)]

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return 2 * len(perm) == len(node.attrs["pads"])

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        if not self.can_permute(node, graph, perm):
            return False
        r = len(perm)
        p = node.attrs["pads"]
        node.attrs["pads"] = _remap(p[:r], perm) + _remap(p[r:], perm)
        return True

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """Moves int8 values; a constant pad value is put on the input's grid."""
        if node.attrs.get("mode", "constant") != "constant":
            return low.move_unchanged(node)

        def value_on(grid: tuple[float, int]) -> dict[str, Any]:
            s, zp = grid
            return {"value": int(quantize_constant(np.array([node.attrs.get("value", 0.0)], np.float32), s, zp)[0])}

        return low.move_unchanged(node, value_on)

    def macs(self, node: Node, graph: Graph) -> int:
        return 0

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        shape = graph.tensor(node.inputs[0]).shape
        r = len(shape)
        p = node.attrs["pads"]
        mode = node.attrs["mode"]
        # merge runs of adjacent unpadded axes (they behave as one axis)
        groups: list[dict[str, Any]] = []
        for k, n in enumerate(shape):
            b, e = p[k], p[r + k]
            if b == 0 and e == 0 and groups and groups[-1]["tab"] is None:
                groups[-1]["I"] *= n
                groups[-1]["O"] *= n
                continue
            tab = None if b == 0 and e == 0 else index_table(n, b, e, mode)
            groups.append(
                {"I": int(n), "O": int(n + b + e), "pb": int(b), "tab": None if tab is None else [int(v) for v in tab]}
            )
        if not groups:
            groups = [{"I": 1, "O": 1, "pb": 0, "tab": None}]
        for k, g in enumerate(groups):
            g["block"] = int(np.prod([h["O"] for h in groups[k + 1 :]], dtype=np.int64))
            g["has_fill"] = g["tab"] is not None and min(g["tab"], default=0) < 0
        last = groups[-1]
        last["lo"] = max(last["pb"], 0)
        last["hi"] = min(last["O"], last["I"] + last["pb"])
        if last["hi"] < last["lo"]:
            last["hi"] = last["lo"]
        return {
            "groups": groups,
            "mode": mode,
            "value": node.attrs["value"],
            "in_size": graph.tensor(node.inputs[0]).size,
        }
