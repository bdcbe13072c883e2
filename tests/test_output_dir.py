"""Output folders (tinyc.targets.output_dir): a compile into a folder that holds another target's
project replaces what tinyc wrote there (its manifest lists it) and its stale build/, keeps the
user's own files and the mtimes of unchanged files; a non-empty folder tinyc did not write is
refused; a compile that fails leaves nothing behind (no folder, or the previous project intact)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from onnx import helper

from util import REPO, make_model, rng

import tinyc.api as api
from tinyc.errors import BuildError, UsageError

HAVE_ARM = all(shutil.which(t) for t in ("arm-none-eabi-gcc", "cmake"))
HAVE_CC = all(shutil.which(t) for t in ("cc", "cmake"))


def _model():
    w = rng(4).normal(size=(4, 8)).astype(np.float32)
    return make_model([helper.make_node("Gemm", ["x", "w"], ["g"], transB=1), helper.make_node("Tanh", ["g"], ["y"])],
                      [("x", [1, 8])], [("y", [1, 4])], {"w": w}, name="od")


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def _tiny_board(tmp_path):
    """mps2-an386 with 64 bytes of flash: the fit check refuses every model, after codegen."""
    text = (REPO / "boards" / "mps2-an386.toml").read_text()
    text = text.replace('name = "mps2-an386"', 'name = "tiny-flash"').replace("flash_size = 0x400000",
                                                                           "flash_size = 0x40")
    (tmp_path / "boards").mkdir()
    (tmp_path / "boards" / "tiny-flash.toml").write_text(text)
    return tmp_path / "boards"


@pytest.mark.slow
@pytest.mark.skipif(not (HAVE_ARM and HAVE_CC), reason="needs arm-none-eabi-gcc, cc and cmake")
def test_reusing_a_folder_for_another_target_builds(tmp_path):
    """The friction: a firmware project, built, then a host compile into the same folder — its
    build used to configure with the stale cross-compiler cache (arm-none-eabi-gcc -march=native)."""
    out = tmp_path / "p"
    api.compile(_model(), out, board="mps2-an386", build=True)
    assert (out / "build" / "od.elf").is_file() and (out / "link.ld").is_file()
    (out / "notes.txt").write_text("mine")
    api.compile(_model(), out, build=True)
    x = np.ones((1, 8), np.float32)
    assert api.run(out, {"x": x})["y"].shape == (1, 4)
    for stale in ("link.ld", "toolchain.cmake", "board.json", "runtime/port", "build/od.elf"):
        assert not (out / stale).exists(), stale
    assert (out / "notes.txt").read_text() == "mine"  # not tinyc's: untouched
    listed = json.loads((out / "tinyc.json").read_text())["files"]
    assert "od.c" in listed and "notes.txt" not in listed and not any(f.startswith("build/") for f in listed)
    # and back to the board
    api.compile(_model(), out, board="mps2-an386", build=True)
    assert (out / "build" / "od.elf").is_file() and not (out / "build" / "libod.so").exists()


@pytest.mark.skipif(not HAVE_CC, reason="needs cc and cmake")
def test_recompiling_keeps_unchanged_files_and_the_build(tmp_path):
    out = tmp_path / "p"
    api.compile(_model(), out, build=True)
    before = _snapshot(out)
    api.compile(_model(), out)
    after = _snapshot(out)
    assert set(before) == set(after)
    # same bytes, same mtimes: the incremental builds (report.* only lose what `build` added to them)
    changed = sorted(k for k in before if before[k] != after[k] and not k.startswith("report."))
    assert changed == [], changed
    assert any(k.startswith("build/") for k in after) and after["od.c"] == before["od.c"]
    assert not list(tmp_path.glob(".p.tinyc-staging-*"))


def test_a_foreign_folder_is_refused_untouched(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "main.c").write_text("int main(void) { return 0; }\n")
    with pytest.raises(UsageError, match="not empty and holds no tinyc project"):
        api.compile(_model(), out)
    assert [p.name for p in out.iterdir()] == ["main.c"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    empty = tmp_path / "empty"
    empty.mkdir()
    api.compile(_model(), empty)  # an empty folder is fine
    assert (empty / "tinyc.json").is_file()


def test_a_failed_compile_leaves_nothing_behind(tmp_path):
    boards = _tiny_board(tmp_path)
    out = tmp_path / "new" / "p"
    with pytest.raises(BuildError, match="does not fit"):
        api.compile(_model(), out, board="tiny-flash", board_dir=boards)
    assert not (tmp_path / "new").exists()  # not even the parent it had to create
    # an existing project stays exactly as it was
    keep = tmp_path / "keep"
    api.compile(_model(), keep)
    before = _snapshot(keep)
    with pytest.raises(BuildError, match="does not fit"):
        api.compile(_model(), keep, board="tiny-flash", board_dir=boards)
    assert _snapshot(keep) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["boards", "keep"]


def test_several_models_refused_in_a_firmware_project(tmp_path):
    with pytest.raises(UsageError, match="--format library"):
        api.compile_models([_model(), _model()], tmp_path / "fw", board="mps2-an386")
    assert not (tmp_path / "fw").exists()
