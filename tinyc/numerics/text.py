"""Names are untrusted text: how a model-given string may appear in what tinyc writes.

A node, tensor or model name comes from the ONNX file and may hold anything (quotes, newlines,
`*/`, bidi overrides, megabytes). Every place it reaches goes through one function here: a C
identifier or prefix, the inside of a C comment or string literal, a line of Markdown or XML, a
CMake argument or a make assignment. Each keeps the text recognisable, bounds its length and can
never end its context early.
"""

from __future__ import annotations

import functools
import hashlib
import html
import re
import unicodedata
from typing import Any

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
