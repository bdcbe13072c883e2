"""Board definitions (boards/*.toml): what a target is built with, how it is laid out in memory,
how it talks to the host and how it is flashed or emulated.

Boards are plain dicts (the parsed TOML) so that every part of tinyc - the firmware project
writer, the flashers, the CLI - reads the same facts from one place. `load_board` validates a
file completely before anyone uses it: a typo in a board file must fail here, naming the file
and the field, not as a confusing linker or QEMU error later. boards/README.md documents the
schema that the tables below enforce.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinyc.numerics.text import cmake_quote  # noqa: F401  (re-exported: board templates quote flags with it)
from tinyc.errors import UsageError
from tinyc.resources import boards_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KINDS = ("host", "mcu")
FLOAT_ABIS = ("soft", "softfp", "hard")
UART_DRIVERS = ("cmsdk", "user")
COUNTERS = ("systick", "dwt")
FLASHERS = ("qemu", "pyocd", "openocd", "st-flash", "picotool")
IMAGES = ("elf", "bin", "hex", "uf2")
#: Every `[cpu] fpu` value (gcc -mfpu names) the Cortex-M cores below can have.
FPUS = ("none", "fpv4-sp-d16", "fpv5-sp-d16", "fpv5-d16")


@dataclass(frozen=True)
class Core:
    """What a Cortex-M core (gcc -mcpu name) can have: the architecture, the FPUs it is built
    with, and whether the DSP extension, Helium (MVE) and the DWT cycle counter exist on it."""

    arch: str
    fpus: tuple[str, ...]
    dsp: bool
    mve: bool
    dwt: bool


#: The cores the Cortex-M port (runtime_c/ports/cortex_m) runs on: ARMv6-M, ARMv7-M, ARMv7E-M,
#: ARMv8-M Baseline / Mainline and ARMv8.1-M Mainline. Anything else is refused at load time.
CORES: dict[str, Core] = {
    "cortex-m0": Core("armv6-m", ("none",), False, False, False),
    "cortex-m0plus": Core("armv6-m", ("none",), False, False, False),
    "cortex-m1": Core("armv6-m", ("none",), False, False, False),
    "cortex-m3": Core("armv7-m", ("none",), False, False, True),
    "cortex-m4": Core("armv7e-m", ("none", "fpv4-sp-d16"), True, False, True),
    "cortex-m7": Core("armv7e-m", ("none", "fpv5-sp-d16", "fpv5-d16"), True, False, True),
    "cortex-m23": Core("armv8-m.base", ("none",), False, False, False),
    "cortex-m33": Core("armv8-m.main", ("none", "fpv5-sp-d16"), True, False, True),
    "cortex-m35p": Core("armv8-m.main", ("none", "fpv5-sp-d16"), True, False, True),
    "cortex-m55": Core("armv8.1-m.main", ("none", "fpv5-sp-d16", "fpv5-d16"), True, True, True),
    "cortex-m85": Core("armv8.1-m.main", ("none", "fpv5-sp-d16", "fpv5-d16"), True, True, True),
}
# Cores without the DWT cycle counter (ARMv6-M, ARMv8-M Baseline): SysTick only.
NO_DWT_CORES = tuple(name for name, core in CORES.items() if not core.dwt)

#: The 32-bit address space every [memory] region and the UART must lie in.
ADDRESS_SPACE = 1 << 32
_U32_MAX = ADDRESS_SPACE - 1

# (section or "" for the top level, key) -> (type, allowed values or None)
_Spec = tuple[type, tuple[str, ...] | None]
_HOST_FIELDS: dict[tuple[str, str], _Spec] = {
    ("", "name"): (str, None),
    ("", "description"): (str, None),
    ("", "kind"): (str, KINDS),
    ("toolchain", "cc"): (str, None),
    ("toolchain", "cflags"): (str, None),
}
_MCU_FIELDS: dict[tuple[str, str], _Spec] = {
    ("", "name"): (str, None),
    ("", "description"): (str, None),
    ("", "kind"): (str, KINDS),
    ("", "emulated"): (bool, None),
    ("cpu", "core"): (str, tuple(CORES)),
    ("cpu", "fpu"): (str, FPUS),
    ("cpu", "float_abi"): (str, FLOAT_ABIS),
    ("cpu", "dsp"): (bool, None),
    ("cpu", "mve"): (bool, None),
    ("cpu", "clock_hz"): (int, None),
    ("toolchain", "prefix"): (str, None),
    ("toolchain", "cflags"): (str, None),
    ("toolchain", "ldflags"): (str, None),
    ("memory", "flash_origin"): (int, None),
    ("memory", "flash_size"): (int, None),
    ("memory", "ram_origin"): (int, None),
    ("memory", "ram_size"): (int, None),
    ("memory", "stack_size"): (int, None),
    ("uart", "driver"): (str, UART_DRIVERS),
    ("uart", "base"): (int, None),
    ("uart", "baud"): (int, None),
    ("cycle_counter", "kind"): (str, COUNTERS),
    ("flasher", "tool"): (str, FLASHERS),
    ("flasher", "args"): (list, None),
    ("flasher", "image"): (str, IMAGES),
}
_EMULATOR_FIELDS: dict[tuple[str, str], _Spec] = {
    ("emulator", "qemu"): (str, None),
    ("emulator", "machine"): (str, None),
    ("emulator", "icount_shift"): (int, None),
}
_OPTIONAL_FIELDS: dict[tuple[str, str], _Spec] = {("", "notes"): (str, None), ("flasher", "target"): (str, None)}
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list"}

# Characters a compiler flag cannot carry safely into every generated build file: ';' separates
# CMake list elements, control characters (newlines) end a CMake or Makefile line, and "$<" starts
# a CMake generator expression. Quotes, backslashes, spaces, '$' and '#' are escaped instead.
_UNSAFE_IN_FLAG = re.compile(r"[;\x00-\x1f\x7f]|\$<")
# A toolchain prefix is a path (or a bare name) to which "gcc", "size", "objcopy" are appended.
_PREFIX = re.compile(r"[A-Za-z0-9_./+~-]*")


def split_flags(text: str) -> list[str]:
    """The words of a flags string, split as a POSIX shell splits them (quotes and backslashes
    group and escape: `-DMSG=\\"hi\\"` and `'-DMSG="hi there"'` are one word each).

    Raises ValueError saying why when the string does not split (an unclosed quote) or a word
    holds a character that no generated CMake/Makefile can pass on safely."""
    try:
        words = shlex.split(text, posix=True)
    except ValueError as exc:
        raise ValueError(f"cannot be split into words ({exc}: check its quotes)") from None
    for word in words:
        bad = _UNSAFE_IN_FLAG.search(word)
        if bad:
            what = "'$<' (a CMake generator expression)" if bad.group() == "$<" else repr(bad.group())
            raise ValueError(
                f"flag {word!r} contains {what}, which cannot be passed through CMake; "
                "remove it (put several definitions in separate flags)"
            )
    return words


def _search_dirs(board_dir: str | Path | None) -> list[Path]:
    dirs = [Path(board_dir)] if board_dir else []
    dirs.append(boards_dir())
    return dirs


def load_board(name: str, board_dir: str | Path | None = None) -> dict[str, Any]:
    """Find `<name>.toml` in the user's board dir (if given) or the bundled boards, parse and
    validate it. Returns the board as a dict (the TOML tables as nested dicts)."""
    dirs = _search_dirs(board_dir)
    for d in dirs:
        path = d / f"{name}.toml"
        if path.is_file():
            return load_board_file(path)
    known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.toml")})
    from tinyc.suggest import did_you_mean

    raise UsageError(f"unknown board '{name}'{did_you_mean(name, known)} (known: {', '.join(known)})")


def load_board_file(path: str | Path) -> dict[str, Any]:
    """Parse and validate one board file (see `validate_board`). Every defect of the file itself
    (unreadable, not UTF-8, not TOML, a schema violation) is a one-line UsageError naming it."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"board file {path} cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise UsageError(
            f"board file {path} is not UTF-8 text: byte 0x{raw[exc.start]:02x} on line {line} "
            "(TOML files must be UTF-8)"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"board file {path} is not valid TOML: {exc}") from None
    data.setdefault("name", path.stem)
    validate_board(data, path)
    return data


