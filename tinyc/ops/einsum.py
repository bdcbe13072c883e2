"""Einsum, lowered at import to ops tinyc already has (no kernel of its own).

The equation is parsed into integer labels (ellipsis dimensions get labels of their own, aligned
from the right as numpy broadcasts them). Each operand is then simplified on its own: a repeated
label (a diagonal) becomes Transpose + Reshape + a strided Slice, a label of size 1 that another
operand has larger is dropped (broadcasting), and a label no one else needs is summed out
(ReduceSum). Operands are contracted left to right: float32 pairs as one batched MatMul
(Transpose + Reshape to [batch, M, K] x [batch, K, N]), or as a Gemm when one side is a constant
without batch labels (a projection: int8 then makes it a quantized fully connected layer), other
types as a broadcast Mul followed by a ReduceSum over the contracted labels. A last Transpose puts the labels in output order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tinyc.ir import Node
from tinyc.ops.base import NodeEmitter, OpDef, register

ELLIPSIS_BASE = 1000  # labels of ellipsis dimensions: ELLIPSIS_BASE + position (letters are ord(c) < 128)


@dataclass
class _Operand:
    name: str
    labels: list[int]
    sizes: list[int]
    const: bool = False  # computed from constants only (its nodes fold at import)


def _parse_term(term: str, rank: int | None, n_ell: int, ctx: Any) -> tuple[list[int], int]:
    """Labels of one term; `rank` None for the output. Returns (labels, ellipsis dims in the term)."""
    if term.count("...") > 1:
        ctx.invalid(f"term '{term}' has more than one ellipsis")
    head, _, tail = term.partition("...")
    for c in head + tail:
        if not c.isalpha():
            ctx.invalid(f"label '{c}' in term '{term}' is not a letter")
    letters = len(head) + len(tail)
    if "..." not in term:
        if rank is not None and letters != rank:
            ctx.invalid(f"term '{term}' has {letters} labels for an operand of rank {rank}")
        return [ord(c) for c in term], 0
    e = (rank - letters) if rank is not None else n_ell
    if e < 0:
        ctx.invalid(f"term '{term}' has more labels than its operand's rank {rank}")
    ell = [ELLIPSIS_BASE + n_ell - e + k for k in range(e)]
    return [ord(c) for c in head] + ell + [ord(c) for c in tail], e


def parse_equation(eq: str, ranks: list[int], ctx: Any) -> tuple[list[list[int]], list[int]]:
    """(labels per input, output labels), with numpy's implicit output when there is no '->'."""
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        ctx.invalid(f"equation '{eq}' has {len(terms)} operands, the node {len(ranks)} inputs")
    n_ell = 0
    for t, r in zip(terms, ranks):
        if "..." in t:
            n_ell = max(n_ell, r - (len(t) - 3))
    ins = [_parse_term(t, r, n_ell, ctx)[0] for t, r in zip(terms, ranks)]
    if arrow:
        out = _parse_term(rhs, None, n_ell, ctx)[0]
    else:
        counts: dict[int, int] = {}
        for labels in ins:
            for lab in labels:
                counts[lab] = counts.get(lab, 0) + 1
        ell = [ELLIPSIS_BASE + k for k in range(n_ell)]
        out = ell + sorted(lab for lab, c in counts.items() if c == 1 and lab < ELLIPSIS_BASE)
    if len(set(out)) != len(out):
        ctx.invalid(f"equation '{eq}' repeats a label in its output")
    present = {lab for labels in ins for lab in labels}
    for lab in out:
        if lab not in present:
            ctx.invalid(f"output label '{chr(lab) if lab < ELLIPSIS_BASE else '...'}' of '{eq}' is in no input")
    return ins, out


