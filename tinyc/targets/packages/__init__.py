"""`--format zephyr | esp-idf | arduino | platformio | stm32cube`: the model as a package for the
build system a firmware already lives in.

Each package carries what `--format library` carries (the generated model files exactly as codegen
wrote them, the runtime core, no harness, no board port) in that build system's folders, with its
own build file (tinyc.targets.packages.layout says where each file goes). The board's CPU flags
(-mcpu, -mfpu, -mfloat-abi) belong to the build system's board definition, so only its code flags
(optimisation, -fno-math-errno) go into the build file; the README lists both. The Arduino library
also ships `lib<prefix>.a` precompiled for the board's core (`precompiled=full`: other cores build
from the sources). `tinyc build` on a package compiles its sources as the build file lists them
with the board's cross compiler, as tinyc's check that the package compiles.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tinyc.codegen.manifest import MANIFEST, load_manifest
from tinyc.errors import UsageError
from tinyc.ir import Graph
from tinyc.numerics.text import c_comment
from tinyc.resources import runtime_dir
from tinyc.targets.base import Target, refuse_device
from tinyc.targets.host import _write_if_changed
from tinyc.targets.library import RUNTIME_FILES
from tinyc.targets.packages.layout import PACKAGE_FORMATS, place_files, split_board_flags
from tinyc.version import __version__

#: each format's build files: template under templates/project/<dir>/ -> file in the package
_TEMPLATES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "zephyr": (
        "zephyr",
        (("module.yml.j2", "zephyr/module.yml"), ("CMakeLists.txt.j2", "CMakeLists.txt"), ("Kconfig.j2", "Kconfig")),
    ),
    "esp-idf": ("esp_idf", (("idf_component.yml.j2", "idf_component.yml"), ("CMakeLists.txt.j2", "CMakeLists.txt"))),
    "arduino": ("arduino", (("library.properties.j2", "library.properties"),)),
    "platformio": ("platformio", (("library.json.j2", "library.json"),)),
    "stm32cube": ("stm32cube", ()),
}


def write_package(
    fmt: str, out_dir: Path, files: Mapping[str, str], manifest: dict[str, Any], board: Mapping[str, Any]
) -> None:
    """Write the `fmt` package for `board` into `out_dir` (`files`/`manifest` as from
    `tinyc.codegen.generate`). Unchanged files keep their mtimes (the firmware's incremental build
    does not recompile an unchanged model)."""
    from tinyc.codegen.emitter import template_env

    if fmt not in PACKAGE_FORMATS:
        raise UsageError(f"unknown package format {fmt!r} (one of {', '.join(PACKAGE_FORMATS)})")
    out_dir = Path(out_dir)
    prefix = manifest["prefix"]
    runtime = {rel: (runtime_dir() / rel).read_text() for rel in RUNTIME_FILES}
    placed = place_files(fmt, files, runtime, prefix)
    ctx = _render_context(fmt, manifest, board, placed.sources, placed.include_dirs)
    written = dict(placed.files)
    tpl_dir, templates = _TEMPLATES[fmt]
    env = template_env()
    for tpl, dest in (*templates, ("README.md.j2", "README.md")):
        written[dest] = env.get_template(f"project/{tpl_dir}/{tpl}").render(**ctx)
    for rel, text in written.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_if_changed(path, text)
    package_files = sorted(written)
    if fmt == "arduino":
        from tinyc.targets.packages.archives import build_archive

        for stale in (out_dir / "src").glob("*/**/lib*.a"):  # a previous compile for another core
            if stale.relative_to(out_dir).as_posix() != ctx["archive"]:
                stale.unlink()
        build_archive(out_dir, ctx["archive"], placed.sources, placed.include_dirs, board, ctx["cflags_words"])
        package_files.append(ctx["archive"])
    public = {k: v for k, v in manifest.items() if k != "render"}
    public.update(
        format=fmt,
        target=ctx["board_name"],
        board=ctx["board_name"],
        cflags=ctx["cflags"],
        cpu_flags=ctx["cpu_flags"],
        code_flags=ctx["code_flags"],
        cc=ctx["cc"],
        sources=placed.sources,
        include_dirs=placed.include_dirs,
        files=sorted(package_files),
    )
    _write_if_changed(out_dir / MANIFEST, json.dumps(public, indent=2) + "\n")


def _render_context(
    fmt: str, manifest: Mapping[str, Any], board: Mapping[str, Any], sources: list[str], include_dirs: list[str]
) -> dict[str, Any]:
    prefix = manifest["prefix"]
    name = str(board.get("name", "board"))
    toolchain = board.get("toolchain") or {}
    tool_prefix = str(toolchain.get("prefix", ""))
    cpu, code = split_board_flags(board)
    model = str(manifest.get("model", prefix))
    description = f"tinyc {__version__}: model '{c_comment(model)}' as C99 ({name} flags)"
    ctx: dict[str, Any] = dict(
        manifest["render"],
        version=__version__,
        prefix=prefix,
        PREFIX=prefix.upper(),
        board_name=name,
        board_description=str(board.get("description", name)),
        cc=str(toolchain.get("cc") or f"{tool_prefix}gcc"),
        cflags_words=cpu + code,
        cflags=shlex.join(cpu + code),
        cpu_flags=shlex.join(cpu),
        code_flags=shlex.join(code),
        code_flags_words=code,
        sources=sources,
        include_dirs=include_dirs,
        # the headers a caller includes: one per model compiled into the folder (compile_models)
        headers=[f"{m['prefix']}.h" for m in manifest.get("models", [manifest])],
        description=description,
        description_json=json.dumps(description),
        # the Kconfig symbol: TINYC_ keeps a model named "net" or "log" off Zephyr's own CONFIG_NET
        kconfig=f"TINYC_{prefix.upper()}",
        json=lambda value: json.dumps(value),
    )
    if fmt == "platformio":  # srcFilter paths are relative to srcDir ("src")
        ctx["pio_src_filter"] = ["-<*>"] + [f"+<{s.split('/', 1)[1]}>" for s in sources]
    if fmt == "arduino":
        from tinyc.targets.packages.archives import archive_folder

        ctx["archive_dir"] = f"src/{archive_folder(cpu, name)}"
        ctx["archive"] = f"{ctx['archive_dir']}/lib{prefix}.a"
    return ctx


def compile_check(out_dir: str | os.PathLike, werror: bool = True) -> dict[str, Any]:
    """Compile every source the package's manifest lists, with its include folders and the board's
    full cflags, and archive the objects as `<out_dir>/build/lib<prefix>.a` (not part of the
    package): tinyc's check that the sources build for the board, as `tinyc build` runs it."""
    import subprocess
    from shutil import which

    from tinyc.errors import BuildError

    out = Path(out_dir)
    manifest = load_manifest(out)
    if manifest.get("format") not in PACKAGE_FORMATS:
        raise UsageError(f"{out} was not compiled with --format {'|'.join(PACKAGE_FORMATS)}")
    cc = str(manifest.get("cc") or "cc")
    ar = cc[: -len("gcc")] + "ar" if cc.endswith("gcc") else "ar"
    for tool in (cc, ar):
        if which(tool) is None:
            raise BuildError(
                f"{tool} not found on PATH: the toolchain of board {manifest.get('board')} "
                "(for arm-none-eabi-gcc: apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi)"
            )
    build = out / "build"
    build.mkdir(exist_ok=True)
    flags = shlex.split(str(manifest.get("cflags", ""))) + ["-std=c99", "-Wall", "-Wextra"]
    flags += ["-Werror"] if werror else []
    flags += [f"-I{out / d}" for d in manifest.get("include_dirs", ["."])]

    def run(cmd: list[str], what: str) -> None:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
            raise BuildError(f"{what} of {out} failed:\n{tail}")

    objects = []
    for i, src in enumerate(manifest.get("sources", [])):
        obj = build / f"{i}_{Path(src).stem}.o"
        run([cc, *flags, "-c", str(out / src), "-o", str(obj)], f"compiling {src}")
        objects.append(str(obj))
    lib = build / f"lib{manifest['prefix']}.a"
    lib.unlink(missing_ok=True)
    run([ar, "rcs", str(lib), *objects], "archiving")
    return {"library": str(lib), "objects": objects, "compiler": cc}


class PackageTarget(Target):
    """A package for a firmware's own build system, written with a board's flags."""

    def __init__(self, fmt: str, board: Mapping[str, Any]) -> None:
        from tinyc.ir.isa import Isa

        self.format = fmt
        self.definition: dict[str, Any] = dict(board)
        self.board = self.definition
        self.name = str(self.definition.get("name", ""))
        self.schedule_target = Isa.of_board(self.definition).name

    def report_fields(self) -> dict[str, Any]:
        return {"board": self.name, "format": self.format}

    def write_project(self, out: Path, gen: Any, graph: Graph, source_model: str | None) -> None:
        write_package(self.format, out, gen.files, gen.manifest, self.definition)

    def build(self, out: Path, force: bool = False) -> dict[str, Any]:
        return compile_check(out)

    def run(self, out: Path, inputs: Any, port: str | None = None, device: str | None = None) -> dict[str, np.ndarray]:
        refuse_device(device)
        raise UsageError(
            f"{out} is a {self.format} package for your own firmware build (--format {self.format}); "
            "it has no runner: compile with --format project to run it on the board"
        )
