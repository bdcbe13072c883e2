"""tinyc.device.flashers: QEMU sessions for real (a tiny firmware built here), and the exact command
lines of the real-board flashers, run as fake executables that record their arguments."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tinyc.device import flashers
from tinyc.device.flashers import start
from tinyc.errors import DeviceError, UsageError

HAVE_ARM_GCC = shutil.which("arm-none-eabi-gcc") is not None
HAVE_QEMU = shutil.which("qemu-system-arm") is not None
needs_arm_gcc = pytest.mark.skipif(not HAVE_ARM_GCC, reason="needs arm-none-eabi-gcc")
needs_qemu = pytest.mark.skipif(not (HAVE_ARM_GCC and HAVE_QEMU), reason="needs arm-none-eabi-gcc and qemu-system-arm")

AN386 = {
    "name": "mps2-an386", "kind": "mcu", "emulated": True,
    "toolchain": {"prefix": "arm-none-eabi-"},
    "memory": {"flash_origin": 0x0, "flash_size": 0x400000, "ram_origin": 0x20000000, "ram_size": 0x400000},
    "flasher": {"tool": "qemu", "args": [], "image": "elf"},
    "emulator": {"qemu": "qemu-system-arm", "machine": "mps2-an386", "icount_shift": 7},
}

# A complete bare-metal firmware for the MPS2 boards: vector table, reset handler, CMSDK UART.
# It waits for one byte c from the host, answers "hi" + (c + 1), then exits through semihosting
# SYS_EXIT_EXTENDED with EXIT_CODE (or 100 + c when c is not 'A'); NEVER_EXIT spins instead.
FIRMWARE_C = r"""
#include <stdint.h>
#define UART_DATA    (*(volatile uint32_t *)0x40004000u)
#define UART_STATE   (*(volatile uint32_t *)0x40004004u)
#define UART_CTRL    (*(volatile uint32_t *)0x40004008u)
#define UART_BAUDDIV (*(volatile uint32_t *)0x40004010u)
#define SYST_CSR     (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR     (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR     (*(volatile uint32_t *)0xE000E018u)

extern uint32_t __stack_top;
void reset_handler(void);
static void spin(void) { for (;;) { } }

__attribute__((section(".vectors"), used))
const void *const vectors[4] = { &__stack_top, (const void *)reset_handler, (const void *)spin, (const void *)spin };

static void put(uint8_t c) { while (UART_STATE & 1u) { } UART_DATA = c; }
static uint8_t get(void) { while (!(UART_STATE & 2u)) { } return (uint8_t)UART_DATA; }

static void semihosting_exit(uint32_t code) {
    static volatile uint32_t block[2];
    block[0] = 0x20026u; /* ADP_Stopped_ApplicationExit */
    block[1] = code;
    register uint32_t r0 __asm__("r0") = 0x20u; /* SYS_EXIT_EXTENDED */
    register volatile uint32_t *r1 __asm__("r1") = block;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    spin();
}

void reset_handler(void) {
    UART_BAUDDIV = 16u;
    UART_CTRL = 3u; /* TX and RX enabled */
    /* A running SysTick keeps QEMU's main loop ticking; without any timer, bytes from the host
     * are never delivered to a guest that polls the UART. */
    SYST_RVR = 0xFFFFFFu;
    SYST_CVR = 0u;
    SYST_CSR = 5u;
    uint8_t c = get();
    put('h');
    put('i');
    put((uint8_t)(c + 1u));
#ifdef NEVER_EXIT
    spin();
#endif
    semihosting_exit(c == 'A' ? EXIT_CODE : 100u + c);
}
"""

LINKER_SCRIPT = """
MEMORY { FLASH (rx) : ORIGIN = 0x00000000, LENGTH = 4M
         RAM (rwx)  : ORIGIN = 0x20000000, LENGTH = 4M }
