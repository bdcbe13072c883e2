"""Locate the data folders (templates/, runtime_c/, boards/) in a source checkout or an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Installed wheels carry the folders under tinyc/_data; a checkout has them at the repo root."""
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"tinyc data folder '{name}' not found (broken installation?)")


def templates_dir() -> Path:
    return data_dir("templates")


def runtime_dir() -> Path:
    return data_dir("runtime_c")


def boards_dir() -> Path:
    return data_dir("boards")
