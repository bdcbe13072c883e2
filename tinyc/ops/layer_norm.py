"""LayerNormalization, RMSNormalization (normalise trailing axes) and LpNormalization (one axis).

Layer/RMS norm view x as [outer][n] rows (the normalised axes are always the trailing ones, so
each row is contiguous): a mean pass, a variance pass and an affine pass per row, statistics
in float (stash_type 1). Scale/bias are flattened to the normalised shape: constants are
broadcast at compile time, runtime ones must already have that shape. LpNormalization views x
as [outer][n][inner] and keeps the per-column norms in scratch so loops run along memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.numerics.fixed_point import multiply_by_quantized_multiplier, quantize_multiplier
from tinyc.numerics.qparams import qparams_of
from tinyc.ops.base import AxisPermutable, CTYPES, Int8Lowering, OpDef, OutputType, register
from tinyc.ops.tflm_l2norm import inv_sqrt_multiplier

FLOATS = ("float32", "float64")
INT32_MAX = (1 << 31) - 1
#: fraction bits of the normalised value u (LayerNorm: (x - mean) / sqrt(var + eps)) in the int8 kernel
NORM_FRAC_BITS = 20


def _prod(dims: Any) -> int:
    return int(np.prod([int(d) for d in dims], dtype=np.int64))


def _param_input(ctx: Any, i: int, norm_shape: tuple[int, ...], what: str) -> str:
    """Scale/bias as an input of exactly the normalised shape (constants broadcast here)."""
    shape = tuple(int(d) for d in ctx.shape(i))
    if ctx.dtype(i) != ctx.dtype(0):
        ctx.unsupported(f"{what} of type {ctx.dtype(i)} differs from the input type {ctx.dtype(0)}")
    stripped = shape
    while len(stripped) > len(norm_shape) and stripped[0] == 1:
        stripped = stripped[1:]
    try:
        ok = tuple(int(d) for d in np.broadcast_shapes(stripped, norm_shape)) == norm_shape
    except ValueError:
        ok = False
    if not ok:
        ctx.unsupported(f"{what} of shape {shape} does not broadcast to the normalised shape {norm_shape}")
    value = ctx.const(i)
    if value is not None:
        flat = np.broadcast_to(np.asarray(value).reshape(stripped), norm_shape).reshape(-1)
        return ctx.add_constant(what.lower(), np.ascontiguousarray(flat).astype(ctx.dtype(0)))
    if _prod(shape) != _prod(norm_shape):
        ctx.unsupported(
            f"runtime {what} of shape {shape} broadcast to {norm_shape} is not supported "
            f"(make it a constant or give it the full normalised shape)"
        )
    return ctx.inputs[i]


class _RowNorm(OpDef):
    """LayerNormalization / RMSNormalization. attrs: `axis` (normalised), `epsilon`, `rms`."""

    template = "layer_norm.c.j2"
    dtypes = FLOATS
    rms = False
    int8_kernel = True

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        stash = int(ctx.attr("stash_type", 1))
        if stash != 1:
            ctx.unsupported(f"stash_type {stash} (only 1, float32 statistics)")
        shape = tuple(int(d) for d in ctx.shape(0))
        rank = len(shape)
        axis = int(ctx.attr("axis", -1))
        if rank == 0 or not -rank <= axis < rank:
            ctx.unsupported(f"axis {axis} out of range for rank {rank}")
        axis %= rank
        if any(d == 0 for d in shape):
            ctx.unsupported(f"zero-size input {shape}")
        norm_shape = shape[axis:]
        scale = _param_input(ctx, 1, norm_shape, "Scale")
        inputs = [ctx.inputs[0], scale]
        if not self.rms and ctx.has_input(2):
            inputs.append(_param_input(ctx, 2, norm_shape, "B"))
        outputs = list(ctx.outputs[:1] if self.rms else ctx.outputs[:3])
        return ctx.make_node(
            self.op, inputs=inputs, outputs=outputs, axis=axis, epsilon=float(ctx.attr("epsilon", 1e-5)), rms=self.rms
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        ax = node.attrs["axis"]
        stat = tuple(t.shape[:ax]) + (1,) * (len(t.shape) - ax)
        return [(t.shape, t.dtype), (stat, "float32"), (stat, "float32")][: len(node.outputs)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        ax = node.attrs["axis"]
        outer, n = _prod(x.shape[:ax]), _prod(x.shape[ax:])
        xm = x.reshape(outer, n).astype(np.float64)
        eps = float(np.float32(node.attrs["epsilon"]))
        scale = inputs[1].reshape(1, n).astype(np.float64)
        with np.errstate(all="ignore"):
            if node.attrs["rms"]:
                mean = np.zeros((outer, 1))
                inv = 1.0 / np.sqrt(np.mean(xm * xm, axis=1, keepdims=True) + eps)
                y = xm * inv * scale
            else:
                mean = xm.mean(axis=1, keepdims=True)
                inv = 1.0 / np.sqrt(((xm - mean) ** 2).mean(axis=1, keepdims=True) + eps)
                y = (xm - mean) * inv * scale
                if len(inputs) > 2 and inputs[2] is not None:
                    y = y + inputs[2].reshape(1, n).astype(np.float64)
        stat = tuple(x.shape[:ax]) + (1,) * (x.ndim - ax)
        outs = [
            y.reshape(x.shape).astype(x.dtype),
            mean.reshape(stat).astype(np.float32),
            inv.reshape(stat).astype(np.float32),
        ]
        return outs[: len(node.outputs)]

    def macs(self, node: Node, graph: Graph) -> int:
        return 4 * graph.tensor(node.inputs[0]).size

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Only permutations of the leading (not normalised) axes keep each row contiguous."""
        ax = node.attrs["axis"]
        return len(perm) == len(graph.tensor(node.outputs[0]).shape) and all(perm[a] == a for a in range(ax, len(perm)))

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return self.can_permute(node, graph, perm)

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        if t.dtype not in self.dtypes:
            raise UnsupportedError(f"node '{node.source or node.name}' ({node.op}): element type {t.dtype}")
        ax = node.attrs["axis"]
        outs = [o for o in node.outputs]
        return {
            "outer": _prod(t.shape[:ax]),
            "n": _prod(t.shape[ax:]),
            "T": CTYPES[t.dtype],
            "eps": node.attrs["epsilon"],
            "rms": node.attrs["rms"],
            "has_bias": len(node.inputs) > 2 and bool(node.inputs[2]),
            "has_mean": len(outs) > 1 and bool(outs[1]),
            "has_inv": len(outs) > 2 and bool(outs[2]),
        }

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """QLayerNorm: integer mean and variance, a fixed-point 1/sqrt, per-channel requantization."""
        g = low.g
        if len([o for o in node.outputs if o]) > 1:
            return "Mean / InvStdDev outputs stay float"
        params = [g.tensor(i) for i in node.inputs[1:] if i]
        if not all(t.is_constant for t in params):
            return "scale / bias not constant"
        why = low.needs_output(node)
        if why:
            return why
        x_q = low.as_int8(node.inputs[0])
        out = node.outputs[0]
        y_q = low.int8_output(out)
        low.emit(build_qlayer_norm(g, node, x_q, y_q), out, y_q)
        return None


