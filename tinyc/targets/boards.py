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
import sys
from pathlib import Path
from typing import Any

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
# Cores without the DWT cycle counter (ARMv6-M, ARMv8-M Baseline): SysTick only.
NO_DWT_CORES = ("cortex-m0", "cortex-m0plus", "cortex-m1", "cortex-m23")

# (section or "" for the top level, key) -> (type, allowed values or None)
_HOST_FIELDS: dict[tuple[str, str], tuple[type, tuple[str, ...] | None]] = {
    ("", "name"): (str, None),
    ("", "description"): (str, None),
    ("", "kind"): (str, KINDS),
    ("toolchain", "cc"): (str, None),
    ("toolchain", "cflags"): (str, None),
}
_MCU_FIELDS: dict[tuple[str, str], tuple[type, tuple[str, ...] | None]] = {
    ("", "name"): (str, None),
    ("", "description"): (str, None),
    ("", "kind"): (str, KINDS),
    ("", "emulated"): (bool, None),
    ("cpu", "core"): (str, None),
    ("cpu", "fpu"): (str, None),
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
_EMULATOR_FIELDS: dict[tuple[str, str], tuple[type, tuple[str, ...] | None]] = {
    ("emulator", "qemu"): (str, None),
    ("emulator", "machine"): (str, None),
    ("emulator", "icount_shift"): (int, None),
}
_OPTIONAL_FIELDS: dict[tuple[str, str], tuple[type, tuple[str, ...] | None]] = {
    ("", "notes"): (str, None),
    ("flasher", "target"): (str, None),
}
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list"}


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
    raise UsageError(f"unknown board '{name}' (known: {', '.join(known)})")


def load_board_file(path: str | Path) -> dict[str, Any]:
    """Parse and validate one board file (see `validate_board`)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"board file {path} is not valid TOML: {exc}") from None
    data.setdefault("name", path.stem)
    validate_board(data, path)
    return data


def _where(section: str, key: str) -> str:
    return f"[{section}] {key}" if section else key


def validate_board(board: dict[str, Any], source: str | Path = "<board>") -> None:
    """Check that every field the board's kind needs is present and has the right type and an
    allowed value; raise UsageError naming `source` and the field otherwise."""
    kind = board.get("kind", "mcu" if "cpu" in board else None)
    if kind is None:
        raise UsageError(f"board file {source}: missing kind (one of {', '.join(KINDS)})")
    fields = dict(_HOST_FIELDS) if kind == "host" else dict(_MCU_FIELDS)
    if kind != "host" and board.get("emulated") is True:
        fields.update(_EMULATOR_FIELDS)
    for (section, key), spec in fields.items():
        table = board if not section else board.get(section)
        if section and not isinstance(table, dict):
            if section in board:
                raise UsageError(f"board file {source}: [{section}] must be a table")
            raise UsageError(f"board file {source}: missing [{section}] {key}")
        if key not in table:
            raise UsageError(f"board file {source}: missing {_where(section, key)}")
        _check_value(table[key], spec, source, section, key)
    for (section, key), spec in _OPTIONAL_FIELDS.items():
        table = board if not section else board.get(section, {})
        if key in table:
            _check_value(table[key], spec, source, section, key)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", board["name"]):
        raise UsageError(f"board file {source}: name {board['name']!r} may only use letters, digits, '.', '_' "
                         "and '-' (it becomes a C string and a file name)")
    if kind != "host":
        _check_mcu(board, source)


def _check_value(value: Any, spec: tuple[type, tuple[str, ...] | None], source: str | Path,
                 section: str, key: str) -> None:
    typ, allowed = spec
    # bool is an int in Python: `clock_hz = true` must not pass as 1
    ok = isinstance(value, typ) and (typ is bool or not isinstance(value, bool))
    if not ok:
        raise UsageError(f"board file {source}: {_where(section, key)} must be {_TYPE_NAMES[typ]}, "
                         f"got {value!r}")
    if allowed is not None and value not in allowed:
        raise UsageError(f"board file {source}: {_where(section, key)} is {value!r}; "
                         f"expected one of {', '.join(allowed)}")


def _check_mcu(board: dict[str, Any], source: str | Path) -> None:
    """Consistency checks a type check cannot do."""
    mem = board["memory"]
    for key in ("flash_size", "ram_size", "stack_size"):
        if mem[key] <= 0:
            raise UsageError(f"board file {source}: [memory] {key} must be positive, got {mem[key]}")
    if mem["stack_size"] % 16:
        raise UsageError(f"board file {source}: [memory] stack_size must be a multiple of 16 "
                         f"(the stack is 16-byte aligned), got {mem['stack_size']}")
    if mem["stack_size"] >= mem["ram_size"]:
        raise UsageError(f"board file {source}: [memory] stack_size ({mem['stack_size']}) leaves no RAM "
                         f"of ram_size ({mem['ram_size']})")
    for key in ("clock_hz",):
        if board["cpu"][key] <= 0:
            raise UsageError(f"board file {source}: [cpu] {key} must be positive")
    if board["uart"]["baud"] <= 0:
        raise UsageError(f"board file {source}: [uart] baud must be positive")
    if not all(isinstance(a, str) for a in board["flasher"]["args"]):
        raise UsageError(f"board file {source}: [flasher] args must be a list of strings")
    if board["cycle_counter"]["kind"] == "dwt" and board["cpu"]["core"] in NO_DWT_CORES:
        raise UsageError(f"board file {source}: [cycle_counter] kind 'dwt' but a {board['cpu']['core']} "
                         "has no DWT cycle counter; use 'systick'")
    if board.get("emulated") and board["flasher"]["tool"] != "qemu":
        raise UsageError(f"board file {source}: emulated board with [flasher] tool "
                         f"{board['flasher']['tool']!r}; emulated boards use 'qemu'")
    if board["emulated"] and board["emulator"]["icount_shift"] not in range(0, 11):
        raise UsageError(f"board file {source}: [emulator] icount_shift must be 0..10")


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
            rows.append({"name": b["name"], "description": b["description"], "kind": "host",
                         "cpu": "host", "fpu": None, "mve": None, "flash_bytes": None, "ram_bytes": None,
                         "clock_hz": None, "flasher": None, "emulated": False})
            continue
        rows.append({"name": b["name"], "description": b["description"], "kind": b["kind"],
                     "cpu": b["cpu"]["core"], "fpu": b["cpu"]["fpu"], "mve": b["cpu"]["mve"],
                     "flash_bytes": b["memory"]["flash_size"], "ram_bytes": b["memory"]["ram_size"],
                     "clock_hz": b["cpu"]["clock_hz"], "flasher": b["flasher"]["tool"],
                     "emulated": b["emulated"]})
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
        lines.append((r["name"], cpu, _kib(r["flash_bytes"]), _kib(r["ram_bytes"]),
                      f"{r['clock_hz'] / 1e6:g} MHz", r["flasher"], "yes (QEMU)" if r["emulated"] else "no"))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines) + "\n"
