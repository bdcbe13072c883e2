"""Elementwise ops: the unary family (one table of numpy + C expressions) and broadcasting
binary arithmetic. Unary ops double as fusable activations (Conv/Gemm/Add + `activation`)."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from collections.abc import Callable

import numpy as np

from tinyc.numerics.literals import c_float
from tinyc.ir import Graph, Node
from tinyc.ops.base import Clamp, Int8Lowering, OpDef, OutputType, broadcast_strides, register_instance

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext

F = c_float


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x.astype(np.float64)).astype(x.dtype)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


@dataclass
class UnarySpec:
    name: str
    np_fn: Callable[[np.ndarray, dict[str, Any]], np.ndarray]
    c_fn: Callable[[str, dict[str, Any]], str]
    defaults: dict[str, float]
    fusable: bool = False
    dtypes: tuple[str, ...] = ("float32",)


def _clip_bounds(a: dict[str, Any]) -> tuple[float, float]:
    """Clip's (min, max); a NaN bound is no bound, as onnxruntime does (a NaN input stays NaN)."""
    lo, hi = float(a["min"]), float(a["max"])
    return (-math.inf if math.isnan(lo) else lo), (math.inf if math.isnan(hi) else hi)


def _clip_np(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    lo, hi = _clip_bounds(a)
    return np.minimum(np.maximum(x, np.asarray(lo, x.dtype)), np.asarray(hi, x.dtype))


def _clip_c(x: str, a: dict[str, Any]) -> str:
    lo, hi = _clip_bounds(a)
    e = x
    if lo != -math.inf:
        e = f"tinyc_maxf({e}, {F(lo)})"
    if hi != math.inf:
        e = f"tinyc_minf({e}, {F(hi)})"
    return e


UNARY: list[UnarySpec] = [
    UnarySpec("Relu", lambda x, a: np.maximum(x, 0).astype(x.dtype), lambda x, a: f"tinyc_maxf({x}, 0.0f)", {}, True),
    UnarySpec(
        "LeakyRelu",
        lambda x, a: np.where(x >= 0, x, x * np.float32(a["alpha"])).astype(x.dtype),
        lambda x, a: f"(({x}) >= 0.0f ? ({x}) : {F(a['alpha'])} * ({x}))",
        {"alpha": 0.01},
        True,
    ),
    UnarySpec("Clip", _clip_np, _clip_c, {"min": -math.inf, "max": math.inf}, True),
    UnarySpec("Sigmoid", lambda x, a: _sigmoid(x), lambda x, a: f"(1.0f / (1.0f + expf(-({x}))))", {}, True),
    UnarySpec("Tanh", lambda x, a: np.tanh(x), lambda x, a: f"tanhf({x})", {}, True),
    UnarySpec(
        "HardSigmoid",
        lambda x, a: np.clip(x * np.float32(a["alpha"]) + np.float32(a["beta"]), 0, 1).astype(x.dtype),
        lambda x, a: f"tinyc_minf(tinyc_maxf({F(a['alpha'])} * ({x}) + {F(a['beta'])}, 0.0f), 1.0f)",
        {"alpha": 0.2, "beta": 0.5},
        True,
    ),
    UnarySpec(
        "HardSwish",
        lambda x, a: (x * np.clip(x / np.float32(6) + np.float32(0.5), 0, 1)).astype(x.dtype),
        lambda x, a: f"(({x}) * tinyc_minf(tinyc_maxf(({x}) / 6.0f + 0.5f, 0.0f), 1.0f))",
        {},
        True,
    ),
    UnarySpec(
        "Elu",
        lambda x, a: np.where(x > 0, x, np.float32(a["alpha"]) * np.expm1(x)).astype(x.dtype),
        lambda x, a: f"(({x}) > 0.0f ? ({x}) : {F(a['alpha'])} * expm1f({x}))",
        {"alpha": 1.0},
        True,
    ),
    UnarySpec(
        "Selu",
        lambda x, a: (np.float32(a["gamma"]) * np.where(x > 0, x, np.float32(a["alpha"]) * np.expm1(x))).astype(
            x.dtype
        ),
        lambda x, a: f"({F(a['gamma'])} * (({x}) > 0.0f ? ({x}) : {F(a['alpha'])} * expm1f({x})))",
        {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
        True,
    ),
    UnarySpec(
        "Celu",
        lambda x, a: (
            np.maximum(x, 0) + np.minimum(0, np.float32(a["alpha"]) * np.expm1(x / np.float32(a["alpha"])))
        ).astype(x.dtype),
        lambda x, a: f"(tinyc_maxf({x}, 0.0f) + tinyc_minf(0.0f, {F(a['alpha'])} * expm1f(({x}) / {F(a['alpha'])})))",
        {"alpha": 1.0},
        True,
    ),
    UnarySpec(
        "ThresholdedRelu",
        lambda x, a: np.where(x > np.float32(a["alpha"]), x, 0).astype(x.dtype),
        lambda x, a: f"(({x}) > {F(a['alpha'])} ? ({x}) : 0.0f)",
        {"alpha": 1.0},
        True,
    ),
    UnarySpec(
        "Softplus", lambda x, a: _softplus(x), lambda x, a: f"(({x}) > 20.0f ? ({x}) : log1pf(expf({x})))", {}, True
    ),
    UnarySpec(
        "Softsign",
        lambda x, a: (x / (1 + np.abs(x))).astype(x.dtype),
        lambda x, a: f"(({x}) / (1.0f + fabsf({x})))",
        {},
        True,
    ),
    UnarySpec(
        "Mish",
        lambda x, a: (x * np.tanh(_softplus(x))).astype(x.dtype),
        lambda x, a: f"(({x}) * tanhf(({x}) > 20.0f ? ({x}) : log1pf(expf({x}))))",
        {},
        True,
    ),
    UnarySpec(
        "Gelu",
        lambda x, a: (
            (0.5 * x * (1 + _erf(x / np.float32(math.sqrt(2))))).astype(x.dtype)
            if a.get("approximate", "none") == "none"
            else (
                0.5 * x * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x**3)))
            ).astype(x.dtype)
        ),
        lambda x, a: (
            f"(0.5f * ({x}) * (1.0f + erff(({x}) * 0.707106781f)))"
            if a.get("approximate", "none") == "none"
            else f"(0.5f * ({x}) * (1.0f + tanhf(0.797884561f * (({x}) + 0.044715f * ({x}) * ({x}) * ({x})))))"
        ),
        {},
        True,
    ),
    UnarySpec("Exp", lambda x, a: np.exp(x), lambda x, a: f"expf({x})", {}),
    UnarySpec("Log", lambda x, a: np.log(x), lambda x, a: f"logf({x})", {}),
    UnarySpec("Sqrt", lambda x, a: np.sqrt(x), lambda x, a: f"sqrtf({x})", {}),
    UnarySpec("Abs", lambda x, a: np.abs(x), lambda x, a: f"fabsf({x})", {}),
    UnarySpec("Neg", lambda x, a: np.negative(x), lambda x, a: f"(-({x}))", {}),
    UnarySpec("Reciprocal", lambda x, a: (np.float32(1) / x).astype(x.dtype), lambda x, a: f"(1.0f / ({x}))", {}),
    UnarySpec("Floor", lambda x, a: np.floor(x), lambda x, a: f"floorf({x})", {}),
    UnarySpec("Ceil", lambda x, a: np.ceil(x), lambda x, a: f"ceilf({x})", {}),
    UnarySpec("Round", lambda x, a: np.round(x), lambda x, a: f"rintf({x})", {}),
    UnarySpec("Erf", lambda x, a: _erf(x), lambda x, a: f"erff({x})", {}),
    UnarySpec("Sin", lambda x, a: np.sin(x), lambda x, a: f"sinf({x})", {}),
    UnarySpec("Cos", lambda x, a: np.cos(x), lambda x, a: f"cosf({x})", {}),
    UnarySpec("Tan", lambda x, a: np.tan(x), lambda x, a: f"tanf({x})", {}),
    UnarySpec("Asin", lambda x, a: np.arcsin(x), lambda x, a: f"asinf({x})", {}),
    UnarySpec("Acos", lambda x, a: np.arccos(x), lambda x, a: f"acosf({x})", {}),
    UnarySpec("Atan", lambda x, a: np.arctan(x), lambda x, a: f"atanf({x})", {}),
    UnarySpec("Sinh", lambda x, a: np.sinh(x), lambda x, a: f"sinhf({x})", {}),
    UnarySpec("Cosh", lambda x, a: np.cosh(x), lambda x, a: f"coshf({x})", {}),
    UnarySpec("Asinh", lambda x, a: np.arcsinh(x), lambda x, a: f"asinhf({x})", {}),
    UnarySpec("Acosh", lambda x, a: np.arccosh(x), lambda x, a: f"acoshf({x})", {}),
    UnarySpec("Atanh", lambda x, a: np.arctanh(x), lambda x, a: f"atanhf({x})", {}),
    UnarySpec(
        "Sign",
        lambda x, a: np.sign(x),  # Sign(NaN) = NaN (numpy, onnxruntime)
        lambda x, a: f"(({x}) != ({x}) ? ({x}) : (float)((({x}) > 0.0f) - (({x}) < 0.0f)))",
        {},
    ),
]


