"""Fuzzing in CI: seeded mutations of models, data files, board files, tuning logs and protocol
frames (tests/mutators.py), each judged by the oracle: a clean one-line refusal (exit 2) or
onnxruntime's outputs; never a traceback, a wrong result, a crash, a hang or injected code.

Seeds are fixed so CI is reproducible; TINYC_FUZZ_SEED=N runs another set. Every failure message
names its seed and the mutation. benchmarks/fuzz_campaign.py runs the same oracle at scale.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests import mutators as M

SEED = int(os.environ.get("TINYC_FUZZ_SEED", "20261201"))
N_PROTO, N_BYTES, N_DATA, N_BOARDS, N_LOG_LINES, N_LOGS_BUILT = 30, 15, 20, 20, 30, 6


def _seed(cls: int, i: int) -> int:
    return SEED * 1000 + cls * 100 + i


def _assert_ok(o: M.Outcome, seed: int, what: str) -> None:
    assert not o.failed, (f"{o.outcome}: {o.signature}\n  {o.detail}\n  mutation: {what}\n  seed {seed} "
                          f"(TINYC_FUZZ_SEED={SEED}; onnxruntime: {o.ort})")


@pytest.fixture(scope="session")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="session")
def models() -> dict:
    all_models = M.seed_models()
    return {k: v for k, v in all_models.items() if k in ("digits", "kws_qdq")}


@pytest.fixture(scope="session")
def run_ctx(fuzz_dir) -> dict:
    return M.digits_run_context(fuzz_dir / "ctx")


@pytest.fixture(scope="session")
def data_ctx(fuzz_dir) -> dict:
    firmware = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None
    ctx = M.data_context(fuzz_dir / "data_ctx", with_firmware=firmware)
    ctx["firmware"] = firmware
    return ctx


# ---- the mutators and the oracle themselves

def test_mutators_are_deterministic():
    raw = M.DIGITS.read_bytes()
    for seed in range(5):
        assert M.mutate_model(raw, seed) == M.mutate_model(raw, seed)
        assert M.mutate_bytes(raw, seed) == M.mutate_bytes(raw, seed)
        assert M.mutate_data({"input": (1, 1, 8, 8)}, seed) == M.mutate_data({"input": (1, 1, 8, 8)}, seed)
        text = (M.REPO / "boards" / "mps2-an386.toml").read_text()
        assert M.mutate_board(text, seed) == M.mutate_board(text, seed)
    rec = {"board": "host", "key": "k", "knobs": {"oc_tile": 4}, "status": "ok", "cycles": 1.0}
    assert all(M.mutate_log_line(rec, s) == M.mutate_log_line(rec, s) for s in range(20))
    # distinct seeds give distinct mutants (most of the time)
    assert len({M.mutate_model(raw, s)[0] for s in range(20)}) >= 15


def test_every_data_board_and_log_mutation_runs():
    for kind in M.DATA_MUTATIONS:
        data, what = M.mutate_data({"input": (1, 1, 8, 8)}, 1, kind)
        assert isinstance(data, bytes) and what == kind
    text = (M.REPO / "boards" / "mps2-an386.toml").read_text()
    for kind in M.BOARD_MUTATIONS:
        assert isinstance(M.mutate_board(text, 1, kind)[0], bytes)
    rec = {"board": "host", "key": "k", "knobs": {"oc_tile": 4}, "status": "ok", "cycles": 1.0}
    for kind in M.LOG_MUTATIONS:
        assert isinstance(M.mutate_log_line(rec, 1, kind)[0], bytes)
    assert M.dump_toml({"a": 1, "t": {"s": "x\"y\n", "l": [1, 2]}}) and \
        M.tomllib.loads(M.dump_toml({"a": 1, "t": {"s": "x\"y\n", "l": [1, 2]}})) == {"a": 1, "t": {"s": "x\"y\n", "l": [1, 2]}}


def test_oracle_classifies(tmp_path):
    ok = M.CliResult(0, "", "")
    assert M.judge_cli(ok, "x") is None
    assert M.judge_cli(M.CliResult(2, "", "tinyc: error: bad model\n"), "x").outcome == "refused"
    assert M.judge_cli(M.CliResult(2, "", "tinyc: error: bad\nmore\n"), "x").outcome == "traceback"
    assert M.judge_cli(M.CliResult(-1, "", "", "ValueError at a.py:1 f", "ValueError: x"), "x").outcome == "traceback"
    assert M.close(np.array([np.nan, 1.0]), np.array([np.nan, 1.0])) == ""
    assert M.close(np.array([np.nan, 1.0]), np.array([0.0, 1.0])).startswith("NaN")
    assert M.close(np.array([np.inf]), np.array([-np.inf])).startswith("Inf")
    assert M.close(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
    assert M.close(np.array([1.0, 2.0]), np.array([1.0, 2.5]), atol=0.5) == ""
    # a hang is killed at its timeout, a crash reported
    import time
    res, status, _ = M.isolated(time.sleep, (30,), 1)
    assert res is None and status == "hang"
    res, status, _ = M.isolated(_die, (), 10)
    assert res is None and status.startswith("crash")


def _die():
    import signal
    os.kill(os.getpid(), signal.SIGSEGV)


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("nm") is None, reason="needs gcc and nm")
def test_injection_detector(tmp_path):
    """The oracle must see a symbol named INJECTED in a built library and the text a constructor prints."""
    src = tmp_path / "lib.c"
    src.write_text('#include <stdio.h>\nint INJECTED;\n__attribute__((constructor)) static void c(void) '
                   '{ puts("INJECTED" "_RAN"); }\n')
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(tmp_path / "libx.so")], check=True)
    assert M.injected_in("", tmp_path).startswith("symbol INJECTED")
    assert M.injected_in("...\nINJECTED_RAN\n", None)
    assert not M.injected_in("tinyc: error: name '*/ int INJECTED; /*' is not valid", None)
    assert all("INJECTED_RAN" not in p and "INJECTED CODE RAN" not in p for p in M.INJECTIONS)

    import ctypes  # and one that prints from its constructor, captured at the fd level
    def load():
        ctypes.CDLL(str(tmp_path / "libx.so"))
        return M.Outcome("ok")
    res, status, output = M.isolated(load, (), 30)
    assert status == "ok" and M.injected_in(output, None)


# ---- protocol frames (cheap: in process)

def test_protocol_frames_fuzz():
    stats = M.fuzz_decoder(_seed(9, 0), 4000)
    assert stats["traceback"] == 0 and stats["wrong"] == 0, stats["failures"][:3]
    assert stats["refused"] and stats["ok-equal"]
    stats = M.fuzz_client(_seed(9, 1), 60)
    assert stats["traceback"] == 0 and stats["wrong"] == 0, stats["failures"][:3]


# ---- models

def _model_cases():
    cases = []
    for i in range(N_PROTO):
        cases.append(("proto", "kws_qdq" if i % 3 == 2 else "digits", _seed(1, i)))
    for i in range(N_BYTES):
        cases.append(("bytes", "kws_qdq" if i % 3 == 2 else "digits", _seed(2, i)))
    return cases


@pytest.mark.slow
@pytest.mark.parametrize("mode,base,seed", _model_cases(), ids=lambda v: str(v))
def test_fuzz_model(mode, base, seed, models, fuzz_dir):
    path, feeds = models[base]
    raw = path.read_bytes()
    data, what = M.mutate_model(raw, seed) if mode == "proto" else M.mutate_bytes(raw, seed)
    work = fuzz_dir / f"model-{seed}"
    try:
        o = M.check_model(data, work, feeds, fuzz_dir / "ort_cache", timeout=180)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _assert_ok(o, seed, f"{base} {what}")


# ---- data files

@pytest.mark.slow
@pytest.mark.parametrize("i", range(N_DATA))
def test_fuzz_data_file(i, data_ctx, fuzz_dir):
    seed = _seed(3, i)
    kind = M.DATA_MUTATIONS[(SEED + i) % len(M.DATA_MUTATIONS)]
    data, what = M.mutate_data({"input": (1, 1, 8, 8)}, seed, kind)
    commands = ["run", "quantize"] + (["validate", "profile"] if data_ctx["firmware"] else [])
    for cmd in commands:
        work = fuzz_dir / f"data-{seed}-{cmd}"
        try:
            o = M.check_data(cmd, data, work, data_ctx, timeout=120)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _assert_ok(o, seed, f"{cmd} {what}")


# ---- board files

@pytest.mark.slow
@pytest.mark.parametrize("i", range(N_BOARDS))
def test_fuzz_board_file(i, run_ctx, fuzz_dir):
    seed = _seed(4, i)
    texts = M.board_texts()
    base = sorted(texts)[i % len(texts)]
    data, what = M.mutate_board(texts[base], seed, M.BOARD_MUTATIONS[(SEED + i) % len(M.BOARD_MUTATIONS)])
    work = fuzz_dir / f"board-{seed}"
    try:
        o = M.check_board(data, work, run_ctx, timeout=240, base_text=texts[base])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _assert_ok(o, seed, f"{base}: {what}")


# ---- tuning logs

@pytest.fixture(scope="session")
def log_records():
    return M.digits_log_records()


@pytest.mark.parametrize("i", range(N_LOG_LINES))
def test_fuzz_log_line(i, log_records, run_ctx, fuzz_dir):
    """Each corrupted line among valid ones: `compile --tuning-log` refuses cleanly or compiles."""
    seed = _seed(5, i)
    kind = M.LOG_MUTATIONS[(SEED + i) % len(M.LOG_MUTATIONS)]
    bad, what = M.mutate_log_line(log_records[i % len(log_records)], seed, kind)
    lines = [M.json.dumps(r).encode() for r in log_records]
    lines.insert(i % (len(lines) + 1), bad)
    work = fuzz_dir / f"log-{seed}"
    try:
        o = M.check_log(b"\n".join(lines) + b"\n", work, dict(run_ctx, build=False), timeout=120)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _assert_ok(o, seed, what)


@pytest.mark.slow
@pytest.mark.parametrize("i", range(N_LOGS_BUILT))
def test_fuzz_log_built(i, log_records, run_ctx, fuzz_dir):
    """Whole corrupted logs: the tuned model builds, runs and matches onnxruntime."""
    seed = _seed(6, i)
    data, what = M.make_log(seed, log_records)
    work = fuzz_dir / f"logb-{seed}"
    try:
        o = M.check_log(data, work, run_ctx, timeout=180)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _assert_ok(o, seed, what)
