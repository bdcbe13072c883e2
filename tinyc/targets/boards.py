"""Board definitions (boards/*.toml): what a target is built with."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tinyc.errors import UsageError
from tinyc.resources import boards_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def load_board(name: str, board_dir: str | Path | None = None) -> dict[str, Any]:
    """Find `<name>.toml` in the user's board dir (if given) or the bundled boards."""
    dirs = [Path(board_dir)] if board_dir else []
    dirs.append(boards_dir())
    for d in dirs:
        path = d / f"{name}.toml"
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text())
            except tomllib.TOMLDecodeError as exc:
                raise UsageError(f"board file {path} is not valid TOML: {exc}") from None
            data.setdefault("name", name)
            return data
    known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.toml")})
    raise UsageError(f"unknown board '{name}' (known: {', '.join(known)})")
