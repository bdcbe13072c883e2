"""Pooling: MaxPool, AveragePool (count_include_pad, ceil_mode), GlobalAverage/MaxPool.
Imported NCHW; the layout pass runs them channels-last like Conv.

MaxPool also runs on int8/uint8 (ONNX allows them since opset 12): the maximum of quantized
values is the quantized maximum when input and output share scale and zero point, so the int8
lowering reuses this op unchanged (``build_qmaxpool``). Padded taps are skipped, never read.

3D windows, MaxPool's Indices output and LpPool import as PoolND instead: a plain NCHW loop nest
of its own (pool_nd.c.j2), so the 1D/2D kernels, their schedules and int8 forms stay as they are."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.ops.base import Int8Lowering, OpDef, OutputType, ctype, register
from tinyc.ops.conv import conv_out_size, resolve_pads


def _windows(
    size: int, k: int, s: int, d: int, pb: int, pe: int, out: int, include_pad: bool
) -> list[tuple[int, int, int]]:
    """Per output position: first input index, last (exclusive), and the divisor for averages."""
    res = []
    for o in range(out):
        start = o * s - pb
        taps = [start + i * d for i in range(k)]
        valid = [t for t in taps if 0 <= t < size]
        if include_pad:
            count = len([t for t in taps if -pb <= t < size + pe])
        else:
            count = len(valid)
        res.append((start, len(valid), count))
    return res


def window_attrs(ctx: Any, xs: tuple[int, ...], n: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """kernel_shape, strides, dilations and resolved pads of an n-D pooling node (shared by the 1-D/2-D
    Pool and PoolND): onnxruntime refuses pads that reach a whole kernel, and so does tinyc."""
    if ctx.attr("kernel_shape") is None:
        ctx.invalid("the kernel_shape attribute is required")
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    strides = [int(s) for s in (ctx.attr("strides") or [1] * n)]
    dil = [int(d) for d in (ctx.attr("dilations") or [1] * n)]
    pads = resolve_pads(ctx, xs[2:], kernel, strides, dil)
    if any(pads[i] >= kernel[i] or pads[i + n] >= kernel[i] for i in range(n)):
        ctx.invalid(f"pads {pads} must be smaller than the kernel {kernel} (onnxruntime refuses larger ones)")
    return kernel, strides, dil, pads


@register
class Pool(OpDef):
    op = "Pool"
    onnx_ops: tuple[str, ...] = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
    int8_kernel = True
    qdq_shares_qparams = ("MaxPool", "AveragePool")
    template = "pool.c.j2"
    channels_last_capable = True
    dtypes: tuple[str, ...] = ("float32", "int8", "uint8")
    #: element types MaxPool / GlobalMaxPool take besides float32 (no arithmetic, only compares)
    INT_DTYPES = ("int8", "uint8")

    def import_onnx(self, ctx):
        xs = ctx.shape(0)
        n = len(xs) - 2
        wants_indices = len(ctx.outputs) > 1 and bool(ctx.outputs[1])
        if n == 3 or (wants_indices and n in (1, 2)):
            return import_pool_nd(ctx, "max" if "Max" in ctx.op_type else "avg")
        if n not in (1, 2):
            ctx.unsupported(f"only 1D, 2D and 3D pooling is supported (input rank {len(xs)})")
        kind = "max" if "Max" in ctx.op_type else "avg"
        if ctx.dtype(0) != "float32" and not (kind == "max" and ctx.dtype(0) in self.INT_DTYPES):
            ctx.unsupported(f"element type {ctx.dtype(0)} (float32{', int8, uint8' if kind == 'max' else ''} only)")
        if ctx.op_type.startswith("Global"):
            return ctx.make_node(
                "Pool",
                inputs=ctx.inputs[:1],
                kind=kind,
                kernel=list(xs[2:]),
                strides=[1] * n,
                pads=[0] * (2 * n),
                dilations=[1] * n,
                ceil_mode=0,
                count_include_pad=0,
                layout="NCHW",
                is_global=True,
            )
        # storage_order only changes the Indices output, which is not asked for here
        kernel, strides, dil, pads = window_attrs(ctx, xs, n)
        return ctx.make_node(
            "Pool",
            inputs=ctx.inputs[:1],
            outputs=ctx.outputs[:1],
            kind=kind,
            kernel=kernel,
            strides=strides,
            pads=pads,
            dilations=dil,
            ceil_mode=int(ctx.attr("ceil_mode", 0)),
            count_include_pad=int(ctx.attr("count_include_pad", 0)),
            layout="NCHW",
            is_global=False,
        )

    def _dims(self, node: Node, graph: Graph) -> dict[str, Any]:
        a = node.attrs
        x = graph.tensor(node.inputs[0]).shape
        n = len(a["kernel"])
        if a["layout"] == "NCHW":
            N, C, sp = x[0], x[1], list(x[2:])
        else:
            N, C, sp = x[0], x[-1], list(x[1:-1])
        k, s, d = list(a["kernel"]), list(a["strides"]), list(a["dilations"])
        pb, pe = list(a["pads"][:n]), list(a["pads"][n:])
        if n == 1:
            sp, k, s, d, pb, pe = [1] + sp, [1] + k, [1] + s, [1] + d, [0] + pb, [0] + pe
        out = []
        for i in range(2):
            o = conv_out_size(sp[i], k[i], s[i], d[i], pb[i], pe[i], bool(a["ceil_mode"]))
            if a["ceil_mode"] and (o - 1) * s[i] >= sp[i] + pb[i]:
                o -= 1  # the last window may not start in the end padding
            out.append(o)
        return dict(
            N=N,
            C=C,
            H=sp[0],
            W=sp[1],
            KH=k[0],
            KW=k[1],
            SH=s[0],
            SW=s[1],
            DH=d[0],
            DW=d[1],
            PT=pb[0],
            PL=pb[1],
            PB=pe[0],
            PR=pe[1],
            OH=out[0],
            OW=out[1],
            n=n,
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        m = self._dims(node, graph)
        sp = [m["OH"], m["OW"]][2 - m["n"] :]
        dt = graph.tensor(node.inputs[0]).dtype
        if node.attrs["layout"] == "NCHW":
            return [((m["N"], m["C"], *sp), dt)]
        return [((m["N"], *sp, m["C"]), dt)]

    def macs(self, node: Node, graph: Graph) -> int:
        m = self._dims(node, graph)
        return m["N"] * m["C"] * m["OH"] * m["OW"] * m["KH"] * m["KW"]

    def params(self, node: Node, graph: Graph) -> int:
        return 0

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        m = self._dims(node, graph)
        a = node.attrs
        x = inputs[0]
        if a["layout"] == "NCHW":
            x = np.moveaxis(x, 1, -1)
        x4 = x.reshape(m["N"], m["H"], m["W"], m["C"]).astype(np.float64)
        empty = -np.inf if x.dtype.kind == "f" else float(np.iinfo(x.dtype).min)
        wh = _windows(m["H"], m["KH"], m["SH"], m["DH"], m["PT"], m["PB"], m["OH"], bool(a["count_include_pad"]))
        ww = _windows(m["W"], m["KW"], m["SW"], m["DW"], m["PL"], m["PR"], m["OW"], bool(a["count_include_pad"]))
        y = np.zeros((m["N"], m["OH"], m["OW"], m["C"]), np.float64)
        for oh, (h0, _, ch) in enumerate(wh):
            hs = [h0 + i * m["DH"] for i in range(m["KH"]) if 0 <= h0 + i * m["DH"] < m["H"]]
            for ow, (w0, _, cw) in enumerate(ww):
                wsel = [w0 + i * m["DW"] for i in range(m["KW"]) if 0 <= w0 + i * m["DW"] < m["W"]]
                win = x4[:, hs][:, :, wsel]
                if a["kind"] == "max":
                    # an all-padding window (possible only with odd dilations) gives the type's minimum
                    y[:, oh, ow] = win.max(axis=(1, 2)) if win.size else empty
                else:
                    with np.errstate(invalid="ignore"):  # Inf + -Inf in a window: NaN, as the C
                        y[:, oh, ow] = win.sum(axis=(1, 2)) / max(1, ch * cw)
        y = y.reshape(m["N"], *([m["OH"], m["OW"]][2 - m["n"] :]), m["C"]).astype(inputs[0].dtype)
        if a["layout"] == "NCHW":
            y = np.moveaxis(y, -1, 1)
        return [np.ascontiguousarray(y)]

    def to_channels_last(self, node: Node, graph: Graph) -> bool:
        if node.attrs["layout"] != "NCHW":
            return False
        node.attrs["layout"] = "NHWC"
        return True

    def check_supported(self, node: Node, graph: Graph) -> None:
        super().check_supported(node, graph)
        dt = graph.tensor(node.inputs[0]).dtype
        if node.attrs["kind"] != "max" and dt != "float32":
            raise UnsupportedError(
                f"node '{node.source or node.name}' (Pool): average pooling of {dt} "
                "needs the integer QAvgPool (float32 only here)"
            )

    def keeps_input_grid(self, node: Node) -> bool:
        return node.attrs["kind"] == "max"  # a maximum is one of the input values

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """Max pooling on the input's grid (QMaxPool); average pooling requantizes (QAvgPool)."""
        from tinyc.ops.qpool import build_qavgpool, build_qmaxpool

        x_q = low.as_int8(node.inputs[0])
        if node.attrs["kind"] == "max":
            low.preserving(
                node, x_q, lambda y: build_qmaxpool(low.g, node.name, x_q, y, node.attrs, source=node.source)
            )
            return None
        why = low.needs_output(node)
        if why:
            return why
        out = node.outputs[0]
        y_q = low.int8_output(out)
        low.emit(build_qavgpool(low.g, node.name, x_q, y_q, node.attrs, source=node.source), out, y_q)
        return None

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        if node.attrs["layout"] != "NHWC":
            raise UnsupportedError(f"node '{node.source}': pooling kernels run channels-last only")
        m = self._dims(node, graph)
        a = node.attrs
        wh = _windows(m["H"], m["KH"], m["SH"], m["DH"], m["PT"], m["PB"], m["OH"], bool(a["count_include_pad"]))
        ww = _windows(m["W"], m["KW"], m["SW"], m["DW"], m["PL"], m["PR"], m["OW"], bool(a["count_include_pad"]))
        padded = any(m[k] for k in ("PT", "PL", "PB", "PR")) or a["ceil_mode"]
        dt = graph.tensor(node.inputs[0]).dtype
        lowest = {"float32": "-INFINITY", "int8": "INT8_MIN", "uint8": "0"}[dt]
        return dict(
            m=m,
            kind=a["kind"],
            padded=padded,
            T=ctype(dt),
            lowest=lowest,
            is_float=dt == "float32",
            global_pool=a.get("is_global", False),
            include_pad=bool(a["count_include_pad"]),
            uniform=(not padded) or (a["kind"] == "avg" and a["count_include_pad"] and not a["ceil_mode"]),
            div_h=[c for _, _, c in wh],
            div_w=[c for _, _, c in ww],
        )


