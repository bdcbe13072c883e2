"""The tuning log: one JSON object per line, only ever appended to.

Measuring a candidate on a board can take seconds to minutes, and a tuning run may be killed at
any moment (Ctrl-C, a hung emulator, a power cut on the bench). So every record is written and
fsync'ed on its own the moment it exists, the file is never rewritten, and the reader tolerates a
half-written line instead of losing the whole log. A record names the board and the task key, so
one log can hold many models and boards and prime the cost model for new ones.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any
from collections.abc import Mapping

#: Fields a record carries (extra fields are kept as they are).
RECORD_FIELDS = (
    "board",
    "target",
    "key",
    "op",
    "knobs",
    "cycles",
    "status",
    "units",
    "repeats",
    "tinyc_version",
    "time",
)
#: Outcomes of measuring a candidate; each one is final (the candidate is never measured again).
FINAL_STATUSES = ("ok", "wrong", "crash", "timeout", "build_error", "skipped")
#: "lost": the candidate's batch lost its board or farm worker on every try (tinyc/tune/executor.py):
#: nothing is known about the candidate itself, so a later run measures it again.
STATUSES = FINAL_STATUSES + ("lost",)
#: Fields append() refuses to write a record without.
REQUIRED_FIELDS = ("board", "key", "knobs", "status")
#: How logs written before the "lost" status recorded a lost batch: as a crash with this detail.
LOST_DETAIL = "the batch lost its board or worker"
#: A UTF-8 byte order mark, which some editors put at the start of a file.
_BOM = b"\xef\xbb\xbf"
#: Integers in a record are counts, sizes, tiles and times: more digits than this is corruption
#: (and would overflow float conversions later on).
_MAX_INT_DIGITS = 20
#: Fields that are strings when present, and the types of the other typed fields.
_STR_FIELDS = ("board", "key", "status", "op", "target", "units", "detail", "model", "tinyc_version", "measured_on")
_DICT_FIELDS = ("knobs", "task", "board_info")
_NUMBER_FIELDS = ("time", "scratch_bytes")


def _jsonable(value: Any) -> Any:
    """json.dumps fallback: numpy scalars (tile sizes often come from numpy) become Python numbers."""
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def knobs_id(knobs: Mapping[str, Any]) -> str:
    """The identity of a candidate: its knobs as canonical JSON (sorted keys, no spaces).

    Keys starting with "_" are numbers derived from the knobs (e.g. "_scratch_bytes" passed along
    for the cost model), not knobs, so they are left out: the same schedule must have one id
    whether or not such extras ride along.
    """
    plain = {k: v for k, v in knobs.items() if not str(k).startswith("_")}
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), default=_jsonable)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check(record: Mapping[str, Any]) -> str | None:
    """Why a record is not valid, or None: shared by the writer (raise) and the reader (skip).
    Checks every field tinyc reads: a log is outside input, and a list where a string belongs
    must cost one line, not the run."""
    missing = [f for f in REQUIRED_FIELDS if f not in record]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    for f in _STR_FIELDS:
        if f in record and not isinstance(record[f], str) and not (f == "detail" and record[f] is None):
            return f"{f} {_short(record[f])} is not a string"
    for f in _DICT_FIELDS:
        if f in record and not isinstance(record[f], Mapping):
            return f"{f} is not an object"
    for f in _NUMBER_FIELDS:
        if record.get(f) is not None and not _is_number(record[f]):
            return f"{f} {_short(record[f])} is not a finite number"
    for name, value in record["knobs"].items():
        if not isinstance(name, str):
            return f"knob name {_short(name)} is not a string"
        if not isinstance(value, (str, bool)) and not _is_number(value):
            return f"knob {name} = {_short(value)} is not a string, number or boolean"
    if record["status"] not in STATUSES:
        return f"status {record['status']!r} is not one of {', '.join(STATUSES)}"
    cycles = record.get("cycles")
    if cycles is not None and not (_is_number(cycles) and cycles >= 0):
        return f"cycles {_short(cycles)} is not a finite number >= 0 or null"
    if record["status"] == "ok" and not cycles:
        return "an ok record needs cycles > 0"
    repeats = record.get("repeats")
    if (
        repeats is not None
        and not _is_number(repeats)
        and not (isinstance(repeats, list) and all(_is_number(x) for x in repeats))
    ):
        return f"repeats {_short(repeats)} is not a number or a list of numbers"
    return None


def is_lost(record: Mapping[str, Any]) -> bool:
    """The record says the candidate's batch was lost (its board or worker, every try), not how
    the candidate ran: such a candidate counts as not measured. Older logs wrote these as crashes
    with the detail "the batch lost its board or worker N times (...)"."""
    status = record.get("status")
    return status == "lost" or (status == "crash" and str(record.get("detail") or "").startswith(LOST_DETAIL))


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits")
    return int(text)


def _parse_line(raw: bytes) -> Any:
    """One log line as JSON; raises ValueError (any kind of corruption) with the reason."""
    try:
        return json.loads(raw.decode("utf-8"), parse_int=_parse_int)
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as exc:  # json.JSONDecodeError, and int() past Python's digit limit
        raise ValueError(f"{exc.__class__.__name__}: {str(exc)[:200]}") from None


def _read_log(path: Path) -> bytes:
    """The log file's bytes (b"" when it does not exist); UsageError when `path` cannot be a log."""
    from tinyc.errors import UsageError

    check_log_path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise UsageError(f"tuning log {path} cannot be read ({exc.strerror or exc})") from None


