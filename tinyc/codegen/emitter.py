"""Render a planned graph to C sources through the Jinja2 templates and a dialect.

Output files per model: `<prefix>.h` (API, I/O shapes, arena size), `<prefix>.c` (kernels and the
run function over one static arena), `<prefix>_weights.c/.h` (aligned const arrays).
Deterministic: the same graph and plan always give byte-identical text.
"""

from __future__ import annotations

import functools
import hashlib
import html
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import jinja2
import numpy as np

from tinyc import __version__
from tinyc.codegen.dialect import C99, Dialect, c_float, c_int, c_literal
from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node, Tensor
from tinyc.memory import MemoryLayout
from tinyc.ops import get_op
from tinyc.ops.base import ctype, strides_of
from tinyc.resources import runtime_dir, templates_dir


#: C keywords (C99, C11, C23) and the C23 spellings of old macros: never a generated identifier.
C_KEYWORDS = frozenset(
    (
        "auto break case char const continue default do double else enum extern float for goto if inline int long "
        "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
        "_Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic _Noreturn _Static_assert _Thread_local _BitInt "
        "_Decimal32 _Decimal64 _Decimal128 alignas alignof bool constexpr false nullptr static_assert thread_local true "
        "typeof typeof_unqual asm fortran"
    ).split()
)

#: Longest identifier body made from a model-given name (C99 guarantees 63 significant characters).
MAX_IDENT = 40
#: Longest C prefix (every exported symbol, macro, file and CMake target starts with it).
MAX_PREFIX = 32
#: CMake's reserved target names (the prefix names the library target).
_CMAKE_RESERVED = frozenset(
    (
        "all all_build clean depend edit_cache help install install_local install_strip list_install_components "
        "package package_source preinstall rebuild_cache run_tests zero_check"
    ).split()
)


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def c_identifier(text: str, fallback: str = "model", max_len: int = MAX_IDENT) -> str:
    """A C identifier made from untrusted text: only ASCII [A-Za-z0-9_], no leading underscore
    (reserved) or digit, never a keyword, at most `max_len` characters. A longer one keeps its start
    and ends in 8 hex digits of the text's hash, so that different long names stay different.
    Callers that need several make them unique themselves (sanitising maps `a-b` and `a_b` alike)."""
    text = str(text)
    ident = re.sub(r"[^0-9A-Za-z_]", "_", text).strip("_") or fallback
    if ident[0].isdigit() or ident in C_KEYWORDS:
        ident = f"m_{ident}"
    if len(ident) > max_len:
        ident = ident[: max_len - 9].rstrip("_") + "_" + _short_hash(text)
    return ident


@functools.lru_cache(maxsize=1)
def _reserved_prefixes() -> frozenset[str]:
    """Prefixes whose files would collide with the runtime's or the project's (main.c, tinyc_rt.h,
    model_cl.c ...): every file stem under runtime_c/ and templates/project/, plus `main`."""
    stems = {"main", "harness_main", "harness_host"}
    for root in (runtime_dir(), templates_dir() / "project"):
        stems.update(p.name.split(".")[0].lower() for p in root.rglob("*") if p.is_file())
    return frozenset(stems | _CMAKE_RESERVED | C_KEYWORDS)


def c_prefix(text: str) -> str:
    """The C prefix of a model (symbols `<prefix>_run` ..., files `<prefix>.c` ..., the CMake target):
    `c_identifier` of untrusted text, lower case, at most MAX_PREFIX characters, and never one of
    tinyc's own names: `main`, a runtime or project file's name, anything starting `tinyc`, a CMake
    reserved target or a C keyword become `m_<name>`. Idempotent."""
    prefix = c_identifier(text, "model", MAX_PREFIX).lower()
    if prefix.startswith("tinyc") or prefix in _reserved_prefixes():
        prefix = f"m_{prefix}"
        if len(prefix) > MAX_PREFIX:
            prefix = prefix[: MAX_PREFIX - 9].rstrip("_") + "_" + _short_hash(str(text))
    return prefix


def _overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    """Whether two arena byte ranges overlap: such operands must not be `restrict`."""
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


#: Longest model-given text in one generated comment, as written (escapes count in full).
COMMENT_LIMIT = 120
#: Longest model-given text in one C string literal, in UTF-8 bytes (ISO C99 compilers need only
#: take 4095 characters in a literal; gcc -pedantic warns beyond that).
STRING_LIMIT = 1024
#: Longest model-given text in one line of Markdown or SVG (report.md, memory.svg, README.md).
TEXT_LIMIT = 200


def _escape_char(ch: str) -> str:
    o = ord(ch)
    return f"\\u{o:04X}" if o <= 0xFFFF else f"\\U{o:08X}"


