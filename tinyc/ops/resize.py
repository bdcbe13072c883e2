"""Resize (opsets 10-19) and Upsample (7/9): nearest, linear and cubic interpolation, any axes.

Interpolation is separable, so at compile time every resized axis gets a table: for each output
index, the input indices of its taps and their weights (plus an "extrapolated" flag for
tf_crop_and_resize). The tables follow onnx.reference's arithmetic exactly; the C kernel is then
a plain gather (nearest) or a weighted gather over the product of the axes' taps. All attributes
are per axis, so the op follows transposes (`permute`) and runs channels-last after a Conv.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

import numpy as np

from tinyc.numerics.literals import c_float, c_literal
from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, Int8Lowering, OpDef, OutputType, ctype, register, strides_of

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext

MODES = ("nearest", "linear", "cubic")
COORD_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nearest",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


# -- per-axis coefficient functions (onnx.reference.ops.op_resize) ----------------------------
def _nearest_coeffs(ratio: float, mode: str) -> np.ndarray:
    if float(ratio).is_integer():
        return np.array([0.0, 1.0])
    if mode == "round_prefer_floor":
        return np.array([ratio <= 0.5, ratio > 0.5], np.float64)
    if mode == "round_prefer_ceil":
        return np.array([ratio < 0.5, ratio >= 0.5], np.float64)
    if mode == "floor":
        return np.array([1.0, 0.0])
    return np.array([0.0, 1.0])  # ceil


def _linear_coeffs(ratio: float, scale: float) -> np.ndarray:
    return np.array([1 - ratio, ratio])


def _linear_coeffs_antialias(ratio: float, scale: float) -> np.ndarray:
    scale = min(scale, 1.0)
    start = int(np.floor(-1 / scale) + 1)
    footprint = 2 - 2 * start
    args = (np.arange(start, start + footprint) - ratio) * scale
    coeffs = np.clip(1 - np.abs(args), 0, 1)
    return coeffs / coeffs.sum()


def _cubic_coeffs(ratio: float, scale: float, A: float) -> np.ndarray:
    return np.array(
        [
            ((A * (ratio + 1) - 5 * A) * (ratio + 1) + 8 * A) * (ratio + 1) - 4 * A,
            ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1,
            ((A + 2) * (1 - ratio) - (A + 3)) * (1 - ratio) * (1 - ratio) + 1,
            ((A * ((1 - ratio) + 1) - 5 * A) * ((1 - ratio) + 1) + 8 * A) * ((1 - ratio) + 1) - 4 * A,
        ]
    )


def _cubic_coeffs_antialias(ratio: float, scale: float, A: float) -> np.ndarray:
    scale = min(scale, 1.0)

    def coeff(x: float) -> float:
        x = abs(x)
        x2, x3 = x * x, x * x * x
        if x <= 1:
            return (A + 2) * x3 - (A + 3) * x2 + 1
        if x < 2:
            return A * x3 - 5 * A * x2 + 8 * A * x - 4 * A
        return 0.0

    i_start = int(np.floor(-2 / scale) + 1)
    i_end = 2 - i_start
    c = np.array([coeff(scale * (i - ratio)) for i in range(i_start, i_end)])
    return c / c.sum()


def _coeff_fn(a: dict[str, Any]) -> Callable[[float, float], np.ndarray]:
    mode = a["mode"]
    if mode == "nearest":
        nm = a["nearest_mode"]
        return lambda r, s: _nearest_coeffs(r, nm)
    if mode == "linear":
        return _linear_coeffs_antialias if a["antialias"] else _linear_coeffs
    A = a["cubic_coeff_a"]
    fn = _cubic_coeffs_antialias if a["antialias"] else _cubic_coeffs
    return lambda r, s: fn(r, s, A)


def _source_coords(
    ctm: str, y: np.ndarray, scale: float, in_size: int, out_size: int, roi: list[float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Output index -> input coordinate, and the tf_crop_and_resize out-of-range flags."""
    out_w = scale * in_size
    extrap = None
    if ctm == "align_corners":
        x = np.zeros(out_size) if out_w == 1 else y * (in_size - 1) / (out_w - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        assert roi is not None
        lo, hi = np.float32(roi[0]), np.float32(roi[1])
        if out_w == 1:
            x = np.full(out_size, (hi - lo) * (in_size - 1) / 2, np.float64)
        else:
            x = y * (hi - lo) * (in_size - 1) / (out_w - 1)
        x = x + lo * (in_size - 1)
        extrap = (x < 0) | (x > in_size - 1)
    elif ctm == "pytorch_half_pixel":
        # the spec (and onnxruntime) say 0 for a length-1 output; onnx.reference uses -0.5, which
        # only differs for cubic weights
        x = np.zeros(out_size) if out_size == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / out_w)
        x = offset + (y + 0.5) / scale - 0.5
    else:  # tf_half_pixel_for_nearest
        x = (y + 0.5) / scale
    return np.asarray(x, np.float64), extrap


