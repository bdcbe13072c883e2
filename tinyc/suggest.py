"""'did you mean ...?' for a mistyped name (a board, an operator): the fix, not only the list.

At the bottom layer so that both the frontend (op names) and the targets (board names) use it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_matches(name: str, known: Iterable[str], n: int = 2, cutoff: float = 0.6) -> list[str]:
    """The names of `known` closest to `name` (case-insensitive difflib ratio >= cutoff), best first."""
    lowered: dict[str, str] = {}
    for k in known:
        lowered.setdefault(k.lower(), k)
    return [lowered[c] for c in difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=cutoff)]


def did_you_mean(name: str, known: Iterable[str], n: int = 2, cutoff: float = 0.6) -> str:
    """'; did you mean 'X'?' (or 'X' or 'Y') for the closest known names, '' when none is close."""
    close = [c for c in close_matches(name, known, n, cutoff) if c != name]
    if not close:
        return ""
    return "; did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
