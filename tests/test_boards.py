"""Board files, the Cortex-M port and firmware projects: built with the real cross compiler, run in
QEMU on the emulated boards (UART output, semihosting exit code, deterministic tick counts),
measured (flash, RAM, stack) and checked against the board's memory."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from tinyc.errors import BuildError, UsageError
from tinyc.targets import boards
from tinyc.targets.board import (build_board_project, check_fit, model_hash, stack_usage,
                                 write_board_project)
from util import REPO, make_model

EMULATED = ["mps2-an385", "mps2-an386", "mps2-an500", "mps3-an547"]
REAL = ["nrf52840dk", "nucleo-f746zg", "nucleo-l4r5zi", "rpi-pico"]
HAS_ARM = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("cmake") is not None
HAS_QEMU = shutil.which("qemu-system-arm") is not None
needs_arm = pytest.mark.skipif(not HAS_ARM, reason="arm-none-eabi-gcc/cmake not installed")
needs_qemu = pytest.mark.skipif(not (HAS_ARM and HAS_QEMU), reason="qemu-system-arm not installed")

SPIN = 100000  # iterations of a two-instruction loop timed in the firmware

# The test firmware: runs the model once on a fixed input, prints the result's float bits, the
# ticks of a known loop, float/double arithmetic and a vectorisable float loop, then exits.
TEST_MAIN = r"""
#include <stdint.h>
#include "tinyc_port.h"
#include "tiny.h"

static float x[8];
static float y[4];
static float va[64];
static float vb[64];

static void put(const char *s)
{
    uint32_t n = 0;
    while (s[n]) {
        ++n;
    }
    tinyc_port_write((const uint8_t *)s, n);
}

static void putu(uint64_t v)
{
    char buf[21];
    int i = 20;
    buf[i] = '\0';
    do {
        buf[--i] = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v);
    put(buf + i);
}

static void puthex(uint32_t v)
{
    static const char d[] = "0123456789abcdef";
    char buf[10];
    int i;
    buf[0] = ' ';
    for (i = 0; i < 8; ++i) {
        buf[1 + i] = d[(v >> (28 - 4 * i)) & 0xFu];
    }
    buf[9] = '\0';
    put(buf);
}

static uint32_t fbits(float f)
{
    union { float f; uint32_t u; } c;
    c.f = f;
    return c.u;
}

/* gcc assembles Thumb-1 inline asm (Cortex-M0+) in divided syntax, Thumb-2 in unified */
#if defined(__thumb2__)
#define SPIN_SUB "subs %0, %0, #1"
#else
#define SPIN_SUB "sub %0, #1"
#endif

static void spin(uint32_t n)
{
    __asm__ volatile("1: " SPIN_SUB "\n\tbne 1b" : "+r"(n));
}

static void __attribute__((noinline)) axpy(float *TINYC_VR y_, const float *TINYC_VR x_, int n)
{
    int i;
    for (i = 0; i < n; ++i) {
        y_[i] += 0.5f * x_[i];
    }
}

int main(void)
{
    volatile float f = 1.0f;
    volatile double d = 1.0;
    union { double d; uint32_t u[2]; } db;
    uint64_t t0, t1;
    float sum = 0.0f;
    int rc, i;
    tinyc_port_init();
    put("board ");
    put(tinyc_port_board_name());
    for (i = 0; i < 8; ++i) {
        x[i] = (float)(i - 3) * 0.25f;
    }
    rc = tiny_run(x, y);
    put("\nrc ");
    putu((uint64_t)rc);
    put("\ny");
    for (i = 0; i < 4; ++i) {
        puthex(fbits(y[i]));
    }
    t0 = tinyc_port_cycles();
    spin(SPIN_COUNT);
    t1 = tinyc_port_cycles();
    put("\nspin ");
    putu(t1 - t0);
    f = f / 3.0f;
    f = f * f + 0.5f;
    d = d / 3.0;
    d = d * d + 0.5;
    db.d = d;
    put("\nfloat");
    puthex(fbits(f));
    put("\ndouble");
    puthex(db.u[1]);
    puthex(db.u[0]);
    for (i = 0; i < 64; ++i) {
        va[i] = (float)i;
        vb[i] = 1.0f;
    }
    axpy(vb, va, 64);
    for (i = 0; i < 64; ++i) {
        sum += vb[i];
    }
    put("\naxpy");
    puthex(fbits(sum));
    put("\nend\n");
    tinyc_port_exit(rc);
    return rc;
}
""".replace("SPIN_COUNT", f"{SPIN}u").replace("TINYC_VR", "restrict")

# Echoes bytes (case flipped) until '.', then shows that a read with nothing sent times out; also
# overrides one of the port's weak functions.
ECHO_MAIN = r"""
#include <stdint.h>
#include "tinyc_port.h"

const char *tinyc_port_board_name(void)
{
    return "overridden";
}

static void put(const char *s)
{
    uint32_t n = 0;
    while (s[n]) {
        ++n;
    }
    tinyc_port_write((const uint8_t *)s, n);
}