def axis_table(a: dict[str, Any], axis: int, in_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """(indices [O, T], weights [O, T], extrapolated [O] or None) for one axis; None: identity."""
    out_size, scale = int(a["sizes"][axis]), float(a["scales"][axis])
    roi = a["roi"][axis] if a["roi"] is not None else None
    trivial_roi = roi is None or (math.isclose(roi[0], 0.0) and math.isclose(roi[1], 1.0))
    if math.isclose(scale, 1.0) and out_size == in_size and trivial_roi:
        return None
    y = np.arange(out_size, dtype=np.float64)
    x, extrap = _source_coords(a["coordinate_transformation_mode"], y, scale, in_size, out_size, roi)
    if a["mode"] == "nearest" and a["nearest_mode"] == "simple":
        # Resize-10 / Upsample (as onnxruntime): floor when upsampling, ceil when downsampling
        idx = np.floor(x) if scale >= 1 else np.ceil(x)
        idx = np.clip(idx.astype(np.int64), 0, in_size - 1)
        return idx[:, None], np.ones((out_size, 1)), extrap
    x_int = np.floor(x)
    ratios = np.where(x == x_int, 1.0, x - x_int)
    fn = _coeff_fn(a)
    coeffs = np.array([fn(float(r), scale) for r in ratios], np.float64).reshape(out_size, -1)
    n = coeffs.shape[1]
    pad = int(np.ceil(n / 2))
    xp = x + pad
    pp = np.floor(xp)
    frac = xp - pp
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        off = np.where(frac <= 0.5, base, base + 1)
    nb = (pp.astype(np.int64) + off)[:, None] + np.arange(n)[None, :] - pad
    if a["exclude_outside"]:
        coeffs = np.where((nb < 0) | (nb >= in_size), 0.0, coeffs)
        total = coeffs.sum(axis=-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    idx = np.clip(nb, 0, in_size - 1)
    if extrap is not None and not extrap.any():
        extrap = None
    return idx, coeffs, extrap


def _one_hot(idx: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """Per-output single source index when every row's weights pick exactly one tap."""
    if not (np.all((w == 0) | (w == 1)) and np.all((w == 1).sum(axis=1) == 1)):
        return None
    return idx[np.arange(len(idx)), np.argmax(w, axis=1)]


@register
class Resize(OpDef):
    op = "Resize"
    onnx_ops = ("Resize", "Upsample")
    int8_passthrough = True
    qdq_shares_qparams = ("Resize",)
    template = "resize.c.j2"
    dtypes = tuple(CTYPES)

    # -- import ---------------------------------------------------------------------------
    def import_onnx(self, ctx: ImportContext) -> Node | list[Node]:
        shape = ctx.shape(0)
        rank = len(shape)
        dtype = ctx.dtype(0)
        if dtype not in CTYPES:
            ctx.unsupported(f"element type {dtype}")
        mode = ctx.attr("mode", "nearest")
        if mode == "bilinear":  # Upsample-1/7 spelling
            mode = "linear"
        if mode not in MODES:
            ctx.unsupported(f"mode={mode!r}")
        a: dict[str, Any] = dict(
            mode=mode,
            coordinate_transformation_mode="asymmetric",
            nearest_mode="simple",
            cubic_coeff_a=-0.75,
            exclude_outside=0,
            extrapolation_value=0.0,
            antialias=0,
        )
        scales = sizes = roi = None
        axes = list(range(rank))
        if ctx.op_type == "Upsample" or ctx.opset < 11:
            if mode == "cubic":
                ctx.unsupported("mode='cubic' needs Resize-11 or later")
            if ctx.has_attr("scales"):
                scales = [float(s) for s in ctx.attr("scales")]
            else:
                scales = [float(s) for s in ctx.require_const(1, "scales").reshape(-1)]
        else:
            ctm = ctx.attr("coordinate_transformation_mode", "half_pixel")
            if ctm == "tf_half_pixel_for_nn":  # Resize-11's spelling
                ctm = "tf_half_pixel_for_nearest"
            if (
                ctm not in COORD_MODES
                or (ctm == "half_pixel_symmetric" and ctx.opset < 19)
                or (ctm == "tf_half_pixel_for_nearest" and ctx.opset >= 13)
            ):
                ctx.unsupported(f"coordinate_transformation_mode={ctm!r} (not defined for Resize-{ctx.opset})")
            nm = ctx.attr("nearest_mode", "round_prefer_floor")
            if nm not in NEAREST_MODES[:4]:
                ctx.unsupported(f"nearest_mode={nm!r}")
            a.update(
                coordinate_transformation_mode=ctm,
                nearest_mode=nm,
                cubic_coeff_a=float(ctx.attr("cubic_coeff_a", -0.75)),
                exclude_outside=int(ctx.attr("exclude_outside", 0)),
                extrapolation_value=float(ctx.attr("extrapolation_value", 0.0)),
                antialias=int(ctx.attr("antialias", 0)) if mode != "nearest" else 0,
            )
            if ctx.attr("axes") is not None:
                try:
                    axes = [int(x) + rank if int(x) < 0 else int(x) for x in ctx.attr("axes")]
                except (TypeError, ValueError):
                    ctx.unsupported(f"axes={ctx.attr('axes')!r}")
                if len(set(axes)) != len(axes) or any(not 0 <= x < rank for x in axes):
                    ctx.unsupported(f"axes={ctx.attr('axes')!r} for rank {rank}")
            sc = ctx.require_const(2, "scales") if ctx.has_input(2) else None
            sz = ctx.require_const(3, "sizes") if ctx.has_input(3) else None
            if sc is not None and sc.size:
                scales = [float(s) for s in sc.reshape(-1)]
            if sz is not None and sz.size:
                sizes = [int(s) for s in sz.reshape(-1)]
            if (scales is None) == (sizes is None):
                ctx.unsupported("exactly one of scales and sizes must be given (non-empty)")
            if ctm == "tf_crop_and_resize":
                r = ctx.require_const(1, "roi") if ctx.has_input(1) else None
                if r is None or r.size != 2 * len(axes):
                    ctx.unsupported(f"tf_crop_and_resize needs an roi of {2 * len(axes)} values")
                rv = [float(v) for v in r.reshape(-1).astype(np.float32)]
                roi = [[0.0, 1.0] for _ in range(rank)]
                for i, ax in enumerate(axes):
                    roi[ax] = [rv[i], rv[len(axes) + i]]
        n = len(axes)
        if (scales is not None and len(scales) != n) or (sizes is not None and len(sizes) != n):
            ctx.unsupported(
                f"scales/sizes need {n} values for {'axes ' + str(axes) if n != rank else 'rank ' + str(rank)}"
            )
        full_scales, full_sizes = [1.0] * rank, list(shape)
        if sizes is not None:
            if min(sizes) < 1:
                ctx.unsupported(f"sizes {sizes} must be positive")
            ratios = [sizes[i] / shape[ax] for i, ax in enumerate(axes)]
            policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
            if policy == "stretch":
                for i, ax in enumerate(axes):
                    full_scales[ax], full_sizes[ax] = ratios[i], sizes[i]
            elif policy in ("not_larger", "not_smaller"):
                s = min(ratios) if policy == "not_larger" else max(ratios)
                for ax in axes:
                    full_scales[ax], full_sizes[ax] = s, int(s * shape[ax] + 0.5)
            else:
                ctx.unsupported(f"keep_aspect_ratio_policy={policy!r}")
        else:
            assert scales is not None
            if min(scales) <= 0:
                ctx.unsupported(f"scales {scales} must be positive")
            for i, ax in enumerate(axes):
                full_scales[ax] = float(np.float32(scales[i]))
                full_sizes[ax] = int(np.float64(full_scales[ax]) * shape[ax])
        if min(full_sizes, default=1) < 1:
            ctx.unsupported(f"output shape {full_sizes} is empty")
        a.update(sizes=[int(s) for s in full_sizes], scales=full_scales, roi=roi)
        if mode != "nearest" and dtype != "float32":
            ctx.unsupported(f"mode={mode!r} on element type {dtype} (float32 only; nearest supports all types)")
        return ctx.make_node("Resize", inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], **a)

    # -- semantics ------------------------------------------------------------------------
    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(tuple(node.attrs["sizes"]), graph.tensor(node.inputs[0]).dtype)]

    def _tables(self, node: Node, graph: Graph) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None] | None]:
        shape = graph.tensor(node.inputs[0]).shape
        return [axis_table(node.attrs, ax, shape[ax]) for ax in range(len(shape))]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Axis by axis in float64, as onnx.reference does."""
        x = inputs[0]
        y = x.astype(np.float64)
        fill = node.attrs["extrapolation_value"]
        for ax, tab in enumerate(self._tables(node, graph)):
            if tab is None:
                continue
            idx, w, ex = tab
            g = np.take(y, idx, axis=ax)  # [..., O, T, ...]
            y = (g * w.reshape((1,) * ax + w.shape + (1,) * (y.ndim - ax - 1))).sum(axis=ax + 1)
            if ex is not None:
                y = np.where(ex.reshape((1,) * ax + (-1,) + (1,) * (y.ndim - ax - 1)), fill, y)
        return [_saturate(y, x.dtype)]

    def macs(self, node: Node, graph: Graph) -> int:
        taps = 1
        for tab in self._tables(node, graph):
            if tab is not None:
                taps *= tab[0].shape[1]
        return int(np.prod(node.attrs["sizes"])) * taps

    def params(self, node: Node, graph: Graph) -> int:
        return 0

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return True  # every attribute is per axis: any permutation of the input rank

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Every attribute is per axis: axis a of the old input is axis perm[a] of the new one."""
        a = node.attrs
        rank = len(perm)
        if len(a["sizes"]) != rank:
            return False

        def move(values: list[Any]) -> list[Any]:
            out: list[Any] = [None] * rank
            for i, v in enumerate(values):
                out[perm[i]] = v
            return out

        a["sizes"], a["scales"] = move(a["sizes"]), move(a["scales"])
        if a["roi"] is not None:
            a["roi"] = move(a["roi"])
        return True

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        if node.attrs.get("mode") != "nearest":
            return "only nearest Resize moves int8 values unchanged"
        return low.move_unchanged(node)

    def check_supported(self, node: Node, graph: Graph) -> None:
        super().check_supported(node, graph)
        if node.attrs["mode"] != "nearest" and graph.tensor(node.inputs[0]).dtype != "float32":
            raise UnsupportedError(
                f"node '{node.source or node.name}' (Resize): mode={node.attrs['mode']!r} runs on float32 only"
            )

    # -- code generation ------------------------------------------------------------------
    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        """Loop nest over merged axis groups: plain runs of unresized axes, 'copy' axes (one
        source index per output) and 'weighted' axes (taps x weights); the last plain run is the
        contiguous innermost loop."""
        xt = graph.tensor(node.inputs[0])
        in_shape, out_shape = xt.shape, tuple(node.attrs["sizes"])
        ist, ost = strides_of(in_shape), strides_of(out_shape)
        ct = ctype(xt.dtype)
        tabs = self._tables(node, graph)
        groups: list[dict[str, Any]] = []
        tables: list[dict[str, Any]] = []
        for ax, tab in enumerate(tabs):
            if tab is None:
                if groups and groups[-1]["kind"] == "plain":
                    g = groups[-1]
                    g["extent"] *= in_shape[ax]
                    g["is"], g["os"] = ist[ax], ost[ax]
                else:
                    groups.append({"kind": "plain", "extent": in_shape[ax], "is": ist[ax], "os": ost[ax]})
                continue
            idx, w, ex = tab
            g = dict(kind="copy", extent=out_shape[ax], os=ost[ax], axis=ax, ex=None)
            single = _one_hot(idx, w)
            if single is not None:
                g["tab"] = f"rz_o{ax}"
                tables.append(_table(g["tab"], "int32_t", single * ist[ax]))
            else:
                g.update(kind="weighted", taps=int(idx.shape[1]), tab=f"rz_o{ax}", wtab=f"rz_w{ax}")
                tables.append(_table(g["tab"], "int32_t", idx * ist[ax]))
                tables.append(_table(g["wtab"], "float", w))
            if ex is not None:
                g["ex"] = f"rz_x{ax}"
                tables.append(_table(g["ex"], "uint8_t", ex.astype(np.int64)))
            groups.append(g)
        for k, g in enumerate(groups):
            g["var"] = f"i{k}"
        inner = 1
        if groups and groups[-1]["kind"] == "plain":
            inner = groups.pop()["extent"]
        out_terms = [f"{g['var']} * {g['os']}" for g in groups]
        in_terms = [f"{g['var']} * {g['is']}" for g in groups if g["kind"] == "plain"]
        in_terms += [f"{g['tab']}[{g['var']}]" for g in groups if g["kind"] == "copy"]
        ex_terms = [f"{g['ex']}[{g['var']}]" for g in groups if g.get("ex")]
        return dict(
            groups=groups,
            tables=tables,
            inner=inner,
            ct=ct,
            out_expr=" + ".join(out_terms) or "0",
            in_expr=" + ".join(in_terms) or "0",
            weighted=[g for g in groups if g["kind"] == "weighted"],
            ex_cond=" || ".join(ex_terms),
            fill=c_literal(_saturate(np.asarray(node.attrs["extrapolation_value"]), np.dtype(xt.dtype)), ct),
        )


def _saturate(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 -> the element type; integers round and clamp (only the extrapolation value can
    leave the input's range, since nearest copies elements)."""
    if np.issubdtype(dtype, np.floating):
        return y.astype(dtype)
    if dtype == np.bool_:
        return y.astype(bool)
    info = np.iinfo(dtype)
    return np.clip(np.rint(y), info.min, info.max).astype(dtype)


def _table(name: str, ct: str, values: np.ndarray) -> dict[str, Any]:
    """A flat static const C array (row-major), pre-formatted (tables can hold thousands of entries)."""
    flat = values.reshape(-1)
    items = [c_float(v) for v in flat] if ct == "float" else [str(int(v)) for v in flat]
    lines = ["        " + ", ".join(items[i : i + 12]) for i in range(0, len(items), 12)]
    return dict(name=name, ctype=ct, dims=f"[{len(items)}]", body=",\n".join(lines))
