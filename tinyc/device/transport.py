"""Byte links to a device: anything pyserial opens (a serial port, socket://, rfc2217://, loop://).

Every read takes a deadline, so no caller can block forever on a silent device. Reads ask for
``max(1, in_waiting)`` bytes: pyserial's ``read(n)`` raises when the stream ends (an emulator
exiting, a board unplugged) and throws away the bytes it had already collected, so asking only
for what is there keeps every byte that arrived before the end.
"""

from __future__ import annotations

import time

from tinyc.errors import DeviceError

# Longest single blocking read: bounds how far a read can overshoot its deadline.
POLL_S = 0.05
DEFAULT_BAUD = 115200


class LinkError(DeviceError):
    """The link failed (write timeout, I/O error)."""


class LinkClosed(LinkError):
    """The other end went away: socket closed, emulator exited, board unplugged."""


class Link:
    """A pyserial port with deadline-bounded reads; `url` names it in error messages."""

    def __init__(self, port, url: str) -> None:
        self._port = port
        self.url = url
        self._timeout = POLL_S
        self.closed = False

    def write(self, data: bytes) -> None:
        """Send all of `data` (bounded by the write timeout given to open_link)."""
        import serial

        try:
            self._port.write(data)
            self._port.flush()
        except serial.SerialTimeoutException:
            raise LinkError(f"{self.url}: write timed out (the device does not read)") from None
        except (serial.SerialException, OSError) as exc:
            raise LinkClosed(f"{self.url}: link closed while writing ({exc})") from None

    def read_some(self, deadline: float) -> bytes:
        """Whatever bytes arrive first, waiting until `deadline` (time.monotonic()) at most;
        b"" when none came. Raises LinkClosed when the other end is gone."""
        import serial

        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return b""
            wait = min(POLL_S, remaining)
            try:
                if abs(wait - self._timeout) > 1e-3:
                    self._port.timeout = wait
                    self._timeout = wait
                data = self._port.read(max(1, self._port.in_waiting))
            except (serial.SerialException, OSError) as exc:
                raise LinkClosed(f"{self.url}: link closed ({exc})") from None
            if data:
                return bytes(data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                _close_quickly(self._port)
            except Exception:  # closing a dead port must not mask the error that got us here
                pass

    def __enter__(self) -> Link:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_quickly(port) -> None:
    """pyserial's socket:// close() sleeps 0.3 s after closing ("give the server time to
    reconnect"); a session that is over has no use for that, so close the socket directly
    when the port is that class and still looks as expected."""
    from serial.urlhandler import protocol_socket

    sock = getattr(port, "_socket", None)
    if isinstance(port, protocol_socket.Serial) and sock is not None:
        import socket

        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
        port._socket = None
        port.is_open = False
        return
    port.close()


def open_link(url: str, timeout: float = 5.0, baudrate: int = DEFAULT_BAUD) -> Link:
    """Open `url` with pyserial's serial_for_url: a device path (/dev/ttyACM0, COM3),
    socket://host:port, rfc2217://host:port or loop://. `timeout` bounds every write."""
    import serial

    try:
        port = serial.serial_for_url(url, baudrate=baudrate, timeout=POLL_S, write_timeout=timeout)
    except (serial.SerialException, ValueError, OSError) as exc:
        raise DeviceError(f"cannot open device link {url}: {exc}") from None
    return Link(port, url)