class UnaryOp(OpDef):
    """y = f(x) elementwise; f given as both a numpy function and a C expression."""

    template = "unary.c.j2"
    inplace = True
    layout_agnostic = True

    int8_kernel = True  # any unary op becomes an int8 lookup table (QLut) of its reference

    def __init__(self, spec: UnarySpec) -> None:
        self.spec = spec
        self.op = spec.name
        self.onnx_ops = (spec.name,)
        self.dtypes = spec.dtypes
        self.fusable_activation = spec.fusable

    def import_onnx(self, ctx):
        attrs = {k: float(ctx.attr(k, v)) for k, v in self.spec.defaults.items()}
        if self.op == "Clip":
            # opset < 11: attributes; opset >= 11: optional constant inputs
            lo = ctx.const(1) if ctx.has_input(1) else None
            hi = ctx.const(2) if ctx.has_input(2) else None
            if (ctx.has_input(1) and lo is None) or (ctx.has_input(2) and hi is None):
                ctx.unsupported("min/max must be constants")
            if lo is not None:
                attrs["min"] = float(lo)
            if hi is not None:
                attrs["max"] = float(hi)
            if ctx.dtype(0) != "float32":
                ctx.unsupported(f"element type {ctx.dtype(0)} (only float32)")
        if self.op == "Gelu":
            attrs["approximate"] = ctx.attr("approximate", "none")
        return ctx.make_node(self.op, inputs=ctx.inputs[:1], **attrs)

    def apply(self, attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
        a = dict(self.spec.defaults, **attrs)
        with np.errstate(all="ignore"):
            return np.asarray(self.spec.np_fn(x, a)).astype(x.dtype)

    def c_expr(self, attrs: dict[str, Any], x: str, ct: str = "float") -> str:
        return self.spec.c_fn(x, dict(self.spec.defaults, **attrs))

    def activation_clamp(self, attrs: dict[str, Any]) -> Clamp | None:
        if self.op == "Relu":
            return (0.0, None)
        if self.op == "Clip":
            lo, hi = float(attrs.get("min", -math.inf)), float(attrs.get("max", math.inf))
            return (None if math.isinf(lo) else lo, None if math.isinf(hi) else hi)
        return None

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        return low.lookup_table(node)

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [self.apply({k: v for k, v in node.attrs.items() if k != "activation"}, inputs[0])]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        expr = self.c_expr(node.attrs, "v")
        if t.dtype == "float64":
            return {"expr": _double_expr(expr), "count": t.size, "T": "double"}
        return {"expr": expr, "count": t.size, "T": "float"}


#: Unary ops whose C expression is libm calls and exact literals only: they also run on float64,
#: with the double functions (expf -> exp), as ONNX allows (tensor(double)).
_FLOAT64_UNARY = (
    "Exp", "Log", "Sqrt", "Abs", "Neg", "Reciprocal", "Floor", "Ceil", "Round", "Erf", "Sin", "Cos", "Tan",
    "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
)  # fmt: skip
_LIBM_F = re.compile(
    r"\b(exp|log|sqrt|fabs|floor|ceil|rint|erf|sin|cos|tan|asin|acos|atan|sinh|cosh|asinh|acosh|atanh)f\("
)


def _double_expr(expr: str) -> str:
    """A float32 C expression over libm functions as its float64 form (expf(x) -> exp(x))."""
    return _LIBM_F.sub(lambda m: f"{m.group(1)}(", expr)


for _spec in UNARY:
    if _spec.name in _FLOAT64_UNARY:
        _spec = dataclasses.replace(_spec, dtypes=("float32", "float64"))
    register_instance(UnaryOp(_spec))


# -- binary --------------------------------------------------------------------------------
def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(d) for d in np.broadcast_shapes(a, b))