def check_log_path(path: str | os.PathLike) -> None:
    """Fail early, with one clear message, when `path` cannot be a tuning log: a directory, or
    a file in a folder that cannot be made."""
    from tinyc.errors import UsageError

    p = Path(path)
    if p.is_dir():
        raise UsageError(f"tuning log {p} is a directory; give the path of a file (e.g. {p / 'tune.jsonl'})")
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise UsageError(f"tuning log {p}: {parent} is a file, not a directory")


def load_records(path: str | os.PathLike, lines_out: list[int] | None = None) -> list[dict]:
    """Every valid record of a log file, in file order; [] when the file does not exist.

    A line that does not parse (typically the last one, cut short by a kill; or any corruption:
    invalid UTF-8, absurd nesting or integers) or is not a valid record is skipped with a warning
    naming the file and line: one bad line must never cost the measurements around it. A UTF-8
    byte order mark at the start of the file is ignored. `lines_out` receives each returned
    record's line number. A directory is a UsageError.
    """
    path = Path(path)
    data = _read_log(path)
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    records: list[dict] = []
    lines = data.split(b"\n")
    last = max((n for n, raw in enumerate(lines, start=1) if raw.strip()), default=0)
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = "last line" if number == last else "line"
        try:
            record = _parse_line(raw)
        except ValueError as exc:
            warnings.warn(f"{path}: skipping corrupt {where} {number} ({exc})", stacklevel=2)
            continue
        problem = _check(record) if isinstance(record, dict) else "not a JSON object"
        if problem:
            warnings.warn(f"{path}: skipping invalid record on {where} {number} ({problem})", stacklevel=2)
            continue
        records.append(record)
        if lines_out is not None:
            lines_out.append(number)
    return records


class TuningLog:
    """An append-only JSON Lines file of measurements, plus the queries the tuner needs."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        check_log_path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lines: list[int] = []
        self._records: list[dict] = load_records(self.path, lines)
        self._line: dict[int, int] = {id(r): n for r, n in zip(self._records, lines)}

    def line_of(self, record: Mapping[str, Any]) -> int | None:
        """The line of the file a loaded record came from (None: appended by this process)."""
        return self._line.get(id(record))

    def drop_invalid_knobs(self, board: str, key: str, problem: Any) -> int:
        """Forget the records of (board, task `key`) whose knobs `problem(knobs)` finds fault with (returns
        a reason, or None): a value the op does not offer (`8.0` for 8, `true` for 1, an unknown
        knob) must never reach the generated C, nor count as measured. Each is skipped with a
        warning naming the file and line. Returns how many were dropped."""
        kept, dropped = [], 0
        for r in self._records:
            why = problem(r["knobs"]) if r["key"] == key and r["board"] == board else None
            if why:
                line = self.line_of(r)
                warnings.warn(
                    f"{self.path}: skipping record on line {line if line else '?'} for {key} ({why})", stacklevel=2
                )
                dropped += 1
            else:
                kept.append(r)
        self._records = kept
        return dropped

    def append(self, record: Mapping[str, Any]) -> None:
        """Validate, then write the record as one line and fsync it before returning.

        The file is opened with O_APPEND and written with a single write() per record, so an
        interrupted run leaves at worst one partial line at the end. If the file does not end in
        a newline (such a partial line), one is written first so the new record starts its own
        line and stays readable.
        """
        # as the reader will see it (numpy scalars become Python numbers), then checked as it will be
        full = json.loads(json.dumps(dict(record), default=_jsonable))
        problem = _check(full)
        if problem:
            raise ValueError(f"tuning record not written: {problem}")
        if "time" not in full:
            full["time"] = time.time()
        if "tinyc_version" not in full:
            # imported here: tinyc's package init may itself import the tuner
            from tinyc.version import __version__

            full["tinyc_version"] = __version__
        line = json.dumps(full, default=_jsonable, allow_nan=False, separators=(",", ":")) + "\n"
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except IsADirectoryError:
            from tinyc.errors import UsageError

            raise UsageError(f"tuning log {self.path} is a directory; give the path of a file") from None
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = "\n" + line
            data = line.encode("utf-8")
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        self._records.append(json.loads(line))

    def records(self, board: str | None = None, key: str | None = None) -> list[dict]:
        """Records in file order, optionally only those of one board and/or one task key."""
        return [r for r in self._records if (board is None or r["board"] == board) and (key is None or r["key"] == key)]

    def measured(self, board: str, key: str) -> set[str]:
        """knobs_id of every candidate already tried for (board, key), whatever the outcome:
        a crash or a wrong result is as final as a timing, and retrying it wastes board time.
        A lost batch (`is_lost`) says nothing about its candidates: they are not measured."""
        return {
            knobs_id(r["knobs"]) for r in self.records(board, key) if r["status"] in FINAL_STATUSES and not is_lost(r)
        }

    def lost(self, board: str, key: str) -> list[dict[str, Any]]:
        """Knobs of the candidates of (board, key) whose every record is a lost batch (in file
        order, once each): what an interrupted farm run still owes."""
        done = self.measured(board, key)
        out: dict[str, dict[str, Any]] = {}
        for r in self.records(board, key):
            ident = knobs_id(r["knobs"])
            if is_lost(r) and ident not in done and ident not in out:
                out[ident] = {k: v for k, v in r["knobs"].items() if not str(k).startswith("_")}
        return list(out.values())

    def best(self, board: str, key: str) -> dict | None:
        """The fastest correct measurement for (board, key) (the earliest on ties), or None."""
        ok = [r for r in self.records(board, key) if r["status"] == "ok" and r.get("cycles") is not None]
        return min(ok, key=lambda r: r["cycles"]) if ok else None

    def __len__(self) -> int:
        return len(self._records)