def _bounded(pieces: Any, limit: int) -> str:
    """Join escaped pieces up to `limit` characters; "..." marks a cut."""
    out: list[str] = []
    n = 0
    for piece in pieces:
        if n + len(piece) > limit:
            out.append("...")
            break
        out.append(piece)
        n += len(piece)
    return "".join(out)


def c_comment(text: Any, limit: int = COMMENT_LIMIT) -> str:
    """Untrusted text for the inside of a /* */ comment of C or OpenCL C, and of a #-comment line of
    CMake or make: printable ASCII only (a backslash doubled, any other character as \\uXXXX or
    \\UXXXXXXXX, so no newline), at most `limit` characters (then "..."), and no `*/`, `/*` or `??`
    (a trigraph) left: a space breaks each up. Place it between separators (spaces, quotes)."""

    def pieces() -> Any:
        for ch in str(text):
            if ch == "\\":
                yield "\\\\"
            elif " " <= ch <= "~":
                yield ch
            else:
                yield _escape_char(ch)

    s = _bounded(pieces(), limit)
    while "*/" in s or "/*" in s or "??" in s:
        s = s.replace("*/", "* /").replace("/*", "/ *").replace("??", "? ?")
    return s


_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def c_string_literal(text: str, limit: int = STRING_LIMIT) -> str:
    """Escape `text` (UTF-8) for a C string literal (the content between the quotes): printable ASCII
    as itself except `"`, `\\` and `?` (trigraphs), which get a backslash; newline, CR and tab as
    `\\n`, `\\r`, `\\t`; every other byte as a 3-digit octal escape. Text of more than `limit` bytes
    is cut at a character boundary and ends in "..."."""
    raw = str(text).encode("utf-8", "replace")
    if len(raw) > limit:
        raw = raw[: max(0, limit - 3)].decode("utf-8", "ignore").encode("utf-8") + b"..."
    out = []
    for b in raw:
        ch = chr(b)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif 32 <= b < 127:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return "".join(out)


def _unprintable(ch: str) -> bool:
    """Control, format (bidi overrides), surrogate, private, unassigned and line/paragraph separator
    characters: what must not reach a line of Markdown or XML as itself."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def md_text(text: Any, limit: int = TEXT_LIMIT) -> str:
    """Untrusted text for one line of Markdown (a heading, a table cell): unprintable characters as
    \\uXXXX, `<`, `>`, `&` as entities (no HTML), and Markdown's `\\ ` * [ ] | ~ $` backslash-escaped
    (no links, images, code spans or table cells); at most `limit` characters (then "...")."""

    def pieces() -> Any:
        for ch in str(text):
            if _unprintable(ch):
                yield _escape_char(ch)
            elif ch in "<>&":
                yield {"<": "&lt;", ">": "&gt;", "&": "&amp;"}[ch]
            elif ch in "\\`*[]|~$":
                yield "\\" + ch
            else:
                yield ch

    return _bounded(pieces(), limit)


def xml_text(text: Any, limit: int = TEXT_LIMIT) -> str:
    """Untrusted text for XML character data or a quoted attribute (SVG): unprintable characters
    (XML 1.0 forbids most control characters) as \\uXXXX, markup characters as entities; at most
    `limit` characters before escaping the markup (then "...")."""
    s = _bounded((_escape_char(ch) if _unprintable(ch) else ch for ch in str(text)), limit)
    return html.escape(s, quote=True)


def cmake_quote(word: str) -> str:
    """`word` as one quoted CMake argument: backslashes, quotes and '$' escaped (so `${...}` is not
    expanded); CMake itself then escapes the value for the Makefile or Ninja file and the shell."""
    return '"' + str(word).replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def make_text(text: str) -> str:
    """`text` (shell words, e.g. flags) as it must stand in a GNU make assignment to reach the
    shell unchanged: `$` doubled, `#` (a comment in make) escaped; newlines become spaces."""
    return " ".join(str(text).splitlines()).replace("$", "$$").replace("#", "\\#")


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
    comment: str  # C comment text (escaped: tinyc.codegen.emitter.c_comment)
    name_literal: str = ""  # the ONNX node name as C string-literal content


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
    return lambda x: unary.c_expr(act.get("attrs", {}), x, "float")  # type: ignore[attr-defined]


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
    graph: Graph, layout: MemoryLayout, schedules: dict[str, dict[str, Any]], prefix: str, dialect: Dialect = C99
) -> GeneratedModel:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", prefix):
        raise ValueError(f"C prefix {prefix!r} is not an identifier (tinyc.codegen.emitter.c_prefix makes one)")
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
        ins, outs, params = [], [], []
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
        ctx.update(opdef.kernel_context(node, graph, sched))
        try:
            code = env.get_template(f"kernels/{opdef.template}").render(**ctx)
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
        layers.append(Layer(idx, node, fn, code.rstrip() + "\n", params, comment, c_string_literal(src)))

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
    }
