"""Output folders: a compile is written into a staging folder beside the target folder and only
then moved in, so that a compile that fails (the board fit check, an unsupported op) leaves
nothing behind, and a folder compiled for another target holds nothing stale afterwards.

What tinyc owns in a folder is what its manifest (tinyc.json) lists under "files", plus the
`build/` folder its builders create. On success the new files replace the old ones; a file whose
bytes did not change keeps its mtime (incremental builds of the library format and of tinyc's own
builds rely on that); the old files the new compile did not write are removed, and so is `build/`
when the folder changes target (its CMake cache names another compiler). Files of the user's in
a tinyc folder are never touched; a non-empty folder without a manifest is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tinyc.codegen.manifest import MANIFEST
from tinyc.errors import UsageError

#: the folders tinyc's builders create inside a compiled folder
BUILD_DIRS = ("build",)
#: what decides whether an old build folder can be reused: the same target, board and format
_BUILD_KEYS = ("target", "board", "format", "prefix", "models")


def check_output_dir(out: Path) -> dict[str, Any] | None:
    """The folder's old manifest (None when it is new or empty); refuses a non-empty folder that
    tinyc did not write, and a path that is a file."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"output folder {out} is a file: choose a folder path")
    if not out.exists() or not any(out.iterdir()):
        return None
    path = out / MANIFEST
    if not path.is_file():
        raise UsageError(
            f"output folder {out} is not empty and holds no tinyc project (no {MANIFEST}): "
            "choose a new or empty folder (tinyc replaces only what it wrote itself)"
        )
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        raise UsageError(f"{path} is not a readable tinyc manifest: remove it or choose another folder") from None
    return old if isinstance(old, dict) else {}


@contextmanager
def staged_output(out: Path) -> Iterator[Path]:
    """Yield a fresh staging folder to write the whole compile into; on a normal exit, move it
    into `out` (`commit`); on an exception, remove it (and any parent folder it created)."""
    out = Path(out).absolute()  # "." has no name to stage beside
    old = check_output_dir(out)
    created: Path | None = None
    parent = out.parent
    if not parent.exists():
        created = parent
        while not created.parent.exists():
            created = created.parent
        parent.mkdir(parents=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.tinyc-staging-", dir=parent))
    try:
        yield stage
        commit(stage, out, old)
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _listing(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink())


def record_files(stage: Path) -> None:
    """Add the list of the folder's files to its manifest (what a later compile may replace)."""
    path = stage / MANIFEST
    if not path.is_file():
        return
    manifest = json.loads(path.read_text())
    manifest["files"] = _listing(stage)
    path.write_text(json.dumps(manifest, indent=2) + "\n")


def commit(stage: Path, out: Path, old: dict[str, Any] | None) -> None:
    """Move the staged compile into `out`: changed and new files replace, unchanged ones stay
    (mtime kept), old tinyc files not written again go, `build/` goes when the target changed."""
    record_files(stage)
    new_files = _listing(stage)
    if not out.exists():
        os.replace(stage, out)  # the common case: a new folder, one rename
        stage.mkdir()  # (the caller removes the staging path)
        return
    new_manifest = json.loads((stage / MANIFEST).read_text()) if (stage / MANIFEST).is_file() else {}
    old = old or {}
    if any(old.get(k) != new_manifest.get(k) for k in _BUILD_KEYS) or "files" not in old:
        for name in BUILD_DIRS:
            if (out / name).is_dir():
                shutil.rmtree(out / name)
    old_files = [str(f) for f in old.get("files", [])] if old else []
    if old and "files" not in old:
        old_files = _legacy_files(out)
    keep = set(new_files)
    for rel in old_files:
        path = out / rel
        if rel not in keep and _inside(out, path) and (path.is_file() or path.is_symlink()):
            path.unlink()
            _prune_empty(path.parent, out)
    for rel in new_files:
        src, dst = stage / rel, out / rel
        if dst.is_file() and not dst.is_symlink() and dst.read_bytes() == src.read_bytes():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.is_dir() and not dst.is_symlink():
            shutil.rmtree(dst)
        os.replace(src, dst)


def _legacy_files(out: Path) -> list[str]:
    """A folder compiled before manifests listed their files: the runtime tinyc copied in (the
    only files whose set depends on the target; the rest is rewritten under the same names)."""
    rt = out / "runtime"
    return [p.relative_to(out).as_posix() for p in rt.rglob("*") if p.is_file()] if rt.is_dir() else []


def _inside(root: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def _prune_empty(folder: Path, root: Path) -> None:
    while folder != root and _inside(root, folder) and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent
