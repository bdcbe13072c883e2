"""Microcontroller targets: a standalone CMake firmware project per board, cross-compiled into one
ELF, measured (flash, RAM, worst-case stack) and checked against the board's memory.

The project is self-contained (model sources, runtime, the Cortex-M port, linker script and
toolchain file), so a user can copy the folder and build it with plain CMake; tinyc itself
only drives that build and reads back what the linker produced. Board facts come from the
board dict (boards/<name>.toml, see tinyc.targets.boards), copied into the project as
board.json so that a later build or flash needs nothing but the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import numpy as np

from tinyc.version import __version__
from tinyc.errors import BuildError, UsageError
from tinyc.resources import runtime_dir, templates_dir
from tinyc.codegen.manifest import MANIFEST, load_manifest
from tinyc.device.project import BOARD_JSON, load_project_board, model_hash
from tinyc.targets.host import _write_if_changed, write_sources

REPORT = "report.json"
BUILD_DIR = "build"
HARNESS_TEMPLATE = "project/harness_main.c.j2"
_RESULT = ".tinyc-firmware.json"
_STAMP = ".tinyc-sources"

# Bytes the core pushes on exception entry: 8 words, plus 18 FP words (S0-S15, FPSCR, padding)
# when the interrupted code had an active FP context.
_EXC_FRAME = 32
_EXC_FRAME_FP = 32 + 72
# Exception handlers that can run on top of the deepest call chain (the fault entry is a naked
# stub that branches to the reporter, which the call graph does not show).
_HANDLER_ROOTS = ("SysTick_Handler", "tinyc_cm_fault_report")

_APT_HINT = (
    "install the Arm cross compiler and its C library "
    "(Debian/Ubuntu: apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi)"
)


def _is_mcu(board: Mapping[str, Any]) -> bool:
    return board.get("kind") != "host" and "memory" in board


def port_sources(board: Mapping[str, Any]) -> list[str]:
    """The Cortex-M port files this board's firmware needs (names in runtime_c/ports/cortex_m)."""
    srcs = ["startup.c", "port.c", f"counter_{board['cycle_counter']['kind']}.c"]
    if board["uart"]["driver"] == "cmsdk":
        srcs.append("uart_cmsdk.c")
    if board["emulated"]:
        srcs.append("semihost.c")
    return srcs


def board_defines(board: Mapping[str, Any]) -> list[str]:
    """The -D definitions that tell the port about the board (see runtime_c/ports/cortex_m/tinyc_cm.h)."""
    defs = [
        f'TINYC_BOARD_NAME="{board["name"]}"',
        f"TINYC_CPU_HZ={board['cpu']['clock_hz']}u",
        f"TINYC_UART_BASE=0x{board['uart']['base']:08x}u",
        f"TINYC_UART_BAUD={board['uart']['baud']}u",
    ]
    if board["uart"]["driver"] == "cmsdk":
        defs.append("TINYC_UART_CMSDK=1")
    if board["emulated"]:
        defs.append("TINYC_SEMIHOSTING=1")
    if board["cpu"]["fpu"] != "none" or board["cpu"]["mve"]:
        defs.append("TINYC_HAS_FPU=1")
    return defs


def _header_number(files: Mapping[str, str], prefix: str, macro: str) -> int:
    """A #define from the generated model header (arena size, layer count)."""
    text = files.get(f"{prefix}.h", "")
    m = re.search(rf"#define {re.escape(prefix.upper())}_{macro} (\d+)u?", text)
    if not m:
        raise UsageError(f"generated header {prefix}.h lacks {prefix.upper()}_{macro}")
    return int(m.group(1))


def _jinja_env() -> Any:
    from tinyc.codegen.emitter import template_env

    env = template_env()
    return env


def _board_flags(board: Mapping[str, Any], key: str) -> list[str]:
    """`[toolchain] key` as its words (see tinyc.targets.boards.split_flags)."""
    from tinyc.targets.boards import split_flags

    try:
        return split_flags(board["toolchain"][key])
    except ValueError as exc:
        raise UsageError(f"board '{board.get('name')}': [toolchain] {key} {exc}") from None


