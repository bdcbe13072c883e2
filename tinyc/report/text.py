"""Model-given names (untrusted) as plain display text for plots and HTML: unprintable characters
(controls, bidi overrides, line separators) as \\uXXXX, bounded in length. Markup is escaped later by
whoever writes the text (Jinja autoescape for HTML, matplotlib's SVG writer for plots)."""

from __future__ import annotations

import unicodedata
from typing import Any

#: Longest model-given text in a plot label or an HTML table cell.
TEXT_LIMIT = 200
_UNPRINTABLE = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def plain(text: Any, limit: int = TEXT_LIMIT) -> str:
    """`text` with unprintable characters escaped, at most `limit` characters (then "...")."""
    out: list[str] = []
    n = 0
    for ch in str(text):
        o = ord(ch)
        piece = (f"\\u{o:04X}" if o <= 0xFFFF else f"\\U{o:08X}") if unicodedata.category(ch) in _UNPRINTABLE else ch
        if n + len(piece) > limit:
            out.append("...")
            break
        out.append(piece)
        n += len(piece)
    return "".join(out)
