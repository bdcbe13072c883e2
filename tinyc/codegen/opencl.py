"""OpenCL C 1.2 programs from the kernels the C templates render through the OpenCL dialect.

The kernel templates are written once, in C; `templates/dialects/opencl.j2` turns their kernel
and parallel-loop constructs into OpenCL ones. What a macro cannot reach is the address space of
a pointer: C has one memory, OpenCL C 1.2 needs every pointer to say whether it points into a
device buffer (`__global`), a table (`__constant`) or work-item memory (`__private`, the default).
`address_spaces` adds the qualifiers to the rendered text, reading each pointer's space from what
it is initialised with; the prelude supplies C99's names (stdint types, `expf`, ...) and the
runtime's integer arithmetic (tinyc_q.h, compiled unchanged) so kernels need no edit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tinyc.resources import runtime_dir

#: The OpenCL C version the program is built for (no extension is required except cl_khr_fp64,
#: and that only by the kernels of the few ops that accumulate in double).
CL_STD = "CL1.2"

_TYPE = (
    r"(?:unsigned\s+)?(?:float|double|char|uchar|short|ushort|int|uint|long|ulong|bool|"
    r"u?int(?:8|16|32|64)_t|tinyc_[a-z0-9_]+_t)"
)
# `static const T name[...] = {` (a table) and `static const T name = {` (a constant struct)
_STATIC_TABLE = re.compile(rf"\bstatic\s+const\s+({_TYPE})\s+([A-Za-z_]\w*)\s*\[")
_STATIC_SCALAR = re.compile(rf"\bstatic\s+const\s+({_TYPE})\s+([A-Za-z_]\w*)\s*=")
# a private array: `T name[...]` (no initialiser pointer, no static)
_PRIVATE_ARRAY = re.compile(rf"^\s*({_TYPE})\s+([A-Za-z_]\w*)\s*\[", re.M)
# a pointer declaration `[const] T *[const] [restrict] name` followed by `=`, `;` or `[`
_POINTER_DECL = re.compile(
    rf"(?P<lead>^\s*|\(\s*|for\s*\(\s*)(?P<decl>(?:const\s+)?{_TYPE}\s*\*\s*(?:const\s+)?(?:restrict\s+|TINYC_RESTRICT\s+)?"
    rf"(?P<name>[A-Za-z_]\w*))(?P<after>\s*(?:=|;|\[))(?P<init>[^;]*)",
    re.M,
)
# a pointer cast `(const T *)` or `(T *)` (or `*const`)
_POINTER_CAST = re.compile(rf"\((?P<ty>(?:const\s+)?{_TYPE}\s*\*\s*(?:const\s*)?)\)")
_PARALLEL = re.compile(r"/\* tinyc:parallel_for (\S+) \*/")
_LOCAL_BYTES = re.compile(r"/\* tinyc:local_bytes (\d+) \*/")
# a pointer into work-group local memory: `__local [const] T *name`
_LOCAL_POINTER = re.compile(rf"__local\s+(?:const\s+)?{_TYPE}\s*\*\s*(?:const\s+)?([A-Za-z_]\w*)\s*=")
_IDENT = re.compile(r"[A-Za-z_]\w*")


def address_spaces(code: str) -> str:
    """Qualify the pointers of one rendered kernel (plus its helpers) for OpenCL C 1.2.

    Tables (`static const T t[]`) become `__constant`; a constant scalar struct stays private
    (helpers take it by pointer). A pointer declaration takes the space of the first known name in
    its initialiser: a table's is `__constant`, a private array's stays private, anything else —
    kernel operands, scratch, pointers derived from them — is `__global`; one derived from a
    `__local` pointer (the dialect's staged rows) is `__local`. Pointer casts (of the scratch
    buffer) are `__global`. Lines already qualified are left alone."""
    tables = {m.group(2) for m in _STATIC_TABLE.finditer(code)}
    code = _STATIC_TABLE.sub(lambda m: f"__constant {m.group(1)} {m.group(2)}[", code)
    code = _STATIC_SCALAR.sub(lambda m: f"const {m.group(1)} {m.group(2)} =", code)
    private = {m.group(2) for m in _PRIVATE_ARRAY.finditer(code)} - tables
    space: dict[str, str] = {m.group(1): "__local" for m in _LOCAL_POINTER.finditer(code)}

    def decl(m: re.Match[str]) -> str:
        init = m.group("init") if m.group("after").strip() == "=" else ""
        kind = "__global"
        for ident in _IDENT.findall(init):
            if ident in tables or space.get(ident) == "__constant":
                kind = "__constant"
                break
            if space.get(ident) == "__local":
                kind = "__local"
                break
            if ident in private or space.get(ident) == "__private":
                kind = "__private"
                break
            if ident in space or ident.startswith(("in", "out", "scratch")):
                kind = space.get(ident, "__global")
                break
        space[m.group("name")] = kind
        prefix = "" if kind == "__private" else kind + " "
        return f"{m.group('lead')}{prefix}{m.group('decl')}{m.group('after')}{m.group('init')}"

    lines = []
    for line in code.split("\n"):
        if (
            "__global" in line
            or "__constant" in line
            or "__local" in line
            or line.lstrip().startswith(("/*", "*", "//"))
        ):
            lines.append(line)
            continue
        line = _POINTER_DECL.sub(decl, line)
        line = _POINTER_CAST.sub(lambda m: f"(__global {m.group('ty')})", line)
        lines.append(line)
    return "\n".join(lines)


def global_size(code: str) -> int:
    """Work-items a rendered kernel runs on: the extent of its one parallel loop; 1 (a serial
    kernel) when it has none, several (a later loop may read what another work-item wrote) or one
    whose extent is not a number."""
    found = _PARALLEL.findall(code)
    if len(found) != 1 or not found[0].isdigit():
        return 1
    return max(1, int(found[0]))


def local_bytes(code: str) -> int:
    """Bytes of work-group local memory a rendered kernel takes as its third argument (the
    dialect's `kernel(..., local_bytes=N)` marks it); 0 for a kernel without one."""
    found = _LOCAL_BYTES.findall(code)
    return max((int(v) for v in found), default=0)


PRELUDE = (
    r"""/* tinyc OpenCL C 1.2 prelude: C99's names for the kernels rendered from the C templates. */
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
/* a * b + c stays two roundings, as in the C kernels and the golden model */
#pragma OPENCL FP_CONTRACT OFF
typedef char int8_t;
typedef uchar uint8_t;
typedef short int16_t;
typedef ushort uint16_t;
typedef int int32_t;
typedef uint uint32_t;
typedef long int64_t;
typedef ulong uint64_t;
#define INT8_MIN CHAR_MIN
#define INT8_MAX CHAR_MAX
#define UINT8_MAX UCHAR_MAX
#define INT16_MIN SHRT_MIN
#define INT16_MAX SHRT_MAX
#define UINT16_MAX USHRT_MAX
#define INT32_MIN INT_MIN
#define INT32_MAX INT_MAX
#define UINT32_MAX UINT_MAX
#define INT64_MIN LONG_MIN
#define INT64_MAX LONG_MAX
#define UINT64_MAX ULONG_MAX
#define INT64_C(x) (x##L)
#define UINT64_C(x) (x##UL)
#define TINYC_SIMD
#define TINYC_RESTRICT restrict
#define TINYC_ALIGN(n)
#define TINYC_INLINE static inline
#define TINYC_Q_TABLE __global
#define TINYC_OK 0
"""
    + "".join(
        f"#define {f}f {f}\n"
        for f in (
            "exp",
            "expm1",
            "log",
            "log1p",
            "sqrt",
            "fabs",
            "tanh",
            "pow",
            "erf",
            "tan",
            "sinh",
            "sin",
            "cos",
            "cosh",
            "rint",
            "floor",
            "ceil",
            "atanh",
            "atan",
            "asinh",
            "asin",
            "acosh",
            "acos",
            "fmod",
            "fmin",
            "fmax",
            "round",
            "trunc",
            "nearbyint",
            "copysign",
            "log2",
            "exp2",
            "log10",
        )
    )
    + r"""
/* NaN in either argument gives NaN (IEEE/ONNX, as runtime_c/include/tinyc_rt.h) */
TINYC_INLINE float tinyc_minf(float a, float b) { return (a < b || a != a) ? a : b; }
TINYC_INLINE float tinyc_maxf(float a, float b) { return (a > b || a != a) ? a : b; }
TINYC_INLINE int32_t tinyc_mini(int32_t a, int32_t b) { return a < b ? a : b; }
TINYC_INLINE int32_t tinyc_maxi(int32_t a, int32_t b) { return a > b ? a : b; }
"""
)


def runtime_header(name: str) -> str:
    """A runtime_c header as OpenCL C: its #include lines dropped (the prelude defines them)."""
    text = (runtime_dir() / "include" / name).read_text()
    return "\n".join(line for line in text.split("\n") if not line.startswith("#include"))


@dataclass
class Kernel:
    """One layer's kernel as the host launches it."""

    index: int
    fn: str
    name: str
    global_size: int
    local_size: int  # 0: the driver chooses


def kernel_code(code: str) -> str:
    """A layer's rendered code for the program: address spaces added, #includes dropped (the
    program carries the prelude and runtime headers once)."""
    body = "\n".join(line for line in code.split("\n") if not line.startswith("#include"))
    return address_spaces(body)


def program_source(prefix: str, model: str, version: str, layer_codes: list[tuple[str, str]]) -> str:
    """The whole OpenCL program: prelude, tinyc_q.h, then one kernel per layer (comment, code)."""
    parts = [
        f"/*\n * {prefix}.cl - generated by tinyc {version} from model '{model}'. Do not edit.\n"
        f" * {len(layer_codes)} kernels, OpenCL C 1.2.\n */\n",
        PRELUDE,
        runtime_header("tinyc_q.h"),
    ]
    for comment, code in layer_codes:
        parts.append(f"/* {comment} */\n{kernel_code(code)}")
    return "\n".join(parts)
