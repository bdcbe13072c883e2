"""DFT and STFT: a mixed-radix FFT, or the direct transform over a twiddle table.

Both ops reduce to one loop nest over signals (a line of `taps` points along the DFT axis, or one
frame of an STFT signal, optionally weighted by a window), so they share the kernels and their
implementations (the schedule knob `variant`):
  * "fft" (applies for n > 1 with no prime factor above 7, except the inverse one-sided form): a
    Stockham FFT, one pass per factor of n (4s first, then a 2 moved to the front, then odd
    primes), radix-2/3/4/5 butterflies in the arithmetic order of numpy's pocketfft, and a plain
    p-point sum for other primes. Where the factorisations agree (pocketfft also has a radix-8
    pass, so not for multiples of 8) float32 results equal numpy's to the last bit, as checked
    on the onnx inverse test data (n = 10). Serial, scratch of 4 n values.
  * "direct": output bin k sums x[t] * exp(-+2 pi i k t / n), the phase index (k t) mod n stepping
    by k over a constant table of n cosines and sines. O(n^2), no scratch, any length; it also
    does the inverse one-sided transform (the real signal of length n from the one-sided
    spectrum, numpy's irfft: the imaginary parts of bins 0 and n/2 are ignored).

Default variant: "fft" for inverse transforms and for n >= 64, "direct" for shorter forward ones.
Both are accurate to float32 rounding; they differ in *which* rounding. The direct sum keeps the
exact zeros of symmetric inputs (near-)exact, as onnx's forward test data (computed in float64)
has them, while the inverse test data is numpy's float32 pocketfft output, whose rounding noise
the fft variant reproduces. Below 64 points the O(n^2) sum costs little; a tuner may
pick either (knob `variant`).

Layout: ONNX's [..., n, ..., 1 | 2] (real, or interleaved real/imaginary in the last dimension).
inverse: the conjugate twiddles and 1/n.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import DTYPE_BYTES, Graph, Node
from tinyc.numerics.literals import c_float
from tinyc.ops.base import CTYPES, OpDef, OutputType, register
from tinyc.ops.impl import Implementation, applicable, by_name

DTYPES = ("float32", "float64")


def _scalar(ctx: Any, i: int, what: str) -> int:
    v = np.asarray(ctx.require_const(i, what)).reshape(-1)
    if v.size != 1:
        ctx.unsupported(f"input {i} ({what}) must be a scalar, got {v.size} values")
    return int(v[0])


def _complex(x: np.ndarray) -> np.ndarray:
    """[..., 1 | 2] as complex128 [...]."""
    x = x.astype(np.float64)
    return x[..., 0] + (1j * x[..., 1] if x.shape[-1] == 2 else 0)


def dft_reference(x: np.ndarray, axis: int, n: int, inverse: bool, onesided: bool) -> np.ndarray:
    """onnx's DFT in float64: complex [..., 2] out, or [..., 1] for the inverse one-sided form."""
    c = _complex(x)
    if inverse and onesided:
        return np.fft.irfft(c, n=n, axis=axis)[..., None]
    y = np.fft.ifft(c, n=n, axis=axis) if inverse else np.fft.fft(c, n=n, axis=axis)
    if onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return np.stack([y.real, y.imag], axis=-1)


def _out_bins(n: int, inverse: bool, onesided: bool) -> int:
    return n // 2 + 1 if onesided and not inverse else n


def _table(values: np.ndarray, dtype: str) -> str:
    lit = c_float if dtype == "float32" else (lambda v: repr(float(v)))
    items = [lit(v) for v in values]
    return ",\n".join("        " + ", ".join(items[i : i + 8]) for i in range(0, len(items), 8))


def transform_context(
    x_dtype: str, n: int, taps: int, inverse: bool, onesided: bool, geometry: dict[str, int]
) -> dict[str, Any]:
    """Template variables shared by DFT and STFT: the twiddle tables and the mode."""
    phase = 2 * np.pi * np.arange(n) / n
    sign = 1.0 if inverse else -1.0
    return {
        "T": CTYPES[x_dtype],
        "n": n,
        "taps": taps,
        "K": n if inverse else _out_bins(n, inverse, onesided),
        "irfft": inverse and onesided,
        "scale": (c_float(1.0 / n) if x_dtype == "float32" else repr(1.0 / n)) if inverse else None,
        "cos_table": _table(np.cos(phase), x_dtype),
        "sin_table": _table(sign * np.sin(phase), x_dtype),
        **geometry,
    }


def factors(n: int) -> list[int]:
    """The FFT passes' radices: 4s, a remaining 2 first, then odd primes ascending."""
    out: list[int] = []
    while n % 4 == 0:
        out.append(4)
        n //= 4
    if n % 2 == 0:
        out.insert(0, 2)
        n //= 2
    p = 3
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 2
    return out + ([n] if n > 1 else [])