@register
class LayerNormalization(_RowNorm):
    op = "LayerNormalization"
    onnx_ops = ("LayerNormalization",)


@register
class RMSNormalization(_RowNorm):
    op = "RMSNormalization"
    onnx_ops = ("RMSNormalization",)
    rms = True


@register
class LpNormalization(AxisPermutable, OpDef):
    """attrs: `axis`, `p` (1 or 2). y = x / ||x||_p along axis; a zero norm gives 0."""

    op = "LpNormalization"
    onnx_ops = ("LpNormalization",)
    template = "lp_norm.c.j2"
    dtypes = FLOATS

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        rank = len(ctx.shape(0))
        axis = int(ctx.attr("axis", -1))
        if rank == 0 or not -rank <= axis < rank:
            ctx.unsupported(f"axis {axis} out of range for rank {rank}")
        p = int(ctx.attr("p", 2))
        if p not in (1, 2):
            ctx.unsupported(f"p = {p} (only 1 and 2)")
        if any(d == 0 for d in ctx.shape(0)):
            return ctx.set_constant(0, np.zeros(ctx.shape(0), ctx.dtype(0)))
        return ctx.make_node(self.op, inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], axis=axis % rank, p=p)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        xd = x.astype(np.float64)
        ax = node.attrs["axis"]
        if node.attrs["p"] == 1:
            norm = np.abs(xd).sum(axis=ax, keepdims=True)
        else:
            norm = np.sqrt((xd * xd).sum(axis=ax, keepdims=True))
        with np.errstate(all="ignore"):
            y = np.where(norm == 0, 0.0, xd / norm)
        return [y.astype(x.dtype)]

    def macs(self, node: Node, graph: Graph) -> int:
        return 2 * graph.tensor(node.inputs[0]).size

    def _split(self, node: Node, graph: Graph) -> tuple[int, int, int]:
        shape = graph.tensor(node.inputs[0]).shape
        ax = node.attrs["axis"]
        return _prod(shape[:ax]), int(shape[ax]), _prod(shape[ax + 1 :])

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        inner = self._split(node, graph)[2]
        return 0 if inner == 1 else inner * (8 if graph.tensor(node.inputs[0]).dtype == "float64" else 4)

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        if t.dtype not in self.dtypes:
            raise UnsupportedError(f"node '{node.source or node.name}' ({node.op}): element type {t.dtype}")
        outer, n, inner = self._split(node, graph)
        ct = CTYPES[t.dtype]
        return {
            "outer": outer,
            "n": n,
            "inner": inner,
            "T": ct,
            "p": node.attrs["p"],
            "sfx": "f" if ct == "float" else "",
        }


