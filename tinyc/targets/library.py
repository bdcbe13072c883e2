"""`--format library`: the model as a folder a firmware engineer drops into an existing build.

The folder holds the generated model sources, the runtime core (no harness, no board port:
the firmware keeps its own startup, UART and main loop), a CMakeLists.txt defining the static
library target `<prefix>` (alias `tinyc::<prefix>`) for `add_subdirectory`, a GNU make fragment
`<prefix>.mk`, and for cross-compiling boards a CMake toolchain file so that the folder also
builds on its own (`build_library`), which is how tinyc checks it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from tinyc.version import __version__
from tinyc.errors import BuildError, UsageError
from tinyc.resources import runtime_dir, templates_dir
from tinyc.codegen.manifest import MANIFEST, load_manifest
from tinyc.targets.host import _write_if_changed

FORMAT = "library"
#: The runtime core a model needs; the harness and the board ports stay out of a user's firmware.
RUNTIME_FILES = (
    "include/tinyc_rt.h",
    "include/tinyc_q.h",
    "include/tinyc_simd.h",
    "include/tinyc_fp.h",
    "src/tinyc_rt.c",
)
#: Generated sources compiled into the library (headers are found through the include dirs).
_MODEL_SOURCE_SUFFIXES = ("{prefix}.c", "{prefix}_weights.c")


def write_library_project(
    out_dir: Path, files: Mapping[str, str], manifest: dict[str, Any], board: dict[str, Any]
) -> None:
    """Write the library folder for `board` (a dict from `load_board`) into `out_dir`.

    `files`/`manifest` are what `tinyc.codegen.generate` returned. Unchanged files keep their
    mtimes, so the user's incremental build does not recompile an unchanged model."""
    import jinja2

    from tinyc.codegen.emitter import register_filters

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = manifest["prefix"]
    for name, text in files.items():
        _write_if_changed(out_dir / name, text)
    for rel in RUNTIME_FILES:
        dst = out_dir / "runtime" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        _write_if_changed(dst, (runtime_dir() / rel).read_text())

    ctx = _render_context(manifest, board, files)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    register_filters(env)  # model-given text in comments and the README is escaped (c_comment, md_text)
    env.globals["cmake_ref"] = lambda name: "${" + name + "}"
    tpl = "project/library/"
    _write_if_changed(out_dir / "CMakeLists.txt", env.get_template(tpl + "CMakeLists.txt.j2").render(**ctx))
    _write_if_changed(out_dir / f"{prefix}.mk", env.get_template(tpl + "library.mk.j2").render(**ctx))
    _write_if_changed(out_dir / "README.md", env.get_template(tpl + "README.md.j2").render(**ctx))
    stale = [p for p in out_dir.glob("toolchain-*.cmake") if p.name != ctx["toolchain_file"]]
    for p in stale:  # a previous compile for another board
        p.unlink()
    if ctx["toolchain_file"]:
        _write_if_changed(out_dir / ctx["toolchain_file"], env.get_template(tpl + "toolchain.cmake.j2").render(**ctx))
    public = {k: v for k, v in manifest.items() if k != "render"}
    public.update(
        format=FORMAT,
        target=ctx["board_name"],
        board=ctx["board_name"],
        cflags=ctx["cflags"],
        cc=ctx["cc"],
        toolchain_file=ctx["toolchain_file"] or None,
        sources=ctx["model_sources"] + ctx["runtime_sources"],
    )
    _write_if_changed(out_dir / MANIFEST, json.dumps(public, indent=2) + "\n")


