"""The Arduino library's precompiled archive: `lib<prefix>.a` built with the board's cross compiler
and flags, at the folder an Arduino builder searches for the board being compiled.

The Arduino library specification (and arduino-cli's `findExpectedPrecompiledLibFolder`) looks in
`src/{build.mcu}/{fpu}-{float-abi}` (each part taken from the -mfpu= / -mfloat-abi= flags of the
compile recipe, when present) and then in `src/{build.mcu}`. A hard-float archive must never sit in
the `src/{build.mcu}` fallback, where a soft-float build of the same core would pick it up; a
soft-float archive for a core without an FPU can, which covers cores that pass no float flags
(Arduino SAMD, RP2040)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tinyc.errors import BuildError, UsageError
from tinyc.targets.packages.layout import flag_value

#: Flags every archive object is compiled with besides the board's (what --format library adds)
ARCHIVE_EXTRA_FLAGS = ("-std=c99", "-Wall", "-Wextra", "-ffunction-sections", "-fdata-sections")


def archive_folder(cpu_flags: Sequence[str], board_name: str) -> str:
    """The folder under `src/` that an Arduino build for these CPU flags searches first."""
    mcu = flag_value(list(cpu_flags), "cpu")
    if not mcu:
        raise UsageError(
            f"board {board_name}: its cflags have no -mcpu=, which an Arduino build names the "
            "precompiled folder by (src/{build.mcu}); add -mcpu= to the board's [toolchain] cflags"
        )
    fpu = flag_value(list(cpu_flags), "fpu")
    abi = flag_value(list(cpu_flags), "float-abi")
    if fpu in (None, "none") and abi in (None, "soft"):
        return mcu  # soft float, no FPU: also what a core passing no float flags looks for
    return f"{mcu}/" + "-".join(v for v in (fpu, abi) if v)


def build_archive(
    out_dir: Path,
    archive: str,
    sources: Sequence[str],
    include_dirs: Sequence[str],
    board: Mapping[str, Any],
    cflags: Sequence[str],
) -> None:
    """Compile `sources` (relative to `out_dir`) with the board's compiler and `cflags` and write
    the archive `out_dir/archive`. Objects are compiled in a scratch folder: only the .a lands in
    the package."""
    toolchain = board.get("toolchain") or {}
    tool_prefix = str(toolchain.get("prefix", ""))
    cc = str(toolchain.get("cc") or f"{tool_prefix}gcc")
    ar = f"{tool_prefix}ar" if tool_prefix else "ar"
    for tool in (cc, ar):
        if shutil.which(tool) is None:
            raise BuildError(
                f"{tool} not found on PATH: --format arduino precompiles the model for board "
                f"{board.get('name')} (apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi)"
            )
    # relative paths, run from the package: the objects (their STT_FILE symbol) and so the archive
    # do not depend on where the package was written, and a recompile leaves it byte-identical
    includes = [f"-I{d}" for d in include_dirs]
    dest = out_dir / archive
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tinyc-arduino-") as tmp:
        objects = []
        for i, src in enumerate(sources):
            obj = Path(tmp) / f"{i}_{Path(src).stem}.o"
            cmd = [cc, *cflags, *ARCHIVE_EXTRA_FLAGS, *includes, "-c", src, "-o", str(obj)]
            _run(cmd, f"compiling {src} for the Arduino archive", cwd=out_dir)
            objects.append(str(obj))
        tmp_archive = Path(tmp) / dest.name
        _run([ar, "rcsD", str(tmp_archive), *objects], "archiving")  # D: no timestamps, uids
        data = tmp_archive.read_bytes()
    if not dest.exists() or dest.read_bytes() != data:  # unchanged: keep its mtime
        tmp_dest = dest.with_name(dest.name + f".tmp{os.getpid()}")
        tmp_dest.write_bytes(data)
        tmp_dest.replace(dest)


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise BuildError(f"{what} failed ({' '.join(cmd[:1])}):\n{tail}")
