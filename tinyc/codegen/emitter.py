"""Render a planned graph to C sources through the Jinja2 templates and a dialect.

Output files per model: `<prefix>.h` (API, I/O shapes, arena size), `<prefix>.c` (kernels and the
run function over one static arena), `<prefix>_weights.c/.h` (aligned const arrays).
Deterministic: the same graph and plan always give byte-identical text.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import jinja2
import numpy as np

from tinyc.version import __version__
from tinyc.codegen.dialect import Dialect
from tinyc.codegen.launch import LAUNCH, Launch, render_kernel
from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node, Tensor
from tinyc.memory import ALIGNMENT, MemoryLayout
from tinyc.numerics.literals import c_double, c_float, c_int, c_literal
from tinyc.numerics.text import c_comment, c_identifier, c_string_literal, cmake_quote, make_text, md_text, xml_text
from tinyc.ops import get_op
from tinyc.ops.base import ctype, strides_of
from tinyc.resources import templates_dir


def _overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    """Whether two arena byte ranges overlap: such operands must not be `restrict`."""
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def register_filters(env: jinja2.Environment) -> jinja2.Environment:
    """The escaping filters every template that prints a model-given text uses: `c_comment`,
    `c_string` (C string-literal content), `c_ident`, `md_text` and `xml_text`."""
    env.filters["c_comment"] = c_comment
    env.filters["c_string"] = lambda v: c_string_literal(str(v))
    env.filters["c_ident"] = c_identifier
    env.filters["md_text"] = md_text
    env.filters["xml_text"] = xml_text
    env.filters["cmake_quote"] = cmake_quote
    env.filters["make_text"] = make_text
    return env


@dataclass
class TensorView:
    """What a kernel template knows about one operand."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    ctype: str
    param: str
    is_const: bool
    data: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def strides(self) -> list[int]:
        return strides_of(self.shape)


@dataclass
class KernelParam:
    name: str
    ctype: str
    const: bool
    restrict: bool
    arg: str  # C expression at the call site
    base: str = "arena"  # where a dialect without C symbols finds it: "arena" or "weights" (packed) ...
    offset: int = 0  # ... at this byte offset


@dataclass
class Layer:
    index: int
    node: Node
    fn: str
    code: str
    params: list[KernelParam]
    comment: str  # C comment text (escaped: tinyc.numerics.text.c_comment)
    name_literal: str = ""  # the ONNX node name as C string-literal content
    launch: Launch = field(default_factory=Launch)  # what the dialect declared (OpenCL: global size, local bytes)


@dataclass
class GeneratedModel:
    prefix: str
    files: dict[str, str]
    layers: list[Layer] = field(default_factory=list)
    weights_bytes: int = 0
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    weights: list[dict[str, Any]] = field(default_factory=list)  # sym, tensor, packed offset, bytes


