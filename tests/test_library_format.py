"""`--format library`: the folder a firmware drops in, built with the board's cross compiler, linked
into the example firmware (examples/firmware_library) with CMake and with make, and run in QEMU:
the digit and the logits it prints must be tinyc's own host results for the same input."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys

import numpy as np
import pytest

from util import REPO

from tinyc.targets.boards import load_board
from tinyc.targets.library import RUNTIME_FILES, build_library, write_library_project

DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"
EXAMPLE = REPO / "examples" / "firmware_library"
HAVE_ARM = all(shutil.which(t) for t in ("arm-none-eabi-gcc", "arm-none-eabi-nm", "cmake"))
HAVE_QEMU = shutil.which("qemu-system-arm") is not None and shutil.which("make") is not None
needs_arm = pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and cmake")
needs_qemu = pytest.mark.skipif(not (HAVE_ARM and HAVE_QEMU), reason="needs arm-none-eabi-gcc, cmake, make, QEMU")

sys.path.insert(0, str(REPO / "examples" / "digits"))
sys.path.insert(0, str(EXAMPLE))
from data import load_split  # noqa: E402
from make_input import input_header  # noqa: E402


def generate_digits(quantize: str = "none", prefix: str = "digits_cnn"):
    """The model through tinyc's pipeline, as tinyc.compile does it, up to the generated sources."""
    from tinyc.api import prepare
    from tinyc.codegen import generate
    calib = None
    if quantize == "int8":
        x_train = load_split()[0]
        calib = {"input": x_train[:64]}
    graph, _ = prepare(str(DIGITS), quantize=quantize, calib=calib, progress=False)
    return generate(graph, prefix=prefix)


def test_library_folder_layout(tmp_path):
    gen = generate_digits()
    out = tmp_path / "lib"
    board = load_board("mps2-an386")
    write_library_project(out, gen.files, gen.manifest, board)
    names = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert names == {*gen.files, *(f"runtime/{r}" for r in RUNTIME_FILES), "CMakeLists.txt", "digits_cnn.mk",
                     "toolchain-mps2-an386.cmake", "README.md", "tinyc.json"}
    manifest = json.loads((out / "tinyc.json").read_text())
    assert manifest["format"] == "library" and manifest["board"] == "mps2-an386"
    assert manifest["inputs"][0]["name"] == "input" and manifest["outputs"][0]["shape"] == [1, 10]
    cmake = (out / "CMakeLists.txt").read_text()
    assert "add_library(digits_cnn STATIC" in cmake and "add_library(tinyc::digits_cnn ALIAS digits_cnn)" in cmake
    assert board["toolchain"]["cflags"] in cmake
    assert re.search(r"target_include_directories\(digits_cnn PUBLIC", cmake)
    assert re.search(r"target_compile_options\(digits_cnn PRIVATE \$\{DIGITS_CNN_CFLAGS_LIST\}\)", cmake)
    mk = (out / "digits_cnn.mk").read_text()
    for var in ("DIGITS_CNN_SRCS :=", "DIGITS_CNN_INCLUDES :=", "DIGITS_CNN_CFLAGS :=", "DIGITS_CNN_LIB ="):
        assert var in mk
    assert "set(CMAKE_C_COMPILER arm-none-eabi-gcc)" in (out / "toolchain-mps2-an386.cmake").read_text()

    # Writing the same model again touches nothing (the firmware's build stays up to date) ...
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    os.utime(out / "digits_cnn.c", ns=(1, 1))
    mtimes[out / "digits_cnn.c"] = 1
    write_library_project(out, gen.files, gen.manifest, board)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == mtimes
    # ... and another board replaces the toolchain file
    write_library_project(out, gen.files, gen.manifest, load_board("mps3-an547"))
    assert [p.name for p in out.glob("toolchain-*.cmake")] == ["toolchain-mps3-an547.cmake"]
    assert "-mcpu=cortex-m55" in (out / "digits_cnn.mk").read_text()


@pytest.mark.slow
def test_host_board_library(tmp_path):
    """`--board host`: the same folder, built with the system compiler (no toolchain file)."""
    if shutil.which("cmake") is None or shutil.which("nm") is None:
        pytest.skip("needs cmake and nm")
    gen = generate_digits()
    out = tmp_path / "lib"
    write_library_project(out, gen.files, gen.manifest, load_board("host"))
    assert not list(out.glob("toolchain-*.cmake"))
    lib = build_library(out)
    assert lib == out / "build" / "libdigits_cnn.a"
    symbols = subprocess.run(["nm", str(lib)], capture_output=True, text=True, check=True).stdout
    assert re.search(r" T digits_cnn_run$", symbols, re.M)
    assert build_library(out) == lib  # unchanged: no rebuild


