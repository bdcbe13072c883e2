"""What the device side reads from a firmware project folder: the board it was written for
(board.json) and the hash of its model sources, which the firmware reports in HELLO so the host
can tell whether a board already runs this project. Board projects (tinyc.targets.board) write
both with these functions, so writer and reader cannot disagree."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tinyc.errors import UsageError

BOARD_JSON = "board.json"


def model_hash(files: Mapping[str, str]) -> str:
    """16 hex digits of the sha256 of the generated model sources (names and text, sorted by
    name): the firmware reports it, so the host can tell whether the board runs this model."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode())
        h.update(b"\0")
        h.update(files[name].encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def load_project_board(out_dir: Path) -> dict[str, Any]:
    """The board a firmware project was written for (its board.json)."""
    path = Path(out_dir) / BOARD_JSON
    if not path.is_file():
        raise UsageError(f"{out_dir} is not a tinyc firmware project (no {BOARD_JSON}); compile for a board first")
    return json.loads(path.read_text())
