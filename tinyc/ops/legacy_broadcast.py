"""Axis broadcasting of opset < 7 binary ops (Add/Sub/Mul/Div... with `broadcast=1` and `axis`).

Before opset 7, B's shape was matched against A's starting at dimension `axis` (not aligned to
the trailing dimensions as numpy does): A [2, 3] + B [2, 1] with axis=0 adds B along rows. So B
is reshaped to A's rank, its dimensions at [axis, axis + rank(B)) and 1 elsewhere, and the op
then broadcasts as today. Called from the binary ops' import (tinyc/ops/elementwise.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinyc.ir import Node

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext


def axis_broadcast(ctx: ImportContext, op: str) -> list[Node]:
    """Reshape B for its legacy `axis`, then the binary op with numpy broadcasting."""
    ins = [i for i in ctx.inputs if i]
    if len(ins) != 2:
        ctx.invalid(f"expects two operands, got {len(ins)}")
    if ctx.dtype(0) != ctx.dtype(1):
        ctx.unsupported(f"mixed element types {ctx.dtype(0)} and {ctx.dtype(1)}")
    a, b = ctx.shape(0), ctx.shape(1)
    axis = int(ctx.attr("axis"))
    if axis < 0:
        axis += len(a)
    if not 0 <= axis <= len(a) - len(b):
        ctx.invalid(f"axis {ctx.attr('axis')} cannot place B {b} inside A {a}")
    if any(db not in (1, da) for da, db in zip(a[axis:], b)):
        ctx.invalid(f"B {b} does not match A {a} from axis {axis}")
    shape = (1,) * axis + tuple(b) + (1,) * (len(a) - axis - len(b))
    nodes: list[Node] = []
    rhs = ins[1]
    if shape != tuple(b):
        value = ctx.const(1)
        if value is not None:
            rhs = ctx.add_constant("axis_broadcast", value.reshape(shape))
        else:
            rhs = ctx.graph.unique_name(f"{ctx.name}_axis_broadcast")
            nodes.append(ctx.make_node("Reshape", inputs=[ins[1]], outputs=[rhs], shape=list(shape)))
    return [*nodes, ctx.make_node(op, inputs=[ins[0], rhs], outputs=ctx.outputs[:1])]