def write_board_project(
    out_dir: Path,
    files: Mapping[str, str],
    manifest: dict[str, Any],
    board: dict[str, Any],
    main_source: str | None = None,
) -> None:
    """Write the firmware project for `board` into `out_dir`: model sources, runtime, the port files
    the board needs, link.ld, toolchain.cmake, CMakeLists.txt, main.c, board.json and tinyc.json.

    main.c is `main_source` when given, else templates/project/harness_main.c.j2 (the serial
    harness) rendered with the manifest's render context. Unchanged files keep their mtime, so
    rebuilding an unchanged model does nothing."""
    if not _is_mcu(board):
        raise UsageError(f"board '{board.get('name')}' is not a microcontroller board (kind {board.get('kind')!r})")
    out_dir = Path(out_dir)
    rt = write_sources(out_dir, files)
    port_dir = rt / "port"
    port_dir.mkdir(parents=True, exist_ok=True)
    ports = port_sources(board)
    for name in ["tinyc_cm.h", *ports]:
        _write_if_changed(port_dir / name, (runtime_dir() / "ports" / "cortex_m" / name).read_text())
    for stale in port_dir.glob("*.c"):  # a project rewritten for another board
        if stale.name not in ports:
            stale.unlink()

    prefix = manifest["prefix"]
    mhash = model_hash(files)
    render = dict(
        manifest["render"],
        version=__version__,
        model_hash=mhash,
        board=board["name"],
        counter_kind=board["cycle_counter"]["kind"],
        arena_bytes=_header_number(files, prefix, "ARENA_BYTES"),
        nlayers=_header_number(files, prefix, "NUM_LAYERS"),
    )
    env = _jinja_env()
    defines = board_defines(board)
    if main_source is None:
        # the harness runs the model through its context API on its own arena (zero copy): the
        # one-call API's static arena would be RAM spent twice
        defines.append(f"{prefix.upper()}_NO_STATIC_ARENA")
        if not (templates_dir() / HARNESS_TEMPLATE).is_file():
            raise UsageError(
                f"the firmware harness template templates/{HARNESS_TEMPLATE} is missing (broken installation?)"
            )
        main_source = env.get_template(HARNESS_TEMPLATE).render(**render)
    _write_if_changed(out_dir / "main.c", main_source)

    tool = board["toolchain"]["prefix"]
    ctx = dict(
        render,
        board=board,
        memory=board["memory"],
        prefix_tool=tool,
        cflags=board["toolchain"]["cflags"],
        ldflags=board["toolchain"]["ldflags"],
        cflags_list=_board_flags(board, "cflags"),
        ldflags_list=_board_flags(board, "ldflags"),
        model_sources=sorted(n for n in files if n.endswith(".c")),
        runtime_sources=[f"runtime/src/{f.name}" for f in sorted((runtime_dir() / "src").glob("*.c"))],
        port_sources=[f"runtime/port/{n}" for n in ports],
        defines=defines,
        sections=manifest.get("sections") or {},
    )
    for name, template in (
        ("link.ld", "link.ld.j2"),
        ("toolchain.cmake", "toolchain.cmake.j2"),
        ("CMakeLists.txt", "CMakeLists.txt.j2"),
    ):
        _write_if_changed(out_dir / name, env.get_template(f"project/board/{template}").render(**ctx))
    _write_if_changed(out_dir / BOARD_JSON, json.dumps(board, indent=2) + "\n")
    public = {k: v for k, v in manifest.items() if k != "render"}
    public.update(board=board["name"], model_hash=mhash, firmware=f"{BUILD_DIR}/{prefix}.elf")
    _write_if_changed(out_dir / MANIFEST, json.dumps(public, indent=2) + "\n")


def _io_bytes(manifest: Mapping[str, Any]) -> int:
    total = 0
    for spec in list(manifest.get("inputs", [])) + list(manifest.get("outputs", [])):
        count = int(np.prod(spec["shape"], dtype=np.int64)) if spec["shape"] else 1
        total += max(count, 1) * np.dtype(spec["dtype"]).itemsize
    return total


