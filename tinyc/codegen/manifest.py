"""The manifest of a compiled folder (tinyc.json): what codegen says about the model's I/O and
target, read back by every runner, builder and the device side without knowing which target wrote it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tinyc.errors import RunError

MANIFEST = "tinyc.json"


def load_manifest(out_dir: Path) -> dict[str, Any]:
    """The folder's tinyc.json (a RunError naming the folder when it was never compiled)."""
    path = Path(out_dir) / MANIFEST
    if not path.exists():
        raise RunError(f"{out_dir} is not a tinyc output folder (no {MANIFEST}); run `tinyc compile` first")
    return json.loads(path.read_text())
