"""User-facing errors.

Every failure a user can cause (bad model, bad flag, missing toolchain) is raised as a
``TinycError`` subclass whose message is meant to be printed as-is; the CLI turns them into
a one-line message and exit code 2 instead of a traceback.
"""

from __future__ import annotations

import re


class TinycError(Exception):
    """Base class: the message is complete and addressed to the user."""

    exit_code = 2
    #: whether the message is one line by contract; tool output (compiler, emulator, runner) is not
    one_line = True

    def printable(self) -> str:
        """The message as a terminal may show it: model-given names can hold newlines or escape
        sequences (ANSI colours, cursor moves, bidi overrides); those are escaped, so the message
        stays one line and cannot rewrite the user's screen."""
        return printable_text(str(self), keep_newlines=not self.one_line)


_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable_text(text: str, keep_newlines: bool = False) -> str:
    """`text` with control characters (and, unless `keep_newlines`, newlines) as escapes."""
    if not keep_newlines:
        text = text.replace("\r\n", "\n").replace("\n", "\\n")
    return _UNPRINTABLE.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


class ModelLoadError(TinycError):
    """The file is missing, unreadable, not ONNX, or its external data is missing."""


class UnsupportedError(TinycError):
    """An operator, attribute value or data type that tinyc cannot compile."""


class ShapeError(TinycError):
    """A dynamic (symbolic) dimension was not resolved, or shapes are inconsistent."""


class BuildError(TinycError):
    """The C compiler or CMake failed; the message carries the tool's output."""

    one_line = False


class RunError(TinycError):
    """Running compiled code failed (bad inputs, missing build, crash)."""

    one_line = False


class UsageError(TinycError):
    """A command-line argument or API parameter is malformed."""


class DeviceError(TinycError):
    """Talking to a board failed: serial timeout, corrupted link, flasher or emulator failure.

    The message names the port, the command in flight and the bytes seen, since that is what a
    user needs to tell a wrong cable from a crashed firmware."""

    one_line = False