SECTIONS {
  .text : { KEEP(*(.vectors)) *(.text*) *(.rodata*) } > FLASH
  .bss (NOLOAD) : { *(.bss*) *(COMMON) } > RAM
  __stack_top = ORIGIN(RAM) + LENGTH(RAM);
}
"""


def build_firmware(dst: Path, *defines: str) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "fw.c").write_text(FIRMWARE_C)
    (dst / "fw.ld").write_text(LINKER_SCRIPT)
    elf = dst / "fw.elf"
    cmd = ["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror",
           "-ffreestanding", "-nostdlib", "-T", str(dst / "fw.ld"), *[f"-D{d}" for d in defines],
           str(dst / "fw.c"), "-o", str(elf)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return elf


@pytest.fixture(scope="module")
def firmware(tmp_path_factory):
    if not HAVE_ARM_GCC:
        pytest.skip("needs arm-none-eabi-gcc")
    root = tmp_path_factory.mktemp("fw")
    return {"exit7": build_firmware(root / "exit7", "EXIT_CODE=7u"),
            "never": build_firmware(root / "never", "EXIT_CODE=0u", "NEVER_EXIT")}


def gone(pid: int) -> bool:
    """The process no longer exists, not even as a zombie, and is not our unreaped child."""
    try:
        os.kill(pid, 0)
        return False
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def recv_exactly(sock: socket.socket, n: int, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


# ----------------------------------------------------------------------------------- QEMU, real

@pytest.mark.slow
@needs_qemu
def test_qemu_session_serial_roundtrip_and_exit_code(firmware):
    import serial
    t0 = time.perf_counter()
    session = start(AN386, firmware["exit7"])
    listening = time.perf_counter() - t0
    assert listening < 5.0
    assert session.url.startswith("socket://127.0.0.1:")
    assert session.alive() and session.returncode is None
    assert "-icount" in session.command and "shift=7,sleep=off" in session.command
    link = serial.serial_for_url(session.url, timeout=5)
    try:
        link.write(b"A")
        got = b""
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            got += link.read(max(1, link.in_waiting))
        assert got == b"hiB"
        assert session.wait_exit(10) == 7
    finally:
        link.close()
    pid = session.pid
    session.close()
    assert gone(pid)
    assert session.returncode == 7 and not session.alive()
    assert "waiting for connection" in session.log  # the log survives close()


@pytest.mark.slow
@needs_qemu
def test_qemu_exit_code_follows_the_firmware(firmware):
    """The code is the firmware's: a wrong byte gives 100 + byte."""
    with start(AN386, firmware["exit7"]) as session:
        with socket.create_connection(("127.0.0.1", int(session.url.rsplit(":", 1)[1])), timeout=5) as sock:
            sock.sendall(b"\x05")
            assert recv_exactly(sock, 3) == b"hi\x06"
            assert session.wait_exit(10) == 105


@pytest.mark.slow
@needs_qemu
def test_qemu_firmware_that_never_exits_is_killed_by_close(firmware):
    session = start(AN386, firmware["never"])
    with socket.create_connection(("127.0.0.1", int(session.url.rsplit(":", 1)[1])), timeout=5) as sock:
        sock.sendall(b"A")
        assert recv_exactly(sock, 3) == b"hiB"
        with pytest.raises(DeviceError, match="did not exit within 0.3 s"):
            session.wait_exit(0.3)
        assert session.alive()
        pid = session.pid
        t0 = time.perf_counter()
        session.close()
        assert time.perf_counter() - t0 < flashers.CLOSE_GRACE_S + 1.0
    assert gone(pid) and not session.alive()
    session.close()  # idempotent


@pytest.mark.slow
@needs_qemu
def test_qemu_close_before_any_client_and_on_exception(firmware):
    """QEMU blocked waiting for its client still stops; leaving a `with` block by an exception too."""
    pids = []
    with pytest.raises(RuntimeError):
        with start(AN386, firmware["never"]) as session:
            pids.append(session.pid)
            raise RuntimeError("boom")
    assert gone(pids[0])


@pytest.mark.slow
@needs_qemu
def test_qemu_dies_at_start_reports_its_log(firmware):
    bad = json.loads(json.dumps(AN386))
    bad["emulator"]["machine"] = "no-such-machine"
    with pytest.raises(DeviceError) as exc:
        start(bad, firmware["exit7"])
    msg = str(exc.value)
    assert "QEMU exited at start" in msg and "no-such-machine" in msg
    assert "-M no-such-machine" in msg  # the command line, to reproduce by hand


