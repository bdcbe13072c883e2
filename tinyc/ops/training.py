"""ai.onnx.preview.training optimizers: Momentum, Adagrad, Adam (one update step).

Each is a fixed elementwise update rule on tensors (the rules of onnx/reference/ops/
aionnx_preview_training/), so it is lowered at import into ordinary ONNX elementwise nodes (Mul, Add,
Sqrt, Where, ...) that then import through their own rules, fold when constant and fuse like any
other elementwise chain: no kernel of its own is needed. R (learning rate) and T (step count) are
scalars and may be run-time inputs: the rules' branches on T > 0 become Where nodes. With several
tensors to optimize, inputs are (R, T, X1..Xn, G1..Gn, state1..staten, ...) and outputs
(X1_new..Xn_new, state1_new.., ...), each group updated independently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper

from tinyc.ops.base import OpDef, register
from tinyc.ops.sequences import emit

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext


class _Builder:
    """ONNX nodes of one update rule, each intermediate value under a fresh name."""

    def __init__(self, ctx: ImportContext, group: int) -> None:
        self.ctx = ctx
        self.tag = f"g{group}"
        self.nodes: list[onnx.NodeProto] = []
        self.count = 0

    def const(self, value: float, dtype: str = "float32") -> str:
        return self.ctx.add_constant(f"{self.tag}_c", np.asarray(value, dtype=dtype))

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        if out is None:
            self.count += 1  # the counter keeps names distinct before any of these nodes is imported
            out = self.ctx.graph.unique_name(f"{self.ctx.name}__{self.tag}_{op_type.lower()}{self.count}")
        name = out
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))
        return name

    def float_t(self, t: str) -> str:
        """T as float32 (it is int64 in the spec)."""
        return self.op("Cast", t, to=onnx.TensorProto.FLOAT)

    def t_positive(self, t: str) -> str:
        return self.op("Greater", t, self.const(0, "int64"))


class _TrainingOp(OpDef):
    """Lowered at import (see the module doc): no kernel."""

    template = None
    dtypes = ()
    n_states = 1  # optimizer state tensors per optimized tensor (Momentum's V, Adagrad's H, Adam's V and H)

    def import_onnx(self, ctx):
        n_in, k = len(ctx.inputs), 2 + self.n_states
        if n_in < 2 + k or (n_in - 2) % k or any(not i for i in ctx.inputs):
            ctx.invalid(f"expects inputs (R, T, X..., G..., {self.n_states} state group(s)), got {n_in} inputs")
        n = (n_in - 2) // k
        if len(ctx.outputs) != n * (1 + self.n_states):
            ctx.invalid(f"{n} optimized tensor(s) need {n * (1 + self.n_states)} outputs, got {len(ctx.outputs)}")
        for i in range(2, n_in):
            if ctx.dtype(i) != "float32":
                ctx.unsupported(f"input {i} is {ctx.dtype(i)}; only float32 tensors are supported")
        r, t = ctx.inputs[0], ctx.inputs[1]
        if ctx.graph.tensor(t).dtype != "int64":
            ctx.invalid(f"T must be int64, got {ctx.graph.tensor(t).dtype}")
        if ctx.graph.tensor(r).dtype != "float32":
            ctx.unsupported(f"R is {ctx.graph.tensor(r).dtype}; only float32 is supported")
        nodes: list[onnx.NodeProto] = []
        for j in range(n):
            b = _Builder(ctx, j)
            xs = [ctx.inputs[2 + j + n * s] for s in range(k)]  # X, G, state...
            outs = [ctx.outputs[j + n * s] for s in range(1 + self.n_states)]
            self.rule(ctx, b, r, t, xs, outs)
            nodes += b.nodes
        # the lowered nodes are written in opset-13 form (numpy broadcasting), whatever default-domain
        # opset the model imports (often none at all next to the training domain)
        ctx.opset = max(ctx.opset, 13)
        emit(ctx, nodes, [o for o in ctx.outputs if o])
        return []

    def rule(self, ctx: ImportContext, b: _Builder, r: str, t: str, xs: list[str], outs: list[str]) -> None:
        raise NotImplementedError

    @staticmethod
    def regularized(b: _Builder, x: str, g: str, norm: float) -> str:
        """g + norm_coefficient * x (the gradient of the L2 regularization term added)."""
        return b.op("Add", b.op("Mul", b.const(norm), x), g)


@register
class Momentum(_TrainingOp):
    """attrs alpha, beta, mode ("standard" | "nesterov"), norm_coefficient (all required)."""

    op = "Momentum"
    training_ops = ("Momentum",)

    def rule(self, ctx, b, r, t, xs, outs):
        for a in ("alpha", "beta", "mode", "norm_coefficient"):
            if not ctx.has_attr(a):
                ctx.invalid(f"attribute '{a}' is required")
        mode = ctx.attr("mode")
        if mode not in ("standard", "nesterov"):
            ctx.invalid(f"mode must be 'standard' or 'nesterov', got '{mode}'")
        alpha, beta = float(ctx.attr("alpha")), float(ctx.attr("beta"))
        x, g, v = xs
        gr = self.regularized(b, x, g, float(ctx.attr("norm_coefficient")))
        beta_adj = b.op("Where", b.t_positive(t), b.const(beta), b.const(1.0))  # 1 at the first step
        v_new = b.op("Add", b.op("Mul", b.const(alpha), v), b.op("Mul", beta_adj, gr), out=outs[1] or None)
        step = v_new if mode == "standard" else b.op("Add", gr, b.op("Mul", b.const(alpha), v_new))
        b.op("Sub", x, b.op("Mul", r, step), out=outs[0] or None)


@register
class Adagrad(_TrainingOp):
    """attrs decay_factor, epsilon, norm_coefficient (default 0)."""

    op = "Adagrad"
    training_ops = ("Adagrad",)

    def rule(self, ctx, b, r, t, xs, outs):
        x, g, h = xs
        decay, eps = float(ctx.attr("decay_factor", 0.0)), float(ctx.attr("epsilon", 0.0))
        r_adj = b.op("Div", r, b.op("Add", b.const(1.0), b.op("Mul", b.float_t(t), b.const(decay))))
        gr = self.regularized(b, x, g, float(ctx.attr("norm_coefficient", 0.0)))
        h_new = b.op("Add", h, b.op("Mul", gr, gr), out=outs[1] or None)
        h_sqrt = b.op("Add", b.op("Sqrt", h_new), b.const(eps))
        b.op("Sub", x, b.op("Div", b.op("Mul", r_adj, gr), h_sqrt), out=outs[0] or None)


@register
class Adam(_TrainingOp):
    """attrs alpha (0.9), beta (0.999), epsilon (0), norm_coefficient (0), norm_coefficient_post (0)."""

    op = "Adam"
    training_ops = ("Adam",)
    n_states = 2

    def rule(self, ctx, b, r, t, xs, outs):
        x, g, v, h = xs
        alpha, beta = float(ctx.attr("alpha", 0.9)), float(ctx.attr("beta", 0.999))
        eps, post = float(ctx.attr("epsilon", 0.0)), float(ctx.attr("norm_coefficient_post", 0.0))
        gr = self.regularized(b, x, g, float(ctx.attr("norm_coefficient", 0.0)))
        v_new = b.op("Add", b.op("Mul", b.const(alpha), v), b.op("Mul", b.const(1.0 - alpha), gr), out=outs[1] or None)
        h_new = b.op(
            "Add",
            b.op("Mul", b.const(beta), h),
            b.op("Mul", b.const(1.0 - beta), b.op("Mul", gr, gr)),
            out=outs[2] or None,
        )
        h_sqrt = b.op("Add", b.op("Sqrt", h_new), b.const(eps))
        # bias correction r * sqrt(1 - beta^T) / (1 - alpha^T) when T > 0 (computed with max(T, 1),
        # so that the branch Where discards at T = 0 is finite too)
        tf = b.float_t(b.op("Max", t, b.const(1, "int64")))
        one = b.const(1.0)
        corr = b.op(
            "Div",
            b.op("Sqrt", b.op("Sub", one, b.op("Pow", b.const(beta), tf))),
            b.op("Sub", one, b.op("Pow", b.const(alpha), tf)),
        )
        r_adj = b.op("Where", b.t_positive(t), b.op("Mul", r, corr), r)
        x_new = b.op("Sub", x, b.op("Mul", r_adj, b.op("Div", v_new, h_sqrt)))
        b.op("Mul", b.const(1.0 - post), x_new, out=outs[0] or None)
