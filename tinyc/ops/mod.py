"""Mod and BitShift: broadcasting binaries whose C needs statements (sign fix-ups, guards
against C's undefined cases), rendered as a per-layer static helper (binary_fn.c.j2).

Mod: fmod=1 is C's truncated remainder (fmod / `%`); fmod=0 is numpy's floored mod (result
has the divisor's sign; a zero result takes the divisor's sign for floats). Integer division by
zero (undefined in ONNX) gives 0 instead of trapping, and MIN % -1 gives 0.
BitShift: shifts >= the bit width (or negative) give 0 (or -1 for a negative value shifted
right), like onnx's reference; left shifts of signed values wrap through the unsigned type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, register
from tinyc.ops.elementwise import collapse_broadcast

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext

FLOATS = ("float32", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")


def _check_binary(ctx: ImportContext, dtypes: tuple[str, ...]) -> tuple[int, ...]:
    if len([i for i in ctx.inputs if i]) != 2:
        ctx.unsupported("expects exactly two inputs")
    if ctx.dtype(0) not in dtypes:
        ctx.unsupported(f"element type {ctx.dtype(0)} (supported: {', '.join(dtypes)})")
    if ctx.dtype(1) != ctx.dtype(0):
        ctx.unsupported(f"mixed element types {ctx.dtype(0)} and {ctx.dtype(1)}")
    try:
        return tuple(int(d) for d in np.broadcast_shapes(ctx.shape(0), ctx.shape(1)))
    except ValueError:
        ctx.unsupported(f"shapes {ctx.shape(0)} and {ctx.shape(1)} do not broadcast")


class _Binary(OpDef):
    """Shared shape rule, layout behaviour and broadcasting kernel context."""

    template = "binary_fn.c.j2"
    layout_agnostic = True

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        a, b = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        return [(tuple(int(d) for d in np.broadcast_shapes(a.shape, b.shape)), a.dtype)]

    def body(self, node: Node, dtype: str) -> str:
        raise NotImplementedError

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a, b = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        out = graph.tensor(node.outputs[0])
        dims, (sa, sb) = collapse_broadcast(out.shape, [a.shape, b.shape])
        return {"dims": dims, "sa": sa, "sb": sb, "body": self.body(node, a.dtype)}


@register
class Mod(_Binary):
    """attrs: `fmod` (0: floored, numpy's mod; 1: truncated, C's fmod)."""

    op = "Mod"
    onnx_ops = ("Mod",)
    dtypes = FLOATS + SIGNED + UNSIGNED

    def import_onnx(self, ctx):
        _check_binary(ctx, self.dtypes)
        fmod = int(ctx.attr("fmod", 0))
        if fmod not in (0, 1):
            ctx.unsupported(f"fmod = {fmod} (0 or 1)")
        return ctx.make_node("Mod", inputs=ctx.inputs[:2], outputs=ctx.outputs[:1], fmod=fmod)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a, b = inputs[0], inputs[1]
        with np.errstate(all="ignore"):
            if a.dtype.kind == "f":
                y = np.fmod(a, b) if node.attrs["fmod"] else np.mod(a, b)
            else:
                a2, b2 = np.broadcast_arrays(a, b)
                safe = np.where(b2 == 0, 1, b2).astype(a.dtype)
                if a.dtype.kind == "i":  # MIN % -1 overflows in C: define it as 0
                    safe = np.where(safe == -1, 1, safe).astype(a.dtype)
                y = np.fmod(a2, safe) if node.attrs["fmod"] else np.mod(a2, safe)
                y = np.where(b2 == 0, 0, y)
        return [np.ascontiguousarray(np.asarray(y).astype(a.dtype))]

    def body(self, node: Node, dtype: str) -> str:
        ct = CTYPES[dtype]
        if dtype in FLOATS:
            f = "fmodf" if dtype == "float32" else "fmod"
            if node.attrs["fmod"]:
                return f"    return {f}(a, b);"
            cs = "copysignf" if dtype == "float32" else "copysign"
            return (
                f"    {ct} r = {f}(a, b);\n"
                f"    if (r != 0) {{\n"
                f"        if ((b < 0) != (r < 0)) {{\n"
                f"            r += b;\n"
                f"        }}\n"
                f"    }} else {{\n"
                f"        r = {cs}(({ct})0, b);\n"
                f"    }}\n"
                f"    return r;"
            )
        if dtype in UNSIGNED:
            return f"    return b == 0 ? ({ct})0 : ({ct})(a % b);"
        lines = [
            f"    {ct} r;",
            "    if (b == 0 || b == -1) {",
            f"        return ({ct})0;",
            "    }",
            f"    r = ({ct})(a % b);",
        ]
        if not node.attrs["fmod"]:
            lines += ["    if (r != 0 && ((r < 0) != (b < 0))) {", f"        r = ({ct})(r + b);", "    }"]
        lines.append("    return r;")
        return "\n".join(lines)


_BITS = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64, "int8": 8, "int16": 16, "int32": 32, "int64": 64}
_WIDE = {8: "uint32_t", 16: "uint32_t", 32: "uint32_t", 64: "uint64_t"}


@register
class BitShift(_Binary):
    """attrs: `left` (direction LEFT)."""

    op = "BitShift"
    onnx_ops = ("BitShift",)
    dtypes = UNSIGNED + SIGNED

    def import_onnx(self, ctx):
        _check_binary(ctx, self.dtypes)
        direction = str(ctx.attr("direction", "")).upper()
        if direction not in ("LEFT", "RIGHT"):
            ctx.unsupported(f"direction '{direction}' (LEFT or RIGHT)")
        return ctx.make_node("BitShift", inputs=ctx.inputs[:2], outputs=ctx.outputs[:1], left=direction == "LEFT")

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a, b = np.broadcast_arrays(inputs[0], inputs[1])
        bits = np.iinfo(a.dtype).bits
        bad = (b < 0) | (b >= bits)
        sb = np.where(bad, 0, b).astype(a.dtype)
        signed = a.dtype.kind == "i"
        if node.attrs["left"]:
            u = np.dtype(f"u{a.dtype.itemsize}")
            if signed:
                y = np.left_shift(np.ascontiguousarray(a).view(u), sb.astype(u)).view(a.dtype)
            else:
                y = np.left_shift(a, sb)
            y = np.where(bad, 0, y)
        else:
            y = np.right_shift(a, sb)
            y = np.where(bad, np.where(a < 0, -1, 0) if signed else 0, y)
        return [np.ascontiguousarray(np.asarray(y).astype(a.dtype))]

    def body(self, node: Node, dtype: str) -> str:
        ct = CTYPES[dtype]
        bits = _BITS[dtype]
        wide = _WIDE[bits]
        signed = dtype in SIGNED
        bad = f"b < 0 || b >= {bits}" if signed else f"b >= {bits}"
        if node.attrs["left"]:
            return (
                f"    if ({bad}) {{\n        return ({ct})0;\n    }}\n"
                f"    return ({ct})(({wide})(({wide})a << b) & ({wide}){hex((1 << bits) - 1)}u);"
                if bits < 32
                else f"    if ({bad}) {{\n        return ({ct})0;\n    }}\n    return ({ct})(({wide})a << b);"
            )
        if not signed:
            return f"    if ({bad}) {{\n        return ({ct})0;\n    }}\n    return ({ct})(a >> b);"
        # arithmetic shift without implementation-defined behaviour: shift the complement
        return (
            f"    if ({bad}) {{\n        return ({ct})(a < 0 ? -1 : 0);\n    }}\n"
            f"    return a < 0 ? ({ct})~(({ct})~a >> b) : ({ct})(a >> b);"
        )