def _where(section: str, key: str) -> str:
    return f"[{section}] {key}" if section else key


def validate_board(board: dict[str, Any], source: str | Path = "<board>") -> None:
    """Check that every field the board's kind needs is present and has the right type and an
    allowed value, that no unknown field is there (a typo), and that the values agree with each
    other (core, FPU, ABI and flags; the memory map); raise UsageError naming `source` and the
    field otherwise."""
    kind = board.get("kind", "mcu" if "cpu" in board else None)
    if kind is None:
        raise UsageError(f"board file {source}: missing kind (one of {', '.join(KINDS)})")
    if not isinstance(kind, str) or kind not in KINDS:
        raise UsageError(f"board file {source}: kind is {kind!r}; expected one of {', '.join(KINDS)}")
    fields = dict(_HOST_FIELDS) if kind == "host" else dict(_MCU_FIELDS)
    if kind != "host" and board.get("emulated") is True:
        fields.update(_EMULATOR_FIELDS)
    for (section, key), spec in fields.items():
        table = board if not section else board.get(section)
        if not isinstance(table, dict):  # only a section's table can be missing: `board` is a dict
            if section in board:
                raise UsageError(f"board file {source}: [{section}] must be a table")
            raise UsageError(f"board file {source}: missing [{section}] {key}")
        if key not in table:
            raise UsageError(f"board file {source}: missing {_where(section, key)}")
        _check_value(table[key], spec, source, section, key)
    optional = dict(_OPTIONAL_FIELDS)
    if kind != "host":
        optional.update(_EMULATOR_FIELDS)  # a real board may keep an [emulator] table: still typed
    for (section, key), spec in optional.items():
        table = board if not section else board.get(section, {})
        if not isinstance(table, dict):
            raise UsageError(f"board file {source}: [{section}] must be a table")
        if key in table:
            _check_value(table[key], spec, source, section, key)
    _check_unknown(board, {**fields, **optional}, source)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", board["name"]):
        raise UsageError(
            f"board file {source}: name {board['name']!r} may only use letters, digits, '.', '_' "
            "and '-' (it becomes a C string and a file name)"
        )
    _check_flags(board, source, ("cflags",) if kind == "host" else ("cflags", "ldflags"))
    if kind != "host":
        _check_mcu(board, source)