def fit_remedy(report: Mapping[str, Any], manifest: Mapping[str, Any], board: Mapping[str, Any]) -> str:
    """What to do about a model that does not fit, with numbers: quantize a float model to int8,
    give an int8 model int8 I/O, or pick a bundled board with room (flash for the weights, RAM for
    arena + I/O + that board's stack)."""
    from tinyc.targets.boards import board_names, load_board

    weights = int(report.get("weights_bytes", 0))
    arena = int(report.get("arena_bytes", 0))
    io = _io_bytes(manifest)
    tips = []
    if not report.get("quantization"):
        tips.append(
            f"quantize it (--quantize int8 --data DATA.npz): weights about {weights // 4} B instead of "
            f"{weights}, float activations in the arena about a quarter of {arena} B"
        )
    else:
        float_io = [
            s for s in list(manifest.get("inputs", [])) + list(manifest.get("outputs", [])) if s["dtype"] == "float32"
        ]
        saved = sum(3 * max(int(np.prod(s["shape"], dtype=np.int64)) if s["shape"] else 1, 1) for s in float_io)
        if saved:
            tips.append(
                f"--io-dtype int8 (int8 inputs/outputs) saves at least {saved} B of RAM (the float I/O "
                "buffers; the arena's float copy of the inputs goes too)"
            )
    together = report.get("together")
    if together and not together["shared_arena"] and len(together["arenas"]) > 1:
        arenas = together["arenas"]
        tips.insert(
            0,
            f"--shared-arena, if the models never run at the same time: one arena of {max(arenas)} B "
            f"instead of {sum(arenas)} B",
        )
    fits = []
    for name in board_names():
        if name == board.get("name"):
            continue
        try:
            other = load_board(name)
        except UsageError:
            continue
        om = other.get("memory")
        if other.get("kind") == "host" or not om:
            continue
        need = arena + io + int(om["stack_size"])
        if weights <= om["flash_size"] and need <= om["ram_size"]:
            fits.append(f"{name} (flash {om['flash_size']} B, RAM {om['ram_size']} B for {need} B)")
    tips.append("boards where it fits: " + ", ".join(fits) if fits else "no bundled board has room for it")
    return "; remedy: " + "; or ".join(tips)


def _fit_message(
    what: str, board: Mapping[str, Any], flash: tuple[int, str] | None, ram: tuple[int, str] | None, remedy: str = ""
) -> str:
    mem = board["memory"]
    parts = []
    if flash is not None:
        need, detail = flash
        parts.append(
            f"flash needs {need} bytes{detail}, {mem['flash_size']} available ({need - mem['flash_size']} over)"
        )
    if ram is not None:
        need, detail = ram
        parts.append(f"RAM needs {need} bytes{detail}, {mem['ram_size']} available ({need - mem['ram_size']} over)")
    return f"{what} does not fit board '{board['name']}': " + "; ".join(parts) + remedy


def check_fit(report: Mapping[str, Any], manifest: Mapping[str, Any], board: Mapping[str, Any]) -> None:
    """Refuse a model that cannot fit before compiling anything: the weights alone must fit in
    flash, and the arena + input/output buffers + reserved stack in RAM. (Code size is not
    known yet; the linker checks the full firmware afterwards.)"""
    mem = board["memory"]
    weights = int(report.get("weights_bytes", 0))
    arena = int(report.get("arena_bytes", 0))
    io = _io_bytes(manifest)
    ram_need = arena + io + mem["stack_size"]
    flash = (weights, " at least (weights)") if weights > mem["flash_size"] else None
    ram = (
        (ram_need, f" at least (arena {arena} + inputs/outputs {io} + stack {mem['stack_size']})")
        if ram_need > mem["ram_size"]
        else None
    )
    if flash or ram:
        label = manifest.get("model", manifest.get("prefix"))
        what = str(label) if report.get("together") else f"model '{label}'"
        raise BuildError(_fit_message(what, board, flash, ram, fit_remedy(report, manifest, board)))