int main(void)
{
    uint64_t t0, t1, dt;
    char num[21];
    int i = 20;
    tinyc_port_init();
    put(tinyc_port_board_name());
    put(" ready\n");
    for (;;) {
        int c = tinyc_port_read_byte(60000u);
        uint8_t b;
        if (c < 0) {
            put("lost\n");
            tinyc_port_exit(3);
        }
        if (c == '.') {
            break;
        }
        b = (uint8_t)(c ^ 0x20);
        tinyc_port_write(&b, 1u);
    }
    t0 = tinyc_port_cycles();
    if (tinyc_port_read_byte(10u) != -1) {
        tinyc_port_exit(4);
    }
    t1 = tinyc_port_cycles();
    dt = t1 - t0;
    num[i] = '\0';
    do {
        num[--i] = (char)('0' + (int)(dt % 10u));
        dt /= 10u;
    } while (dt);
    put("\ntimeout ");
    put(num + i);
    put("\n");
    tinyc_port_exit(0);
    return 0;
}
"""

FAULT_MAIN = r"""
#include <stdint.h>
#include "tinyc_port.h"

int main(void)
{
    tinyc_port_init();
    tinyc_port_write((const uint8_t *)"go\n", 3u);
    __asm__ volatile("udf #7");
    tinyc_port_exit(0);
    return 0;
}
"""

W = np.linspace(-1, 1, 32).reshape(8, 4).astype(np.float32)
B = np.linspace(0, 0.5, 4).astype(np.float32)
X = ((np.arange(8) - 3) * 0.25).astype(np.float32).reshape(1, 8)


@pytest.fixture(scope="module")
def gen():
    """A small float model (Gemm + Relu) compiled to C by tinyc's own pipeline."""
    from tinyc.api import prepare
    from tinyc.codegen import generate
    model = make_model([helper.make_node("Gemm", ["x", "w", "b"], ["g"]), helper.make_node("Relu", ["g"], ["y"])],
                       [("x", [1, 8])], [("y", [1, 4])], {"w": W, "b": B}, name="tiny")
    graph, _ = prepare(model)
    return generate(graph, prefix="tiny")


def _project(tmp: Path, gen, board: dict, main: str | None) -> Path:
    out = tmp / board["name"]
    write_board_project(out, gen.files, gen.manifest, board, main_source=main)
    (out / "report.json").write_text(json.dumps(gen.report))
    return out


def _board_file(tmp: Path, name: str, edit) -> Path:
    text = (REPO / "boards" / f"{name}.toml").read_text()
    path = tmp / "x.toml"
    path.write_text(edit(text))
    return path