def _check_unknown(board: dict[str, Any], fields: dict[tuple[str, str], _Spec], source: str | Path) -> None:
    """A key the schema does not know is a typo (`stack_sise`), never silently ignored."""
    sections = {s for s, _ in fields if s}
    for key, value in board.items():
        if isinstance(value, dict) and key in sections:
            known = sorted(k for s, k in fields if s == key)
            for sub in value:
                if sub not in known:
                    raise UsageError(
                        f"board file {source}: unknown key [{key}] {sub} (known in [{key}]: {', '.join(known)})"
                    )
        elif (("", key) not in fields) and key not in sections:
            known = sorted([k for s, k in fields if not s] + [f"[{s}]" for s in sections])
            raise UsageError(f"board file {source}: unknown key {key} (known: {', '.join(known)})")


def _check_value(value: Any, spec: _Spec, source: str | Path, section: str, key: str) -> None:
    typ, allowed = spec
    # bool is an int in Python: `clock_hz = true` must not pass as 1
    ok = isinstance(value, typ) and (typ is bool or not isinstance(value, bool))
    if not ok:
        raise UsageError(f"board file {source}: {_where(section, key)} must be {_TYPE_NAMES[typ]}, got {_short(value)}")
    if allowed is not None and value not in allowed:
        raise UsageError(
            f"board file {source}: {_where(section, key)} is {_short(value)}; expected one of {', '.join(allowed)}"
        )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_flags(board: dict[str, Any], source: str | Path, keys: tuple[str, ...]) -> None:
    for key in keys:
        try:
            split_flags(board["toolchain"][key])
        except ValueError as exc:
            raise UsageError(f"board file {source}: [toolchain] {key} {exc}") from None


