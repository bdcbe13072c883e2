"""Putting a firmware image on a board, and saying where to talk to it afterwards.

Emulated boards run the image in QEMU with the board's UART on a local TCP socket; real boards
are programmed with the board's flasher tool (pyOCD, OpenOCD, st-flash, picotool) and are then
reached on the serial port the user names. Either way the caller gets a `DeviceSession` whose
`url` is what `tinyc.device.transport.open_link` opens, and whose `close()` leaves nothing running.

POSIX only (process groups): QEMU runs in its own session so that `close()` can signal everything
it started and a Ctrl-C in the terminal reaches tinyc, which then cleans up, rather than QEMU.
On Linux QEMU also gets SIGKILL the moment the tinyc thread that started it dies (prctl
PR_SET_PDEATHSIG), so a tinyc killed with SIGKILL, which cannot clean up, leaves no emulator behind.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from tinyc.errors import DeviceError, UsageError

#: `[flasher] tool` values. "none": the user programs the board some other way; tinyc only talks
#: to the serial port.
TOOLS = ("qemu", "pyocd", "openocd", "st-flash", "picotool", "none")

#: How each executable is installed, for the "not found" message.
INSTALL_HINTS = {
    "qemu-system-arm": "apt-get install qemu-system-arm (Debian/Ubuntu) or brew install qemu (macOS)",
    "pyocd": "pip install pyocd",
    "openocd": "apt-get install openocd (Debian/Ubuntu) or brew install open-ocd (macOS)",
    "st-flash": "apt-get install stlink-tools (Debian/Ubuntu) or brew install stlink (macOS)",
    "picotool": "apt-get install picotool, or build it from the Raspberry Pi picotool sources",
}

#: Seconds `close()` waits after SIGTERM before it sends SIGKILL.
CLOSE_GRACE_S = 2.0
#: What QEMU prints (to stderr) once its `server=on,wait=on` socket listens.
_QEMU_LISTENING = "waiting for connection"
_PORT_ATTEMPTS = 4
_TAIL_LINES = 30


class DeviceSession:
    """A started board: where to talk to it (`url`) and how to let go of it (`close`).

    This base class is what a real board gets: its flasher already ran to completion and the
    board runs on its own, so there is no process to watch; `log` is the flasher's output."""

    def __init__(self, board_name: str, url: str, log: str = "", command: Sequence[str] = ()) -> None:
        self.board_name = board_name
        self.url = url
        self.command = list(command)
        self._log = log
        self._closed = False

    @property
    def log(self) -> str:
        """Text the flasher or emulator printed (for error messages)."""
        return self._log

    @property
    def returncode(self) -> int | None:
        """Exit status of the emulator once it has exited; always None for a real board."""
        return None

    def alive(self) -> bool:
        """Whether the board is (as far as tinyc can tell) still running the firmware."""
        return not self._closed

    def wait_exit(self, timeout: float) -> int:
        """The firmware's exit code. Only an emulator can report one."""
        raise UsageError(
            f"board {self.board_name} is real hardware: its firmware cannot report an exit "
            "code (only emulated boards exit through semihosting)"
        )

    def close(self) -> None:
        """Forget the board; a flashed board keeps running its firmware."""
        self._closed = True

    def __enter__(self) -> DeviceSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(board={self.board_name!r}, url={self.url!r}, alive={self.alive()})"


class QemuSession(DeviceSession):
    """QEMU running one firmware image; the guest UART is a one-client TCP server on localhost."""

    def __init__(self, board_name: str, url: str, command: Sequence[str], proc: subprocess.Popen, logfile: Any) -> None:
        super().__init__(board_name, url, command=command)
        self._proc = proc
        self._logfile = logfile
        # If the caller forgets close() (or an exception skips it), QEMU must still not outlive us.
        self._finalizer = weakref.finalize(self, _stop_process, proc, 0.5)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def log(self) -> str:
        if self._logfile is None:
            return self._log
        return _read_log(self._logfile)

    @property
    def returncode(self) -> int | None:
        return self._proc.poll()

    def alive(self) -> bool:
        return self._proc.poll() is None

    def wait_exit(self, timeout: float) -> int:
        """Wait for the firmware to end (semihosting SYS_EXIT / SYS_EXIT_EXTENDED) and return
        QEMU's exit status, which is the code the firmware passed. QEMU keeps running on timeout."""
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise DeviceError(
                f"{self.board_name}: the firmware did not exit within {timeout:g} s (QEMU still "
                f"running, pid {self._proc.pid}){_log_suffix(self.log)}"
            ) from None

    def close(self, grace: float = CLOSE_GRACE_S) -> None:
        """Stop QEMU (SIGTERM to its process group, SIGKILL after `grace` seconds), reap it, keep its log."""
        if self._closed:
            return
        _stop_process(self._proc, grace)
        self._finalizer.detach()
        if self._logfile is not None:
            self._log = _read_log(self._logfile)
            self._logfile.close()
            self._logfile = None
        self._closed = True