def _lit(v: float, dtype: str) -> str:
    return c_float(v) if dtype == "float32" else repr(float(v))


def fft_passes(n: int, inverse: bool, dtype: str) -> tuple[list[dict[str, Any]], int]:
    """Per pass: radix p, l1, ido, source / destination offsets (in T) in the scratch, and the
    butterfly constants; plus where the result lies."""
    sign = 1.0 if inverse else -1.0
    consts = {
        3: [-0.5, sign * np.sin(2 * np.pi / 3)],
        5: [
            np.cos(2 * np.pi / 5),
            sign * np.sin(2 * np.pi / 5),
            np.cos(4 * np.pi / 5),
            sign * np.sin(4 * np.pi / 5),
            -sign * np.sin(2 * np.pi / 5),
        ],
    }
    passes, l1, src = [], 1, 0
    for p in factors(n):
        ido = n // (l1 * p)
        dst = 2 * n - src
        passes.append(
            {"p": p, "l1": l1, "ido": ido, "src": src, "dst": dst, "c": [_lit(v, dtype) for v in consts.get(p, [])]}
        )
        l1 *= p
        src = dst
    return passes, src


def _transform_attrs(node: Node) -> tuple[int, bool, bool]:
    a = node.attrs
    return a["n"], bool(a.get("inverse", False)), bool(a["onesided"])


def _fft_applies(node: Node, graph: Graph) -> bool:
    n, inverse, onesided = _transform_attrs(node)
    return n > 1 and not (inverse and onesided) and max(factors(n)) <= 7


def _fft_scratch(node: Node, graph: Graph, schedule: dict[str, Any]) -> int:
    return 4 * node.attrs["n"] * DTYPE_BYTES[graph.tensor(node.inputs[0]).dtype]


FFT_FROM = 64  # forward transforms shorter than this default to the direct sum


def _fft_rank(node: Node, graph: Graph) -> int:
    """Default choice: the FFT for inverse transforms and from 64 points on, the direct sum for
    short forward ones (see the module docstring)."""
    n, inverse, _ = _transform_attrs(node)
    return 10 if inverse or n >= FFT_FROM else -10


IMPLEMENTATIONS = (
    Implementation("fft", "dft/fft.c.j2", _fft_applies, scratch=_fft_scratch, priority=_fft_rank),
    Implementation("direct", "dft/direct.c.j2"),
)


class _Transform(OpDef):
    """What DFT and STFT share: the implementations and their choice."""

    implementations = IMPLEMENTATIONS

    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        return {"variant": [i.name for i in applicable(self.implementations, node, graph)]}

    def implementation(self, node: Node, graph: Graph, schedule: dict[str, Any] | None, target: str) -> Implementation:
        variant = (schedule or {}).get("variant") or self.knobs(node, graph)["variant"][0]
        return by_name(self.implementations, variant, f"node '{node.source or node.name}' ({node.op})")

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        return self.implementation(node, graph, schedule, target).scratch(node, graph, schedule)

    def variant_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        impl = self.implementation(node, graph, schedule, target)
        out: dict[str, Any] = {"impl_template": impl.template}
        if impl.name == "fft":
            n, inverse, _ = _transform_attrs(node)
            out["passes"], out["result"] = fft_passes(n, inverse, graph.tensor(node.inputs[0]).dtype)
        return out