def collapse_broadcast(
    out_shape: tuple[int, ...], operand_shapes: list[tuple[int, ...]]
) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent output dims that every operand walks contiguously (or broadcasts over alike),
    so the kernel runs the fewest, longest loops."""
    if not out_shape:
        return [1], [[0] for _ in operand_shapes]
    strides = [broadcast_strides(s, out_shape) for s in operand_shapes]
    dims = list(out_shape)
    i = len(dims) - 2
    while i >= 0:
        if all(st[i] == st[i + 1] * dims[i + 1] for st in strides):
            dims[i] *= dims[i + 1]
            del dims[i + 1]
            for st in strides:
                st[i] = st[i + 1]
                del st[i + 1]
        i -= 1
    return dims, strides


@dataclass
class BinarySpec:
    name: str
    np_fn: Callable[[np.ndarray, np.ndarray], np.ndarray]
    c_float: str  # C expression over a, b (float)
    c_int: str | None = None  # C expression for integer types (None: float only)
    out_dtype: str | None = None  # fixed output type (comparisons: bool); None: the input type
    only_bool: bool = False  # logical ops take bool inputs only
    absorbs_activation: bool = False  # the kernel applies a fused activation (OpDef.absorbs_activation)
    int8: bool = False  # has an int8 kernel (QAdd, QMul) that takes int8 constant operands


def _div_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        with np.errstate(all="ignore"):
            q = np.trunc(a.astype(np.float64) / b.astype(np.float64))
        return q.astype(a.dtype)
    return a / b


def _pow_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)


BINARY: list[BinarySpec] = [
    BinarySpec("Add", np.add, "a + b", "a + b", absorbs_activation=True, int8=True),
    BinarySpec("Sub", np.subtract, "a - b", "a - b", absorbs_activation=True),
    BinarySpec("Mul", np.multiply, "a * b", "a * b", absorbs_activation=True, int8=True),
    BinarySpec("Div", _div_np, "a / b", "a / b"),
    # integer Pow computes in double (numpy's float64 power, then the base's type)
    BinarySpec("Pow", _pow_np, "powf(a, b)", "pow((double)a, (double)b)"),
    BinarySpec("PRelu", lambda a, b: np.where(a < 0, a * b, a).astype(a.dtype), "(a < 0.0f ? a * b : a)"),
    # float: a NaN in either operand gives NaN (np.maximum, onnxruntime); equal operands give b
    BinarySpec("Max", np.maximum, "(a > b || a != a ? a : b)", "(a > b ? a : b)"),
    BinarySpec("Min", np.minimum, "(a < b || a != a ? a : b)", "(a < b ? a : b)"),
    BinarySpec("Equal", np.equal, "(a == b)", "(a == b)", "bool"),
    BinarySpec("Less", np.less, "(a < b)", "(a < b)", "bool"),
    BinarySpec("Greater", np.greater, "(a > b)", "(a > b)", "bool"),
    BinarySpec("LessOrEqual", np.less_equal, "(a <= b)", "(a <= b)", "bool"),
    BinarySpec("GreaterOrEqual", np.greater_equal, "(a >= b)", "(a >= b)", "bool"),
    BinarySpec("And", np.logical_and, "(a && b)", "(a && b)", "bool", True),
    BinarySpec("Or", np.logical_or, "(a || b)", "(a || b)", "bool", True),
    BinarySpec("Xor", np.logical_xor, "((a != 0) != (b != 0))", "((a != 0) != (b != 0))", "bool", True),
]
INT_TYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


#: ops that broadcast only with the attribute broadcast=1 before opset 7, and the variadic ones,
#: which did not broadcast at all before opset 8: otherwise their operands must have one shape
_LEGACY_ATTR_BROADCAST = ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less")
_LEGACY_NO_BROADCAST = ("Max", "Min", "Sum", "Mean")


def check_legacy_broadcast(ctx: Any, op: str, ins: list[str]) -> None:
    """An old-opset model that relies on broadcasting its opset did not have is malformed:
    computing it with today's numpy broadcasting would give an answer the model never meant."""
    legacy = (op in _LEGACY_ATTR_BROADCAST and ctx.opset < 7 and not int(ctx.attr("broadcast", 0))) or (
        op in _LEGACY_NO_BROADCAST and ctx.opset < 8
    )
    if legacy and len(ins) > 1:
        shapes = [tuple(ctx.graph.tensor(i).shape) for i in ins]
        if len(set(shapes)) > 1:
            ctx.invalid(
                f"operand shapes {', '.join(map(str, shapes))} differ, but at opset {ctx.opset} {op} does "
                "not broadcast" + (" without broadcast=1" if op in _LEGACY_ATTR_BROADCAST else "")
            )