def build_qlayer_norm(graph: Graph, node: Node, x: str, y: str) -> Node:
    """The QLayerNorm node for float LayerNormalization/RMSNormalization `node` on int8 x -> y.

    With d = x - zx per row of n: LayerNorm uses xc = n d - sum d = n (d - mean) and
    W = n sum d^2 - (sum d)^2 + E = n^2 (var + eps / sx^2) (E = eps n^2 / sx^2), so the normalised
    value is xc / sqrt(W); RMS uses xc = d and W = sum d^2 + E = n (mean d^2 + eps / sx^2)
    (E = eps n / sx^2), the normalised value xc sqrt(n) / sqrt(W). Per channel j the constant row
    packs (multiplier, shift) of |gamma_j| c / (sy 2^F) (c = 1, RMS: sqrt(n)), the sign of
    gamma_j and round(beta_j / sy)."""
    sx, zx = qparams_of(graph, x)
    sy, zy = qparams_of(graph, y)
    ax = node.attrs["axis"]
    shape = graph.tensor(node.inputs[0]).shape
    n = _prod(shape[ax:])
    gamma = np.asarray(graph.tensor(node.inputs[1]).data, np.float64).reshape(n)
    has_b = len(node.inputs) > 2 and bool(node.inputs[2])
    beta = np.asarray(graph.tensor(node.inputs[2]).data, np.float64).reshape(n) if has_b else np.zeros(n)
    sx32, sy32 = float(np.float32(sx)), float(np.float32(sy))
    rms = bool(node.attrs["rms"])
    c = np.sqrt(n) if rms else 1.0
    mult, shift = quantize_multiplier(np.abs(gamma) * c / (sy32 * 2.0**NORM_FRAC_BITS))
    packed = np.stack(
        [
            np.asarray(mult, np.int64).reshape(n),
            np.asarray(shift, np.int64).reshape(n),
            np.where(gamma < 0, -1, 1),
            np.clip(np.round(beta / sy32), -(1 << 24), 1 << 24),
        ]
    ).astype(np.int32)
    eps = float(np.float32(node.attrs["epsilon"])) * (n if rms else n * n) / (sx32 * sx32)
    consts = graph.add_constant(graph.unique_name(f"{node.name}_q_params"), packed)
    attrs = {"axis": ax, "rms": rms, "zx": zx, "zy": zy, "eps_q": int(min(round(eps), 1 << 50))}
    return Node(node.name, "QLayerNorm", [x, consts], [y], attrs, source=node.source)


def qlayer_norm_golden(x: np.ndarray, packed: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """The C kernel's integers (build_qlayer_norm's docstring), every row at once."""
    ax = attrs["axis"]
    n = _prod(x.shape[ax:])
    d = x.reshape(-1, n).astype(np.int64) - attrs["zx"]
    s1 = d.sum(axis=1, keepdims=True)
    s2 = (d * d).sum(axis=1, keepdims=True)
    if attrs["rms"]:
        xc, w = d, s2 + attrs["eps_q"]
    else:
        xc, w = n * d - s1, n * s2 - s1 * s1 + attrs["eps_q"]
    k = np.zeros_like(w)
    while np.any(w > INT32_MAX):
        big = w > INT32_MAX
        w = np.where(big, w >> 2, w)
        k = k + big
    inv, sh = inv_sqrt_multiplier(w.reshape(-1))
    ts = np.clip(sh.reshape(-1, 1) + NORM_FRAC_BITS - k, -31, 31)
    u = np.asarray(multiply_by_quantized_multiplier(xc, inv.reshape(-1, 1), ts)).astype(np.int64)
    p = np.asarray(packed, np.int64)
    v = np.asarray(multiply_by_quantized_multiplier(p[2] * u, p[0], p[1])).astype(np.int64)
    return np.clip(v + p[3] + attrs["zy"], -128, 127).astype(np.int8).reshape(x.shape)


@register
class QLayerNorm(OpDef):
    """int8 LayerNormalization / RMSNormalization over trailing axes. inputs: x int8, the packed
    int32 [4, n] per-channel constants; attrs: axis, rms, zx, zy, eps_q (epsilon on the integer
    variance's scale)."""

    op = "QLayerNorm"
    template = "layer_norm_int8.c.j2"
    dtypes = ("int8",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, "int8")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [qlayer_norm_golden(inputs[0], inputs[1], node.attrs)]

    def macs(self, node: Node, graph: Graph) -> int:
        return 4 * graph.tensor(node.inputs[0]).size

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        ax = node.attrs["axis"]
        return {"outer": _prod(t.shape[:ax]), "n": _prod(t.shape[ax:]), "frac": NORM_FRAC_BITS}