def run_qemu(board: dict, elf: Path, send: bytes = b"", timeout: float = 30.0) -> tuple[int, bytes, str]:
    """Run `elf` in QEMU as NOTES.md prescribes (UART on a TCP server socket that holds the guest
    until we connect); returns (exit status, UART bytes, QEMU's own output)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emu = board["emulator"]
    cmd = [emu["qemu"], "-M", emu["machine"], "-nographic", "-nic", "none", "-monitor", "none",
           "-semihosting-config", "enable=on,target=native", "-icount", f"shift={emu['icount_shift']},sleep=off",
           "-serial", f"tcp:127.0.0.1:{port},server=on,wait=on", "-kernel", str(elf)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"QEMU did not open its serial port: {proc.stdout.read().decode()}")
                time.sleep(0.02)
        data = b""
        with conn:
            conn.settimeout(timeout)
            if send:
                conn.sendall(send)
            while True:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
        rc = proc.wait(timeout=timeout)
        return rc, data, proc.stdout.read().decode(errors="replace")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        proc.stdout.close()


def _fields(out: bytes) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in out.decode().splitlines() if line.strip()}


def _f32(hexbits: str) -> float:
    return struct.unpack(">f", bytes.fromhex(hexbits))[0]


# --- board files -------------------------------------------------------------------------------

def test_bundled_boards_load_and_validate():
    names = boards.board_names()
    assert set(EMULATED + REAL + ["host"]) <= set(names)
    for name in names:
        b = boards.load_board(name)
        assert b["name"] == name
    rows = {r["name"]: r for r in boards.list_boards()}
    assert sorted(n for n, r in rows.items() if r["emulated"]) == EMULATED
    assert rows["mps3-an547"]["mve"] and rows["mps3-an547"]["clock_hz"] == 32_000_000
    assert rows["rpi-pico"]["cpu"] == "cortex-m0plus" and rows["rpi-pico"]["fpu"] == "none"
    assert boards.load_board("rpi-pico")["cycle_counter"]["kind"] == "systick"
    assert "boot2" in boards.load_board("rpi-pico")["notes"]
    for name in REAL:
        b = boards.load_board(name)
        assert b["uart"]["driver"] == "user" and not b["emulated"]
        assert b["flasher"]["tool"] in ("st-flash", "openocd", "pyocd", "picotool")
    table = boards.boards_table()
    for name in names:
        assert re.search(rf"^{re.escape(name)}\s", table, flags=re.M), name
    assert "25 MHz" in table and "512 KB" in table and "yes (QEMU)" in table


def test_host_board_keeps_its_short_schema():
    host = boards.load_board("host")
    assert host["kind"] == "host" and host["toolchain"]["cc"]


@pytest.mark.parametrize("line,field", [
    ("ram_size = 0x400000", "[memory] ram_size"),
    ("clock_hz = 25000000", "[cpu] clock_hz"),
    ('machine = "mps2-an386"', "[emulator] machine"),
    ('image = "elf"', "[flasher] image"),
    ('kind = "systick"', "[cycle_counter] kind"),
    ("emulated = true", "emulated"),
])
def test_missing_field_is_named(tmp_path, line, field):
    path = _board_file(tmp_path, "mps2-an386", lambda t: t.replace(line + "\n", ""))
    with pytest.raises(UsageError, match=rf"board file .*x\.toml: missing {re.escape(field)}$"):
        boards.load_board("x", tmp_path)
    assert path.exists()


@pytest.mark.parametrize("old,new,message", [
    ("clock_hz = 25000000", 'clock_hz = "fast"', r"\[cpu\] clock_hz must be an integer, got 'fast'"),
    ("emulated = true", "emulated = 1", r"emulated must be true or false"),
    ("dsp = true", "dsp = 1", r"\[cpu\] dsp must be true or false"),
    ('float_abi = "hard"', 'float_abi = "hardest"', r"\[cpu\] float_abi is 'hardest'; expected one of soft"),
    ("args = []", 'args = "-v"', r"\[flasher\] args must be a list"),
    ("stack_size = 0x4000", "stack_size = 1000", r"multiple of 16"),
    ("stack_size = 0x4000", "stack_size = 0x400000", r"leaves no RAM"),
    ('tool = "qemu"', 'tool = "jlink"', r"\[flasher\] tool is 'jlink'"),
    ('name = "mps2-an386"', 'name = "a b"', r"name 'a b' may only use letters"),
])
def test_wrong_values_are_named(tmp_path, old, new, message):
    _board_file(tmp_path, "mps2-an386", lambda t: t.replace(old, new))
    with pytest.raises(UsageError, match=r"x\.toml: .*" + message):
        boards.load_board("x", tmp_path)


def test_dwt_on_a_core_without_one_is_refused(tmp_path):
    _board_file(tmp_path, "rpi-pico", lambda t: t.replace('kind = "systick"', 'kind = "dwt"'))
    with pytest.raises(UsageError, match="has no DWT cycle counter"):
        boards.load_board("x", tmp_path)


def test_user_board_dir_and_unknown_board(tmp_path):
    _board_file(tmp_path, "mps2-an386", lambda t: t.replace('name = "mps2-an386"', 'name = "x"'))
    assert boards.load_board("x", tmp_path)["cpu"]["core"] == "cortex-m4"
    assert "x" in boards.board_names(tmp_path)
    with pytest.raises(UsageError, match="unknown board 'nope'.*mps2-an386"):
        boards.load_board("nope")


# --- the board schema: every defect of a user-written board file is one line naming file and key --

@pytest.mark.parametrize("name,old,new,message", [
    # the core, its FPU, ABI and extensions
    ("mps2-an386", 'core = "cortex-m4"', 'core = "riscv"', r"\[cpu\] core is 'riscv'; expected one of cortex-m0, "),
    ("mps2-an386", 'core = "cortex-m4"', "core = 4", r"\[cpu\] core must be a string, got 4"),
    ("mps2-an386", 'fpu = "fpv4-sp-d16"', 'fpu = "fpv5-d16"', r"\[cpu\] fpu 'fpv5-d16' does not exist on a cortex-m4; "
                                                            r"expected one of none, fpv4-sp-d16"),
    ("mps2-an386", 'fpu = "fpv4-sp-d16"', 'fpu = "vfp9"', r"\[cpu\] fpu is 'vfp9'; expected one of none, "),
    ("mps2-an385", 'float_abi = "soft"', 'float_abi = "hard"', r"\[cpu\] float_abi 'hard' needs an FPU, but \[cpu\] "
                                                              r"fpu is 'none'"),
    ("mps2-an385", "dsp = false", "dsp = true", r"\[cpu\] dsp = true, but a cortex-m3 \(armv7-m\) has no DSP"),
    ("mps2-an386", "mve = false", "mve = true", r"\[cpu\] mve = true, but a cortex-m4 has no Helium"),
    ("mps2-an386", "clock_hz = 25000000", "clock_hz = 0x10000000000", r"\[cpu\] clock_hz must be in 1\.\.4294967295"),
    # the flags must build what [cpu] says
    ("mps2-an386", "-mcpu=cortex-m4 ", "-mcpu=cortex-m7 ", r"\[toolchain\] cflags say -mcpu=cortex-m7, but \[cpu\] "
                                                         r"core is 'cortex-m4'"),
    ("mps2-an386", "-mcpu=cortex-m4 ", "", r"\[toolchain\] cflags do not select the core: add -mcpu=cortex-m4$"),
    ("mps2-an386", "-mfpu=fpv4-sp-d16", "-mfpu=fpv5-d16",
     r"cflags say -mfpu=fpv5-d16, but \[cpu\] fpu is 'fpv4-sp-d16'"),
    ("mps2-an386", "-mfloat-abi=hard", "-mfloat-abi=softfp", r"cflags say -mfloat-abi=softfp, but \[cpu\] float_abi"),
    ("mps2-an386", "-mfloat-abi=hard", "",
     r"\[cpu\] float_abi is 'hard' but \[toolchain\] cflags lack -mfloat-abi=hard"),
    ("mps2-an386", "-O3 -fno", r'-DX=\"unclosed -fno', r"\[toolchain\] cflags cannot be split into words "
                                                    r"\(No closing quotation"),
    ("mps2-an386", "-O3 -fno", "-DA=1;-DB=2 -fno", r"\[toolchain\] cflags flag '-DA=1;-DB=2' contains ';'"),
    ("mps2-an386", "-O3 -fno", "-DA=$<CONFIG> -fno", r"contains '\$<' \(a CMake generator expression\)"),
    ("mps2-an386", 'prefix = "arm-none-eabi-"', 'prefix = "my gcc/arm-none-eabi-"', r"\[toolchain\] prefix 'my gcc/"),
    # the memory map
    ("mps2-an386", "ram_origin = 0x20000000", "ram_origin = 0x00100000",
     r"\[memory\] flash 0x00000000\.\.0x003fffff and RAM 0x00100000\.\.0x004fffff overlap "
     r"\(0x00100000\.\.0x003fffff\)"),
    ("mps2-an386", "ram_size = 0x400000", "ram_size = 0x10000000000", r"\[memory\] ram_origin 0x20000000 \+ ram_size "
                                                                    r"0x10000000000 ends at 0x10020000000, beyond"),
    ("mps2-an386", "flash_origin = 0x00000000", "flash_origin = 0x100000000", r"\[memory\] flash_origin 0x100000000 "
                                                                            r"is outside the 32-bit address space"),
    ("mps2-an386", "flash_size = 0x400000", "flash_size = 0", r"\[memory\] flash_size must be positive, got 0"),
    ("mps2-an386", "ram_size = 0x400000", "ram_size = -16", r"\[memory\] ram_size must be positive, got -16"),
    ("mps2-an386", "ram_size = 0x400000", "ram_size = 4.5e6",
     r"\[memory\] ram_size must be an integer, got 4500000\.0"),
    ("mps2-an386", "ram_origin = 0x20000000", "ram_origin = 0x20000004", r"\[memory\] ram_origin must be a multiple "
                                                                        r"of 16"),
    ("nucleo-f746zg", "flash_origin = 0x08000000", "flash_origin = 0x08000004",
     r"\[memory\] flash_origin must be a multiple of 128"),
    ("mps2-an386", 'machine = "mps2-an386"', 'machine = "a b"', r"\[emulator\] machine 'a b' is not a QEMU machine"),
    ("mps2-an386", "base = 0x40004000", "base = 0x40004002", r"\[uart\] base must be a word-aligned 32-bit address"),
    ("mps2-an386", "baud = 115200", "baud = 115200000", r"\[uart\] baud 115200000 is too fast for the CMSDK UART"),
    # types and typos
    ("mps2-an386", "args = []", "args = [1]", r"\[flasher\] args must be a list of strings$"),
    ("mps2-an386", "icount_shift = 7", 'icount_shift = "7"', r"\[emulator\] icount_shift must be an integer, got '7'"),
    ("mps2-an386", "stack_size = 0x4000", "stack_size = 0x4000\nstack_sise = 0x4000",
     r"unknown key \[memory\] stack_sise \(known in \[memory\]: flash_origin, "),
    ("mps2-an386", 'kind = "mcu"', 'kind = "mcu"\ncolour = "red"', r"unknown key colour \(known: "),
    ("nrf52840dk", 'target = "nrf52840"', "target = 52840", r"\[flasher\] target must be a string, got 52840"),
])
def test_board_schema_defects_are_one_line_naming_file_and_key(tmp_path, name, old, new, message):
    _board_file(tmp_path, name, lambda t: t.replace(old, new, 1) if old in t else pytest.fail(f"{old!r} not in {name}"))
    with pytest.raises(UsageError) as err:
        boards.load_board("x", tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"board file {tmp_path / 'x.toml'}: "), msg
    assert re.search(message, msg), msg


def test_board_file_that_is_not_utf8_or_has_a_bom(tmp_path):
    text = (REPO / "boards" / "mps2-an386.toml").read_bytes()
    (tmp_path / "x.toml").write_bytes(text.replace(b"Cortex-M4F", b"Cortex-M4\xff", 1))
    with pytest.raises(UsageError, match=r"board file .*x\.toml is not UTF-8 text: byte 0xff on line 3 "
                                         r"\(TOML files must be UTF-8\)$"):
        boards.load_board("x", tmp_path)
    (tmp_path / "x.toml").write_bytes(b"\xef\xbb\xbf" + text.replace(b'name = "mps2-an386"', b'name = "x"'))
    assert boards.load_board("x", tmp_path)["cpu"]["core"] == "cortex-m4"


def test_every_bundled_core_fpu_and_flag_agree():
    for name in boards.board_names():
        b = boards.load_board(name)
        if b["kind"] == "host":
            continue
        core = boards.CORES[b["cpu"]["core"]]
        assert b["cpu"]["fpu"] in core.fpus and (core.dsp or not b["cpu"]["dsp"]) and (core.mve or not b["cpu"]["mve"])
    assert boards.split_flags(r"""-DA=\"x\" '-DB="y z"' -O2""") == ['-DA="x"', '-DB="y z"', "-O2"]
    assert boards.cmake_quote('-DA="x\\y$z"') == r'"-DA=\"x\\y\$z\""'