@register
class DFT(_Transform):
    """attrs: axis (of the input, not the last), n (dft_length), inverse, onesided."""

    op = "DFT"
    onnx_ops = ("DFT",)
    template = "dft.c.j2"
    dtypes = DTYPES

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        shape = ctx.shape(0)
        rank = len(shape)
        if rank < 2 or shape[-1] not in (1, 2):
            ctx.invalid(f"input shape {shape}: the last dimension must be 1 (real) or 2 (complex)")
        if ctx.opset >= 20:
            axis = _scalar(ctx, 2, "axis") if ctx.has_input(2) else -2
        else:
            axis = int(ctx.attr("axis", 1))
        if not -rank <= axis < rank or axis % rank == rank - 1:
            ctx.invalid(f"axis {axis} for input rank {rank} (the last dimension holds real/imaginary)")
        axis %= rank
        inverse, onesided = bool(int(ctx.attr("inverse", 0))), bool(int(ctx.attr("onesided", 0)))
        if ctx.has_input(1):
            n = _scalar(ctx, 1, "dft_length")
        else:
            n = 2 * (shape[axis] - 1) if inverse and onesided else shape[axis]
        if n <= 0:
            ctx.invalid(f"dft_length {n}")
        if n > 32768:
            ctx.unsupported(f"dft_length {n} > 32768 (the direct transform's phase index is int32)")
        return ctx.make_node(
            "DFT", inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], axis=axis, n=n, inverse=inverse, onesided=onesided
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        a = node.attrs
        shape = list(t.shape)
        shape[a["axis"]] = _out_bins(a["n"], a["inverse"], a["onesided"])
        shape[-1] = 1 if a["inverse"] and a["onesided"] else 2
        return [(tuple(shape), t.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        y = dft_reference(inputs[0], a["axis"], a["n"], a["inverse"], a["onesided"])
        return [y.astype(inputs[0].dtype)]

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.outputs[0]).size * int(graph.tensor(node.inputs[0]).shape[node.attrs["axis"]])

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        a = node.attrs
        ax, n = a["axis"], a["n"]
        cin = int(t.shape[-1])
        inner = int(np.prod(t.shape[ax + 1 : -1], dtype=np.int64))
        n_in = int(t.shape[ax])
        limit = n // 2 + 1 if a["inverse"] and a["onesided"] else n
        geometry = {
            "outer": int(np.prod(t.shape[:ax], dtype=np.int64)),
            "frames": 1,
            "inner": inner,
            "cin": cin,
            "s_outer": n_in * inner * cin,
            "s_frame": 0,
            "s_tap": inner * cin,
            "cout": 1 if a["inverse"] and a["onesided"] else 2,
            "window": False,
        }
        ctx = transform_context(t.dtype, n, min(n_in, limit), a["inverse"], a["onesided"], geometry)
        return {**ctx, "inverse": a["inverse"], **self.variant_context(node, graph, schedule, target)}


@register
class STFT(_Transform):
    """inputs: signal [batch, length, 1 | 2], window (optional, may be a run-time input).
    attrs: step (frame_step), n (frame_length), onesided."""

    op = "STFT"
    onnx_ops = ("STFT",)
    template = "dft.c.j2"
    dtypes = DTYPES

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        shape = ctx.shape(0)
        if len(shape) != 3 or shape[-1] not in (1, 2):
            ctx.invalid(f"signal shape {shape} (STFT takes [batch, length, 1 | 2])")
        step = _scalar(ctx, 1, "frame_step")
        window = ctx.inputs[2] if ctx.has_input(2) else ""
        win_len = int(ctx.shape(2)[0]) if window else None
        if window and (len(ctx.shape(2)) != 1 or ctx.dtype(2) != ctx.dtype(0)):
            ctx.unsupported(f"window of shape {ctx.shape(2)} and type {ctx.dtype(2)} (1-D, the signal's type)")
        if ctx.has_input(3):
            n = _scalar(ctx, 3, "frame_length")
            if win_len is not None and win_len != n:
                ctx.unsupported(f"frame_length {n} differs from the window length {win_len}")
        else:
            n = win_len if win_len is not None else int(shape[1])
        if step <= 0 or n <= 0 or n > shape[1]:
            ctx.invalid(f"frame_step {step}, frame_length {n} for a signal of {shape[1]} samples")
        if n > 32768:
            ctx.unsupported(f"frame_length {n} > 32768")
        onesided = bool(int(ctx.attr("onesided", 1)))
        return ctx.make_node(
            "STFT", inputs=[ctx.inputs[0], window], outputs=ctx.outputs[:1], step=step, n=n, onesided=onesided
        )

    def _frames(self, node: Node, graph: Graph) -> int:
        return 1 + (int(graph.tensor(node.inputs[0]).shape[1]) - node.attrs["n"]) // node.attrs["step"]

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        k = _out_bins(node.attrs["n"], False, node.attrs["onesided"])
        return [((int(t.shape[0]), self._frames(node, graph), k, 2), t.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, w = inputs[0], inputs[1] if len(inputs) > 1 else None
        a = node.attrs
        n, step, frames = a["n"], a["step"], self._frames(node, graph)
        idx = np.arange(frames)[:, None] * step + np.arange(n)[None, :]
        framed = x.astype(np.float64)[:, idx, :]  # [batch, frames, n, c]
        if w is not None:
            framed = framed * w.astype(np.float64)[None, None, :, None]
        return [dft_reference(framed, 2, n, False, a["onesided"]).astype(x.dtype)]

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.outputs[0]).size * node.attrs["n"]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        a = node.attrs
        cin = int(t.shape[-1])
        geometry = {
            "outer": int(t.shape[0]),
            "frames": self._frames(node, graph),
            "inner": 1,
            "cin": cin,
            "s_outer": int(t.shape[1]) * cin,
            "s_frame": a["step"] * cin,
            "s_tap": cin,
            "cout": 2,
            "window": bool(node.inputs[1]),
        }
        ctx = transform_context(t.dtype, a["n"], a["n"], False, a["onesided"], geometry)
        return {**ctx, "inverse": False, **self.variant_context(node, graph, schedule, target)}
