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
from tinyc.memory import MemoryLayout
from tinyc.numerics.literals import c_float, c_int, c_literal
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
    flat = data.reshape(-1)
    if ct in ("float", "double"):
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


def generate_c(
    graph: Graph, layout: MemoryLayout, schedules: dict[str, dict[str, Any]], prefix: str, dialect: Dialect, target: str
) -> GeneratedModel:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", prefix):
        raise ValueError(f"C prefix {prefix!r} is not an identifier (tinyc.numerics.text.c_prefix makes one)")
    env = _env()
    weight_syms: dict[str, str] = {}
    weights: list[dict[str, Any]] = []
    packed = [0]  # the next free offset in the packed weights blob

    def weight(name: str) -> str:
        if name not in weight_syms:
            t = graph.tensor(name)
            sym = f"{prefix}_w{len(weight_syms)}"
            weight_syms[name] = sym
            ct = ctype(t.dtype)
            data = t.data if t.data is not None else np.zeros(t.shape, t.dtype)
            weights.append(
                {
                    "sym": sym,
                    "ctype": ct,
                    "count": max(1, t.size),
                    "tensor": name,
                    "shape": t.shape,
                    "literals": _weight_literals(data if t.size else np.zeros(1, data.dtype), ct),
                    "bytes": t.nbytes,
                    "offset": packed[0],
                }
            )
            packed[0] += -(-max(1, t.nbytes) // WEIGHT_ALIGN) * WEIGHT_ALIGN
        return weight_syms[name]

    def place(name: str) -> tuple[str, int]:
        """(base, byte offset) of a tensor for dialects that address buffers, not C symbols."""
        if graph.tensor(name).is_constant:
            sym = weight(name)
            return "weights", next(w["offset"] for w in weights if w["sym"] == sym)
        return "arena", layout.offsets[layout.buffer_of(name)]

    def pointer(name: str, writable: bool) -> str:
        t = graph.tensor(name)
        ct = ctype(t.dtype)
        if t.is_constant:
            return weight(name)
        off = layout.offsets[layout.buffer_of(name)]
        return f"({'' if writable else 'const '}{ct} *)(arena + {off})"

    def arena_range(name: str) -> tuple[int, int] | None:
        t = graph.tensor(name)
        if t.is_constant:
            return None
        off = layout.offsets[layout.buffer_of(name)]
        return off, off + t.nbytes

    layers: list[Layer] = []
    code_nodes = [n for n in graph.nodes if not get_op(n.op).alias]
    for idx, node in enumerate(code_nodes):
        opdef = get_op(node.op)
        opdef.check_supported(node, graph)
        if opdef.template is None:
            raise UnsupportedError(f"node '{node.source or node.name}' ({node.op}) has no C kernel")
        sched = schedules.get(node.name, {})
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
            shared = (not t.is_constant) and any(_overlap(arena_range(name), arena_range(o)) for o in node.outputs if o)
            params.append(KernelParam(pname, ctype(t.dtype), True, not shared, pointer(name, False), *place(name)))
        for j, name in enumerate(node.outputs):
            if not name:
                outs.append(None)
                continue
            t = graph.tensor(name)
            pname = f"out{j}"
            outs.append(TensorView(name, t.shape, t.dtype, ctype(t.dtype), pname, False))
            shared = any(_overlap(arena_range(i), arena_range(name)) for i in node.inputs if i)
            params.append(KernelParam(pname, ctype(t.dtype), False, not shared, pointer(name, True), *place(name)))
        scratch = layout.scratch.get(node.name)
        if scratch is not None:
            params.append(
                KernelParam(
                    "scratch",
                    "uint8_t",
                    False,
                    True,
                    f"(arena + {layout.offsets[scratch]})",
                    "arena",
                    layout.offsets[scratch],
                )
            )
        fn = f"layer{idx}_{c_identifier(node.op).lower()}"
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
        layers.append(Layer(idx, node, fn, code.rstrip() + "\n", params, comment, c_string_literal(src), launch))

    used: set[str] = set()
    io_inputs = [_io_view(graph, n, n, "in", k, layout, used) for k, n in enumerate(graph.inputs)]
    io_outputs = [_io_view(graph, pub, n, "out", k, layout, used) for k, (pub, n) in enumerate(graph.public_outputs())]
    for o in io_outputs:
        if o["const"]:
            o["src"] = weight(o["tensor"])

    guard = f"TINYC_MODEL_{prefix.upper()}_H"  # never clashes with the runtime headers (TINYC_RT_H, TINYC_Q_H)
    common = dict(
        prefix=prefix,
        version=__version__,
        model=graph.name,
        arena_bytes=layout.arena_bytes,
        inputs=io_inputs,
        outputs=io_outputs,
        layers=layers,
        weights=weights,
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
        sum(w["bytes"] for w in weights),
        io_inputs,
        io_outputs,
        [{k: w[k] for k in ("sym", "tensor", "offset", "bytes")} for w in weights],
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
        "layout": graph.io_layout.get(public, ""),
        "quant": _io_grid(t),
    }


def _io_grid(t: Tensor) -> dict[str, str | int] | None:
    """An integer input/output's grid as C literals (real = scale * (q - zero_point)), for the header."""
    if t.quant is None or t.dtype not in ("int8", "uint8", "int16"):
        return None
    scale = np.asarray(t.quant.scale, np.float32).reshape(-1)
    zp = np.asarray(t.quant.zero_point).reshape(-1)
    if scale.size != 1:
        return None
    return {"scale": c_float(float(scale[0])), "zero_point": int(zp[0]) if zp.size else 0}