def test_missing_image_and_missing_qemu(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="firmware image .*nope.elf not found"):
        start(AN386, tmp_path / "nope.elf")
    image = tmp_path / "fw.elf"
    image.write_bytes(b"\x7fELF" + bytes(60))
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(DeviceError) as exc:
        start(AN386, image)
    assert "qemu-system-arm not found" in str(exc.value)
    assert "apt-get install qemu-system-arm" in str(exc.value)


def test_qemu_board_rejects_port_and_needs_machine(tmp_path):
    image = tmp_path / "fw.elf"
    image.write_bytes(b"\x7fELF" + bytes(60))
    with pytest.raises(UsageError, match="--port is for real boards"):
        start(AN386, image, port="/dev/ttyACM0")
    board = json.loads(json.dumps(AN386))
    del board["emulator"]["machine"]
    with pytest.raises(UsageError, match=r"board mps2-an386: missing \[emulator\] machine"):
        flashers.qemu_command(board, image, 1234)


def test_qemu_command_line():
    cmd = flashers.qemu_command(AN386, Path("fw.elf"), 4321)
    assert cmd == ["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-nic", "none", "-monitor", "none",
                   "-semihosting-config", "enable=on,target=native", "-icount", "shift=7,sleep=off",
                   "-serial", "tcp:127.0.0.1:4321,server=on,wait=on,nodelay=on", "-kernel", "fw.elf"]


# --------------------------------------------------------------------- real flashers, faked

FAKE_TOOL = """#!{python}
import json, os, sys
with open(os.environ["FAKE_FLASHER_LOG"], "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\\n")
rc = int(os.environ.get("FAKE_FLASHER_RC", "0"))
if rc:
    print("Info : probe found, target voltage 3.28 V")
    print("Error: init mode failed (unable to connect to the target)", file=sys.stderr)
else:
    print("Programming finished, verified OK")
sys.exit(rc)
"""


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    """pyocd/openocd/st-flash/picotool that record their argv (one JSON list per call)."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    for tool in ("pyocd", "openocd", "st-flash", "picotool"):
        p = bindir / tool
        p.write_text(FAKE_TOOL.format(python=sys.executable))
        p.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_FLASHER_LOG", str(log))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return calls


def real_board(tool: str, image: str = "elf", args: list[str] | None = None, **flasher) -> dict:
    return {"name": "nucleo-f746zg", "kind": "mcu", "emulated": False,
            "toolchain": {"prefix": "arm-none-eabi-"},
            "memory": {"flash_origin": 0x08000000, "flash_size": 0x100000, "ram_origin": 0x20000000,
                       "ram_size": 0x50000},
            "flasher": {"tool": tool, "args": args or [], "image": image, **flasher}}


@pytest.fixture
def tty(tmp_path):
    """Stands in for the board's serial device: start() waits until the port path exists."""
    p = tmp_path / "ttyACM0"
    p.touch()
    return str(p)


@pytest.fixture
def fake_elf(tmp_path):
    p = tmp_path / "build" / "fw.elf"
    p.parent.mkdir()
    p.write_bytes(b"\x7fELF" + bytes(60))
    return p


def test_pyocd_command(fake_tools, fake_elf, tty):
    s = start(real_board("pyocd", target="stm32f746zgtx", args=["--frequency", "4000000"]), fake_elf,
              port=tty)
    assert fake_tools() == [["pyocd", "flash", "-t", "stm32f746zgtx", "--frequency", "4000000", str(fake_elf)]]
    assert s.url == tty and s.alive() and s.returncode is None
    assert "verified OK" in s.log
    with pytest.raises(UsageError, match="real hardware"):
        s.wait_exit(1)
    s.close()
    assert not s.alive()