class _Lowering(NodeEmitter):
    """Emits the IR nodes of one Einsum, tracking each intermediate's labels and sizes."""

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.dtype = ctx.dtype(0)

    def transpose(self, a: _Operand, labels: list[int]) -> _Operand:
        if labels == a.labels:
            return a
        perm = [a.labels.index(lab) for lab in labels]
        name = self.node("Transpose", [a.name], "t", perm=perm)
        return _Operand(name, list(labels), [a.sizes[p] for p in perm], a.const)

    def reshape(self, a: _Operand, labels: list[int], sizes: list[int]) -> _Operand:
        if sizes == a.sizes:
            return _Operand(a.name, list(labels), list(sizes), a.const)
        name = self.node("Reshape", [a.name], "r", shape=list(sizes))
        return _Operand(name, list(labels), list(sizes), a.const)

    def reduce(self, a: _Operand, drop: list[int]) -> _Operand:
        if not drop:
            return a
        axes = sorted(a.labels.index(lab) for lab in drop)
        name = self.node("ReduceSum", [a.name], "sum", axes=axes, keepdims=False)
        keep = [k for k in range(len(a.labels)) if k not in axes]
        return _Operand(name, [a.labels[k] for k in keep], [a.sizes[k] for k in keep], a.const)

    def diagonal(self, a: _Operand) -> _Operand:
        """Repeated labels: keep the diagonal (move both axes last, flatten, take every n+1-th)."""
        while len(set(a.labels)) != len(a.labels):
            lab = next(x for x in a.labels if a.labels.count(x) > 1)
            p1 = a.labels.index(lab)
            p2 = a.labels.index(lab, p1 + 1)
            n = a.sizes[p1]
            if a.sizes[p2] != n:
                self.ctx.invalid(f"repeated label '{chr(lab)}' has sizes {n} and {a.sizes[p2]}")
            rest = [k for k in range(len(a.labels)) if k not in (p1, p2)]
            order = [a.labels[k] for k in rest]
            t = self.transpose_axes(a, rest + [p1, p2])
            flat = self.reshape(t, order + [lab], [a.sizes[k] for k in rest] + [n * n])
            rank = len(flat.sizes)
            name = self.node(
                "Slice",
                [flat.name],
                "diag",
                starts=[0] * rank,
                steps=[1] * (rank - 1) + [n + 1],
                counts=flat.sizes[:-1] + [n],
            )
            a = _Operand(name, order + [lab], [a.sizes[k] for k in rest] + [n], a.const)
        return a

    def transpose_axes(self, a: _Operand, perm: list[int]) -> _Operand:
        if perm == list(range(len(perm))):
            return a
        name = self.node("Transpose", [a.name], "t", perm=perm)
        return _Operand(name, [a.labels[p] for p in perm], [a.sizes[p] for p in perm], a.const)

    def contract(self, a: _Operand, b: _Operand, needed: set[int]) -> _Operand:
        if a.const and not b.const:  # a constant goes second: a fully connected layer's weight
            a, b = b, a
        both = [lab for lab in a.labels if lab in b.labels]
        batch = [lab for lab in both if lab in needed]
        summed = [lab for lab in both if lab not in needed]
        a_only = [lab for lab in a.labels if lab not in b.labels]
        b_only = [lab for lab in b.labels if lab not in a.labels]
        size = {**dict(zip(a.labels, a.sizes)), **dict(zip(b.labels, b.sizes))}
        for lab in both:
            if a.sizes[a.labels.index(lab)] != b.sizes[b.labels.index(lab)]:
                self.ctx.invalid(f"label '{_show(lab)}' has sizes that neither match nor broadcast")
        labels = batch + a_only + b_only
        sizes = [size[lab] for lab in labels]
        prod = lambda ls: int(np.prod([size[lab] for lab in ls], dtype=np.int64))  # noqa: E731
        if self.dtype == "float32" and b.const and not batch:
            # activations x constant weight: Gemm [M, K] x [K, N] (int8: a quantized fully connected layer)
            a2 = self.reshape(self.transpose(a, a_only + summed), [-2, -3], [prod(a_only), prod(summed)])
            b2 = self.reshape(self.transpose(b, summed + b_only), [-3, -4], [prod(summed), prod(b_only)])
            gm = self.node("Gemm", [a2.name, b2.name], "gemm", transA=0, transB=0, alpha=1.0, beta=1.0)
            return self.reshape(_Operand(gm, [-2, -4], [prod(a_only), prod(b_only)]), labels, sizes)
        if self.dtype == "float32":
            at = self.transpose(a, batch + a_only + summed)
            bt = self.transpose(b, batch + summed + b_only)
            a3 = self.reshape(at, [-1, -2, -3], [prod(batch), prod(a_only), prod(summed)])
            b3 = self.reshape(bt, [-1, -3, -4], [prod(batch), prod(summed), prod(b_only)])
            mm = self.node("MatMul", [a3.name, b3.name], "mm")
            return self.reshape(_Operand(mm, [-1, -2, -4], [prod(batch), prod(a_only), prod(b_only)]), labels, sizes)
        order = labels + summed
        at = self.transpose(a, [lab for lab in order if lab in a.labels])
        bt = self.transpose(b, [lab for lab in order if lab in b.labels])
        a_full = self.reshape(at, order, [size[lab] if lab in a.labels else 1 for lab in order])
        b_full = self.reshape(bt, order, [size[lab] if lab in b.labels else 1 for lab in order])
        mul = self.node("Mul", [a_full.name, b_full.name], "mul")
        return self.reduce(_Operand(mul, order, [size[lab] for lab in order]), summed)


