"""ONNX optional values whose presence is known at compile time.

An optional built in the graph (Optional with or without an input) is resolved at import, like a
sequence (tinyc/ops/sequences.py): the side table `Graph.optionals` maps its name to the element
(a tensor or sequence name) or None when empty. OptionalHasElement then folds to a constant and
OptionalGetElement to an Identity. Optional-typed graph inputs and outputs stay refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tinyc.ops.base import OpDef, register
from tinyc.ops.sequences import define_sequence

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext


def element(ctx: ImportContext) -> str | None:
    """What input 0 holds: a tensor or sequence name, or None (an empty optional or no input)."""
    if not ctx.has_input(0):
        return None
    name = ctx.inputs[0]
    if name in ctx.graph.optionals:
        return ctx.graph.optionals[name]
    return name  # opset 18+: a plain tensor or sequence is accepted as a present element


class _OptionalOp(OpDef):
    """No kernel: resolved at import (see the module doc)."""

    template = None
    dtypes = ()


@register
class Optional(_OptionalOp):
    """Optional(x): present; Optional() with attribute `type`: empty."""

    op = "Optional"
    onnx_ops = ("Optional",)

    def import_onnx(self, ctx):
        if not ctx.has_input(0) and not ctx.has_attr("type"):
            ctx.invalid("an empty Optional needs the attribute 'type'")
        ctx.graph.optionals[ctx.outputs[0]] = ctx.inputs[0] if ctx.has_input(0) else None
        return []


@register
class OptionalHasElement(_OptionalOp):
    op = "OptionalHasElement"
    onnx_ops = ("OptionalHasElement",)

    def import_onnx(self, ctx):
        return ctx.set_constant(0, np.asarray(element(ctx) is not None))


@register
class OptionalGetElement(_OptionalOp):
    op = "OptionalGetElement"
    onnx_ops = ("OptionalGetElement",)

    def import_onnx(self, ctx):
        value = element(ctx)
        if value is None:
            ctx.invalid("the optional is empty (onnxruntime fails at run time here)")
        if value in ctx.graph.sequences:
            return define_sequence(ctx, 0, ctx.graph.sequences[value])
        return ctx.make_node("Identity", inputs=[value], outputs=ctx.outputs[:1])
