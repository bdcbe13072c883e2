"""`--format zephyr | esp-idf | arduino | platformio | stm32cube`: each package is checked the way
its build system would use it. The test reads the package's OWN build file (the CMakeLists run
through CMake with the Zephyr / ESP-IDF functions stubbed to record their arguments, library.json's
srcFilter/includeDir, library.properties + src/, the README's settings),
compiles exactly those sources with the board's cross compiler and flags (-std=c99 -Wall -Wextra
-Werror) and links them with a small main into an ELF (-Wl,--no-undefined): a build file that
omitted a source, an include folder or a flag fails here. Where a format's own tool installs from
PyPI or Debian it checks the package too: `pio pkg pack` (library.json), `compote manifest lint`
(idf_component.yml) and Debian's arduino-builder (a real Arduino build of a sketch using the
library). Zephyr has no installable module.yml validator: its fields are checked here."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from util import REPO

from tinyc.targets.boards import load_board

DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"
FORMATS = ("zephyr", "esp-idf", "arduino", "platformio", "stm32cube")
BOARD = "mps2-an386"
PREFIX = "digits_cnn"
CC = "arm-none-eabi-gcc"
HAVE_ARM = all(shutil.which(t) for t in (CC, "arm-none-eabi-nm", "arm-none-eabi-ar"))
needs_arm = pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc (apt-get install gcc-arm-none-eabi)")
WFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror"]
LINK = ["-specs=nano.specs", "-specs=nosys.specs", "-Wl,--gc-sections", "-Wl,--no-undefined"]
HEAP = {"malloc", "free", "calloc", "realloc", "_malloc_r", "_free_r"}


def _tool(name: str, install: str) -> str:
    """The validator's path; outside CI a missing one skips (CI installs it: .ci/install.sh).

    The validators are pip packages, so their scripts sit beside the interpreter running the
    tests (the virtual environment's bin/), which is not on PATH when the suite is started as
    `.venv/bin/python -m pytest` without activating the environment (as .ci/test.sh does).
    """
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed in CI ({install}: .ci/install.sh must provide it)")
        pytest.skip(f"{name} not installed ({install})")
    return path


@pytest.fixture(scope="module")
def gen():
    from tinyc.api import prepare
    from tinyc.codegen import generate

    graph, _ = prepare(str(DIGITS), quantize="none", progress=False)
    return generate(graph, prefix=PREFIX, target="mcu+dsp")


def _write(gen, fmt, out, board=BOARD):
    from tinyc.targets.packages import write_package

    write_package(fmt, out, gen.files, gen.manifest, load_board(board))
    return out


def _board_flags(board=BOARD):
    return shlex.split(load_board(board)["toolchain"]["cflags"])


def _cmake_calls(folder: Path, commands: dict[str, str], defines: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Run the folder's CMakeLists.txt through real CMake (script mode) with each build-system
    command in `commands` (name -> its keyword list for cmake_parse_arguments, "" for plain
    arguments) replaced by a stub that records its arguments: what the build system would receive,
    variables and if() included. Returns "command" or "command.KEYWORD" -> the arguments."""
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake")
    lines = [f'set(CMAKE_CURRENT_SOURCE_DIR "{folder}")', 'set(COMPONENT_LIB "__idf_component")']
    lines += [f'set({k} "{v}")' for k, v in (defines or {}).items()]
    for name, keywords in commands.items():
        if keywords:
            lines.append(f'function({name})\n  cmake_parse_arguments(A "" "" "{keywords}" ${{ARGN}})')
            lines += [f'  message("TINYC {name}.{kw}=${{A_{kw}}}")' for kw in keywords.split(";")]
            lines.append("endfunction()")
        else:
            lines.append(f'function({name})\n  message("TINYC {name}=${{ARGN}}")\nendfunction()')
    lines.append(f'include("{folder}/CMakeLists.txt")')
    script = folder.parent / f"{folder.name}-probe.cmake"
    script.write_text("\n".join(lines) + "\n")
    proc = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.findall(r"^TINYC (\S+?)=(.*)$", proc.stderr, re.M)
    return {key: [v for v in value.split(";") if v] for key, value in found}


def _compile_and_link(tmp, sources, includes, flags, extra_objects=(), libs=()):
    """Compile `sources` with the board's flags + `flags`, link them with a main calling the model,
    and return the ELF's symbols (undefined symbols fail the link)."""
    objs = []
    build = tmp / "objs"
    build.mkdir(exist_ok=True)
    for i, src in enumerate(sources):
        obj = build / f"{i}_{Path(src).stem}.o"
        cmd = [CC, *_board_flags(), *WFLAGS, *flags, *(f"-I{d}" for d in includes), "-c", str(src), "-o", str(obj)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
        objs.append(str(obj))
    main = tmp / "main.c"
    main.write_text(
        f'#include "{PREFIX}.h"\n'
        "static float in[64];\nstatic float out[10];\n"
        f"int main(void) {{ return {PREFIX}_run(in, out); }}\n"
    )
    elf = tmp / "fw.elf"
    cmd = [CC, *_board_flags(), *WFLAGS, *(f"-I{d}" for d in includes), str(main), *objs, *extra_objects,
           *LINK, *libs, "-lm", "-o", str(elf)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    nm = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    symbols = {line.split()[-1] for line in nm.splitlines() if line.strip()}
    assert f"{PREFIX}_run" in symbols and not symbols & HEAP
    return symbols


def _all_c(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*.c")}


def test_formats_are_cli_choices():
    from tinyc.cli import build_parser
    from tinyc.targets.registry import FORMATS as REGISTERED, get_target

    assert set(FORMATS) <= set(REGISTERED)
    for fmt in FORMATS:
        args = build_parser().parse_args(["compile", str(DIGITS), "-o", "out", "--board", BOARD, "--format", fmt])
        assert args.format == fmt
        target = get_target(board=BOARD, format=fmt)
        assert target.report_fields() == {"board": BOARD, "format": fmt}
    from tinyc.errors import UsageError
    with pytest.raises(UsageError, match="--format zephyr needs --board"):
        get_target(format="zephyr")


@needs_arm
def test_zephyr_module(gen, tmp_path):
    out = _write(gen, "zephyr", tmp_path / "pkg")
    module = yaml.safe_load((out / "zephyr" / "module.yml").read_text())
    # the fields Zephyr's scripts/zephyr_module.py reads (no installable schema validator exists)
    assert set(module) == {"name", "build"} and re.fullmatch(r"[A-Za-z0-9_-]+", module["name"])
    cmake_dir = out / module["build"]["cmake"]
    kconfig = out / module["build"]["kconfig"]
    assert (cmake_dir / "CMakeLists.txt").is_file() and kconfig.is_file()
    cmake = (cmake_dir / "CMakeLists.txt").read_text()
    symbol = re.search(r"^config (\w+)$", kconfig.read_text(), re.M).group(1)
    assert re.search(r"^\s+bool \"", kconfig.read_text(), re.M) and symbol != PREFIX.upper()
    stubs = {c: "" for c in ("zephyr_library_named", "zephyr_library_sources", "zephyr_include_directories",
                             "zephyr_library_compile_options")}
    assert _cmake_calls(cmake_dir, stubs) == {}  # without CONFIG_<symbol>=y nothing is built
    calls = _cmake_calls(cmake_dir, stubs, {f"CONFIG_{symbol}": "y"})
    assert len(calls["zephyr_library_named"]) == 1
    sources, includes = calls["zephyr_library_sources"], calls["zephyr_include_directories"]
    flags = calls["zephyr_library_compile_options"]
    assert flags == ["-O3", "-fno-math-errno"]  # the board's code flags; Zephyr's board owns -mcpu
    assert {Path(s) for s in sources} == _all_c(out)
    _compile_and_link(tmp_path, sources, includes, flags)


@needs_arm
def test_esp_idf_component(gen, tmp_path):
    out = _write(gen, "esp-idf", tmp_path / "pkg")
    manifest = yaml.safe_load((out / "idf_component.yml").read_text())
    assert manifest["version"] and "digits_cnn" in manifest["description"]
    calls = _cmake_calls(out, {"idf_component_register": "SRCS;INCLUDE_DIRS;REQUIRES;PRIV_REQUIRES",
                               "target_compile_options": ""})
    # ESP-IDF resolves SRCS and INCLUDE_DIRS against the component folder
    sources = [str(out / w) for w in calls["idf_component_register.SRCS"]]
    includes = [str(out / w) for w in calls["idf_component_register.INCLUDE_DIRS"]]
    options = calls["target_compile_options"]
    assert options[:2] == ["__idf_component", "PRIVATE"]
    assert {Path(s) for s in sources} == _all_c(out)
    _compile_and_link(tmp_path, sources, includes, options[2:])


def _properties(path: Path) -> dict[str, str]:
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines)


@needs_arm
def test_arduino_library_sources_and_archive(gen, tmp_path):
    out = _write(gen, "arduino", tmp_path / "pkg")
    props = _properties(out / "library.properties")
    for field in ("name", "version", "author", "maintainer", "sentence", "paragraph", "category", "url",
                  "architectures", "includes", "precompiled"):
        assert field in props, field
    assert props["name"] == PREFIX and props["precompiled"] == "full"  # sources are the fallback
    assert re.fullmatch(r"\d+\.\d+\.\d+", props["version"])
    assert all((out / "src" / h).is_file() for h in props["includes"].split(","))
    # An Arduino build compiles every source under src/ recursively, with only src/ included ...
    sources = sorted(_all_c(out / "src"))
    (tmp_path / "from_src").mkdir()
    _compile_and_link(tmp_path / "from_src", sources, [out / "src"], [])
    # ... or, for this board's build.mcu and float flags, links src/{mcu}/{fpu}-{float-abi}/lib<name>.a
    flags = _board_flags()
    mcu = next(f.split("=")[1] for f in flags if f.startswith("-mcpu="))
    fpu = next(f.split("=")[1] for f in flags if f.startswith("-mfpu="))
    abi = next(f.split("=")[1] for f in flags if f.startswith("-mfloat-abi="))
    folder = out / "src" / mcu / f"{fpu}-{abi}"
    archives = sorted(p.name for p in (out / "src").rglob("*.a"))
    assert archives == [f"lib{PREFIX}.a"] and (folder / f"lib{PREFIX}.a").is_file()
    (tmp_path / "from_archive").mkdir()
    # the builder adds -L<folder>, the ldflags, then -l for each lib*.a there
    ldflags = shlex.split(props["ldflags"])
    assert ldflags.index(f"-l{PREFIX}") < ldflags.index("-lm")  # libm after the archive that needs it
    symbols = _compile_and_link(tmp_path / "from_archive", [], [out / "src"], [],
                                libs=[f"-L{folder}", *ldflags, f"-l{PREFIX}"])
    assert f"{PREFIX}_run" in symbols
    attrs = subprocess.run(["arm-none-eabi-readelf", "-A", str(folder / f"lib{PREFIX}.a")],
                           capture_output=True, text=True).stdout
    assert "Tag_ABI_VFP_args: VFP registers" in attrs  # built with the board's hard-float ABI
    # the same model written elsewhere gives the same archive (a recompile keeps its mtime)
    again = _write(gen, "arduino", tmp_path / "elsewhere" / "pkg")
    assert (again / folder.relative_to(out) / f"lib{PREFIX}.a").read_bytes() == (folder / f"lib{PREFIX}.a").read_bytes()


@pytest.mark.parametrize("board, folder", [("mps2-an385", "cortex-m3"), ("rpi-pico", "cortex-m0plus"),
                                           ("mps2-an500", "cortex-m7/fpv5-d16-hard"),
                                           ("mps3-an547", "cortex-m55/hard")])
def test_arduino_archive_folder_follows_the_float_flags(board, folder):
    """Soft float without an FPU goes to src/{mcu} (cores that pass no float flags look there);
    a hard-float archive only to its {fpu}-{float-abi} folder, never to a soft build's fallback."""
    from tinyc.targets.packages.archives import archive_folder
    from tinyc.targets.packages.layout import split_board_flags

    assert archive_folder(split_board_flags(load_board(board))[0], board) == folder


def _pio_sources(out: Path, manifest: dict) -> list[Path]:
    """PlatformIO's srcFilter: `+<glob>` adds, `-<glob>` removes, in order, under srcDir."""
    src_dir = out / manifest["build"]["srcDir"]
    chosen: set[Path] = set()
    for item in manifest["build"]["srcFilter"]:
        sign, pattern = item[0], item[2:-1]
        matched = {p for p in src_dir.glob(pattern) if p.is_file()}
        chosen = chosen | matched if sign == "+" else chosen - matched
    return sorted(p for p in chosen if p.suffix == ".c")


@needs_arm
def test_platformio_library(gen, tmp_path):
    out = _write(gen, "platformio", tmp_path / "pkg")
    manifest = json.loads((out / "library.json").read_text())
    assert manifest["name"] == PREFIX and manifest["headers"] == [f"{PREFIX}.h"]
    assert (out / manifest["build"]["includeDir"] / manifest["headers"][0]).is_file()
    sources = _pio_sources(out, manifest)
    assert set(sources) == _all_c(out)
    # PlatformIO compiles a library with its includeDir and srcDir on the include path
    includes = [out / manifest["build"]["includeDir"], out / manifest["build"]["srcDir"]]
    _compile_and_link(tmp_path, sources, includes, manifest["build"]["flags"])


@needs_arm
def test_stm32cube_folder(gen, tmp_path):
    out = _write(gen, "stm32cube", tmp_path / "pkg")
    readme = (out / "README.md").read_text()
    settings = dict(re.findall(r"^(include_dirs|sources|cflags): (.*)$", readme, re.M))
    assert shlex.split(settings["cflags"]) == _board_flags()
    assert "`../tinyc/Inc`" in readme  # the include path the README tells the project to add
    # STM32CubeIDE compiles every .c of a source folder: the README's list must be all of them
    sources = [out / s for s in settings["sources"].split()]
    assert set(sources) == _all_c(out / "tinyc")
    _compile_and_link(tmp_path, sources, [out / d for d in settings["include_dirs"].split()], [])


def test_model_files_are_carried_unchanged(gen, tmp_path):
    """Every format holds the generated files byte for byte and the runtime core, no harness or port."""
    from tinyc.resources import runtime_dir
    from tinyc.targets.library import RUNTIME_FILES

    for fmt in FORMATS:
        if fmt == "arduino" and not HAVE_ARM:
            continue
        out = _write(gen, fmt, tmp_path / fmt)
        by_name = {p.name: p for p in out.rglob("*") if p.is_file()}
        for name, text in gen.files.items():
            assert by_name[name].read_text() == text, (fmt, name)
        for rel in RUNTIME_FILES:
            assert by_name[Path(rel).name].read_bytes() == (runtime_dir() / rel).read_bytes()
        assert not {"tinyc_harness.h", "tinyc_port.h", "startup.c", "harness_main.c"} & set(by_name), fmt
        manifest = json.loads((out / "tinyc.json").read_text())
        assert manifest["format"] == fmt and manifest["board"] == BOARD


@needs_arm
def test_compile_build_and_run_through_the_api_and_cli(tmp_path, capsys):
    import tinyc
    from tinyc.cli import main
    from tinyc.errors import UsageError

    res = tinyc.compile(str(DIGITS), tmp_path / "z", board=BOARD, format="zephyr", build=True)
    assert (res.output_dir / "zephyr" / "module.yml").is_file()
    built = tinyc.build_project(res.output_dir)
    assert len(built["objects"]) == 3 and Path(built["library"]).name == f"lib{PREFIX}.a"
    with pytest.raises(UsageError, match="zephyr package"):
        tinyc.run(res.output_dir, {"input": [[0.0] * 64]})
    out = tmp_path / "a"
    assert main(["compile", str(DIGITS), "-o", str(out), "--board", BOARD, "--format", "arduino"]) == 0
    assert main(["build", str(out)]) == 0
    assert f"built {out / 'build' / f'lib{PREFIX}.a'}" in capsys.readouterr().out
    assert (out / "src" / "cortex-m4" / "fpv4-sp-d16-hard" / f"lib{PREFIX}.a").is_file()


@needs_arm
def test_models_compiled_together_share_one_package(tmp_path):
    """compile_models into a package: every model's sources and the shared arena are in the build
    file, and both models link into one ELF."""
    from tinyc.api import compile_models

    out = tmp_path / "pkg"
    compile_models([str(DIGITS), str(DIGITS)], out, names=["m_a", "m_b"], shared_arena=True, board=BOARD,
                   format="platformio")
    manifest = json.loads((out / "library.json").read_text())
    assert manifest["headers"] == ["m_a.h", "m_b.h"]
    sources = _pio_sources(out, manifest)
    assert {p.name for p in sources} == {"m_a.c", "m_a_weights.c", "m_b.c", "m_b_weights.c",
                                         "tinyc_shared_arena.c", "tinyc_rt.c"} and set(sources) == _all_c(out)
    objs = tmp_path / "objs"
    objs.mkdir()
    flags = [*_board_flags(), *WFLAGS, f"-I{out / 'include'}", f"-I{out / 'src'}", *manifest["build"]["flags"]]
    for src in sources:
        subprocess.run([CC, *flags, "-c", str(src), "-o", str(objs / f"{src.stem}.o")], check=True)
    (tmp_path / "main.c").write_text(
        '#include "m_a.h"\n#include "m_b.h"\nstatic float x[64], y[10];\n'
        "int main(void) { return m_a_run(x, y) | m_b_run(x, y); }\n")
    subprocess.run([CC, *flags, str(tmp_path / "main.c"), *map(str, objs.glob("*.o")), *LINK, "-lm",
                    "-o", str(tmp_path / "fw.elf")], check=True)


@pytest.mark.slow
def test_platformio_validates_library_json(gen, tmp_path):
    pio = _tool("pio", "pip install platformio")
    out = _write(gen, "platformio", tmp_path / "pkg")
    env = dict(os.environ, PLATFORMIO_CORE_DIR=str(tmp_path / "pio-core"),
               PLATFORMIO_SETTING_ENABLE_TELEMETRY="No")

    def pack(folder):
        return subprocess.run([pio, "pkg", "pack", "-o", str(tmp_path / "lib.tar.gz"), str(folder)],
                              capture_output=True, text=True, env=env, timeout=120)

    proc = pack(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the check is real: a manifest PlatformIO's schema rejects fails the same command
    bad = json.loads((out / "library.json").read_text())
    bad["version"] = "one"
    (out / "library.json").write_text(json.dumps(bad))
    proc = pack(out)
    assert proc.returncode != 0 and "version" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_idf_component_manager_lints_the_manifest(gen, tmp_path):
    compote = _tool("compote", "pip install idf-component-manager")
    out = _write(gen, "esp-idf", tmp_path / "pkg")
    env = dict(os.environ, IDF_TOOLS_PATH=str(tmp_path / "idf-tools"))
    proc = subprocess.run([compote, "-W", "manifest", "lint", str(out / "idf_component.yml")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (out / "idf_component.yml").write_text('version: "not a version"\n')
    proc = subprocess.run([compote, "manifest", "lint", str(out / "idf_component.yml")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0


#: A minimal Arduino platform (boards.txt/platform.txt, a core with main) around the cross compiler:
#: enough for arduino-builder to find the library by its #include, compile it and link a sketch.
_PLATFORM_TXT = """\
name=tinyc test ARM
version=1.0.0
compiler.path=
compiler.c.flags=-c -std=c99 -Wall -Wextra -Werror -ffunction-sections -fdata-sections
compiler.cpp.flags=-c -std=gnu++11 -fno-exceptions -fno-rtti -Wall -Wextra -Werror -ffunction-sections
compiler.libraries.ldflags=
recipe.c.o.pattern="arm-none-eabi-gcc" {build.cpu_flags} {build.code_flags} {compiler.c.flags} {includes} \
"{source_file}" -o "{object_file}"
recipe.cpp.o.pattern="arm-none-eabi-g++" {build.cpu_flags} {build.code_flags} {compiler.cpp.flags} {includes} \
"{source_file}" -o "{object_file}"
recipe.S.o.pattern="arm-none-eabi-gcc" {build.cpu_flags} -c -x assembler-with-cpp {includes} "{source_file}" \
-o "{object_file}"
recipe.ar.pattern="arm-none-eabi-ar" rcs "{archive_file_path}" "{object_file}"
recipe.c.combine.pattern="arm-none-eabi-gcc" {build.cpu_flags} -specs=nano.specs -specs=nosys.specs \
-Wl,--gc-sections -Wl,--no-undefined -o "{build.path}/{build.project_name}.elf" {object_files} \
{compiler.libraries.ldflags} "{build.path}/{archive_file}" -lm
recipe.size.pattern="arm-none-eabi-size" -A "{build.path}/{build.project_name}.elf"
recipe.size.regex=^(?:\\.text|\\.data|\\.rodata)\\s+([0-9]+).*
tools.ctags.path=/usr/bin
tools.ctags.cmd.path={path}/arduino-ctags
tools.ctags.pattern="{cmd.path}" -u --language-force=c++ -f - --c++-kinds=svpf --fields=KSTtzns \
--line-directives "{source_file}"
preproc.macros.flags=-w -x c++ -E -CC
recipe.preproc.macros="arm-none-eabi-g++" {build.cpu_flags} {preproc.macros.flags} {includes} "{source_file}" \
-o "{preprocessed_file_path}"
"""


@pytest.mark.slow
@needs_arm
def test_arduino_builder_builds_a_sketch_with_the_library(gen, tmp_path):
    """Debian's arduino-builder (1.3.x: older than precompiled-library support, so it compiles the
    library's sources, the `precompiled=full` fallback) builds a sketch that includes the library."""
    builder = _tool("arduino-builder", "apt-get install arduino-builder")
    if shutil.which("arduino-ctags") is None or shutil.which("arm-none-eabi-g++") is None:
        pytest.fail("arduino-builder needs arduino-ctags and arm-none-eabi-g++ (its Debian dependencies)")
    libs = tmp_path / "libraries"
    _write(gen, "arduino", libs / PREFIX)
    arch = tmp_path / "hardware" / "tinyctest" / "arm"
    (arch / "cores" / "tcore").mkdir(parents=True)
    (arch / "platform.txt").write_text(_PLATFORM_TXT.replace("\\\n", ""))
    flags = _board_flags()
    cpu = [f for f in flags if f.startswith(("-mcpu", "-mthumb", "-mfpu", "-mfloat-abi"))]
    (arch / "boards.txt").write_text(
        "m4.name=tinyc test board\nm4.build.mcu=cortex-m4\nm4.build.core=tcore\nm4.build.board=TINYC_TEST\n"
        f"m4.build.cpu_flags={' '.join(cpu)}\nm4.build.code_flags={' '.join(f for f in flags if f not in cpu)}\n")
    (arch / "cores" / "tcore" / "Arduino.h").write_text("#pragma once\nvoid setup(void);\nvoid loop(void);\n")
    (arch / "cores" / "tcore" / "main.cpp").write_text('#include "Arduino.h"\nint main(void) { setup(); for (;;) loop(); }\n')
    sketch = tmp_path / "sketch"
    sketch.mkdir()
    (sketch / "sketch.ino").write_text(
        f"#include <{PREFIX}.h>\nstatic float in[64];\nstatic float out[10];\n"
        f"void setup() {{ {PREFIX}_run(in, out); }}\nvoid loop() {{}}\n")
    build = tmp_path / "build"
    build.mkdir()
    cmd = [builder, "-compile", "-hardware", str(tmp_path / "hardware"), "-tools", str(tmp_path / "hardware"),
           "-libraries", str(libs), "-fqbn", "tinyctest:arm:m4", "-build-path", str(build), "-verbose",
           str(sketch / "sketch.ino")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert f"Using library {PREFIX}" in log
    compiled = {p.name for p in (build / "libraries" / PREFIX).glob("*.o")}
    assert compiled == {f"{p.name}.o" for p in (libs / PREFIX / "src").rglob("*.c")}
    nm = subprocess.run(["arm-none-eabi-nm", str(build / "sketch.ino.elf")], capture_output=True, text=True,
                        check=True).stdout
    assert re.search(rf" T {PREFIX}_run$", nm, re.M)


def test_model_given_names_cannot_break_a_build_file(gen, tmp_path):
    """The model's name is untrusted text: in YAML, JSON, properties, Kconfig and CMake it stays
    inside its string or comment."""
    from tinyc.targets.packages import write_package

    nasty = 'evil"\n}\nname: x\r\n#$(rm -rf) ${CMAKE_COMMAND} */ \\ endif() \u202e\nprecompiled=false'
    manifest = dict(gen.manifest, model=nasty, render=dict(gen.manifest["render"], model=nasty))
    board = load_board(BOARD)
    formats = [f for f in FORMATS if f != "arduino" or HAVE_ARM]
    for fmt in formats:
        write_package(fmt, tmp_path / fmt, gen.files, manifest, board)
    z = yaml.safe_load((tmp_path / "zephyr" / "zephyr" / "module.yml").read_text())
    assert z["name"] == f"tinyc_{PREFIX}" and set(z) == {"name", "build"}
    idf = yaml.safe_load((tmp_path / "esp-idf" / "idf_component.yml").read_text())
    assert set(idf) == {"version", "description"} and "\n" not in idf["description"]
    pio = json.loads((tmp_path / "platformio" / "library.json").read_text())
    assert pio["name"] == PREFIX and "\n" not in pio["description"]
    kconfig = (tmp_path / "zephyr" / "Kconfig").read_text()
    assert all(line.startswith("#") for line in kconfig.splitlines() if "evil" in line)
    assert re.findall(r"^config (\w+)$", kconfig, re.M) == [f"TINYC_{PREFIX.upper()}"]
    calls = _cmake_calls(tmp_path / "zephyr", {"zephyr_library_named": "", "zephyr_library_sources": "",
                                               "zephyr_include_directories": "",
                                               "zephyr_library_compile_options": ""},
                         {f"CONFIG_TINYC_{PREFIX.upper()}": "y"})
    assert calls["zephyr_library_named"] == [f"tinyc_{PREFIX}"] and len(calls["zephyr_library_sources"]) == 3
    calls = _cmake_calls(tmp_path / "esp-idf", {"idf_component_register": "SRCS;INCLUDE_DIRS",
                                                "target_compile_options": ""})
    assert len(calls["idf_component_register.SRCS"]) == 3
    if HAVE_ARM:
        props = _properties(tmp_path / "arduino" / "library.properties")
        assert props["precompiled"] == "full" and props["name"] == PREFIX
        text = (tmp_path / "arduino" / "library.properties").read_text(encoding="utf-8")
        assert len(text.splitlines()) == len(props) == 12  # one field per line, none injected