def _source_digest(out_dir: Path) -> str:
    h = hashlib.sha256()
    paths = sorted(
        list(out_dir.glob("*.[ch]"))
        + list(out_dir.glob("runtime/*/*"))
        + [out_dir / n for n in ("CMakeLists.txt", "toolchain.cmake", "link.ld", BOARD_JSON)]
    )
    for f in paths:
        if f.is_file():
            h.update(str(f.relative_to(out_dir)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _check_tools(board: Mapping[str, Any]) -> tuple[str, str]:
    if shutil.which("cmake") is None:
        raise BuildError("cmake is not installed (apt-get install cmake, or pip install cmake)")
    prefix = board["toolchain"]["prefix"]
    cc, size = f"{prefix}gcc", f"{prefix}size"
    for tool in (cc, size):
        if shutil.which(tool) is None:
            hint = _APT_HINT if prefix == "arm-none-eabi-" else f"install the {prefix}* cross toolchain"
            raise BuildError(f"{tool} not found for board '{board['name']}': {hint}")
    return cc, size


_OVERFLOW = re.compile(r"region `(\w+)' overflowed by (\d+) bytes")


def _link_failure(text: str, board: Mapping[str, Any], what: str) -> BuildError | None:
    """The linker's 'region overflowed' as a BuildError with needed vs available bytes."""
    over: dict[str, int] = {}
    for region, n in _OVERFLOW.findall(text):
        over[region] = max(over.get(region, 0), int(n))
    if not over:
        return None
    mem = board["memory"]
    flash = (mem["flash_size"] + over["FLASH"], " (code + weights + .data)") if "FLASH" in over else None
    ram = None
    if "RAM" in over or "STACK" in over:
        # the RAM region is ram_size minus the stack; the stack has its own region at the top
        ram = (
            mem["ram_size"] + over.get("RAM", 0) + over.get("STACK", 0),
            f" (.data + .bss + stack {mem['stack_size']})",
        )
    return BuildError(_fit_message(what, board, flash, ram))


def _run(cmd: list[str], board: Mapping[str, Any], out: Path, what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        err = _link_failure(text, board, what)
        if err is not None:
            raise err
        if "nano.specs" in text or "cannot find -lc" in text:
            raise BuildError(f"building {out} failed: the cross compiler has no C library; {_APT_HINT}")
        tail = "\n".join(text.strip().splitlines()[-40:])
        raise BuildError(f"building {out} for board '{board['name']}' failed ({' '.join(cmd[:2])}):\n{tail}")
    return text


def elf_sizes(size_tool: str, elf: Path) -> dict[str, int]:
    """text/data/bss of the ELF in Berkeley format (text counts code and constants)."""
    proc = subprocess.run([size_tool, "-B", str(elf)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{size_tool} failed on {elf}: {proc.stderr.strip()}")
    fields = proc.stdout.strip().splitlines()[-1].split()
    return {"text": int(fields[0]), "data": int(fields[1]), "bss": int(fields[2])}


def _parse_callgraph(build_dir: Path) -> tuple[dict[str, int], dict[str, list[str]], list[str]]:
    """Frames (bytes) and call edges from every -fcallgraph-info .ci file of the build."""
    frames: dict[str, int] = {}
    edges: dict[str, list[str]] = {}
    notes: list[str] = []
    node_re = re.compile(r'node: \{ title: "([^"]+)" label: "([^"]*)"')
    edge_re = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')
    size_re = re.compile(r"\\n(\d+) bytes \(([^)]*)\)")
    for ci in sorted(build_dir.rglob("*.ci")):
        text = ci.read_text(errors="replace")
        for title, label in node_re.findall(text):
            m = size_re.search(label)
            if m:
                frames[title] = int(m.group(1))
                if m.group(2) != "static":
                    notes.append(f"{title}: {m.group(2)} stack")
        for src, dst in edge_re.findall(text):
            edges.setdefault(src, []).append(dst)
    # Weak (and static) functions are titled "file:name"; calls from other files name them bare.
    for title in list(frames):
        bare = title.rsplit(":", 1)[-1]
        if bare != title and bare not in frames:
            frames[bare] = frames[title]
            edges.setdefault(bare, []).extend(edges.get(title, []))
    return frames, edges, notes


def stack_usage(build_dir: Path, fpu: bool = True) -> tuple[int, list[str]]:
    """Worst-case stack depth in bytes, and what the number could not account for.

    How: every source is compiled with -fstack-usage -fcallgraph-info=su, so gcc writes each
    function's frame size and its calls (.ci files). The depth of a function is its frame plus the
    deepest of its callees; the result is the depth of the reset handler (which calls main) plus
    the deepest exception handler that can interrupt it (SysTick, the fault reporter) with the
    frame the core stacks on entry (104 bytes with an FP context).
    Limits: an indirect call (function pointer, as the harness makes) is taken to reach the
    deepest function that makes no indirect call itself - safe for tinyc's one level of function
    pointers, not in general; library functions (libc, libm, libgcc helpers) have no frame
    information and count 0; recursion is cut at the repeated call. All three are listed in the
    returned notes."""
    frames, edges, notes = _parse_callgraph(build_dir)
    if not frames:
        return _largest_frame(build_dir)
    unresolved: set[str] = set()
    recursive: set[str] = set()

    def depth(fn: str, path: tuple[str, ...], indirect: int, memo: dict[str, int]) -> int:
        if fn in memo:
            return memo[fn]
        if fn == "__indirect_call":
            return indirect
        if fn not in frames:
            unresolved.add(fn)
            return 0
        deepest = 0
        here = path + (fn,)
        for callee in edges.get(fn, []):
            if callee in here:
                recursive.add(callee)
                continue
            deepest = max(deepest, depth(callee, here, indirect, memo))
        memo[fn] = frames[fn] + deepest
        return memo[fn]

    direct: dict[str, int] = {}
    makes_indirect = {f for f, callees in edges.items() if "__indirect_call" in callees}
    candidates = [f for f in frames if f not in makes_indirect and f not in ("main", "Reset_Handler")]
    indirect = max((depth(f, (), 0, direct) for f in candidates), default=0)
    memo: dict[str, int] = {}
    root = "Reset_Handler" if "Reset_Handler" in frames else "main"
    main_depth = depth(root, (), indirect, memo)
    frame = _EXC_FRAME_FP if fpu else _EXC_FRAME
    handlers = max((depth(h, (), indirect, memo) + frame for h in _HANDLER_ROOTS if h in frames), default=0)
    out = list(notes)
    if makes_indirect:
        out.append(f"indirect calls (in {', '.join(sorted(makes_indirect))}) counted as {indirect} bytes")
    if unresolved:
        out.append("no stack information (library code, counted as 0): " + ", ".join(sorted(unresolved)))
    if recursive:
        out.append("recursion, counted once: " + ", ".join(sorted(recursive)))
    return main_depth + handlers, out


def _largest_frame(build_dir: Path) -> tuple[int, list[str]]:
    """Without call graphs (gcc older than 10): the largest single frame, a lower bound."""
    largest, where = 0, "?"
    for su in build_dir.rglob("*.su"):
        for line in su.read_text(errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) >= 2 and parts[1].isdigit() and int(parts[1]) > largest:
                largest, where = int(parts[1]), parts[0].rsplit(":", 1)[-1]
    return largest, [f"no call graph (-fcallgraph-info needs gcc 10+): largest single frame ({where}), a lower bound"]


def _stack_message(what: str, board: Mapping[str, Any], stack: int, sizes: Mapping[str, int]) -> str:
    """The build's refusal of a firmware whose deepest call chain needs more stack than reserved."""
    mem = board["memory"]
    need = -(-stack // 16) * 16
    # RAM holds .data + .bss (which include the reserved stack) and what is left over
    free = mem["ram_size"] - (sizes["data"] + sizes["bss"])
    remedy = f"raise [memory] stack_size to at least {need} (0x{need:x}) in the board file" + (
        f" ({free} bytes of RAM are still free)"
        if free >= need - mem["stack_size"]
        else f", though only {max(free, 0)} bytes of RAM are free: the model's arena and buffers must "
        "shrink too (int8 quantization, or a board with more RAM)"
    )
    return (
        f"{what} needs an estimated {stack} bytes of stack on board '{board['name']}' (the deepest call "
        f"chain plus an exception frame), but [memory] stack_size reserves {mem['stack_size']} "
        f"({stack - mem['stack_size']} short): {remedy}"
    )


def build_board_project(
    out_dir: str | os.PathLike, force: bool = False, progress: bool | None = None
) -> dict[str, Any]:
    """Configure and build the firmware with CMake and the board's cross compiler (skipped when
    the sources are unchanged since the last build), then measure it.

    Returns and writes into report.json: board, flash_bytes (text + data: code, weights and the
    .data load image), ram_bytes (data + bss, including the reserved stack), stack_bytes (see
    `stack_usage`), plus elf, the sizes of text/data/bss, stack_notes and the linker's warnings.
    A model that cannot fit raises BuildError with the bytes needed and available, before building
    (from report.json) and after linking (from the linker's region check)."""
    out = Path(out_dir)
    manifest = load_manifest(out)
    board = load_project_board(out)
    prefix = manifest["prefix"]
    what = f"model '{manifest.get('model', prefix)}'"
    report_path = out / REPORT
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    check_fit(report, manifest, board)
    build_dir = out / BUILD_DIR
    elf = build_dir / f"{prefix}.elf"
    stamp, result_path = build_dir / _STAMP, build_dir / _RESULT
    digest = _source_digest(out)
    if not force and elf.exists() and stamp.exists() and result_path.exists() and stamp.read_text() == digest:
        return json.loads(result_path.read_text())
    _, size_tool = _check_tools(board)
    board_stamp = build_dir / ".tinyc-board"
    if (build_dir / "CMakeCache.txt").exists() and (
        not board_stamp.exists() or board_stamp.read_text() != board["name"]
    ):
        shutil.rmtree(build_dir)  # configured for another board (or the host): another compiler
    build_dir.mkdir(parents=True, exist_ok=True)
    board_stamp.write_text(board["name"])
    from tinyc.progress import note, on_terminal

    show = on_terminal() if progress is None else progress
    cmds = [
        [
            "cmake",
            "-S",
            str(out),
            "-B",
            str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_TOOLCHAIN_FILE={(out / 'toolchain.cmake').resolve()}",
        ],
        ["cmake", "--build", str(build_dir), "-j", str(max(1, os.cpu_count() or 1))],
    ]
    log = ""
    for step, cmd in zip(("configuring", "building"), cmds):
        if show:
            note(f"tinyc: {step} firmware for {board['name']} in {build_dir}")  # silenced by -q
        log += _run(cmd, board, out, what)
    sizes = elf_sizes(size_tool, elf)
    fpu = board["cpu"]["fpu"] != "none" or bool(board["cpu"]["mve"])
    stack, notes = stack_usage(build_dir, fpu)
    warnings = sorted({line.strip() for line in log.splitlines() if "warning:" in line})
    result = {
        "board": board["name"],
        "flash_bytes": sizes["text"] + sizes["data"],
        "ram_bytes": sizes["data"] + sizes["bss"],
        "stack_bytes": stack,
        "flash_size": board["memory"]["flash_size"],
        "ram_size": board["memory"]["ram_size"],
        "stack_size": board["memory"]["stack_size"],
        "elf": str(elf),
        **sizes,
        "stack_notes": notes,
        "warnings": warnings,
    }
    if stack > board["memory"]["stack_size"]:
        raise BuildError(_stack_message(what, board, stack, sizes))
    report.update({k: result[k] for k in ("board", "flash_bytes", "ram_bytes", "stack_bytes")})
    report["firmware"] = {
        k: v for k, v in result.items() if k not in ("board", "flash_bytes", "ram_bytes", "stack_bytes")
    }
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    result_path.write_text(json.dumps(result, indent=2) + "\n")
    stamp.write_text(digest)
    return result
