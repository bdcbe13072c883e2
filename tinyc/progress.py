"""Progress and chatter on stderr, the same way for every long step (calibration, tuning, runs).

Why one place: a bar is only readable on a terminal; in a CI log or a pipe, tqdm's carriage
returns pile up into noise, while no output at all leaves a long step silent. So every step asks
here: on a terminal it gets a tqdm bar, otherwise one plain line when the stage starts (and, with
``-v``, one when it ends). ``-q`` silences both, and the notes. The CLI sets the level once
(`set_verbosity`); the Python API stays at the default level.

It sits at the bottom layer (like `tinyc.errors`) so that every layer can use it.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

#: -1 quiet, 0 normal, 1+ verbose
_level = 0

log = logging.getLogger("tinyc")


def set_verbosity(level: int) -> None:
    """-1: quiet (errors only), 0: normal, >= 1: verbose (logging at INFO, DEBUG from 2)."""
    global _level
    _level = int(level)
    log.setLevel(
        logging.ERROR
        if _level < 0
        else logging.WARNING
        if _level == 0
        else logging.INFO
        if _level == 1
        else logging.DEBUG
    )
    if not any(isinstance(h, _StderrHandler) for h in log.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("tinyc: %(message)s"))
        log.addHandler(handler)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a record is emitted (not the stream at creation:
    a caller may have replaced it since, e.g. to capture it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def verbosity() -> int:
    return _level


def on_terminal() -> bool:
    """Whether stderr is an interactive terminal (where a bar can redraw itself)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


def note(message: str) -> None:
    """One line for the user on stderr (skipped with -q)."""
    if _level >= 0:
        print(message, file=sys.stderr, flush=True)


def verbose(message: str) -> None:
    """One line on stderr shown only with -v."""
    if _level >= 1:
        print(message, file=sys.stderr, flush=True)


class Bar:
    """A progress bar on a terminal, one plain line per stage elsewhere, nothing when hidden.
    The subset of tqdm that tinyc uses: update, set_postfix_str, close (and as a context manager)."""

    def __init__(self, total: int | None, desc: str, unit: str = "it", show: bool | None = None, leave: bool = False):
        self.desc, self.unit, self.total = desc, unit, total
        self.count = 0
        self.postfix = ""
        self.start = time.monotonic()
        self._tqdm: Any = None
        self.plain = False
        visible = show is not False and _level >= 0
        if not visible:
            return
        if on_terminal():
            from tqdm import tqdm

            self._tqdm = tqdm(total=total, desc=desc, unit=unit, leave=leave)
        else:
            self.plain = True
            size = f" ({unit}s: {total})" if total is not None else ""
            print(f"{desc}{size} ...", file=sys.stderr, flush=True)

    def update(self, n: int = 1) -> None:
        self.count += n
        if self._tqdm is not None:
            self._tqdm.update(n)

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text
        if self._tqdm is not None:
            self._tqdm.set_postfix_str(text)

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None
        elif self.plain and _level >= 1:
            extra = f", {self.postfix}" if self.postfix else ""
            print(
                f"{self.desc}: done, {self.count} {self.unit} in {time.monotonic() - self.start:.1f} s{extra}",
                file=sys.stderr,
                flush=True,
            )
        self.plain = False

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def track(
    items: Iterable[T], desc: str, total: int | None = None, unit: str = "it", show: bool | None = None
) -> Iterator[T]:
    """Iterate `items` under a `Bar` (total from len() when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Bar(total, desc, unit, show) as b:
        for item in items:
            yield item
            b.update(1)