@pytest.mark.slow
@needs_arm
def test_quoted_cflags_build_through_cmake_and_a_too_small_stack_is_an_error(tmp_path, gen):
    """Flags with quotes, spaces, '#' and '$' reach the compiler as written (the shell's word rules), and a
    stack below the measured worst case is refused with both numbers and what to change."""
    flags = (r"""-mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard -O3 """
             r"""-DGREETING=\"hi\" '-DPHRASE="a b#c$d"' -g0""")
    old = 'cflags = "-mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard -O3 -fno-math-errno"'
    path = _board_file(tmp_path, "mps2-an386", lambda t: t.replace(old, f"cflags = '''{flags}'''")
                       .replace("stack_size = 0x4000", "stack_size = 0x40")
                       .replace('name = "mps2-an386"', 'name = "x"'))
    assert "PHRASE" in path.read_text()
    board = boards.load_board_file(path)
    main = r"""
#include "tiny.h"
typedef char greeting_is_a_string[(sizeof(GREETING) == 3 && sizeof(PHRASE) == 8) ? 1 : -1];
static const char phrase[] = PHRASE;
int main(void) { return (int)phrase[3] + (int)sizeof(greeting_is_a_string); }
"""
    out = _project(tmp_path, gen, board, main)
    with pytest.raises(BuildError) as err:
        build_board_project(out)
    msg = str(err.value)
    m = re.search(r"model 'tiny' needs an estimated (\d+) bytes of stack on board 'x' \(the deepest call chain plus an "
                  r"exception frame\), but \[memory\] stack_size reserves 64 \((\d+) short\): raise \[memory\] "
                  r"stack_size to at least (\d+) \(0x[0-9a-f]+\) in the board file \(\d+ bytes of RAM are still free\)",
                  msg)
    assert m, msg
    need, short, fix = map(int, m.groups())
    assert need - 64 == short and fix >= need and fix % 16 == 0
    flags = (out / "build" / "CMakeFiles" / "tiny.dir" / "flags.make").read_text()
    assert "GREETING" in flags and "PHRASE" in flags