def start(
    board: dict[str, Any],
    image: str | os.PathLike,
    port: str | None = None,
    timeout: float = 10.0,
    *,
    flash_timeout: float = 180.0,
) -> DeviceSession:
    """Start `image` on `board` and return the session to talk to it.

    Emulated boards (`[flasher] tool = "qemu"`): QEMU starts with the UART on a free localhost TCP
    port and `timeout` bounds the wait until that port listens; the guest itself only starts when
    the first client connects, so nothing the firmware prints is lost (but pyserial's socket://
    open() discards bytes already received: let the host speak first, or use a plain socket).
    `port` must be None.
    Real boards: the flasher programs, verifies and resets the board (at most `flash_timeout`
    seconds); `port` (required) is the serial port of the board's UART, and a device path is
    waited for (at most `timeout` s) in case the port re-enumerates after the reset."""
    name = str(board.get("name", "?"))
    image = Path(image)
    if not image.is_file():
        raise UsageError(f"firmware image {image} not found (build it first)")
    tool = _field(board, "flasher", "tool")
    if tool not in TOOLS:
        raise UsageError(f"board {name}: unknown [flasher] tool '{tool}' (known: {', '.join(TOOLS)})")
    if tool == "qemu":
        if port:
            raise UsageError(
                f"--port is for real boards; {name} is emulated by QEMU and tinyc picks a local TCP port itself"
            )
        return _start_qemu(board, image, timeout)
    if not port:
        raise UsageError(
            f"board {name} is real hardware: name the serial port its UART is on with --port "
            "(e.g. /dev/ttyACM0, /dev/tty.usbmodem1103 or COM3)"
        )
    if tool == "none":
        return DeviceSession(name, port, log='(not flashed: [flasher] tool = "none")')
    cmd = flash_command(board, prepare_image(board, image))
    out = _run_tool(cmd, f"programming {image.name} onto {name}", flash_timeout)
    _wait_for_port(name, port, timeout, out)
    return DeviceSession(name, port, log=out, command=cmd)


# ---------------------------------------------------------------------------------------- QEMU


def qemu_command(board: dict[str, Any], image: Path, tcp_port: int) -> list[str]:
    """The QEMU command line for `board`: no network or monitor, semihosting on (the firmware
    exits with a code), `-icount` so that SysTick counts executed instructions deterministically,
    and the UART as a TCP server that holds the guest until the host connects (`wait=on`)."""
    emu = board.get("emulator") or {}
    machine = _field(board, "emulator", "machine")
    shift = int(_field(board, "emulator", "icount_shift"))
    return [
        str(emu.get("qemu", "qemu-system-arm")),
        "-M",
        str(machine),
        "-nographic",
        "-nic",
        "none",
        "-monitor",
        "none",
        "-semihosting-config",
        "enable=on,target=native",
        "-icount",
        f"shift={shift},sleep=off",
        # nodelay: the guest writes its UART byte by byte; with Nagle on QEMU's socket every reply
        # waited for the host's delayed ACK (~44 ms a request); without it a request takes < 1 ms
        "-serial",
        f"tcp:127.0.0.1:{tcp_port},server=on,wait=on,nodelay=on",
        "-kernel",
        str(image),
    ]


