"""The Reduce* family (one table: init, per-element map, combine, finalise) and ArgMax/ArgMin.

Kernel plan: drop size-1 dims and merge adjacent dims that are both kept or both reduced. If
that leaves [kept][reduced] (the usual case: reducing trailing axes), each output is one
contiguous row reduction into a register. Otherwise the input is walked once in memory order,
combining into the output buffer (initialised first, finalised last), so the innermost loop is
always contiguous. ReduceLogSumExp subtracts the maximum first (a max pass, then a sum pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import numpy as np

from tinyc.numerics.literals import c_float, c_int
from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, normalize_axis, register, register_instance
from tinyc.ops.slice_gather import _ints, _where

FLOATS = ("float32", "float64")
INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


@dataclass
class ReduceSpec:
    name: str  # ONNX op type
    init: str  # zero | one | lowest | highest
    map: str  # id | abs | square: applied to each element before combining
    combine: str  # sum | prod | max | min
    post: str  # id | mean | sqrt | log | lse
    dtypes: tuple[str, ...]


REDUCE: list[ReduceSpec] = [
    # bfloat16: accumulated in bfloat16 in order, one rounding per element, as ONNX's reference
    # (numpy over ml_dtypes' add) computes it; only over trailing axes (one contiguous row per output)
    ReduceSpec("ReduceSum", "zero", "id", "sum", "id", FLOATS + INTS + ("bfloat16",)),
    ReduceSpec("ReduceMean", "zero", "id", "sum", "mean", FLOATS),
    ReduceSpec("ReduceProd", "one", "id", "prod", "id", FLOATS + INTS),
    ReduceSpec("ReduceMax", "lowest", "id", "max", "id", FLOATS + INTS + ("bool",)),
    ReduceSpec("ReduceMin", "highest", "id", "min", "id", FLOATS + INTS + ("bool",)),
    ReduceSpec("ReduceL1", "zero", "abs", "sum", "id", FLOATS + INTS),
    ReduceSpec("ReduceL2", "zero", "square", "sum", "sqrt", FLOATS),
    ReduceSpec("ReduceSumSquare", "zero", "square", "sum", "id", FLOATS + INTS),
    ReduceSpec("ReduceLogSum", "zero", "id", "sum", "log", FLOATS),
    ReduceSpec("ReduceLogSumExp", "lowest", "id", "max", "lse", FLOATS),
]


def _np_reduce(spec: ReduceSpec, x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """ONNX semantics in numpy: floats computed in float64, ints wrap like the C kernel."""
    is_float = x.dtype.kind == "f"
    if x.size == 0:  # every output reduces an empty set: the identity, finalised
        shape = np.sum(np.zeros(x.shape, np.float64), axis=axes, keepdims=keepdims).shape
        if x.dtype == np.bool_:
            init: Any = {"lowest": False, "highest": True}.get(spec.init, False)
        elif is_float:
            init = {"zero": 0.0, "one": 1.0, "lowest": -np.inf, "highest": np.inf}[spec.init]
        else:
            info = np.iinfo(x.dtype)
            init = {"zero": 0, "one": 1, "lowest": int(info.min), "highest": int(info.max)}[spec.init]
        # a numpy scalar where a reduction leaves no axis (the stubs' type for np.sum and the like)
        y: np.ndarray | np.number = np.full(shape, init, dtype=np.float64 if is_float else x.dtype)
        with np.errstate(all="ignore"):
            if spec.post == "mean":
                y = y / 0.0
            elif spec.post == "sqrt":
                y = np.sqrt(y)
            elif spec.post == "log":
                y = np.log(y)
        return np.ascontiguousarray(y.astype(x.dtype))
    wide = x.astype(np.float64) if is_float else x
    acc_dtype = np.float64 if is_float else x.dtype
    with np.errstate(all="ignore"):
        if spec.map == "abs":
            wide = np.abs(wide)
        elif spec.map == "square":
            wide = wide * wide
        if spec.post == "lse":
            m = np.max(wide, axis=axes, keepdims=True) if wide.size else wide
            safe = np.where(np.isinf(m), 0.0, m)
            s = np.sum(np.exp(wide - safe), axis=axes, keepdims=True)
            y = np.where(np.isinf(m), m, safe + np.log(s))
            if not keepdims:
                y = np.squeeze(y, axis=axes)
        elif spec.combine == "sum":
            y = np.sum(wide, axis=axes, keepdims=keepdims, dtype=acc_dtype)
        elif spec.combine == "prod":
            y = np.prod(wide, axis=axes, keepdims=keepdims, dtype=acc_dtype)
        elif spec.combine == "max":
            y = np.max(wide, axis=axes, keepdims=keepdims)
        else:
            y = np.min(wide, axis=axes, keepdims=keepdims)
        if spec.post == "mean":
            y = y / max(1, int(np.prod([x.shape[a] for a in axes], dtype=np.int64)))
        elif spec.post == "sqrt":
            y = np.sqrt(y)
        elif spec.post == "log":
            y = np.log(y)
    return np.ascontiguousarray(np.asarray(y).astype(x.dtype))


def _import_axes(ctx: Any, axes_input_since: int) -> tuple[list[int] | None, bool]:
    """Axes from the attribute (older opsets) or the constant input; (None: all, keepdims)."""
    rank = len(ctx.shape(0))
    keepdims = bool(int(ctx.attr("keepdims", 1)))
    noop = bool(int(ctx.attr("noop_with_empty_axes", 0)))
    if ctx.opset >= axes_input_since:
        raw = ctx.require_const(1, "axes") if ctx.has_input(1) else None
    else:
        raw = ctx.attr("axes")
    axes = None if raw is None else _ints(raw)
    if not axes:
        return ([] if noop else None), keepdims
    norm = sorted({normalize_axis(a, rank, _where(ctx)) for a in axes})
    if len(norm) != len(axes):
        ctx.unsupported(f"repeated axes {axes}")
    return norm, keepdims


def _reduced_shape(shape: tuple[int, ...], axes: list[int], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def _groups(shape: tuple[int, ...], axes: list[int]) -> list[list[Any]]:
    """[[size, 'K'|'R'], ...] outermost first: size-1 dims dropped, same-kind neighbours merged."""
    groups: list[list[Any]] = []
    for k, d in enumerate(shape):
        if d == 1:
            continue
        kind = "R" if k in axes else "K"
        if groups and groups[-1][1] == kind:
            groups[-1][0] *= int(d)
        else:
            groups.append([int(d), kind])
    if not any(kind == "R" for _, kind in groups):
        groups.append([1, "R"])
    return groups


def _is_simple(groups: list[list[Any]]) -> bool:
    """One contiguous row per output ([K][R] or [R])."""
    return len(groups) == 1 or (len(groups) == 2 and groups[0][1] == "K")


def _unsigned(ct: str) -> str:
    return "uint64_t" if ct in ("int64_t", "uint64_t") else "uint32_t"


def c_ops(spec: ReduceSpec, dtype: str) -> dict[str, Any]:
    """C text for init value and map/combine/post as functions of C expression strings."""
    ct = CTYPES[dtype]
    is_float = dtype in FLOATS
    sfx = "f" if dtype == "float32" else ""
    lit = lambda v: c_float(v) if dtype == "float32" else repr(float(v))  # noqa: E731
    if is_float:
        init = {"zero": lit(0.0), "one": lit(1.0), "lowest": "(-INFINITY)", "highest": "INFINITY"}[spec.init]
    elif dtype == "bool":
        init = {"lowest": "0", "highest": "1"}[spec.init]
    else:
        info = np.iinfo(dtype)
        init = {"zero": "0", "one": "1", "lowest": c_int(int(info.min), ct), "highest": c_int(int(info.max), ct)}[
            spec.init
        ]
        if dtype in ("int32",) and spec.init == "lowest":
            init = "INT32_MIN"
    u = _unsigned(ct)
    mp: Callable[[str], str]
    if spec.map == "id":
        mp = lambda v: v  # noqa: E731
    elif spec.map == "abs":
        mp = (
            (lambda v: f"fabs{sfx}({v})")
            if is_float
            # noqa: E731
            else (lambda v: f"({ct})(({v}) < 0 ? ({u})0 - ({u})({v}) : ({u})({v}))")
        )
    else:
        mp = (
            (lambda v: f"(({v}) * ({v}))")
            if is_float
            # noqa: E731
            else (lambda v: f"({ct})(({u})({v}) * ({u})({v}))")
        )
    cb: Callable[[str, str], str]
    if spec.combine == "sum":
        cb = (lambda a, b: f"{a} + {b}") if is_float else (lambda a, b: f"({ct})(({u}){a} + ({u}){b})")  # noqa: E731
    elif spec.combine == "prod":
        cb = (lambda a, b: f"{a} * {b}") if is_float else (lambda a, b: f"({ct})(({u}){a} * ({u}){b})")  # noqa: E731
    elif spec.combine == "max":
        cb = (
            (lambda a, b: f"({b} > {a} || {b} != {b} ? {b} : {a})")
            if is_float
            # noqa: E731
            else (lambda a, b: f"({b} > {a} ? {b} : {a})")
        )
    else:
        cb = (
            (lambda a, b: f"({b} < {a} || {b} != {b} ? {b} : {a})")
            if is_float
            # noqa: E731
            else (lambda a, b: f"({b} < {a} ? {b} : {a})")
        )
    return {"ct": ct, "init": init, "map": mp, "combine": cb, "sfx": sfx, "lit": lit}


class ReduceOp(OpDef):
    """attrs: `axes` (sorted; [] = reduce nothing, i.e. elementwise map + finalise), `keepdims`."""

    template = "reduce.c.j2"

    def __init__(self, spec: ReduceSpec) -> None:
        self.spec = spec
        self.op = spec.name
        self.onnx_ops = (spec.name,)
        self.dtypes = spec.dtypes

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        axes, keepdims = _import_axes(ctx, 13 if self.op == "ReduceSum" else 18)
        shape = ctx.shape(0)
        if axes is None:
            axes = list(range(len(shape)))
        if any(d == 0 for d in shape):  # the result does not depend on the (absent) values
            return ctx.set_constant(0, _np_reduce(self.spec, np.zeros(shape, ctx.dtype(0)), tuple(axes), keepdims))
        if ctx.dtype(0) == "bfloat16" and not _is_simple(_groups(shape, sorted(axes))):
            ctx.unsupported(
                "bfloat16 ReduceSum over axes that are not the trailing ones (ONNX accumulates in memory order)"
            )
        return ctx.make_node(self.op, inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], axes=axes, keepdims=keepdims)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        return [(_reduced_shape(t.shape, node.attrs["axes"], node.attrs["keepdims"]), t.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        if x.dtype.name == "bfloat16":  # ml_dtypes' sequential bfloat16 sum (ONNX's reference)
            axes = tuple(node.attrs["axes"])
            return [np.sum(x, axis=axes, keepdims=bool(node.attrs["keepdims"]), dtype=x.dtype) if axes else x.copy()]
        return [_np_reduce(self.spec, x, tuple(node.attrs["axes"]), node.attrs["keepdims"])]

    def macs(self, node: Node, graph: Graph) -> int:
        return graph.tensor(node.inputs[0]).size

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        t = graph.tensor(node.inputs[0])
        return bool(node.attrs["keepdims"]) and len(perm) == len(t.shape) and t.dtype != "bfloat16"

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        if not self.can_permute(node, graph, perm):
            return False
        node.attrs["axes"] = sorted(perm[a] for a in node.attrs["axes"])
        return True

    def _plan(self, node: Node, graph: Graph) -> dict[str, Any]:
        shape = graph.tensor(node.inputs[0]).shape
        groups = _groups(shape, node.attrs["axes"])
        return {"groups": groups, "simple": _is_simple(groups)}

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        if self.spec.post != "lse" or self._plan(node, graph)["simple"]:
            return 0
        out = graph.tensor(node.outputs[0])
        return out.size * (8 if out.dtype == "float64" else 4)

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        x = graph.tensor(node.inputs[0])
        if x.dtype not in self.dtypes:
            raise UnsupportedError(f"node '{node.source or node.name}' ({node.op}): element type {x.dtype}")
        plan = self._plan(node, graph)
        groups = plan["groups"]
        if x.dtype == "bfloat16":
            return dict(plan, bf16_steps=True, outer=groups[0][0] if len(groups) == 2 else 1, row=groups[-1][0])
        ops = c_ops(self.spec, x.dtype)
        count = int(np.prod([x.shape[a] for a in node.attrs["axes"]], dtype=np.int64))
        sfx, lit = ops["sfx"], ops["lit"]
        post = {
            "id": lambda a: a,
            "mean": lambda a: f"{a} / {lit(count)}",
            "sqrt": lambda a: f"sqrt{sfx}({a})",
            "log": lambda a: f"log{sfx}({a})",
            "lse": lambda a: a,
        }[self.spec.post]
        # strides of each group in the input and (kept groups only) in the output
        istr: list[int] = []
        ostr: list[int] = []
        s_in, s_out = 1, 1
        for size, kind in reversed(groups):
            istr.insert(0, s_in)
            ostr.insert(0, s_out if kind == "K" else 0)
            s_in *= size
            if kind == "K":
                s_out *= size
        return dict(
            groups=groups,
            simple=plan["simple"],
            istr=istr,
            ostr=ostr,
            lse=self.spec.post == "lse",
            outer=groups[0][0] if len(groups) == 2 else 1,
            row=groups[-1][0],
            out_size=graph.tensor(node.outputs[0]).size,
            init=ops["init"],
            T=ops["ct"],
            fmap=ops["map"],
            fcomb=ops["combine"],
            fpost=post,
            sfx=sfx,
        )


for _spec in REDUCE:
    register_instance(ReduceOp(_spec))


def running_arg(x: np.ndarray, axis: int, kind: str = "max", last: bool = False) -> np.ndarray:
    """Index of the max (min) along `axis` found as the C kernels and onnxruntime find it: a running
    best from the first element, replaced by an element strictly better (or equal, when `last`).
    No comparison with NaN is true, so NaNs are skipped, except a leading one, which is never
    replaced (index 0). ONNX's reference (np.argmax) returns the first NaN instead. Without NaN
    this is np.argmax / np.argmin (the last of equal extremes when `last`)."""
    fn = np.argmax if kind == "max" else np.argmin
    if x.dtype.kind != "f" or not np.isnan(x).any():
        return x.shape[axis] - 1 - fn(np.flip(x, axis=axis), axis=axis) if last else fn(x, axis=axis)
    xs = np.moveaxis(x, axis, 0)
    best, arg = xs[0], np.zeros(xs.shape[1:], np.int64)
    for k in range(1, xs.shape[0]):
        v = xs[k]
        better = (v > best) if kind == "max" else (v < best)
        if last:
            better |= v == best
        best, arg = np.where(better, v, best), np.where(better, k, arg)
    return arg


@register
class ArgMax(OpDef):
    """ArgMax/ArgMin: attrs `kind` (max|min), `axis`, `keepdims`, `last` (select_last_index)."""

    op = "ArgMax"
    onnx_ops = ("ArgMax", "ArgMin")
    template = "argmax.c.j2"
    dtypes = FLOATS + INTS

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        shape = ctx.shape(0)
        if not shape:
            ctx.unsupported("a scalar input has no axis")
        axis = normalize_axis(int(ctx.attr("axis", 0)), len(shape), _where(ctx))
        keep = bool(int(ctx.attr("keepdims", 1)))
        if shape[axis] == 0:
            ctx.unsupported(f"ArgMax/ArgMin over an empty axis {axis} (shape {shape}) has no answer")
        if any(d == 0 for d in shape):
            return ctx.set_constant(0, np.zeros(_reduced_shape(shape, [axis], keep), np.int64))
        return ctx.make_node(
            "ArgMax",
            inputs=ctx.inputs[:1],
            outputs=ctx.outputs[:1],
            kind="max" if ctx.op_type == "ArgMax" else "min",
            axis=axis,
            keepdims=bool(int(ctx.attr("keepdims", 1))),
            last=bool(int(ctx.attr("select_last_index", 0))),
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        t = graph.tensor(node.inputs[0])
        return [(_reduced_shape(t.shape, [node.attrs["axis"]], node.attrs["keepdims"]), "int64")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, ax = inputs[0], node.attrs["axis"]
        y = running_arg(x, ax, node.attrs["kind"], bool(node.attrs["last"]))
        if node.attrs["keepdims"]:
            y = np.expand_dims(y, ax)
        return [np.ascontiguousarray(y.astype(np.int64))]

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        t = graph.tensor(node.inputs[0])
        return bool(node.attrs["keepdims"]) and len(perm) == len(t.shape) and t.dtype != "bfloat16"

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        if not self.can_permute(node, graph, perm):
            return False
        node.attrs["axis"] = perm[node.attrs["axis"]]
        return True

    def _split(self, node: Node, graph: Graph) -> tuple[int, int, int]:
        shape = graph.tensor(node.inputs[0]).shape
        ax = node.attrs["axis"]
        return (int(np.prod(shape[:ax], dtype=np.int64)), int(shape[ax]), int(np.prod(shape[ax + 1 :], dtype=np.int64)))

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        inner = self._split(node, graph)[2]
        t = graph.tensor(node.inputs[0])
        return 0 if inner == 1 else inner * int(np.dtype(t.dtype).itemsize)

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        outer, n, inner = self._split(node, graph)
        better = ">" if node.attrs["kind"] == "max" else "<"
        if node.attrs["last"]:
            better += "="
        return {
            "outer": outer,
            "n": n,
            "inner": inner,
            "better": better,
            "T": CTYPES[graph.tensor(node.inputs[0]).dtype],
        }
