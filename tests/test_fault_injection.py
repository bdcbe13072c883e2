"""The client on a bad link: the host harness behind a proxy that corrupts, drops, delays,
injects or cuts bytes. Every call must either succeed with the right answer (after retries) or
raise a DeviceError naming the port and the command, within its time bound: never hang."""
from __future__ import annotations

import random
import shutil
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest
from faultproxy import FaultProxy
from test_harness_host import build, mlp_model

import tinyc
from tinyc.device import protocol as P
from tinyc.device.client import HarnessClient
from tinyc.device.hostsim import HostHarness
from tinyc.device.transport import open_link
from tinyc.errors import DeviceError

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

TIMEOUT = 0.3    # per attempt: short, so failing cases stay fast
RETRIES = 3
BOUND = (RETRIES + 1) * TIMEOUT + 0.5  # the documented worst case, plus scheduling slack
X = np.linspace(-1, 1, 16, dtype=np.float32)
RUN_REPLY_FRAME = len(P.frame(P.Cmd.RUN | P.REPLY_FLAG, 0, b"\x00" + bytes(12)))
RESET_FRAME = len(P.frame(P.Cmd.RESET, 0))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    project, exe = build(tmp_path_factory.mktemp("faults"), "mlp", mlp_model())
    return exe, tinyc.run(project, {"x": X[None]})["y"].ravel()


@contextmanager
def rig(exe, timeout: float = TIMEOUT, retries: int = RETRIES, run_timeout: float = 10.0):
    """A fresh device behind a fresh proxy, and a client that has already said HELLO."""
    with HostHarness(exe) as dev, FaultProxy("127.0.0.1", dev.port) as proxy:
        client = HarnessClient(open_link(proxy.url, timeout=2.0), timeout=timeout, retries=retries,
                               run_timeout=run_timeout)
        with client:
            client.hello()
            yield dev, proxy, client


def infer(client: HarnessClient) -> np.ndarray:
    client.write_input(X.tobytes())
    client.run()
    return np.frombuffer(client.read_output(), np.float32)


@contextmanager
def within(seconds: float):
    t0 = time.monotonic()
    yield
    assert time.monotonic() - t0 < seconds, f"took {time.monotonic() - t0:.2f} s, bound {seconds} s"


def expect_error(fn, *fragments: str, bound: float = BOUND) -> str:
    with within(bound), pytest.raises(DeviceError) as err:
        fn()
    msg = str(err.value)
    for frag in fragments:
        assert frag in msg, msg
    return msg


@pytest.mark.parametrize("at", [0, 1, 4, RUN_REPLY_FRAME - 2, RUN_REPLY_FRAME - 1])
def test_corrupted_reply_is_retried(mlp, at):
    exe, want = mlp
    with rig(exe) as (_, proxy, c):
        c.write_input(X.tobytes())
        proxy.d2c.corrupt(at=at)
        with within(BOUND):
            assert c.run() > 0
        assert c.retries_used == 1
        np.testing.assert_allclose(np.frombuffer(c.read_output(), np.float32), want, rtol=1e-6)


def test_corrupted_request_is_resent(mlp):
    exe, want = mlp
    with rig(exe) as (_, proxy, c):
        proxy.c2d.corrupt(at=5, count=3)
        with within(BOUND):
            np.testing.assert_allclose(infer(c), want, rtol=1e-6)
        assert c.retries_used == 1


def test_bytes_dropped_from_a_reply(mlp):
    exe, want = mlp
    with rig(exe) as (_, proxy, c):
        proxy.d2c.drop(at=3, count=2)
        with within(BOUND):
            np.testing.assert_allclose(infer(c), want, rtol=1e-6)
        assert c.retries_used >= 1


def test_a_lost_reply_is_recovered_from_the_firmware_cache(mlp):
    """The whole RUN reply vanishes: the client waits one timeout, resends the same seq, and
    the firmware answers from its cache; later requests skip the extra reply. (RUN waits
    run_timeout by default: a lost reply and a long run look the same until then.)"""
    exe, want = mlp
    with rig(exe) as (_, proxy, c):
        c.write_input(X.tobytes())
        proxy.d2c.drop(count=RUN_REPLY_FRAME)
        t0 = time.monotonic()
        assert c.run(timeout=TIMEOUT) > 0
        assert TIMEOUT <= time.monotonic() - t0 < TIMEOUT + 0.5
        assert c.retries_used == 1
        np.testing.assert_allclose(np.frombuffer(c.read_output(), np.float32), want, rtol=1e-6)


def test_a_lost_request_is_resent_after_the_timeout(mlp):
    exe, _ = mlp
    with rig(exe) as (_, proxy, c):
        proxy.c2d.drop(count=RESET_FRAME)
        with within(TIMEOUT + 0.5):
            c.reset()
        assert c.retries_used == 1