# -- N-D pooling (3D windows, MaxPool's Indices, LpPool) ----------------------------------------
#: Element types per kind of PoolND: a maximum only compares, averages and p-norms compute in float.
POOL_ND_DTYPES = {"max": ("float32", "int8", "uint8"), "avg": ("float32",), "lp": ("float32",)}


def import_pool_nd(ctx: Any, kind: str, p: int = 0) -> Node:
    """A PoolND node (kind "max", "avg" or "lp") from MaxPool / AveragePool / LpPool and their
    Global forms: every spatial rank 1-3, and MaxPool's Indices output (attr `indices`)."""
    xs = ctx.shape(0)
    n = len(xs) - 2
    if n not in (1, 2, 3):
        ctx.unsupported(f"only 1D, 2D and 3D pooling is supported (input rank {len(xs)})")
    if ctx.dtype(0) not in POOL_ND_DTYPES[kind]:
        ctx.unsupported(f"element type {ctx.dtype(0)} (supported: {', '.join(POOL_ND_DTYPES[kind])})")
    if any(int(d) == 0 for d in xs):
        ctx.unsupported(f"zero-size input {list(xs)}")
    indices = len(ctx.outputs) > 1 and bool(ctx.outputs[1])
    common = dict(kind=kind, p=int(p), layout="NCHW", indices=indices, storage_order=int(ctx.attr("storage_order", 0)))
    if ctx.op_type.startswith("Global"):
        return ctx.make_node(
            "PoolND",
            inputs=ctx.inputs[:1],
            outputs=ctx.outputs[:1],
            kernel=[int(v) for v in xs[2:]],
            strides=[1] * n,
            pads=[0] * (2 * n),
            dilations=[1] * n,
            ceil_mode=0,
            count_include_pad=0,
            is_global=True,
            **common,
        )
    kernel, strides, dil, pads = window_attrs(ctx, xs, n)
    return ctx.make_node(
        "PoolND",
        inputs=ctx.inputs[:1],
        outputs=ctx.outputs[:2] if indices else ctx.outputs[:1],
        kernel=kernel,
        strides=strides,
        pads=pads,
        dilations=dil,
        ceil_mode=int(ctx.attr("ceil_mode", 0)),
        count_include_pad=int(ctx.attr("count_include_pad", 0)),
        is_global=False,
        **common,
    )