def _render_context(manifest: dict[str, Any], board: dict[str, Any], files: Mapping[str, str]) -> dict[str, Any]:
    prefix = manifest["prefix"]
    name = str(board.get("name", "board"))
    toolchain = board.get("toolchain") or {}
    cross = board.get("kind", "mcu") != "host"
    tool_prefix = str(toolchain.get("prefix", ""))
    if cross:
        cc = str(toolchain.get("cc") or f"{tool_prefix}gcc")
    else:
        cc = str(toolchain.get("cc") or "cc")
    cflags = " ".join(str(toolchain.get("cflags", "")).split())
    if cross and not toolchain.get("cc") and not tool_prefix:
        raise UsageError(f'board {name}: missing [toolchain] prefix (the cross compiler is prefix + "gcc")')
    model_sources = [s.format(prefix=prefix) for s in _MODEL_SOURCE_SUFFIXES if s.format(prefix=prefix) in files]
    model_sources += sorted(f for f in files if f.endswith(".c") and f not in model_sources)
    return dict(
        manifest["render"],
        version=__version__,
        prefix=prefix,
        PREFIX=prefix.upper(),
        board_name=name,
        cflags=cflags,
        cc=cc,
        processor=tool_prefix.split("-")[0] or "arm",
        toolchain_file=f"toolchain-{name}.cmake" if cross else "",
        model_sources=model_sources,
        runtime_sources=[f"runtime/{rel}" for rel in RUNTIME_FILES if rel.endswith(".c")],
    )


def archive_path(out_dir: Path, manifest: dict[str, Any]) -> Path:
    return Path(out_dir) / "build" / f"lib{manifest['prefix']}.a"


def build_library(out_dir: str | os.PathLike, force: bool = False, werror: bool = True) -> Path:
    """Build `<out_dir>/build/lib<prefix>.a` with the board's compiler (skipped when nothing changed).

    This is the folder built on its own, as tinyc's check that it compiles (warnings are errors
    unless `werror=False`); a firmware normally builds it through add_subdirectory or the .mk."""
    out = Path(out_dir)
    manifest = load_manifest(out)
    if manifest.get("format") != FORMAT:
        raise UsageError(f"{out} was not compiled with --format library")
    lib = archive_path(out, manifest)
    build_dir = out / "build"
    stamp = build_dir / ".tinyc-sources"
    digest = _digest(out, werror)
    if not force and lib.exists() and stamp.exists() and stamp.read_text() == digest:
        return lib
    if shutil.which("cmake") is None:
        raise BuildError("cmake is not installed (apt-get install cmake, or pip install cmake)")
    cc = str(manifest.get("cc") or "cc")
    if shutil.which(cc) is None:
        raise BuildError(
            f"{cc} not found on PATH: the compiler for board {manifest.get('board')} "
            "(for arm-none-eabi-gcc: apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi)"
        )
    configure = [
        "cmake",
        "-S",
        str(out),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DTINYC_WERROR={'ON' if werror else 'OFF'}",
    ]
    if manifest.get("toolchain_file"):
        configure.append(f"-DCMAKE_TOOLCHAIN_FILE={(out / manifest['toolchain_file']).resolve()}")
    else:
        configure.append(f"-DCMAKE_C_COMPILER={cc}")
    for cmd in (configure, ["cmake", "--build", str(build_dir), "-j", str(max(1, os.cpu_count() or 1))]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
            hint = ""
            if "CMAKE_TOOLCHAIN_FILE" in tail or "compiler identification" in tail.lower():
                hint = f"\n(remove {build_dir} if it was configured for another board or compiler)"
            raise BuildError(f"building {out} failed ({' '.join(cmd[:2])}):\n{tail}{hint}")
    if not lib.exists():
        raise BuildError(f"building {out} did not produce {lib}")
    stamp.write_text(digest)
    return lib


def _digest(out_dir: Path, werror: bool) -> str:
    h = hashlib.sha256(b"werror" if werror else b"")
    paths = [
        *out_dir.glob("*.[ch]"),
        *out_dir.glob("runtime/*/*"),
        *out_dir.glob("*.cmake"),
        out_dir / "CMakeLists.txt",
    ]
    for f in sorted(p for p in paths if p.is_file()):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()
