"""User-facing errors.

Every failure a user can cause (bad model, bad flag, missing toolchain) is raised as a
``TinycError`` subclass whose message is meant to be printed as-is; the CLI turns them into
a one-line message and exit code 2 instead of a traceback.
"""
from __future__ import annotations


class TinycError(Exception):
    """Base class: the message is complete and addressed to the user."""

    exit_code = 2


class ModelLoadError(TinycError):
    """The file is missing, unreadable, not ONNX, or its external data is missing."""


class UnsupportedError(TinycError):
    """An operator, attribute value or data type that tinyc cannot compile."""


class ShapeError(TinycError):
    """A dynamic (symbolic) dimension was not resolved, or shapes are inconsistent."""


class BuildError(TinycError):
    """The C compiler or CMake failed; the message carries the tool's output."""


class RunError(TinycError):
    """Running compiled code failed (bad inputs, missing build, crash)."""


class UsageError(TinycError):
    """A command-line argument or API parameter is malformed."""


class DeviceError(TinycError):
    """Talking to a board failed: serial timeout, corrupted link, flasher or emulator failure.

    The message names the port, the command in flight and the bytes seen, since that is what a
    user needs to tell a wrong cable from a crashed firmware."""