def pool_nd_geometry(node: Node, graph: Graph) -> dict[str, Any]:
    """Sizes of a PoolND node per spatial dim (lists): input `size`, kernel `k`, stride `s`,
    dilation `d`, pads `pb`/`pe`, output `out` (ceil_mode's last window starts inside the
    input or its begin padding, as onnx.reference and onnxruntime say)."""
    a = node.attrs
    x = graph.tensor(node.inputs[0]).shape
    n = len(a["kernel"])
    size = [int(v) for v in x[2:]]
    k, s, d = list(a["kernel"]), list(a["strides"]), list(a["dilations"])
    pb, pe = list(a["pads"][:n]), list(a["pads"][n:])
    out = []
    for i in range(n):
        o = conv_out_size(size[i], k[i], s[i], d[i], pb[i], pe[i], bool(a["ceil_mode"]))
        if a["ceil_mode"] and (o - 1) * s[i] >= size[i] + pb[i]:
            o -= 1
        out.append(o)
    return dict(N=int(x[0]), C=int(x[1]), size=size, k=k, s=s, d=d, pb=pb, pe=pe, out=out)


def _flat_multipliers(size: list[int], storage_order: int) -> list[int]:
    """What each spatial index is multiplied by in MaxPool's Indices: row-major (storage_order 0)
    or column-major over the spatial dims (1)."""
    n = len(size)
    if storage_order:
        return [int(np.prod(size[:i], dtype=np.int64)) for i in range(n)]
    return [int(np.prod(size[i + 1 :], dtype=np.int64)) for i in range(n)]


