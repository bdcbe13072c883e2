"""The arena shared by several models compiled into one folder (`compile_models(...,
shared_arena=True)`): `tinyc_shared_arena.h` with its size (the largest plan) and
`tinyc_shared_arena.c` defining it, with a compile-time check that it holds every model's plan.
Each model's one-call API runs on it (templates/model.c.j2 with `shared_arena`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tinyc.codegen.emitter import template_env
from tinyc.memory import ALIGNMENT
from tinyc.version import __version__

HEADER = "tinyc_shared_arena.h"
SOURCE = "tinyc_shared_arena.c"


def shared_arena_files(models: Sequence[dict[str, Any]], arena_section: str | None = None) -> dict[str, str]:
    """The two files for `models` (each {"prefix", "arena_bytes"}), the arena's default section
    baked in when given (TINYC_SHARED_ARENA_SECTION overrides it)."""
    env = template_env()
    ctx = dict(
        version=__version__,
        models=list(models),
        prefixes=[m["prefix"] for m in models],
        shared_bytes=shared_arena_bytes(models),
        align=ALIGNMENT,
        arena_section=arena_section,
    )
    return {
        HEADER: env.get_template("shared_arena.h.j2").render(**ctx),
        SOURCE: env.get_template("shared_arena.c.j2").render(**ctx),
    }


def shared_arena_bytes(models: Sequence[dict[str, Any]]) -> int:
    """The shared arena's size: the largest model's plan."""
    return max((int(m["arena_bytes"]) for m in models), default=0)