@pytest.mark.slow
@needs_arm
def test_archive_is_warning_free_hard_float_and_heap_free(tmp_path):
    gen = generate_digits("int8", prefix="digits_q")
    out = tmp_path / "lib"
    write_library_project(out, gen.files, gen.manifest, load_board("mps2-an386"))
    lib = build_library(out)  # TINYC_WERROR=ON: any warning fails the build
    assert lib.name == "libdigits_q.a"
    symbols = subprocess.run(["arm-none-eabi-nm", str(lib)], capture_output=True, text=True, check=True).stdout
    assert re.search(r" T digits_q_run$", symbols, re.M)
    undefined = set(re.findall(r"^\s+U (\S+)$", symbols, re.M))
    assert not undefined & {"malloc", "free", "calloc", "realloc", "_sbrk", "_malloc_r", "_free_r"}
    attrs = subprocess.run(["arm-none-eabi-readelf", "-A", str(lib)], capture_output=True, text=True).stdout
    assert "Tag_ABI_VFP_args: VFP registers" in attrs  # the board's -mfloat-abi=hard was applied
    assert "Tag_CPU_name: \"7E-M\"" in attrs or "Tag_CPU_arch: v7E-M" in attrs


def _run_in_qemu(elf) -> tuple[int, str]:
    from tinyc.device.flashers import start
    with start(load_board("mps2-an386"), elf) as session:
        port = int(session.url.rsplit(":", 1)[1])
        data = b""
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.settimeout(20)
            while chunk := sock.recv(4096):  # QEMU closes the socket when the firmware exits
                data += chunk
        return session.wait_exit(10), data.decode("ascii", "replace")


def _parse(text: str) -> tuple[int, np.ndarray]:
    digit = re.search(r"^digit: (\d+) \(label \d+\)$", text, re.M)
    logits = re.search(r"^logits:((?: [0-9a-f]{8})+)$", text, re.M)
    assert digit and logits, text
    bits = [int(h, 16) for h in logits.group(1).split()]
    return int(digit.group(1)), np.array(struct.unpack(f"<{len(bits)}f", struct.pack(f"<{len(bits)}I", *bits)))


@pytest.mark.slow
@needs_qemu
@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_example_firmware_with_cmake_and_make_runs_in_qemu(tmp_path, quantize):
    import tinyc
    index = 7
    x_test, y_test = load_split()[2:]
    gen = generate_digits(quantize)
    lib_dir = tmp_path / "lib"
    write_library_project(lib_dir, gen.files, gen.manifest, load_board("mps2-an386"))

    fw = tmp_path / "firmware"
    shutil.copytree(EXAMPLE, fw, ignore=shutil.ignore_patterns("lib", "build", "build-make", "__pycache__"))
    (fw / "src" / "input.h").write_text(input_header(x_test[index], int(y_test[index]), f"test image {index}"))

    def run(cmd):
        proc = subprocess.run(cmd, cwd=fw, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout + proc.stderr

    run(["cmake", "-S", ".", "-B", "build", f"-DTINYC_LIB_DIR={lib_dir}", "-DTINYC_WERROR=ON"])
    log = run(["cmake", "--build", "build"])
    assert "warning" not in log.lower()
    log = run(["make", f"LIB={lib_dir}", f"-j{max(1, os.cpu_count() or 1)}"])
    assert "warning" not in log.lower()
    elfs = [fw / "build" / "firmware.elf", fw / "build-make" / "firmware.elf"]

    calib = {"input": load_split()[0][:64]} if quantize == "int8" else None
    tinyc.compile(str(DIGITS), tmp_path / "host", quantize=quantize, calib=calib)
    expected = tinyc.run(tmp_path / "host", {"input": x_test[index:index + 1]})["logits"].ravel()

    for elf in elfs:
        code, text = _run_in_qemu(elf)
        assert code == 0, text
        digit, logits = _parse(text)
        assert f"(label {int(y_test[index])})" in text
        assert digit == int(np.argmax(expected))
        np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))


@pytest.mark.slow
def test_flags_with_quotes_reach_the_compiler(tmp_path):
    """A board's cflags are shell words: a quoted define with spaces, '#' and '$' builds through the
    host project's CMake, the library's CMake and its make fragment (a bare "{{ cflags }}" broke all
    three)."""
    if not all(shutil.which(t) for t in ("cmake", "make", "cc")):
        pytest.skip("needs cmake, make and cc")
    import tinyc
    flags = '-O1 "-DTINYC_TEST_WORDS=\\"a b#c$d\\""'
    res = tinyc.compile(str(DIGITS), tmp_path / "host", cflags=flags, build=True)
    assert (res.output_dir / "tinyc.json").is_file()
    board = load_board("host")
    board["toolchain"]["cflags"] = flags
    gen = generate_digits()
    out = tmp_path / "lib"
    write_library_project(out, gen.files, gen.manifest, board)
    assert build_library(out).is_file()
    (tmp_path / "Makefile").write_text(f"include {out}/digits_cnn.mk\nall: $(DIGITS_CNN_LIB)\n")
    proc = subprocess.run(["make", "-C", str(tmp_path), "DIGITS_CNN_BUILD=" + str(tmp_path / "mk")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "-DTINYC_TEST_WORDS" in proc.stdout and (tmp_path / "mk" / "libdigits_cnn.a").is_file()