# --- fit checks, stack analysis -----------------------------------------------------------------

def test_fit_check_names_needed_and_available(gen):
    board = boards.load_board("mps2-an386")
    check_fit(gen.report, gen.manifest, board)  # fits
    tiny = json.loads(json.dumps(board))
    tiny["name"] = "tiny-board"
    tiny["memory"].update(flash_size=64, ram_size=192, stack_size=128)
    io = (8 + 4) * 4
    need_ram = gen.report["arena_bytes"] + io + 128
    with pytest.raises(BuildError) as err:
        check_fit(gen.report, gen.manifest, tiny)
    msg = str(err.value)
    assert "does not fit board 'tiny-board'" in msg
    assert f"flash needs {gen.report['weights_bytes']} bytes at least (weights), 64 available" in msg
    assert f"RAM needs {need_ram} bytes at least" in msg and "192 available" in msg


def _ci(path: Path, nodes: dict[str, int | None], edges: list[tuple[str, str]]) -> None:
    lines = ['graph: { title: "f.c"']
    for title, size in nodes.items():
        label = title.rsplit(":", 1)[-1] + "\\nf.c:1:1" + (f"\\n{size} bytes (static)" if size is not None else "")
        lines.append(f'node: {{ title: "{title}" label: "{label}" }}')
    lines += [f'edge: {{ sourcename: "{a}" targetname: "{b}" label: "f.c:2:3" }}' for a, b in edges]
    path.write_text("\n".join(lines) + "\n}\n")


