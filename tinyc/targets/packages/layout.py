"""Where each file of a package goes, per build system, and the flags a package may carry.

Every package holds the same things as `--format library`: the model's generated files exactly as
codegen wrote them and the runtime core (`tinyc.targets.library.RUNTIME_FILES`), never the harness
or a board port. Only the folders differ, because each build system looks in its own places (an
Arduino library compiles `src/` recursively with only `src/` on the include path; PlatformIO
exposes one include folder to the code that uses the library; STM32CubeIDE wants a source folder
and an include folder)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tinyc.errors import UsageError
from tinyc.targets.library import RUNTIME_FILES


@dataclass(frozen=True)
class Layout:
    """The folders of one package format, relative to the output folder ("" = its root)."""

    #: generated .c files and the runtime's .c files
    sources: str
    #: generated headers and the runtime's headers
    headers: str
    #: the runtime's own folders, when they are kept apart from the model's (else "" = as above)
    runtime_src: str = ""
    runtime_include: str = ""

    def source_dir(self, runtime: bool) -> str:
        return self.runtime_src if runtime and self.runtime_src else self.sources

    def header_dir(self, runtime: bool) -> str:
        return self.runtime_include if runtime and self.runtime_include else self.headers


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


#: --format name -> its layout. zephyr and esp-idf mirror `--format library` (a CMake subproject).
LAYOUTS: dict[str, Layout] = {
    "zephyr": Layout("", "", "runtime/src", "runtime/include"),
    "esp-idf": Layout("", "", "runtime/src", "runtime/include"),
    "arduino": Layout("src", "src"),
    "platformio": Layout("src", "include"),
    "stm32cube": Layout("tinyc/Src", "tinyc/Inc"),
}
#: the package formats, in the order `--format` lists them
PACKAGE_FORMATS = tuple(LAYOUTS)


@dataclass(frozen=True)
class PackageFiles:
    """The package's C files: relative path -> text, plus the lists its build file names."""

    files: dict[str, str]
    #: every .c to compile, in the order the build file lists them (model first, then runtime)
    sources: list[str]
    #: the include folders, model's first
    include_dirs: list[str]


def place_files(fmt: str, files: Mapping[str, str], runtime: Mapping[str, str], prefix: str) -> PackageFiles:
    """Put the generated `files` and the `runtime` core (RUNTIME_FILES path -> text) where `fmt`
    wants them. Model sources keep the library format's order: `<prefix>.c`, `<prefix>_weights.c`,
    then any other generated .c."""
    layout = LAYOUTS[fmt]
    out: dict[str, str] = {}
    model_sources: list[str] = []
    first = [f"{prefix}.c", f"{prefix}_weights.c"]
    for name in [n for n in first if n in files] + sorted(n for n in files if n not in first):
        if "/" in name:
            raise UsageError(f"generated file {name!r} is in a sub-folder: packages hold a flat model")
        is_source = name.endswith(".c")
        rel = _join(layout.source_dir(False) if is_source else layout.header_dir(False), name)
        out[rel] = files[name]
        if is_source:
            model_sources.append(rel)
    runtime_sources: list[str] = []
    for rel_rt in RUNTIME_FILES:
        base = rel_rt.rsplit("/", 1)[-1]
        is_source = base.endswith(".c")
        rel = _join(layout.source_dir(True) if is_source else layout.header_dir(True), base)
        out[rel] = runtime[rel_rt]
        if is_source:
            runtime_sources.append(rel)
    include_dirs = list(dict.fromkeys([layout.header_dir(False) or ".", layout.header_dir(True) or "."]))
    return PackageFiles(out, model_sources + runtime_sources, include_dirs)


#: Flags that choose the CPU and its float ABI: a Zephyr, ESP-IDF, PlatformIO or Arduino build sets
#: these from its own board definition, so a package must not add them (two -mcpu disagree).
_CPU_FLAG_PREFIXES = ("-mcpu=", "-march=", "-mtune=", "-mfpu=", "-mfloat-abi=", "-mabi=")
_CPU_FLAGS = ("-mthumb", "-marm", "-mlittle-endian", "-mbig-endian")


def split_board_flags(board: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The board's [toolchain] cflags as (cpu flags, code flags): the first the build system owns,
    the second (optimisation, -fno-math-errno, defines) the package applies to its own sources."""
    from tinyc.targets.boards import split_flags

    text = str((board.get("toolchain") or {}).get("cflags", ""))
    try:
        words = split_flags(text)
    except ValueError as exc:
        raise UsageError(f"board '{board.get('name')}': [toolchain] cflags {exc}") from None
    cpu = [w for w in words if w in _CPU_FLAGS or w.startswith(_CPU_FLAG_PREFIXES)]
    code = [w for w in words if w not in cpu]
    return cpu, code


def flag_value(words: list[str], name: str) -> str | None:
    """The value of `-m<name>=value` in `words` (the last one wins, as with gcc), else None."""
    value = None
    for w in words:
        if w.startswith(f"-m{name}="):
            value = w.split("=", 1)[1]
    return value


def shell_join(words: list[str]) -> str:
    return shlex.join(words)