_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Any:
    """libc's prctl, bound once here in the parent (a preexec_fn must not load libraries or take
    locks: it runs between fork and exec); None off Linux or without it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _load_prctl()


def _die_with_parent_hook() -> Any:
    """A preexec_fn that makes the child get SIGKILL when the thread that started it dies (Linux:
    PR_SET_PDEATHSIG; the kernel sends it when the creating *thread* exits, so sessions must be
    closed by the thread that started them, as every caller in tinyc does), or None where that
    does not exist. If the parent died between fork and prctl, the child exits at once."""
    if _PRCTL is None:
        return None
    prctl, parent, sigkill = _PRCTL, os.getpid(), int(signal.SIGKILL)

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, sigkill, 0, 0, 0)  # a failure only loses the safety net
        if os.getppid() != parent:
            os._exit(1)

    return hook


def _start_qemu(board: dict[str, Any], image: Path, timeout: float) -> QemuSession:
    name = str(board.get("name", "?"))
    qemu = str((board.get("emulator") or {}).get("qemu", "qemu-system-arm"))
    if shutil.which(qemu) is None:
        raise DeviceError(
            f"{qemu} not found on PATH: board {name} runs in the QEMU emulator; install it "
            f"({INSTALL_HINTS.get(qemu, INSTALL_HINTS['qemu-system-arm'])})"
        )
    for _ in range(_PORT_ATTEMPTS):
        tcp_port = _free_port()
        cmd = qemu_command(board, image, tcp_port)
        logfile = tempfile.TemporaryFile(prefix="tinyc-qemu-")
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent_hook(),
        )
        session = QemuSession(name, f"socket://127.0.0.1:{tcp_port}", cmd, proc, logfile)
        try:
            if _wait_listening(session, tcp_port, timeout):
                return session
        except BaseException:
            session.close(grace=0.5)
            raise
        session.close(grace=0.5)  # another process took the port between our probe and QEMU's bind
    raise DeviceError(f"{name}: QEMU could not listen on a free localhost TCP port ({_PORT_ATTEMPTS} tries)")


def _wait_listening(session: QemuSession, tcp_port: int, timeout: float) -> bool:
    """Wait until QEMU's UART socket listens, without connecting to it.

    QEMU's `server=on,wait=on` socket takes exactly one client and starts the guest when it
    arrives, so a probe connection would become *the* client and steal the firmware's first
    bytes. Instead: QEMU says so on stderr once it listens, and on Linux the socket's LISTEN state
    is visible in /proc/net/tcp. Returns False when the port was taken by someone else."""
    deadline = time.monotonic() + timeout
    while True:
        log = session.log
        if session.returncode is not None:
            if "Address already in use" in log:
                return False
            raise DeviceError(
                f"{session.board_name}: QEMU exited at start (status {session.returncode}); "
                f"command: {shlex.join(session.command)}{_log_suffix(log)}"
            )
        if _QEMU_LISTENING in log or _listening(tcp_port):
            return True
        if time.monotonic() > deadline:
            raise DeviceError(
                f"{session.board_name}: QEMU did not open its UART socket within {timeout:g} s; "
                f"command: {shlex.join(session.command)}{_log_suffix(log)}"
            )
        time.sleep(0.005)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(tcp_port: int) -> bool:
    """Whether some socket listens on 127.0.0.1/0.0.0.0:`tcp_port` (Linux /proc; False elsewhere)."""
    try:
        text = Path("/proc/net/tcp").read_text()
    except OSError:
        return False
    suffix = f":{tcp_port:04X}"
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[1].endswith(suffix) and fields[3] == "0A":  # 0A = TCP_LISTEN
            return True
    return False


def _stop_process(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group, SIGKILL it after `grace` s, and reap the leader (no zombie).

    The group is only signalled while the leader is unreaped, so its id cannot have been reused."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:  # not our group after all (should not happen): signal the process only
        proc.send_signal(sig)


def _read_log(logfile: Any) -> str:
    """Read the whole log without moving the offset QEMU writes at (shared with the child)."""
    fd = logfile.fileno()
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0).decode("utf-8", "replace") if size else ""


# ------------------------------------------------------------------------------ real flashers


def prepare_image(board: dict[str, Any], image: Path) -> Path:
    """The file the board's flasher takes (`[flasher] image`): the ELF itself, or a .bin/.hex made
    from it with the toolchain's objcopy next to it. picotool reads ELF files directly, so an ELF is
    passed to it even when the board prefers UF2."""
    name = str(board.get("name", "?"))
    want = str((board.get("flasher") or {}).get("image", "elf"))
    tool = str((board.get("flasher") or {}).get("tool", ""))
    image = Path(image)
    is_elf = image.read_bytes()[:4] == b"\x7fELF"
    if want == "elf" or (want == "uf2" and tool == "picotool" and is_elf):
        if not is_elf:
            raise UsageError(f"board {name} is programmed from an ELF file, but {image} is not one")
        return image
    if want not in ("bin", "hex", "uf2"):
        raise UsageError(f"board {name}: unknown [flasher] image '{want}' (elf, bin, hex or uf2)")
    if image.suffix == f".{want}":
        return image
    if not is_elf or want == "uf2":
        raise UsageError(f"board {name}: its flasher takes a .{want} file; cannot make one from {image}")
    out = image.with_suffix(f".{want}")
    objcopy = f"{(board.get('toolchain') or {}).get('prefix', '')}objcopy"
    fmt = {"bin": "binary", "hex": "ihex"}[want]
    _run_tool(
        [objcopy, "-O", fmt, str(image), str(out)],
        f"converting {image.name} to .{want}",
        60.0,
        hint="it comes with the board's cross toolchain (arm-none-eabi-: apt-get install binutils-arm-none-eabi)",
    )
    return out


def flash_command(board: dict[str, Any], image: Path) -> list[str]:
    """The command that programs, verifies and resets `board` with the prepared `image`
    (see `prepare_image`); `[flasher] args` go where each tool takes its options."""
    flasher = board.get("flasher") or {}
    tool = _field(board, "flasher", "tool")
    args = [str(a) for a in flasher.get("args", [])]
    img = str(image)
    kind = image.suffix.lstrip(".").lower()
    if tool == "pyocd":
        target = ["-t", str(flasher["target"])] if flasher.get("target") else []
        base = ["-a", f"{_flash_origin(board):#010x}"] if kind == "bin" else []
        return ["pyocd", "flash", *target, *args, *base, img]  # pyocd resets the target after programming
    if tool == "openocd":
        offset = f" {_flash_origin(board):#010x}" if kind == "bin" else ""
        return ["openocd", *args, "-c", f"program {_tcl_word(image.as_posix())} verify reset exit{offset}"]
    if tool == "st-flash":
        if kind != "bin":
            raise UsageError(
                f'board {board.get("name", "?")}: st-flash writes raw .bin images; set [flasher] image = "bin"'
            )
        return ["st-flash", *args, "--reset", "write", img, f"{_flash_origin(board):#010x}"]
    if tool == "picotool":
        ftype = "elf" if image.read_bytes()[:4] == b"\x7fELF" else kind
        return ["picotool", "load", "-v", "-x", img, "-t", ftype, *args]
    raise UsageError(f"board {board.get('name', '?')}: [flasher] tool '{tool}' has no flash command")


def _wait_for_port(board_name: str, port: str, timeout: float, flasher_log: str) -> None:
    """A board whose USB serial port is the MCU itself (or a probe that re-enumerates) drops the
    port while it resets after programming: wait up to `timeout` s for a device path to be back.
    URLs (socket://, rfc2217://) and names like COM3 are left to the transport."""
    if "://" in port or not port.startswith("/"):
        return
    deadline = time.monotonic() + timeout
    while not os.path.exists(port):
        if time.monotonic() > deadline:
            raise DeviceError(
                f"{board_name} was programmed, but serial port {port} does not exist "
                f"({timeout:g} s after the flasher finished); check --port"
                f"{_log_suffix(flasher_log)}"
            )
        time.sleep(0.05)


def _flash_origin(board: dict[str, Any]) -> int:
    return int(_field(board, "memory", "flash_origin"))


def _tcl_word(text: str) -> str:
    """OpenOCD parses -c as Tcl: brace a path holding spaces or Tcl specials."""
    return "{" + text + "}" if any(c in text for c in ' \t"$[]{};\\') else text


def _run_tool(cmd: list[str], what: str, timeout: float, hint: str | None = None) -> str:
    """Run a flasher/converter; its output (stdout+stderr, in order) on success, DeviceError otherwise."""
    exe = cmd[0]
    if shutil.which(exe) is None:
        how = hint or INSTALL_HINTS.get(exe, "see its documentation")
        raise DeviceError(f"{exe} not found on PATH (needed for {what}); install it: {how}")
    try:
        proc = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.output or b"").decode("utf-8", "replace")
        raise DeviceError(
            f"{exe} did not finish within {timeout:g} s ({what}); command: {shlex.join(cmd)}{_log_suffix(out)}"
        ) from None
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        raise DeviceError(
            f"{exe} failed with exit status {proc.returncode} ({what}); command: {shlex.join(cmd)}{_log_suffix(out)}"
        )
    return out


def _field(board: dict[str, Any], section: str, key: str) -> Any:
    value = (board.get(section) or {}).get(key)
    if value is None:
        raise UsageError(f"board {board.get('name', '?')}: missing [{section}] {key}")
    return value


def _log_suffix(text: str) -> str:
    lines = text.strip().splitlines()
    if not lines:
        return "\n(no output)"
    more = f"(last {_TAIL_LINES} of {len(lines)} lines)\n" if len(lines) > _TAIL_LINES else ""
    return "\noutput:\n" + more + "\n".join(lines[-_TAIL_LINES:])