@functools.cache
def _env() -> jinja2.Environment:
    """One environment per process: Jinja caches compiled templates in it (20x faster codegen)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["cfloat"] = c_float
    env.filters["cint"] = c_int
    env.filters["clit"] = c_literal
    env.filters["ctype"] = ctype
    env.globals["np"] = np
    env.globals["launch"] = LAUNCH  # the dialect's macros record launch metadata through it
    return register_filters(env)


def template_env() -> jinja2.Environment:
    """The one Jinja environment for every tinyc template (kernels and project files alike), with
    the escaping filters: a project file that prints a model-given name needs them too."""
    return _env()


def activation_expr(node: Node) -> Callable[[str], str]:
    """C expression applying the activation fused into `node` (identity when none)."""
    act = node.attrs.get("activation")
    if not act:
        return lambda x: x
    unary = get_op(act["op"])
    return lambda x: unary.c_expr(act.get("attrs", {}), x, "float")


def _weight_literals(data: np.ndarray, ct: str) -> str:
    from tinyc.numerics.dtypes import storage_view  # narrow types (float16, int4...) as their bits

    flat = storage_view(data).reshape(-1)
    if ct == "double":  # float64 constants keep every bit (a float32 literal would round them)
        items = [c_double(v) for v in flat.astype(np.float64)]
    elif ct == "float":
        items = [c_float(v) for v in flat.astype(np.float32)]
    elif data.dtype == np.bool_:
        items = [str(int(v)) for v in flat]
    else:
        items = [c_int(int(v), ct) for v in flat]
    lines = []
    for i in range(0, len(items), 8):
        lines.append("    " + ", ".join(items[i : i + 8]))
    return ",\n".join(lines)


#: Alignment of each constant in the packed weights blob (dialects whose kernels address the
#: weights as one buffer): a cache line, more than any element or vector type needs.
WEIGHT_ALIGN = 64


class _Weights:
    """The model's const arrays (top level and control-flow bodies), each constant once, in the
    order code first uses them, with its offset in the packed blob."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.syms: dict[tuple[str, int], str] = {}
        self.items: list[dict[str, Any]] = []
        self.packed = 0  # the next free offset in the packed weights blob

    def symbol(self, t: Tensor) -> str:
        # a body's copy of an outer constant shares its data: one array for both
        key = (t.name, id(t.data))
        if key not in self.syms:
            sym = f"{self.prefix}_w{len(self.syms)}"
            self.syms[key] = sym
            ct = ctype(t.dtype)
            data = t.data if t.data is not None else np.zeros(t.shape, t.dtype)
            self.items.append(
                {
                    "sym": sym,
                    "ctype": ct,
                    "count": max(1, t.size),
                    "tensor": t.name,
                    "shape": t.shape,
                    "literals": _weight_literals(data if t.size else np.zeros(1, data.dtype), ct),
                    "bytes": t.nbytes,
                    "offset": self.packed,
                }
            )
            self.packed += -(-max(1, t.nbytes) // WEIGHT_ALIGN) * WEIGHT_ALIGN
        return self.syms[key]

    def offset(self, t: Tensor) -> int:
        sym = self.symbol(t)
        return int(next(w["offset"] for w in self.items if w["sym"] == sym))


@dataclass
class _Scope:
    """Where a graph's tensors are, as C expressions: the top level's in the arena, a body's in
    its node's scratch (`base` "scratch"), a body's outer tensors in its kernel's parameters."""

    graph: Graph
    layout: MemoryLayout
    weights: _Weights
    base: str = "arena"  # the byte pointer the layout's offsets count from
    outer: dict[str, str] = field(default_factory=dict)  # outer tensor (layout.external) -> C expression

    def pointer(self, name: str, writable: bool) -> str:
        t = self.graph.tensor(name)
        if t.is_constant:
            return self.weights.symbol(t)
        if name in self.layout.external:
            return self.outer[self.layout.external[name]]
        off = self.layout.offset_of(name)
        return f"({'' if writable else 'const '}{ctype(t.dtype)} *)({self.base} + {off})"

    def place(self, name: str) -> tuple[str, int]:
        """(base, byte offset) of a tensor for dialects that address buffers, not C symbols."""
        t = self.graph.tensor(name)
        if t.is_constant:
            return "weights", self.weights.offset(t)
        if name in self.layout.external:
            return "arena", -1  # only in bodies, which compile to C only (no buffer addressing)
        return "arena", self.layout.offset_of(name)

    def arena_range(self, name: str) -> tuple[int, int] | None:
        t = self.graph.tensor(name)
        if t.is_constant or name in self.layout.external:
            return None
        off = self.layout.offset_of(name)
        return off, off + t.nbytes


def _render_layer(
    env: jinja2.Environment,
    dialect: Dialect,
    target: str,
    prefix: str,
    scope: _Scope,
    idx: int,
    fn: str,
    node: Node,
    sched: dict[str, Any],
) -> Layer:
    """One node's kernel function (a control-flow node's with its body's kernels before it)."""
    graph, layout = scope.graph, scope.layout
    opdef = get_op(node.op)
    opdef.check_supported(node, graph)
    if opdef.template is None:
        raise UnsupportedError(f"node '{node.source or node.name}' ({node.op}) has no C kernel")
    ins: list[TensorView | None] = []  # None: an absent optional input or output
    outs: list[TensorView | None] = []
    params: list[KernelParam] = []
    for i, name in enumerate(node.inputs):
        if not name:
            ins.append(None)
            continue
        t = graph.tensor(name)
        pname = f"in{i}"
        ins.append(TensorView(name, t.shape, t.dtype, ctype(t.dtype), pname, t.is_constant, t.data))
        shared = (not t.is_constant) and any(
            _overlap(scope.arena_range(name), scope.arena_range(o)) for o in node.outputs if o
        )
        params.append(
            KernelParam(pname, ctype(t.dtype), True, not shared, scope.pointer(name, False), *scope.place(name))
        )
    for j, name in enumerate(node.outputs):
        if not name:
            outs.append(None)
            continue
        t = graph.tensor(name)
        pname = f"out{j}"
        outs.append(TensorView(name, t.shape, t.dtype, ctype(t.dtype), pname, False))
        shared = any(_overlap(scope.arena_range(i), scope.arena_range(name)) for i in node.inputs if i)
        params.append(
            KernelParam(pname, ctype(t.dtype), False, not shared, scope.pointer(name, True), *scope.place(name))
        )
    scratch = layout.scratch.get(node.name)
    if scratch is not None:
        off = layout.offsets[scratch]
        params.append(KernelParam("scratch", "uint8_t", False, True, f"({scope.base} + {off})", "arena", off))
    ctx = dict(
        fn=fn,
        node=node,
        attrs=node.attrs,
        schedule=sched,
        ins=ins,
        outs=outs,
        params=params,
        act=activation_expr(node),
        dialect_macros=dialect.macros,
        has_scratch=scratch is not None,
        prefix=prefix,
    )
    ctx.update(opdef.kernel_context(node, graph, sched, target))
    wiring = getattr(opdef, "body_wiring", None)
    if wiring is not None:
        ctx.update(_body_context(env, dialect, target, prefix, scope, fn, node, wiring(node, graph)))
    try:
        code, launch = render_kernel(env.get_template(f"kernels/{opdef.template}"), ctx)
    except jinja2.TemplateError as exc:
        raise UnsupportedError(
            f"node '{node.source or node.name}' ({node.op}): kernel template {opdef.template} failed: {exc}"
        ) from exc
    shapes = ", ".join("x".join(map(str, graph.tensor(o).shape)) or "scalar" for o in node.outputs if o)
    src = node.source or node.name
    # model-given text (the node name; knob values may come from a tuning log) is escaped
    comment = f"layer {idx}: {c_comment(node.op)} '{c_comment(src)}' -> {shapes}" + (
        f" schedule {c_comment(sched, 400)}" if sched else ""
    )
    return Layer(idx, node, fn, code.rstrip() + "\n", params, comment, c_string_literal(src), launch)


def _body_context(
    env: jinja2.Environment, dialect: Dialect, target: str, prefix: str, scope: _Scope, fn: str, node: Node, w: Any
) -> dict[str, Any]:
    """Template variables of a Loop/Scan kernel (templates/kernels/loop.c.j2): its body's kernels
    rendered once (static functions called every iteration, their tensors in this node's scratch)
    and the copies that move states and scan slices in and out (tinyc.ops.control_flow)."""
    where = f"node '{node.source or node.name}' ({node.op})"
    if dialect.name != "c":
        raise UnsupportedError(f"{where}: control flow compiles to C targets only, not {dialect.name}")
    body: Graph = node.attrs["body"]
    sub = scope.layout.subplans[node.name]
    bscope = _Scope(body, sub, scope.weights, "scratch", {name: f"in{k}" for k, name in w.outer})
    codes, calls = [], []
    for i, bnode in enumerate(n for n in body.nodes if not get_op(n.op).alias):
        bfn = f"{fn}_b{i}_{c_identifier(bnode.op).lower()}"
        layer = _render_layer(env, dialect, target, prefix, bscope, i, bfn, bnode, {})
        codes.append(f"/* body of {c_comment(node.source or node.name)}, {layer.comment} */\n{layer.code}")
        calls.append(f"{layer.fn}({', '.join(p.arg for p in layer.params)});")

    def ptr(name: str, writable: bool) -> str:
        return f"({bscope.pointer(name, writable)})"

    def size(name: str) -> int:
        return body.tensor(name).size

    def buf(name: str) -> str | None:
        t = body.tensor(name)
        return None if t.is_constant or name in sub.external else sub.buffer_of(name)

    # Carried states are copied back one after another: a state output stored in another state's
    # input (the body swaps two states) would be overwritten before it is copied.
    state_bufs = {buf(inp) for _, inp in w.carry}
    carry = []
    for out, inp in w.carry:
        if buf(out) == buf(inp):
            continue  # the body hands the state back unchanged, in place
        if buf(out) in state_bufs:
            raise UnsupportedError(f"{where}: the body returns one loop-carried input as another state")
        carry.append({"dst": ptr(inp, True), "src": ptr(out, False), "count": size(inp)})

    def moves(items: list[Any], outgoing: bool) -> list[dict[str, Any]]:
        return [
            {
                "body": ptr(m.body, outgoing is False),
                "node": f"{'out' if outgoing else 'in'}{m.port}",
                "outer": m.outer,
                "steps": m.steps,
                "inner": m.inner,
                "reverse": m.reverse,
            }
            for m in items
            if m.outer * m.inner > 0 and (not outgoing or node.outputs[m.port])  # "": an output not asked for
        ]

    return {
        "body_code": "\n".join(codes),
        "calls": calls,
        "trip": w.trip,
        "init": [{"dst": ptr(b, True), "src": f"in{k}", "count": size(b)} for k, b in w.init if size(b)],
        "counter": ptr(w.counter, True) if w.counter else None,
        "flag": ptr(w.flag, True) if w.flag else None,
        "slices_in": moves(w.slices_in, False),
        "slices_out": moves(w.slices_out, True),
        "carry": [c for c in carry if c["count"]],
        "final": [
            {"dst": f"out{j}", "src": ptr(b, False), "count": size(b)}
            for b, j in w.final
            if size(b) and node.outputs[j]
        ],
    }


@dataclass(frozen=True)
class Placement:
    """Where the generated C puts its storage (docs/c-api.md): the one-call API's static arena
    either the model's own or the one shared by the models compiled together
    (tinyc_shared_arena.c), and the default sections of the static arena and the weights baked
    into the headers (a -D of the same macro overrides them)."""

    shared_arena: bool = False
    arena_section: str | None = None
    weights_section: str | None = None


def generate_c(
    graph: Graph,
    layout: MemoryLayout,
    schedules: dict[str, dict[str, Any]],
    prefix: str,
    dialect: Dialect,
    target: str,
    placement: Placement | None = None,
) -> GeneratedModel:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", prefix):
        raise ValueError(f"C prefix {prefix!r} is not an identifier (tinyc.numerics.text.c_prefix makes one)")
    env = _env()
    weights = _Weights(prefix)
    scope = _Scope(graph, layout, weights)
    layers: list[Layer] = []
    code_nodes = [n for n in graph.nodes if not get_op(n.op).alias]
    for idx, node in enumerate(code_nodes):
        fn = f"layer{idx}_{c_identifier(node.op).lower()}"
        layers.append(_render_layer(env, dialect, target, prefix, scope, idx, fn, node, schedules.get(node.name, {})))

    used: set[str] = set()
    io_inputs = [_io_view(graph, n, n, "in", k, layout, used) for k, n in enumerate(graph.inputs)]
    io_outputs = [_io_view(graph, pub, n, "out", k, layout, used) for k, (pub, n) in enumerate(graph.public_outputs())]
    for o, (_pub, internal) in zip(io_outputs, graph.public_outputs()):
        if o["const"]:
            o["src"] = weights.symbol(graph.tensor(internal))

    guard = f"TINYC_MODEL_{prefix.upper()}_H"  # never clashes with the runtime headers (TINYC_RT_H, TINYC_Q_H)
    place = placement or Placement()
    for i in io_inputs:
        i["preserved"] = _preserved(layout, i["buffer"])
    common = dict(
        arena_align=ALIGNMENT,
        shared_arena=place.shared_arena,
        arena_section=place.arena_section,
        weights_section=place.weights_section,
        stateful=any(get_op(n.op).stateful and n.attrs.get("keep_state") for n in graph.nodes),
        prefix=prefix,
        version=__version__,
        model=graph.name,
        arena_bytes=layout.arena_bytes,
        inputs=io_inputs,
        outputs=io_outputs,
        layers=layers,
        weights=weights.items,
        guard=guard,
        nlayers=len(layers),
    )
    files = {
        f"{prefix}.h": env.get_template("model.h.j2").render(**common),
        f"{prefix}.c": env.get_template("model.c.j2").render(**common),
        f"{prefix}_weights.h": env.get_template("weights.h.j2").render(**common),
        f"{prefix}_weights.c": env.get_template("weights.c.j2").render(**common),
    }
    return GeneratedModel(
        prefix,
        files,
        layers,
        sum(w["bytes"] for w in weights.items),
        io_inputs,
        io_outputs,
        [{k: w[k] for k in ("sym", "tensor", "offset", "bytes")} for w in weights.items],
    )


def _io_view(
    graph: Graph, public: str, name: str, kind: str, k: int, layout: MemoryLayout, used: set[str]
) -> dict[str, Any]:
    t: Tensor = graph.tensor(name)
    ident = f"{kind}_{c_identifier(public, f'{kind}{k}')}"
    while ident.lower() in used:  # case-blind: the header's macros spell it in upper case
        ident += "_"
    used.add(ident.lower())
    return {
        "tensor": public,
        "ident": ident,
        "ctype": ctype(t.dtype),
        "shape": t.shape,
        "count": t.size,
        "bytes": t.nbytes,
        "const": t.is_constant,
        "offset": None if t.is_constant else layout.offsets[layout.buffer_of(name)],
        "buffer": None if t.is_constant else layout.buffer_of(name),
        "dtype": t.dtype,
        "layout": graph.io_layout.get(public, ""),
        "quant": _io_grid(t),
    }


def _io_grid(t: Tensor) -> dict[str, str | int] | None:
    """An integer input/output's grid as C literals (real = scale * (q - zero_point)), for the
    header: its range, and `limit`, a bound on |x / scale| past which every value saturates
    (the quantize helper clamps to it before converting to int32: no overflow, same result)."""
    if t.quant is None or t.dtype not in ("int8", "uint8", "int16"):
        return None
    scale = np.asarray(t.quant.scale, np.float32).reshape(-1)
    zp = np.asarray(t.quant.zero_point).reshape(-1)
    if scale.size != 1:
        return None
    info = np.iinfo(np.dtype(t.dtype))
    return {
        "scale": c_float(float(scale[0])),
        "zero_point": int(zp[0]) if zp.size else 0,
        "qmin": int(info.min),
        "qmax": int(info.max),
        "limit": 2 * (int(info.max) - int(info.min) + 1),
    }


def _preserved(layout: MemoryLayout, buffer: str | None) -> bool:
    """Whether no other arena buffer shares bytes with an input's: a run then leaves the input as
    it was written (the harness and a caller may fill it once and run again)."""
    if buffer is None:
        return True
    sizes = {b.name: b.size for b in layout.buffers}
    off = layout.offsets[buffer]
    end = off + sizes[buffer]
    return not any(
        name != buffer and _overlap((off, end), (o, o + sizes[name]))
        for name, o in layout.offsets.items()
        if name in sizes
    )