def test_stack_usage_follows_the_deepest_chain(tmp_path):
    _ci(tmp_path / "a.c.ci", {"Reset_Handler": 8, "main": 32, "serve": 40, "f.c:tinyc_port_write": 16,
                              "memcpy": None, "__indirect_call": None},
        [("Reset_Handler", "main"), ("main", "serve"), ("serve", "__indirect_call"),
         ("serve", "tinyc_port_write"), ("tinyc_port_write", "memcpy"), ("main", "memcpy")])
    _ci(tmp_path / "b.c.ci", {"model_run": 100, "kernel": 300, "rec": 24, "SysTick_Handler": 8},
        [("model_run", "kernel"), ("kernel", "rec"), ("rec", "rec")])
    depth, notes = stack_usage(tmp_path, fpu=False)
    # Reset 8 + main 32 + serve 40 + indirect (deepest: model_run 100 + kernel 300 + rec 24)
    # + SysTick 8 + exception frame 32
    assert depth == 8 + 32 + 40 + 424 + 8 + 32
    assert stack_usage(tmp_path, fpu=True)[0] == depth + 72
    text = "\n".join(notes)
    assert "indirect calls (in serve) counted as 424 bytes" in text
    assert "memcpy" in text and "recursion" in text and "rec" in text


def test_stack_usage_without_call_graphs(tmp_path):
    (tmp_path / "a.c.su").write_text("a.c:1:5:main\t48\tstatic\na.c:9:6:kernel\t320\tstatic\n")
    depth, notes = stack_usage(tmp_path)
    assert depth == 320 and "lower bound" in notes[0] and "kernel" in notes[0]


def test_model_hash_depends_on_sources():
    a = model_hash({"m.c": "int a;", "m.h": ""})
    assert len(a) == 16 and int(a, 16) >= 0
    assert a == model_hash({"m.h": "", "m.c": "int a;"})
    assert a != model_hash({"m.c": "int b;", "m.h": ""})


def test_missing_cross_compiler_names_the_package(tmp_path, gen, monkeypatch):
    board = boards.load_board("mps2-an386")
    out = _project(tmp_path, gen, board, TEST_MAIN)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if shutil.which("cmake"):
        (bin_dir / "cmake").symlink_to(shutil.which("cmake"))
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(BuildError, match=r"(arm-none-eabi-gcc not found.*apt-get install gcc-arm-none-eabi"
                                         r" libnewlib-arm-none-eabi|cmake is not installed)"):
        build_board_project(out)


def test_project_files(tmp_path, gen):
    board = boards.load_board("mps3-an547")
    out = _project(tmp_path, gen, board, TEST_MAIN)
    manifest = json.loads((out / "tinyc.json").read_text())
    assert manifest["board"] == "mps3-an547" and manifest["model_hash"] == model_hash(gen.files)
    assert json.loads((out / "board.json").read_text()) == board
    link = (out / "link.ld").read_text()
    assert "FLASH (rx) : ORIGIN = 0x00000000, LENGTH = 0x80000" in link
    assert "RAM (rw)   : ORIGIN = 0x21000000, LENGTH = 0x3fc000" in link
    assert "STACK (rw) : ORIGIN = 0x213fc000, LENGTH = 0x4000" in link
    cmake = (out / "CMakeLists.txt").read_text()
    assert "-mcpu=cortex-m55" in cmake and "TINYC_UART_BASE=0x49303000u" in cmake and "TINYC_HAS_FPU=1" in cmake
    assert "arm-none-eabi-gcc" in (out / "toolchain.cmake").read_text()
    ports = sorted(p.name for p in (out / "runtime" / "port").glob("*.c"))
    assert ports == ["counter_systick.c", "port.c", "semihost.c", "startup.c", "uart_cmsdk.c"]
    # rewritten for a real board: the emulator-only port files go away
    real = boards.load_board("nucleo-f746zg")
    write_board_project(out, gen.files, gen.manifest, real, main_source=TEST_MAIN)
    assert sorted(p.name for p in (out / "runtime" / "port").glob("*.c")) == ["counter_dwt.c", "port.c", "startup.c"]
    with pytest.raises(UsageError, match="not a microcontroller board"):
        write_board_project(out, gen.files, gen.manifest, boards.load_board("host"), main_source=TEST_MAIN)


# --- cross-compiled firmware -------------------------------------------------------------------

def _readelf_attrs(elf: Path) -> str:
    return subprocess.run(["arm-none-eabi-readelf", "-A", str(elf)], capture_output=True, text=True).stdout


