"""Pooling: MaxPool, AveragePool (count_include_pad, ceil_mode), GlobalAverage/MaxPool.
Imported NCHW; the layout pass runs them channels-last like Conv.

MaxPool also runs on int8/uint8 (ONNX allows them since opset 12): the maximum of quantized
values is the quantized maximum when input and output share scale and zero point, so the int8
lowering reuses this op unchanged (``build_qmaxpool``). Padded taps are skipped, never read."""

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
        if n not in (1, 2):
            ctx.unsupported(f"only 1D and 2D pooling is supported (input rank {len(xs)})")
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
        if len(ctx.outputs) > 1 and ctx.outputs[1]:
            ctx.unsupported("the Indices output of MaxPool is not supported")
        if int(ctx.attr("storage_order", 0)):
            ctx.unsupported("storage_order=1 is not supported")
        if ctx.attr("kernel_shape") is None:
            ctx.invalid("the kernel_shape attribute is required")
        kernel = [int(k) for k in ctx.attr("kernel_shape")]
        strides = [int(s) for s in (ctx.attr("strides") or [1] * n)]
        dil = [int(d) for d in (ctx.attr("dilations") or [1] * n)]
        pads = resolve_pads(ctx, xs[2:], kernel, strides, dil)
        if any(pads[i] >= kernel[i] or pads[i + n] >= kernel[i] for i in range(n)):
            ctx.invalid(f"pads {pads} must be smaller than the kernel {kernel} (onnxruntime refuses larger ones)")
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