def _show(lab: int) -> str:
    return chr(lab) if lab < ELLIPSIS_BASE else "..."


def lower_einsum(ctx: Any) -> list[Node]:
    """The Einsum node as Transpose / Reshape / Slice / ReduceSum / MatMul / Mul nodes."""
    eq = ctx.attr("equation")
    if not isinstance(eq, str):
        ctx.invalid("missing equation attribute")
    n = len(ctx.inputs)
    shapes = [tuple(int(d) for d in ctx.shape(i)) for i in range(n)]
    for i in range(1, n):
        if ctx.dtype(i) != ctx.dtype(0):
            ctx.unsupported(f"inputs of different types {ctx.dtype(0)} and {ctx.dtype(i)}")
    if any(d == 0 for s in shapes for d in s):
        ctx.unsupported("zero-size operands")
    ins, out = parse_equation(eq, [len(s) for s in shapes], ctx)
    low = _Lowering(ctx)
    global_size: dict[int, int] = {}
    for labels, shape in zip(ins, shapes):
        for lab, d in zip(labels, shape):
            if global_size.get(lab, 1) not in (1, d) and d != 1:
                ctx.invalid(f"label '{_show(lab)}' has sizes {global_size[lab]} and {d}")
            global_size[lab] = max(global_size.get(lab, 1), d)
    ops: list[_Operand] = []
    for i, (labels, shape) in enumerate(zip(ins, shapes)):
        a = low.diagonal(_Operand(ctx.inputs[i], list(labels), list(shape), ctx.const(i) is not None))
        keep = [k for k, lab in enumerate(a.labels) if not (a.sizes[k] == 1 and global_size[lab] > 1)]
        a = low.reshape(a, [a.labels[k] for k in keep], [a.sizes[k] for k in keep])
        ops.append(a)
    for i in range(len(ops)):
        others = {lab for j, o in enumerate(ops) if j != i for lab in o.labels}
        ops[i] = low.reduce(ops[i], [lab for lab in ops[i].labels if lab not in out and lab not in others])
    cur = ops[0]
    for k in range(1, len(ops)):
        needed = set(out) | {lab for o in ops[k + 1 :] for lab in o.labels}
        cur = low.reduce(cur, [lab for lab in cur.labels if lab not in needed and lab not in ops[k].labels])
        nxt = low.reduce(ops[k], [lab for lab in ops[k].labels if lab not in needed and lab not in cur.labels])
        cur = low.contract(cur, nxt, needed)
    cur = low.reduce(cur, [lab for lab in cur.labels if lab not in out])
    missing = [lab for lab in out if lab not in cur.labels]
    if missing:  # output labels every operand broadcast (size 1 there): keep them as size-1 axes
        cur = low.reshape(cur, cur.labels + missing, cur.sizes + [1] * len(missing))
    cur = low.transpose(cur, out)
    if not low.nodes or cur.name == ctx.inputs[0]:
        return [ctx.make_node("Identity", inputs=[cur.name], outputs=ctx.outputs[:1])]
    last = low.nodes[-1]
    if last.outputs[0] != cur.name:
        return [*low.nodes, ctx.make_node("Identity", inputs=[cur.name], outputs=ctx.outputs[:1])]
    last.outputs[0] = ctx.outputs[0]
    return low.nodes


@register
class Einsum(OpDef):
    """Import only: every Einsum becomes other ops (see the module docstring)."""

    op = "Einsum"
    onnx_ops = ("Einsum",)
    dtypes = ("float32", "float64", "int32", "int64", "uint32", "uint64")

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        return lower_einsum(ctx)