@pytest.mark.slow
@needs_qemu
@pytest.mark.parametrize("name", EMULATED)
def test_emulated_board_runs_the_model(tmp_path, gen, name):
    board = boards.load_board(name)
    out = _project(tmp_path, gen, board, TEST_MAIN)
    res = build_board_project(out)
    assert res["warnings"] == []
    assert res["board"] == name
    assert 1000 < res["flash_bytes"] < 64 * 1024
    assert res["ram_bytes"] >= board["memory"]["stack_size"] + gen.report["arena_bytes"]
    assert 0 < res["stack_bytes"] < board["memory"]["stack_size"]
    report = json.loads((out / "report.json").read_text())
    assert {k: report[k] for k in ("board", "flash_bytes", "ram_bytes", "stack_bytes")} == \
        {k: res[k] for k in ("board", "flash_bytes", "ram_bytes", "stack_bytes")}
    assert report["weights_bytes"] == gen.report["weights_bytes"]  # the compile report is kept
    elf = Path(res["elf"])
    assert (elf.parent / "tiny.map").is_file() and (elf.parent / "tiny.bin").is_file()

    rc, uart, log = run_qemu(board, elf)
    assert rc == 0, (uart, log)
    rc2, uart2, _ = run_qemu(board, elf)
    assert (rc2, uart2) == (rc, uart), "tick counts under -icount must repeat exactly"
    f = _fields(uart)
    assert f["board"] == [name] and f["rc"] == ["0"] and "end" in f
    expected = np.maximum(X @ W + B, 0).reshape(-1)
    np.testing.assert_allclose([_f32(v) for v in f["y"]], expected, rtol=1e-6, atol=1e-7)
    # 2 instructions per loop iteration; ticks per instruction = clock_hz * 2^shift / 1e9
    per_instr = board["cpu"]["clock_hz"] * 2 ** board["emulator"]["icount_shift"] / 1e9
    assert abs(int(f["spin"][0]) - 2 * SPIN * per_instr) < 100 * per_instr
    third = np.float32(1.0) / np.float32(3.0)
    assert _f32(f["float"][0]) == third * third + np.float32(0.5)
    assert struct.unpack(">d", bytes.fromhex(f["double"][0] + f["double"][1]))[0] == (1.0 / 3.0) ** 2 + 0.5
    assert _f32(f["axpy"][0]) == 64 + 0.5 * sum(range(64))
    attrs = _readelf_attrs(elf)
    if board["cpu"]["float_abi"] == "hard":
        assert "Tag_ABI_VFP_args: VFP registers" in attrs
    if board["cpu"]["mve"]:
        assert "Tag_MVE_arch" in attrs
        dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True, text=True).stdout
        axpy = re.search(r"<axpy[.\w]*>:\n(.*?)\n\n", dis, flags=re.S)
        assert axpy and re.search(r"\.f32\s+q\d", axpy.group(1)), "the M55 build should run Helium vector code"


@pytest.mark.slow
@needs_qemu
def test_uart_read_timeout_and_weak_override(tmp_path, gen):
    board = boards.load_board("mps2-an385")
    out = _project(tmp_path, gen, board, ECHO_MAIN)
    res = build_board_project(out)
    assert res["warnings"] == []
    rc, uart, log = run_qemu(board, Path(res["elf"]), send=b"abc.")
    assert rc == 0, (uart, log)
    text = uart.decode()
    assert text.startswith("overridden ready\nABC\ntimeout "), text
    ticks = int(text.split("timeout ")[1])
    ms10 = board["cpu"]["clock_hz"] // 100
    assert ms10 <= ticks < 2 * ms10


@pytest.mark.slow
@needs_qemu
def test_fault_is_reported_and_exits(tmp_path, gen):
    board = boards.load_board("mps3-an547")
    out = _project(tmp_path, gen, board, FAULT_MAIN)
    rc, uart, log = run_qemu(board, Path(build_board_project(out)["elf"]))
    assert rc == 70, (uart, log)
    text = uart.decode()
    assert text.startswith("go\n") and "tinyc: fault: exception 0x00000003 pc=0x" in text
    assert "cfsr=0x00010000" in text  # UNDEFINSTR


@pytest.mark.slow
@needs_arm
@pytest.mark.parametrize("name", REAL)
def test_real_board_firmware_compiles(tmp_path, gen, name):
    board = boards.load_board(name)
    out = _project(tmp_path, gen, board, TEST_MAIN)
    res = build_board_project(out)
    assert res["warnings"] == []
    assert res["flash_size"] == board["memory"]["flash_size"] and res["flash_bytes"] > 1000
    elf = Path(res["elf"])
    syms = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True).stdout
    table = re.search(r"^([0-9a-f]{8}) [RT] tinyc_cm_vector_table$", syms, flags=re.M)
    assert table and int(table.group(1), 16) == board["memory"]["flash_origin"]
    for fn in ("tinyc_port_init", "tinyc_port_write", "tinyc_port_cycles", "tinyc_port_exit",
               "tinyc_port_board_name"):
        assert re.search(rf"^[0-9a-f]{{8}} W {fn}$", syms, flags=re.M), fn  # weak: the user overrides
    top = re.search(r"^([0-9a-f]{8}) [A-Za-z] __stack_top__$", syms, flags=re.M)
    assert int(top.group(1), 16) == board["memory"]["ram_origin"] + board["memory"]["ram_size"]
    counter = "SysTick_Handler" if board["cycle_counter"]["kind"] == "systick" else "tinyc_cm_counter_read"
    assert re.search(rf" T {counter}$", syms, flags=re.M)
    assert ("semihost" in syms) is False  # no BKPT on a bare board