def _flag_values(words: list[str], option: str) -> list[str]:
    """Values of `-option=value` (and `-option value`) in a word list, in order."""
    out = []
    for i, w in enumerate(words):
        if w.startswith(option + "="):
            out.append(w[len(option) + 1 :])
        elif w == option and i + 1 < len(words):
            out.append(words[i + 1])
    return out


def _check_mcu(board: dict[str, Any], source: str | Path) -> None:
    """Consistency checks a type check cannot do: the CPU, the flags, the memory map, the UART."""
    err = f"board file {source}:"
    cpu = board["cpu"]
    core_name = cpu["core"]
    core = CORES[core_name]
    if cpu["fpu"] not in core.fpus:
        raise UsageError(
            f"{err} [cpu] fpu {cpu['fpu']!r} does not exist on a {core_name}; expected one of {', '.join(core.fpus)}"
        )
    if cpu["fpu"] == "none" and cpu["float_abi"] != "soft":
        raise UsageError(
            f"{err} [cpu] float_abi {cpu['float_abi']!r} needs an FPU, but [cpu] fpu is 'none'; "
            'use float_abi = "soft"'
        )
    if cpu["dsp"] and not core.dsp:
        raise UsageError(f"{err} [cpu] dsp = true, but a {core_name} ({core.arch}) has no DSP extension")
    if cpu["mve"] and not core.mve:
        raise UsageError(
            f"{err} [cpu] mve = true, but a {core_name} has no Helium (MVE); only cortex-m55 and cortex-m85 do"
        )
    if cpu["mve"] and cpu["float_abi"] == "soft":
        raise UsageError(
            f"{err} [cpu] mve = true needs float_abi 'softfp' or 'hard' (MVE uses the FP "
            "registers, which -mfloat-abi=soft turns off)"
        )
    if not 0 < cpu["clock_hz"] <= _U32_MAX:
        raise UsageError(f"{err} [cpu] clock_hz must be in 1..{_U32_MAX} (Hz), got {cpu['clock_hz']}")

    words = split_flags(board["toolchain"]["cflags"])
    mcpus = _flag_values(words, "-mcpu")
    if not mcpus:
        raise UsageError(f"{err} [toolchain] cflags do not select the core: add -mcpu={core_name}")
    for mcpu in mcpus:
        base, *mods = mcpu.split("+")
        if base != core_name:
            raise UsageError(f"{err} [toolchain] cflags say -mcpu={mcpu}, but [cpu] core is {core_name!r}")
        if cpu["dsp"] and "nodsp" in mods:
            raise UsageError(f"{err} [toolchain] cflags say -mcpu={mcpu}, but [cpu] dsp = true")
        if cpu["mve"] and "nomve" in mods:
            raise UsageError(f"{err} [toolchain] cflags say -mcpu={mcpu}, but [cpu] mve = true")
    for mfpu in _flag_values(words, "-mfpu"):
        if mfpu != cpu["fpu"] and not (mfpu == "auto" and cpu["fpu"] != "none"):
            raise UsageError(f"{err} [toolchain] cflags say -mfpu={mfpu}, but [cpu] fpu is {cpu['fpu']!r}")
    abis = _flag_values(words, "-mfloat-abi")
    for abi in abis:
        if abi != cpu["float_abi"]:
            raise UsageError(
                f"{err} [toolchain] cflags say -mfloat-abi={abi}, but [cpu] float_abi is {cpu['float_abi']!r}"
            )
    if not abis and cpu["float_abi"] != "soft":
        raise UsageError(
            f"{err} [cpu] float_abi is {cpu['float_abi']!r} but [toolchain] cflags lack "
            f"-mfloat-abi={cpu['float_abi']} (the compiler's default is soft)"
        )
    if not _PREFIX.fullmatch(board["toolchain"]["prefix"]):
        raise UsageError(
            f"{err} [toolchain] prefix {_short(board['toolchain']['prefix'])} may only use "
            "letters, digits and _ . / + ~ - (a path without spaces or quotes)"
        )

    mem = board["memory"]
    for key in ("flash_origin", "ram_origin"):
        if not 0 <= mem[key] <= _U32_MAX:
            raise UsageError(f"{err} [memory] {key} 0x{mem[key]:x} is outside the 32-bit address space")
    for key in ("flash_size", "ram_size", "stack_size"):
        if mem[key] <= 0:
            raise UsageError(f"{err} [memory] {key} must be positive, got {mem[key]}")
    for region in ("flash", "ram"):
        origin, size = mem[f"{region}_origin"], mem[f"{region}_size"]
        if origin + size > ADDRESS_SPACE:
            raise UsageError(
                f"{err} [memory] {region}_origin 0x{origin:x} + {region}_size 0x{size:x} ends at "
                f"0x{origin + size:x}, beyond the 32-bit address space (0xffffffff)"
            )
    f0, f1 = mem["flash_origin"], mem["flash_origin"] + mem["flash_size"]
    r0, r1 = mem["ram_origin"], mem["ram_origin"] + mem["ram_size"]
    if f0 < r1 and r0 < f1:
        raise UsageError(
            f"{err} [memory] flash 0x{f0:08x}..0x{f1 - 1:08x} and RAM 0x{r0:08x}..0x{r1 - 1:08x} "
            f"overlap (0x{max(f0, r0):08x}..0x{min(f1, r1) - 1:08x})"
        )
    if mem["flash_origin"] % 128:
        raise UsageError(
            f"{err} [memory] flash_origin must be a multiple of 128 (the vector table at the start "
            f"of flash must be aligned for VTOR), got 0x{mem['flash_origin']:x}"
        )
    for key in ("ram_origin", "ram_size"):
        if mem[key] % 16:
            raise UsageError(
                f"{err} [memory] {key} must be a multiple of 16 (the stack at the top of RAM is "
                f"16-byte aligned), got 0x{mem[key]:x}"
            )
    if mem["stack_size"] % 16:
        raise UsageError(
            f"{err} [memory] stack_size must be a multiple of 16 "
            f"(the stack is 16-byte aligned), got {mem['stack_size']}"
        )
    if mem["stack_size"] >= mem["ram_size"]:
        raise UsageError(
            f"{err} [memory] stack_size ({mem['stack_size']}) leaves no RAM of ram_size ({mem['ram_size']})"
        )

    uart = board["uart"]
    if not 0 <= uart["base"] <= _U32_MAX or uart["base"] % 4:
        raise UsageError(f"{err} [uart] base must be a word-aligned 32-bit address, got 0x{uart['base']:x}")
    if uart["driver"] == "cmsdk" and (f0 <= uart["base"] < f1 or r0 <= uart["base"] < r1):
        raise UsageError(f"{err} [uart] base 0x{uart['base']:08x} lies inside the flash or RAM region")
    if not 0 < uart["baud"] <= _U32_MAX:
        raise UsageError(f"{err} [uart] baud must be positive, got {uart['baud']}")
    if uart["driver"] == "cmsdk" and cpu["clock_hz"] // uart["baud"] < 16:
        raise UsageError(
            f"{err} [uart] baud {uart['baud']} is too fast for the CMSDK UART at clock_hz "
            f"{cpu['clock_hz']} (the divisor clock_hz / baud must be at least 16)"
        )

    if not all(isinstance(a, str) for a in board["flasher"]["args"]):
        raise UsageError(f"{err} [flasher] args must be a list of strings")
    if board["cycle_counter"]["kind"] == "dwt" and not core.dwt:
        raise UsageError(f"{err} [cycle_counter] kind 'dwt' but a {core_name} has no DWT cycle counter; use 'systick'")
    if board.get("emulated") and board["flasher"]["tool"] != "qemu":
        raise UsageError(
            f"{err} emulated board with [flasher] tool {board['flasher']['tool']!r}; emulated boards use 'qemu'"
        )
    if board["emulated"] and board["emulator"]["icount_shift"] not in range(0, 11):
        raise UsageError(f"{err} [emulator] icount_shift must be 0..10")
    if board["emulated"] and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", board["emulator"]["machine"]):
        raise UsageError(
            f"{err} [emulator] machine {_short(board['emulator']['machine'])} is not a QEMU machine "
            "name (qemu-system-arm -M help lists them)"
        )