class BinaryOp(OpDef):
    """y = a OP b with numpy broadcasting; Max/Min/Sum/Mean with more inputs become chains."""

    template = "binary.c.j2"
    inplace = True
    layout_agnostic = True

    def __init__(self, spec: BinarySpec) -> None:
        self.spec = spec
        self.op = spec.name
        self.onnx_ops = (spec.name,)
        self.absorbs_activation = spec.absorbs_activation
        self.int8_kernel = self.quantizes_constant_operands = spec.int8
        self.dtypes = ("bool",) if spec.only_bool else ("float32", "float64") + (INT_TYPES if spec.c_int else ())
        if spec.out_dtype == "bool" and not spec.only_bool:
            self.dtypes = self.dtypes + ("bool",) if spec.name == "Equal" else self.dtypes
        if spec.out_dtype:
            self.inplace = False  # the output type differs from the input's

    def import_onnx(self, ctx):
        if ctx.opset < 7 and (ctx.has_attr("broadcast") or ctx.has_attr("axis")):
            if ctx.attr("axis") is not None and ctx.attr("broadcast", 0):
                from tinyc.ops.legacy_broadcast import axis_broadcast

                return axis_broadcast(ctx, self.op)
        ins = [i for i in ctx.inputs if i]
        check_legacy_broadcast(ctx, self.op, ins)
        if ctx.dtype(0) != ctx.dtype(1) if len(ins) > 1 else False:
            if self.op == "Pow" and ctx.dtype(0) in self.dtypes and ctx.dtype(1) in self.dtypes:
                pass  # float32 base: a constant exponent is converted below; others: the kernel converts
            else:
                ctx.unsupported(f"mixed element types {ctx.dtype(0)} and {ctx.dtype(1)}")
        if len(ins) == 1:
            return ctx.make_node("Identity", inputs=ins)
        if len(ins) == 2:
            if self.op == "Pow" and ctx.dtype(1) != ctx.dtype(0) and ctx.dtype(0) == "float32":
                b = ctx.const(1)
                if b is None:
                    ctx.unsupported(f"exponent of type {ctx.dtype(1)} must be a constant")
                ins = [ins[0], ctx.add_constant("exponent", b.astype(ctx.dtype(0)))]
            if self.op == "PRelu" and ctx.opset < 7:
                # before opset 7 a 1-D slope was per channel (axis 1), not numpy-aligned
                slope = ctx.const(1)
                xs = ctx.shape(0)
                if slope is not None and slope.ndim == 1 and len(xs) > 2 and slope.shape[0] == xs[1]:
                    ins = [ins[0], ctx.add_constant("slope", slope.reshape(-1, *([1] * (len(xs) - 2))))]
            if self.op == "PRelu":
                try:
                    np.broadcast_shapes(ctx.shape(0), ctx.graph.tensor(ins[1]).shape)
                except ValueError:
                    ctx.unsupported(
                        f"slope shape {ctx.graph.tensor(ins[1]).shape} does not broadcast to {ctx.shape(0)}"
                    )
            return ctx.make_node(self.op, inputs=ins)
        # variadic Max/Min: a chain of binaries
        nodes = []
        acc = ins[0]
        for k, b in enumerate(ins[1:]):
            out = ctx.outputs[0] if k == len(ins) - 2 else ctx.graph.unique_name(f"{ctx.name}_part{k}")
            nodes.append(
                Node(
                    f"{ctx.name}" + (f"_{k}" if k < len(ins) - 2 else ""), self.op, [acc, b], [out], {}, source=ctx.name
                )
            )
            acc = out
        return nodes

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        a, b = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        return [(_broadcast_shape(a.shape, b.shape), self.spec.out_dtype or a.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a, b = inputs[0], inputs[1]
        with np.errstate(all="ignore"):
            y = np.asarray(self.spec.np_fn(a, b)).astype(self.spec.out_dtype or a.dtype)
        act = node.attrs.get("activation")
        if act:
            from tinyc.ops.base import get_op

            y = get_op(act["op"]).apply(act.get("attrs", {}), y)
        return [y]

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """QAdd / QMul on the operands' grids, a fused clamp folded into the output clamp."""
        from tinyc.ops.qelementwise import build_qadd, build_qmul

        ok, clamp = low.fused_clamp(node)
        if not ok:
            return f"fused {node.attrs['activation']['op']} is not a clamp"
        if len(node.inputs) != 2 or not all(low.quantizable(i) for i in node.inputs):
            return "operand without int8 grid"
        why = low.needs_output(node)
        if why:
            return why
        a_q, b_q = (low.as_int8(i) for i in node.inputs)
        out = node.outputs[0]
        y_q = low.int8_output(out)
        build = build_qadd if self.op == "Add" else build_qmul
        low.emit(build(low.g, node.name, a_q, b_q, y_q, clamp, source=node.source), out, y_q)
        return None

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a, b = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        out = graph.tensor(node.outputs[0])
        dims, (sa, sb) = collapse_broadcast(out.shape, [a.shape, b.shape])
        is_int = a.dtype in INT_TYPES or a.dtype == "bool"
        # integer inputs pass import only where the spec has a c_int (see dtypes)
        expr = cast(str, self.spec.c_int) if is_int else self.spec.c_float
        if out.dtype == "float64":
            expr = expr.replace("powf", "pow")
        return {"dims": dims, "sa": sa, "sb": sb, "expr": expr, "is_int": is_int}


for _binary in BINARY:
    register_instance(BinaryOp(_binary))


class NotOp(OpDef):
    """Logical not on bool tensors."""

    op = "Not"
    onnx_ops = ("Not",)
    template = "unary_any.c.j2"
    inplace = True
    layout_agnostic = True
    dtypes = ("bool",)

    def import_onnx(self, ctx):
        return ctx.make_node("Not", inputs=ctx.inputs[:1])

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.logical_not(inputs[0])]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        return {"count": graph.tensor(node.inputs[0]).size, "expr": "(uint8_t)!v"}


class WhereOp(OpDef):
    """y = cond ? x : z with three-way numpy broadcasting."""

    op = "Where"
    onnx_ops = ("Where",)
    template = "where.c.j2"
    layout_agnostic = True
    dtypes = ("bool",)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        c, x, z = (graph.tensor(i) for i in node.inputs)
        return [(tuple(int(d) for d in np.broadcast_shapes(c.shape, x.shape, z.shape)), x.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.where(inputs[0], inputs[1], inputs[2])]

    def check_supported(self, node: Node, graph: Graph) -> None:
        from tinyc.errors import UnsupportedError
        from tinyc.ops.base import CTYPES

        if graph.tensor(node.inputs[1]).dtype not in CTYPES:
            raise UnsupportedError(f"node '{node.source}': Where on {graph.tensor(node.inputs[1]).dtype}")

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        out = graph.tensor(node.outputs[0])
        dims, strides = collapse_broadcast(out.shape, [graph.tensor(i).shape for i in node.inputs])
        return {"dims": dims, "strides": strides}


register_instance(NotOp())
register_instance(WhereOp())


class SumMeanOp(OpDef):
    """Variadic Sum/Mean: imported as Add chains (and a scale for Mean)."""

    def __init__(self, name: str) -> None:
        self.op = f"_{name}"
        self.onnx_ops = (name,)
        self.kind = name

    def import_onnx(self, ctx: ImportContext) -> Node | list[Node]:
        ins = [i for i in ctx.inputs if i]
        check_legacy_broadcast(ctx, self.kind, ins)
        nodes: list[Node] = []
        if len(ins) == 1 and self.kind == "Sum":
            return ctx.make_node("Identity", inputs=ins)
        acc = ins[0]
        for k, b in enumerate(ins[1:]):
            last = k == len(ins) - 2 and self.kind == "Sum"
            out = ctx.outputs[0] if last else ctx.graph.unique_name(f"{ctx.name}_part{k}")
            nodes.append(Node(f"{ctx.name}_{k}", "Add", [acc, b], [out], {}, source=ctx.name))
            acc = out
        if self.kind == "Mean":
            scale = ctx.add_constant("inv_n", np.asarray(1.0 / len(ins), dtype=ctx.dtype(0)))
            nodes.append(Node(f"{ctx.name}_scale", "Mul", [acc, scale], [ctx.outputs[0]], {}, source=ctx.name))
        return nodes


register_instance(SumMeanOp("Sum"))
register_instance(SumMeanOp("Mean"))