@pytest.mark.slow
@needs_arm
def test_harness_main_builds(tmp_path, gen):
    from tinyc.resources import templates_dir
    if not (templates_dir() / "project" / "harness_main.c.j2").is_file():
        pytest.skip("the serial harness template is not there yet")
    board = boards.load_board("mps2-an386")
    out = _project(tmp_path, gen, board, None)
    res = build_board_project(out)
    assert res["warnings"] == [] and res["stack_bytes"] > 0
    assert model_hash(gen.files) in (out / "main.c").read_text()


@pytest.mark.slow
@needs_arm
def test_rebuild_of_unchanged_project_is_skipped(tmp_path, gen):
    board = boards.load_board("mps2-an386")
    out = _project(tmp_path, gen, board, TEST_MAIN)
    first = build_board_project(out)
    mtime = Path(first["elf"]).stat().st_mtime_ns
    write_board_project(out, gen.files, gen.manifest, board, main_source=TEST_MAIN)
    assert build_board_project(out) == first
    assert Path(first["elf"]).stat().st_mtime_ns == mtime
    write_board_project(out, gen.files, gen.manifest, board, main_source=TEST_MAIN + "\n/* changed */\n")
    build_board_project(out)
    assert Path(first["elf"]).stat().st_mtime_ns != mtime
    # the same folder rewritten for another board builds for that board's CPU
    write_board_project(out, gen.files, gen.manifest, boards.load_board("mps2-an385"), main_source=TEST_MAIN)
    res = build_board_project(out)
    assert res["board"] == "mps2-an385" and res["warnings"] == []
    attrs = _readelf_attrs(Path(res["elf"]))
    assert "Tag_CPU_arch: v7\n" in attrs and "VFP registers" not in attrs  # ARMv7-M, soft float


@pytest.mark.slow
@needs_arm
def test_linker_overflow_is_reported_with_numbers(tmp_path, gen):
    board = json.loads(json.dumps(boards.load_board("mps2-an386")))
    board["name"] = "small-flash"
    board["memory"]["flash_size"] = 1024
    out = _project(tmp_path, gen, board, TEST_MAIN)
    with pytest.raises(BuildError) as err:
        build_board_project(out)
    msg = str(err.value)
    m = re.search(r"model 'tiny' does not fit board 'small-flash': flash needs (\d+) bytes \(code \+ weights \+ "
                  r"\.data\), 1024 available \((\d+) over\)", msg)
    assert m, msg
    assert int(m.group(1)) == 1024 + int(m.group(2)) and int(m.group(1)) > 2000
    # RAM: exactly what the pre-check counts (arena + buffers + stack) passes it, but the
    # firmware's other variables do not fit any more
    board["name"] = "small-ram"
    board["memory"]["flash_size"] = 0x400000
    board["memory"]["ram_size"] = 0x4000 + gen.report["arena_bytes"] + 48
    out = _project(tmp_path, gen, board, TEST_MAIN)
    with pytest.raises(BuildError, match=rf"does not fit board 'small-ram': RAM needs \d+ bytes \(\.data \+ "
                                         rf"\.bss \+ stack 16384\), {board['memory']['ram_size']} available"):
        build_board_project(out)


@pytest.mark.slow
@needs_arm
def test_too_big_model_is_refused_before_building(tmp_path, gen):
    board = json.loads(json.dumps(boards.load_board("mps2-an385")))
    board["name"] = "tiny-ram"
    board["memory"].update(ram_size=0xC0, stack_size=0x80)
    out = _project(tmp_path, gen, board, TEST_MAIN)
    with pytest.raises(BuildError, match=r"model 'tiny' does not fit board 'tiny-ram': RAM needs \d+ bytes at least "
                                         r"\(arena \d+ \+ inputs/outputs 48 \+ stack 128\), 192 available"):
        build_board_project(out)
    assert not (out / "build").exists()


@pytest.mark.slow
@needs_arm
@pytest.mark.parametrize("example,cpu,header", [
    ("stm32_hal_port.c", ["-mcpu=cortex-m7", "-mfpu=fpv5-sp-d16", "-mfloat-abi=hard"], "stm32f7xx_hal.h"),
    ("nrf_uarte_port.c", ["-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"], "nrf.h"),
])
def test_port_examples_compile(tmp_path, example, cpu, header):
    stubs = REPO / "tests" / "data" / "vendor_stubs"
    assert (stubs / header).is_file()
    obj = tmp_path / "port.o"
    proc = subprocess.run(["arm-none-eabi-gcc", *cpu, "-mthumb", "-O2", "-std=c99", "-pedantic", "-Wall", "-Wextra",
                           "-Werror", "-c", str(REPO / "runtime_c" / "ports" / "examples" / example),
                           "-I", str(stubs), "-I", str(REPO / "runtime_c" / "include"), "-o", str(obj)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    syms = subprocess.run(["arm-none-eabi-nm", str(obj)], capture_output=True, text=True).stdout
    for fn in ("tinyc_port_init", "tinyc_port_write", "tinyc_port_read_byte", "tinyc_port_cycles",
               "tinyc_port_exit", "tinyc_port_board_name"):
        assert re.search(rf" T {fn}$", syms, flags=re.M), fn  # strong: they replace the weak defaults