def test_openocd_command_elf_and_bin(fake_tools, fake_elf, tmp_path, tty):
    args = ["-f", "interface/stlink.cfg", "-f", "target/stm32f7x.cfg"]
    start(real_board("openocd", args=args), fake_elf, port=tty)
    binary = tmp_path / "fw.bin"
    binary.write_bytes(bytes(16))
    start(real_board("openocd", image="bin", args=["-f", "board/st_nucleo_f7.cfg"]), binary, port="COM3")
    spaced = tmp_path / "my build" / "fw.elf"
    spaced.parent.mkdir()
    spaced.write_bytes(fake_elf.read_bytes())
    start(real_board("openocd", args=args), spaced, port=tty)
    assert fake_tools() == [
        ["openocd", *args, "-c", f"program {fake_elf} verify reset exit"],
        ["openocd", "-f", "board/st_nucleo_f7.cfg", "-c", f"program {binary} verify reset exit 0x08000000"],
        ["openocd", *args, "-c", f"program {{{spaced}}} verify reset exit"],
    ]


def test_st_flash_command(fake_tools, tmp_path, tty):
    binary = tmp_path / "fw.bin"
    binary.write_bytes(bytes(16))
    start(real_board("st-flash", image="bin", args=["--freq=4M"]), binary, port=tty)
    assert fake_tools() == [["st-flash", "--freq=4M", "--reset", "write", str(binary), "0x08000000"]]


def test_picotool_command(fake_tools, fake_elf, tmp_path, tty):
    board = real_board("picotool", image="uf2", args=["-f"])
    board["memory"]["flash_origin"] = 0x10000000
    start(board, fake_elf, port=tty)  # picotool reads ELF itself: no conversion
    uf2 = tmp_path / "fw.uf2"
    uf2.write_bytes(b"UF2\n" + bytes(508))
    start(board, uf2, port=tty)
    assert fake_tools() == [["picotool", "load", "-v", "-x", str(fake_elf), "-t", "elf", "-f"],
                            ["picotool", "load", "-v", "-x", str(uf2), "-t", "uf2", "-f"]]


def test_flasher_failure_carries_the_tool_output(fake_tools, fake_elf, monkeypatch, tty):
    monkeypatch.setenv("FAKE_FLASHER_RC", "1")
    with pytest.raises(DeviceError) as exc:
        start(real_board("openocd", args=["-f", "board/st_nucleo_f7.cfg"]), fake_elf, port=tty)
    msg = str(exc.value)
    assert "openocd failed with exit status 1" in msg
    assert "unable to connect to the target" in msg and "target voltage 3.28 V" in msg
    assert "program " in msg and "verify reset exit" in msg  # the command, to retry by hand


def test_real_board_needs_port_and_tool(fake_elf, tmp_path, monkeypatch, tty):
    with pytest.raises(UsageError, match="--port"):
        start(real_board("pyocd"), fake_elf)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for tool, hint in (("pyocd", "pip install pyocd"), ("openocd", "apt-get install openocd"),
                       ("picotool", "picotool")):
        with pytest.raises(DeviceError, match=f"{tool} not found on PATH.*{hint}"):
            start(real_board(tool), fake_elf, port=tty)
    with pytest.raises(UsageError, match="unknown \\[flasher\\] tool 'jlink'"):
        start(real_board("jlink"), fake_elf, port=tty)
    session = start(real_board("none"), fake_elf, port="/dev/ttyUSB0")  # flashed by the user
    assert session.url == "/dev/ttyUSB0"


def test_objcopy_missing_or_failing(fake_tools, fake_elf, tmp_path, monkeypatch, tty):
    board = real_board("st-flash", image="bin")
    board["toolchain"]["prefix"] = "no-such-prefix-"
    with pytest.raises(DeviceError, match="no-such-prefix-objcopy not found on PATH.*cross toolchain"):
        start(board, fake_elf, port=tty)
    assert fake_tools() == []
    if HAVE_ARM_GCC:  # a file that only looks like an ELF: objcopy refuses it, with its message
        with pytest.raises(DeviceError, match="arm-none-eabi-objcopy failed"):
            start(real_board("st-flash", image="bin"), fake_elf, port=tty)