def board_names(board_dir: str | Path | None = None) -> list[str]:
    """Every board name visible with `board_dir` (user boards shadow bundled ones)."""
    return sorted({p.stem for d in _search_dirs(board_dir) if d.is_dir() for p in d.glob("*.toml")})


def _kib(n: int) -> str:
    return f"{n // (1 << 20)} MB" if n >= (1 << 20) and n % (1 << 20) == 0 else f"{n / 1024:g} KB"


def list_boards(board_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """One summary dict per board (loaded and validated): name, description, kind, cpu, fpu, mve,
    flash_bytes, ram_bytes, clock_hz, flasher, emulated. Host boards have None for MCU facts."""
    rows = []
    for name in board_names(board_dir):
        b = load_board(name, board_dir)
        if b.get("kind") == "host":
            rows.append(
                {
                    "name": b["name"],
                    "description": b["description"],
                    "kind": "host",
                    "cpu": "host",
                    "fpu": None,
                    "mve": None,
                    "flash_bytes": None,
                    "ram_bytes": None,
                    "clock_hz": None,
                    "flasher": None,
                    "emulated": False,
                }
            )
            continue
        rows.append(
            {
                "name": b["name"],
                "description": b["description"],
                "kind": b["kind"],
                "cpu": b["cpu"]["core"],
                "fpu": b["cpu"]["fpu"],
                "mve": b["cpu"]["mve"],
                "flash_bytes": b["memory"]["flash_size"],
                "ram_bytes": b["memory"]["ram_size"],
                "clock_hz": b["cpu"]["clock_hz"],
                "flasher": b["flasher"]["tool"],
                "emulated": b["emulated"],
            }
        )
    return rows


def boards_table(board_dir: str | Path | None = None) -> str:
    """The `tinyc boards` listing: one aligned line per board."""
    header = ("board", "cpu", "flash", "RAM", "clock", "flasher", "emulated")
    lines = [header]
    for r in list_boards(board_dir):
        if r["kind"] == "host":
            lines.append((r["name"], "this computer", "-", "-", "-", "-", "-"))
            continue
        cpu = r["cpu"] + ("+MVE" if r["mve"] else "") + ("" if r["fpu"] == "none" else f" ({r['fpu']})")
        lines.append(
            (
                r["name"],
                cpu,
                _kib(r["flash_bytes"]),
                _kib(r["ram_bytes"]),
                f"{r['clock_hz'] / 1e6:g} MHz",
                r["flasher"],
                "yes (QEMU)" if r["emulated"] else "no",
            )
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines) + "\n"
