"""Signal generators: the window functions (HannWindow, HammingWindow, BlackmanWindow) and
MelWeightMatrix.

A window depends only on its (constant) size, so it folds to a constant at import: a model that
multiplies frames by `HannWindow(400)` ships the 400 values as weights and runs no code for them.
MelWeightMatrix folds the same way when all five inputs are constant; when the two edge
frequencies arrive at run time (the shape still needs `num_mel_bins` and `dft_length` constant) a
small kernel builds the triangle filters in double precision, as onnx's reference does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, register, register_instance

WINDOW_DTYPES = tuple(d for d in CTYPES if d != "bool")


def _out_dtype(ctx: Any, default: int = 1) -> str:
    """The `output_datatype` attribute as a tinyc dtype name (refused when C has no such type)."""
    code = int(ctx.attr("output_datatype", default))
    try:
        name = np.dtype(helper.tensor_dtype_to_np_dtype(code)).name
    except Exception:
        ctx.unsupported(f"output_datatype {code}")
    if name not in WINDOW_DTYPES:
        ctx.unsupported(f"output_datatype {name} (supported: {', '.join(WINDOW_DTYPES)})")
    return name


def _scalar(ctx: Any, i: int, what: str) -> Any:
    v = np.asarray(ctx.require_const(i, what)).reshape(-1)
    if v.size != 1:
        ctx.unsupported(f"input {i} ({what}) must be a scalar, got {v.size} values")
    return v[0]


def window(kind: str, size: int, periodic: bool) -> np.ndarray:
    """The window of `size` points in float64 (onnx's reference computes in float64 and casts)."""
    n = np.arange(size, dtype=np.float64)
    denom = size if periodic else size - 1
    with np.errstate(all="ignore"):
        if kind == "HannWindow":
            return np.sin(n * np.pi / denom) ** 2
        if kind == "HammingWindow":
            alpha = 25.0 / 46.0
            return alpha - np.cos(n * np.pi * 2 / denom) * (1 - alpha)
        return 0.42 - 0.5 * np.cos(n * np.pi * 2 / denom) + 0.08 * np.cos(n * np.pi * 4 / denom)


class Window(OpDef):
    """HannWindow / HammingWindow / BlackmanWindow: input `size` (constant scalar), attrs
    `periodic` (default 1) and `output_datatype` (default float). Always folded at import."""

    dtypes = ("int32", "int64")

    def __init__(self, name: str) -> None:
        self.op = name
        self.onnx_ops = (name,)

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        size = int(_scalar(ctx, 0, "size"))
        if size < 0:
            ctx.invalid(f"negative window size {size}")
        dtype = _out_dtype(ctx)
        values = window(self.op, size, bool(int(ctx.attr("periodic", 1))))
        with np.errstate(all="ignore"):
            return ctx.set_constant(0, values.astype(dtype))


for _name in ("HannWindow", "HammingWindow", "BlackmanWindow"):
    register_instance(Window(_name))


def mel_bins(num_mel: int, dft_length: int, sample_rate: float, lower: Any, upper: Any) -> np.ndarray:
    """The num_mel + 2 triangle corner bins, in onnx's reference's arithmetic (the edges keep
    their own element type through the log, the rest is float64)."""
    low = 2595 * np.log1p(lower / 700) / np.log(10)
    high = 2595 * np.log1p(upper / 700) / np.log(10)
    step = (high - low) / (num_mel + 2)
    f = np.arange(num_mel + 2) * step + low
    f = 700 * np.expm1(f / 2595 * np.log(10))
    return (((dft_length + 1) * f) // sample_rate).astype(np.int64)


def mel_matrix(num_mel: int, dft_length: int, bins: np.ndarray) -> np.ndarray:
    """[dft_length // 2 + 1, num_mel] triangles rising from bins[i] to bins[i+1], falling to bins[i+2]."""
    out = np.zeros((dft_length // 2 + 1, num_mel))
    for i in range(num_mel):
        lo, ce, hi = (int(b) for b in bins[i : i + 3])
        if ce == lo:
            out[ce, i] = 1
        else:
            for j in range(lo, ce + 1):
                out[j, i] = (j - lo) / (ce - lo)
        for j in range(ce, hi):
            out[j, i] = (hi - j) / (hi - ce)
    return out


@register
class MelWeightMatrix(OpDef):
    """inputs: num_mel_bins, dft_length, sample_rate (constant), lower_edge_hertz,
    upper_edge_hertz (constant: folded; at run time: the kernel). attrs (IR): num_mel,
    dft_length, sample_rate, dtype."""

    op = "MelWeightMatrix"
    onnx_ops = ("MelWeightMatrix",)
    template = "mel_weight_matrix.c.j2"
    dtypes = ("int32", "int64")

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        num_mel = int(_scalar(ctx, 0, "num_mel_bins"))
        dft_length = int(_scalar(ctx, 1, "dft_length"))
        sample_rate = _scalar(ctx, 2, "sample_rate")
        if num_mel <= 0 or dft_length <= 0 or sample_rate <= 0:
            ctx.invalid("num_mel_bins, dft_length and sample_rate must be positive")
        edge_type = ctx.dtype(3)
        if edge_type not in ("float32", "float64") or ctx.dtype(4) != edge_type:
            ctx.unsupported(f"edge frequencies of types {edge_type}/{ctx.dtype(4)} (float32 or float64, both alike)")
        return ctx.make_node(
            "MelWeightMatrix",
            inputs=ctx.inputs[3:5],
            outputs=ctx.outputs[:1],
            num_mel=num_mel,
            dft_length=dft_length,
            sample_rate=sample_rate.item(),
            dtype=_out_dtype(ctx),
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        a = node.attrs
        return [((a["dft_length"] // 2 + 1, a["num_mel"]), a["dtype"])]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        lo, hi = (np.asarray(v).reshape(-1)[0] for v in inputs[:2])
        bins = mel_bins(a["num_mel"], a["dft_length"], a["sample_rate"], lo, hi)
        return [mel_matrix(a["num_mel"], a["dft_length"], bins).astype(a["dtype"])]

    def check_supported(self, node: Node, graph: Graph) -> None:
        """`dtypes` names the ONNX num_mel_bins types (checked at import); the IR inputs are the
        edges, float32 or float64, also checked at import."""

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a = node.attrs
        return {
            "num_mel": a["num_mel"],
            "dft_length": a["dft_length"],
            "rows": a["dft_length"] // 2 + 1,
            "sample_rate": repr(float(a["sample_rate"])),
            "T": CTYPES[a["dtype"]],
            "ET": CTYPES[graph.tensor(node.inputs[0]).dtype],
        }