def pool_nd_reference(node: Node, g: dict[str, Any], x: np.ndarray) -> list[np.ndarray]:
    """Float64 pooling over every kernel tap as one strided view of the padded input: max (first
    maximum wins, with its flat index), average (count with or without the pads) or p-norm."""
    a = node.attrs
    n, size, k, s, d, pb, pe, out = (len(g["k"]), g["size"], g["k"], g["s"], g["d"], g["pb"], g["pe"], g["out"])
    ext = [max(0, (out[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - size[i] - pb[i] - pe[i]) for i in range(n)]
    widths = [(0, 0), (0, 0)] + [(pb[i], pe[i] + ext[i]) for i in range(n)]
    xp = np.pad(x.astype(np.float64), widths)
    valid = np.pad(np.ones(size, bool), widths[2:])
    inpad = np.pad(np.ones([size[i] + pb[i] + pe[i] for i in range(n)], bool), [(0, e) for e in ext])
    flat = np.pad(
        sum(
            np.arange(size[i]).reshape([-1 if j == i else 1 for j in range(n)]) * m
            for i, m in enumerate(_flat_multipliers(size, a["storage_order"]))
        )
        * np.ones(size, np.int64),
        widths[2:],
    )
    lead = x.shape[:2]
    kind = a["kind"]
    acc = np.full((*lead, *out), -np.inf if kind == "max" else 0.0)
    arg = np.full((*lead, *out), -1, np.int64)
    count = np.zeros(out)
    for kidx in np.ndindex(*k):
        sl = tuple(slice(kidx[i] * d[i], kidx[i] * d[i] + (out[i] - 1) * s[i] + 1, s[i]) for i in range(n))
        v, ok = xp[(slice(None), slice(None)) + tuple(sl)], valid[sl]
        count += inpad[sl] if a["count_include_pad"] else ok
        if kind == "max":
            better = ok & ((v > acc) | (arg < 0) | np.isnan(v))
            better &= ~np.isnan(acc) | (arg < 0)  # a NaN stays the maximum
            acc = np.where(better, v, acc)
            arg = np.where(better, flat[sl], arg)
        elif kind == "avg":
            with np.errstate(invalid="ignore"):
                acc = acc + np.where(ok, v, 0.0)
        else:
            acc = acc + np.where(ok, np.abs(v) ** a["p"], 0.0)
    if kind == "avg":
        acc = acc / np.maximum(count, 1)
    elif kind == "lp":
        acc = acc ** (1.0 / a["p"])
    elif x.dtype.kind != "f":
        acc = np.where(arg < 0, float(np.iinfo(x.dtype).min), acc)
    y = np.ascontiguousarray(acc.astype(x.dtype))
    if not a["indices"]:
        return [y]
    plane = int(np.prod(size, dtype=np.int64))
    base = np.arange(lead[0] * lead[1], dtype=np.int64).reshape(*lead, *([1] * n)) * plane
    return [y, np.ascontiguousarray(np.where(arg < 0, -1, arg + base))]


@register
class PoolND(OpDef):
    """Pooling in NCHW over 1-3 spatial dims: 3D MaxPool/AveragePool, MaxPool with its Indices
    output, LpPool. The 1D/2D pools without Indices keep the channels-last `Pool` (and its int8
    forms); this one is the plain loop nest, float32 (int8/uint8 for max), never channels-last."""

    op = "PoolND"
    template = "pool_nd.c.j2"
    dtypes: tuple[str, ...] = ("float32", "int8", "uint8")
    int8_kernel = True

    def keeps_input_grid(self, node: Node) -> bool:
        return node.attrs["kind"] == "max"  # a maximum is one of the input values

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """Max pooling on the input's grid (the same kernel on int8); averages, p-norms and
        Indices stay float (no N-D integer kernel)."""
        if node.attrs["kind"] != "max" or node.attrs["indices"]:
            return f"no int8 kernel for N-D {node.attrs['kind']} pooling" + (
                " with Indices" if node.attrs["indices"] else ""
            )
        x_q = low.as_int8(node.inputs[0])
        low.preserving(node, x_q, lambda y: Node(node.name, "PoolND", [x_q], [y], dict(node.attrs), source=node.source))
        return None

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        g = pool_nd_geometry(node, graph)
        shape = (g["N"], g["C"], *g["out"])
        res: list[OutputType] = [(shape, graph.tensor(node.inputs[0]).dtype)]
        if node.attrs["indices"]:
            res.append((shape, "int64"))
        return res

    def macs(self, node: Node, graph: Graph) -> int:
        g = pool_nd_geometry(node, graph)
        return g["N"] * g["C"] * int(np.prod(g["out"])) * int(np.prod(g["k"]))

    def params(self, node: Node, graph: Graph) -> int:
        return 0

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return pool_nd_reference(node, pool_nd_geometry(node, graph), inputs[0])

    def check_supported(self, node: Node, graph: Graph) -> None:
        super().check_supported(node, graph)
        dt = graph.tensor(node.inputs[0]).dtype
        if dt not in POOL_ND_DTYPES[node.attrs["kind"]]:
            raise UnsupportedError(
                f"node '{node.source or node.name}' (PoolND): {node.attrs['kind']} pooling of {dt} (float32 only)"
            )

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a = node.attrs
        g = pool_nd_geometry(node, graph)
        lead = 3 - len(g["k"])  # 1D and 2D run as 3D with leading dims of 1

        def dims(v: list[int], fill: int) -> list[int]:
            return [fill] * lead + list(v)

        size, out = dims(g["size"], 1), dims(g["out"], 1)
        k, s, dl = dims(g["k"], 1), dims(g["s"], 1), dims(g["d"], 1)
        pb, pe = dims(g["pb"], 0), dims(g["pe"], 0)
        inc = bool(a["count_include_pad"])
        divs = [
            [max(1, c) for _, _, c in _windows(size[i], k[i], s[i], dl[i], pb[i], pe[i], out[i], inc)] for i in range(3)
        ]
        padded = any(pb) or any(pe) or bool(a["ceil_mode"])
        dt = graph.tensor(node.inputs[0]).dtype
        return dict(
            NC=g["N"] * g["C"],
            S=size,
            O=out,
            K=k,
            ST=s,
            DL=dl,
            PB=pb,
            kind=a["kind"],
            p=a["p"],
            padded=padded,
            T=ctype(dt),
            is_float=dt == "float32",
            lowest={"float32": "-INFINITY", "int8": "INT8_MIN", "uint8": "0"}[dt],
            indices=a["indices"],
            mult=dims(_flat_multipliers(g["size"], a["storage_order"]), 0),
            uniform=(not padded) or (inc and not a["ceil_mode"]),
            divs=divs,
        )
