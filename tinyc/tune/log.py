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
from typing import Any, Mapping

#: Fields a record carries (extra fields are kept as they are).
RECORD_FIELDS = ("board", "target", "key", "op", "knobs", "cycles", "status", "units", "repeats",
                 "tinyc_version", "time")
#: Outcomes of measuring a candidate; each one is final (the candidate is never measured again).
STATUSES = ("ok", "wrong", "crash", "timeout", "build_error", "skipped")
#: Fields append() refuses to write a record without.
REQUIRED_FIELDS = ("board", "key", "knobs", "status")


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


def _check(record: Mapping[str, Any]) -> str | None:
    """Why a record is not valid, or None: shared by the writer (raise) and the reader (skip)."""
    missing = [f for f in REQUIRED_FIELDS if f not in record]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    if not isinstance(record["knobs"], Mapping):
        return "knobs is not an object"
    if record["status"] not in STATUSES:
        return f"status {record['status']!r} is not one of {', '.join(STATUSES)}"
    cycles = record.get("cycles")
    if cycles is not None and not _is_number(cycles):
        return f"cycles {cycles!r} is not a finite number or null"
    if record["status"] == "ok" and cycles is None:
        return "an ok record needs cycles"
    return None


def load_records(path: str | os.PathLike) -> list[dict]:
    """Every valid record of a log file, in file order; [] when the file does not exist.

    A line that does not parse (typically the last one, cut short by a kill) or is not a valid
    record is skipped with a warning naming the file and line: one bad line must never cost the
    measurements around it.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    records: list[dict] = []
    lines = data.split(b"\n")
    last = max((n for n, raw in enumerate(lines, start=1) if raw.strip()), default=0)
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = "last line" if number == last else "line"
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            warnings.warn(f"{path}: skipping corrupt {where} {number} ({exc.__class__.__name__}: {exc})",
                          stacklevel=2)
            continue
        problem = _check(record) if isinstance(record, dict) else "not a JSON object"
        if problem:
            warnings.warn(f"{path}: skipping invalid record on {where} {number} ({problem})", stacklevel=2)
            continue
        records.append(record)
    return records


class TuningLog:
    """An append-only JSON Lines file of measurements, plus the queries the tuner needs."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: list[dict] = load_records(self.path)

    def append(self, record: Mapping[str, Any]) -> None:
        """Validate, then write the record as one line and fsync it before returning.

        The file is opened with O_APPEND and written with a single write() per record, so an
        interrupted run leaves at worst one partial line at the end. If the file does not end in
        a newline (such a partial line), one is written first so the new record starts its own
        line and stays readable.
        """
        problem = _check(record)
        if problem:
            raise ValueError(f"tuning record not written: {problem}")
        full = dict(record)
        if "time" not in full:
            full["time"] = time.time()
        if "tinyc_version" not in full:
            # imported here: tinyc's package init may itself import the tuner
            from tinyc import __version__
            full["tinyc_version"] = __version__
        line = json.dumps(full, default=_jsonable, allow_nan=False, separators=(",", ":")) + "\n"
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = "\n" + line
            data = line.encode("utf-8")
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        self._records.append(json.loads(line))

    def records(self, board: str | None = None, key: str | None = None) -> list[dict]:
        """Records in file order, optionally only those of one board and/or one task key."""
        return [r for r in self._records
                if (board is None or r["board"] == board) and (key is None or r["key"] == key)]

    def measured(self, board: str, key: str) -> set[str]:
        """knobs_id of every candidate already tried for (board, key), whatever the outcome:
        a crash or a wrong result is as final as a timing, and retrying it wastes board time."""
        return {knobs_id(r["knobs"]) for r in self.records(board, key) if r["status"] in STATUSES}

    def best(self, board: str, key: str) -> dict | None:
        """The fastest correct measurement for (board, key) (the earliest on ties), or None."""
        ok = [r for r in self.records(board, key) if r["status"] == "ok" and r.get("cycles") is not None]
        return min(ok, key=lambda r: r["cycles"]) if ok else None

    def __len__(self) -> int:
        return len(self._records)