@pytest.mark.slow
@needs_arm_gcc
def test_elf_converted_to_bin_and_hex(fake_tools, firmware, tmp_path, tty):
    elf = tmp_path / "fw.elf"
    shutil.copy(firmware["exit7"], elf)
    start(real_board("st-flash", image="bin"), elf, port=tty)
    binary = elf.with_suffix(".bin")
    raw = binary.read_bytes()
    assert int.from_bytes(raw[:4], "little") == 0x20400000  # initial stack pointer: top of RAM
    assert int.from_bytes(raw[4:8], "little") & 1  # reset vector, Thumb bit set
    start(real_board("pyocd", image="hex", target="stm32f746zgtx"), elf, port=tty)
    hexfile = elf.with_suffix(".hex")
    assert hexfile.read_text().startswith(":")
    start(real_board("pyocd", image="bin", target="stm32f746zgtx"), elf, port=tty)
    assert fake_tools() == [["st-flash", "--reset", "write", str(binary), "0x08000000"],
                            ["pyocd", "flash", "-t", "stm32f746zgtx", str(hexfile)],
                            ["pyocd", "flash", "-t", "stm32f746zgtx", "-a", "0x08000000", str(binary)]]


def _bundled_real_boards() -> list[str]:
    from tinyc.resources import boards_dir
    from tinyc.targets.boards import load_board
    names = []
    for path in sorted(boards_dir().glob("*.toml")):
        board = load_board(path.stem)
        if (board.get("flasher") or {}).get("tool") not in (None, "qemu", "none"):
            names.append(path.stem)
    return names


@pytest.mark.slow
@needs_arm_gcc
@pytest.mark.parametrize("name", _bundled_real_boards())
def test_bundled_real_boards_flash_commands(name, fake_tools, firmware, tmp_path, tty):
    """Every bundled real board's [flasher] section gives a command its tool would accept."""
    from tinyc.targets.boards import load_board
    board = load_board(name)
    elf = tmp_path / "fw.elf"
    shutil.copy(firmware["exit7"], elf)
    session = start(board, elf, port=tty)
    (call,) = fake_tools()
    flasher = board["flasher"]
    assert call[0] == flasher["tool"]
    args = [str(a) for a in flasher.get("args", [])]
    assert any(call[i:i + len(args)] == args for i in range(len(call))), (args, call)
    image = flashers.prepare_image(board, elf)
    assert image.is_file() and any(str(image) in c for c in call)
    assert session.url == tty


def test_flashed_board_whose_port_never_appears(fake_tools, fake_elf, tmp_path):
    missing = str(tmp_path / "ttyACM9")
    t0 = time.perf_counter()
    with pytest.raises(DeviceError, match=f"serial port {missing} does not exist.*check --port"):
        start(real_board("openocd", args=["-f", "board/st_nucleo_f7.cfg"]), fake_elf, port=missing, timeout=0.3)
    assert time.perf_counter() - t0 < 5
    assert len(fake_tools()) == 1  # it did flash
    # URLs and Windows names are the transport's business
    assert start(real_board("openocd"), fake_elf, port="rfc2217://lab-pi:4000").url == "rfc2217://lab-pi:4000"


def _gone_or_zombie(pid: int) -> bool:
    """`pid` has exited (reaped, or a zombie waiting for a reaper that is not us)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


_STARTS_QEMU_AND_SLEEPS = """
import json, sys, time
from tinyc.device.flashers import start
session = start(json.loads(sys.argv[1]), sys.argv[2])
print(session.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
@needs_qemu
def test_qemu_dies_with_a_sigkilled_parent(firmware):
    """SIGKILL leaves the parent no chance to clean up; QEMU (in its own session, so no terminal or
    process-group signal reaches it) must still go, through PR_SET_PDEATHSIG."""
    import signal
    child = subprocess.Popen([sys.executable, "-c", _STARTS_QEMU_AND_SLEEPS, json.dumps(AN386), str(firmware["never"])],
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    qemu = None
    try:
        qemu = int(child.stdout.readline())
        assert not _gone_or_zombie(qemu), "QEMU is not running"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        deadline = time.monotonic() + 5.0
        while not _gone_or_zombie(qemu) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone_or_zombie(qemu), "QEMU outlived its SIGKILLed parent"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if qemu is not None and not _gone_or_zombie(qemu):
            os.kill(qemu, signal.SIGKILL)
        child.stdout.close()