def test_a_dead_line_fails_within_the_bound(mlp):
    exe, _ = mlp
    with rig(exe) as (_, proxy, c):
        proxy.d2c.drop(count=None)
        t0 = time.monotonic()
        msg = expect_error(c.reset, proxy.url, "RESET failed", f"{RETRIES + 1} attempts",
                           f"timed out after {TIMEOUT:g} s (x{RETRIES + 1})", "received 0 bytes")
        assert time.monotonic() - t0 >= (RETRIES + 1) * TIMEOUT, msg


def test_a_delay_beyond_the_timeout_is_an_error_naming_port_and_command(mlp):
    exe, _ = mlp
    with rig(exe) as (_, proxy, c):
        proxy.d2c.delay(30.0)
        expect_error(lambda: c.run(timeout=TIMEOUT), f"device {proxy.url}: RUN failed", "timed out")


def test_a_delay_within_the_timeout_is_tolerated(mlp):
    exe, want = mlp
    with rig(exe, timeout=1.0) as (_, proxy, c):
        proxy.d2c.delay(0.3)
        with within(1.0):
            np.testing.assert_allclose(infer(c), want, rtol=1e-6)
        assert c.retries_used == 0


def test_device_killed_mid_run(mlp):
    """RUN of ~seconds; the device dies 0.3 s in: an error at once, not after run_timeout."""
    exe, _ = mlp
    with rig(exe, run_timeout=30.0) as (dev, proxy, c):
        c.write_input(X.tobytes())
        killer = threading.Timer(0.3, dev.kill)
        killer.start()
        try:
            expect_error(lambda: c.run(repeat=2_000_000_000), proxy.url, "RUN failed", "link closed", bound=2.0)
        finally:
            killer.cancel()
        assert dev.wait(5) == -9  # it was the kill (the link closes before the process is reaped)


def test_device_frozen_mid_session(mlp):
    """A hung device keeps the link open but never answers: bounded by the timeouts."""
    exe, _ = mlp
    with rig(exe) as (dev, proxy, c):
        dev.pause()
        expect_error(lambda: c.run(timeout=TIMEOUT), proxy.url, "RUN failed", "timed out")


def test_connection_cut_in_the_middle_of_a_reply(mlp):
    exe, _ = mlp
    with rig(exe) as (_, proxy, c):
        proxy.d2c.cut(at=6)
        msg = expect_error(c.read_output, proxy.url, "READ_OUTPUT failed", "link closed", bound=1.0)
        assert "received 6 bytes" in msg


def test_garbage_on_the_line_is_skipped(mlp):
    exe, want = mlp
    with rig(exe) as (_, proxy, c):
        proxy.d2c.inject(b"\x55" * 40 + b"\x00\x12\x34\x00" + b"boot banner\r\n")
        with within(BOUND):
            np.testing.assert_allclose(infer(c), want, rtol=1e-6)


def test_persistent_corruption_fails_fast_with_the_bytes(mlp):
    """Every reply garbled (delimiters intact): resends are immediate, no timeout waits, then a
    clear error with the bytes that came."""
    exe, _ = mlp
    with rig(exe) as (_, proxy, c):
        proxy.d2c.corrupt(at=2, count=None, xor=0x40, spare_zeros=True)
        msg = expect_error(c.reset, proxy.url, "RESET failed", f"{RETRIES + 1} attempts", "corrupted reply",
                           bound=TIMEOUT)
        assert "received" in msg and " 00 " in msg


def test_a_flood_without_delimiters_is_bounded(mlp):
    """Every byte garbled, delimiters too: one endless frame. Bounded all the same."""
    exe, _ = mlp
    with rig(exe) as (_, proxy, c):
        proxy.d2c.corrupt(count=None, xor=0x01)
        expect_error(c.reset, proxy.url, "RESET failed", f"{RETRIES + 1} attempts", "cut off")


@pytest.mark.slow
def test_random_faults_never_hang_and_never_lie(mlp):
    """Many sessions, each with a random fault in a random place: every inference either gives
    the exact answer or fails with a DeviceError inside the bound."""
    exe, want = mlp
    rnd = random.Random(2024)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(40):
        with rig(exe) as (_, proxy, c):
            side = rnd.choice([proxy.c2d, proxy.d2c])
            kind = rnd.choice(["corrupt", "drop", "delay", "cut", "inject"])
            at = rnd.randrange(0, 120)
            if kind == "corrupt":
                side.corrupt(at=at, count=rnd.randrange(1, 4), xor=rnd.randrange(1, 256))
            elif kind == "drop":
                side.drop(at=at, count=rnd.randrange(1, 30))
            elif kind == "delay":
                side.delay(rnd.choice([0.05, 0.5, 3.0]), at=at)
            elif kind == "cut":
                side.cut(at=at)
            else:
                side.inject(bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 40))), at=at)
            t0 = time.monotonic()
            try:
                got = infer(c)
            except DeviceError as exc:
                outcomes["error"] += 1
                assert proxy.url in str(exc)
            else:
                outcomes["ok"] += 1
                np.testing.assert_allclose(got, want, rtol=1e-6)
            # three requests (write, run, read) each bounded by (retries + 1) x timeout
            assert time.monotonic() - t0 < 3 * BOUND
    assert outcomes["ok"] > 10 and outcomes["error"] > 0, outcomes
