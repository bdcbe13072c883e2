"""The harness wire format: COBS, CRC-32 and packets in Python, the same functions in the
firmware's C (compiled here and fed the same bytes), and the client's behaviour on a link with
no device or a garbled one."""
from __future__ import annotations

import random
import shutil
import struct
import subprocess
import time
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinyc.device import protocol as P
from tinyc.device.client import HarnessClient
from tinyc.device.transport import open_link
from tinyc.errors import DeviceError
from tinyc.resources import runtime_dir

# Published COBS examples (input -> encoding).
COBS_VECTORS = [
    (b"", b"\x01"),
    (b"\x00", b"\x01\x01"),
    (b"\x00\x00", b"\x01\x01\x01"),
    (b"\x11\x22\x00\x33", b"\x03\x11\x22\x02\x33"),
    (b"\x11\x22\x33\x44", b"\x05\x11\x22\x33\x44"),
    (b"\x11\x00\x00\x00", b"\x02\x11\x01\x01\x01"),
    (bytes(range(1, 255)), b"\xff" + bytes(range(1, 255))),
    (bytes(range(255)), b"\x01\xff" + bytes(range(1, 255))),
    (bytes(range(1, 256)), b"\xff" + bytes(range(1, 255)) + b"\x02\xff"),
    (bytes(range(2, 256)) + b"\x00", b"\xff" + bytes(range(2, 256)) + b"\x01\x01"),
]


@pytest.mark.parametrize("raw,encoded", COBS_VECTORS)
def test_cobs_known_vectors(raw, encoded):
    assert P.cobs_encode(raw) == encoded
    assert P.cobs_decode(encoded) == raw


@given(st.binary(max_size=1200))
def test_cobs_round_trip_and_bounds(data):
    enc = P.cobs_encode(data)
    assert 0 not in enc
    assert len(enc) <= len(data) + len(data) // 254 + 1
    assert P.cobs_decode(enc) == data


@pytest.mark.parametrize("bad", [b"\x00", b"\x03\x11", b"\x05\x11\x00\x22\x33", b"\x02"])
def test_cobs_decode_rejects_invalid(bad):
    assert P.cobs_decode(bad) is None


def test_crc32_check_value():
    assert P.crc32(b"123456789") == 0xCBF43926


@given(st.integers(0, 255), st.integers(0, 255), st.binary(max_size=300))
def test_frame_round_trip(cmd, seq, payload):
    wire = P.frame(cmd, seq, payload)
    assert wire[0] == 0 and wire[-1] == 0 and 0 not in wire[1:-1]
    assert P.parse_packet(wire[1:-1]) == P.Packet(cmd, seq, payload)


@given(st.binary(min_size=0, max_size=64), st.integers(0, 10_000), st.integers(1, 255))
def test_any_corruption_of_a_frame_is_detected(payload, where, xor):
    """One corrupted byte anywhere in the encoded frame: invalid COBS or a CRC mismatch."""
    enc = bytearray(P.frame(P.Cmd.RUN, 7, payload)[1:-1])
    enc[where % len(enc)] ^= xor
    with pytest.raises(P.BadFrame):
        P.parse_packet(bytes(enc))


@given(st.binary(max_size=200), st.lists(st.integers(1, 40), max_size=30), st.binary(max_size=50))
def test_decoder_resyncs_after_garbage_and_any_split(garbage, cuts, payload):
    """Whatever garbage precedes a frame and however the stream is chunked, the frame comes out
    intact; the garbage comes out as frames that fail to parse (or as nothing)."""
    wire = garbage + P.frame(P.Cmd.READ_OUTPUT | P.REPLY_FLAG, 9, b"\x00" + payload)
    dec, frames, pos = P.FrameDecoder(), [], 0
    for c in cuts:
        frames += dec.feed(wire[pos:pos + c])
        pos += c
    frames += dec.feed(wire[pos:])
    assert dec.pending() == 0
    assert P.parse_packet(frames[-1]) == P.Packet(0x84, 9, b"\x00" + payload)


def test_decoder_caps_an_endless_frame():
    dec = P.FrameDecoder(max_frame=100)
    assert dec.feed(b"\x55" * 1000) == []
    assert dec.pending() <= 100
    ok = P.frame(0x88, 1, b"\x00")
    assert dec.feed(b"\x55" * 10 + ok) == [None, ok[1:-1]]


def test_hello_reply_round_trip_and_error_text():
    info = {"protocol_version": 1, "max_payload": 256, "arena_bytes": 1000, "num_layers": 3, "input_bytes": 40,
            "output_bytes": 8, "num_inputs": 2, "num_outputs": 1, "board": "b", "model": "m" * 80,
            "model_hash": "0123456789abcdef", "tinyc_version": "0.1.0", "counter": "dwt"}
    got = P.parse_hello(P.hello_reply(info))
    assert got == dict(info, model="m" * P.MAX_STRING)
    assert "speaks protocol version 7" in P.describe_status(P.Status.VERSION, 7)
    assert P.hex_preview(bytes(100), limit=4) == "00 00 00 00 ... (+96 more)"


# ---- the C implementation agrees byte for byte ----

DRIVER = r"""
#include <stdio.h>
#include <stdint.h>
#include "tinyc_harness.h"
#include "tinyc_port.h"
/* The framing functions need no port; the serve loop (linked in, never called) does. */
void tinyc_port_init(void) {}
void tinyc_port_write(const uint8_t *data, uint32_t n) { (void)data; (void)n; }
int tinyc_port_read_byte(uint32_t timeout_ms) { (void)timeout_ms; return -1; }
uint64_t tinyc_port_cycles(void) { return 0; }
void tinyc_port_exit(int code) { (void)code; }
const char *tinyc_port_board_name(void) { return "driver"; }
/* Records on stdin: u32 length + bytes. For each, write: crc32, the COBS encoding (u32 length +
 * bytes), and the in-place decoding of the record itself (i32 length + bytes). */
static uint8_t in[8192], enc[8300];
static uint32_t rd32(void) { uint8_t b[4]; if (fread(b, 1, 4, stdin) != 4) return 0xFFFFFFFFu;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24; }
static void wr32(uint32_t v) { uint8_t b[4]; b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16); b[3] = (uint8_t)(v >> 24); fwrite(b, 1, 4, stdout); }
int main(void) {
    uint32_t n;
    while ((n = rd32()) != 0xFFFFFFFFu) {
        uint32_t e;
        int32_t d;
        if (n > sizeof in || fread(in, 1, n, stdin) != n) return 1;
        wr32(tinyc_harness_crc32(in, n));
        e = tinyc_harness_cobs_encode(in, n, enc);
        wr32(e); fwrite(enc, 1, e, stdout);
        d = tinyc_harness_cobs_decode(in, n);
        wr32((uint32_t)d); if (d > 0) fwrite(in, 1, (size_t)d, stdout);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def c_driver(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("framing")
    (d / "driver.c").write_text(DRIVER)
    rt = runtime_dir()
    exe = d / "driver"
    proc = subprocess.run(["cc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", str(rt / "include"),
                           str(d / "driver.c"), str(rt / "src" / "tinyc_harness.c"), "-o", str(exe)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


def _records() -> list[bytes]:
    rnd = random.Random(1234)
    recs = [b"", b"\x00", b"\x00" * 300, bytes(range(1, 255)), bytes(range(1, 256)), bytes(range(256)) * 3,
            b"\x01" * 254, b"\x01" * 508, b"\x01" * 509, b"\x05\x11\x00", b"\xff" * 1000]
    recs += [e for _, e in COBS_VECTORS]
    for _ in range(400):
        n = rnd.choice([rnd.randrange(0, 20), rnd.randrange(240, 270), rnd.randrange(0, 3000)])
        zeros = rnd.random()
        recs.append(bytes(0 if rnd.random() < zeros * 0.3 else rnd.randrange(1, 256) for _ in range(n)))
    recs += [P.frame(rnd.randrange(256), rnd.randrange(256), r[:300])[1:-1] for r in recs[-50:]]
    return recs


def test_c_framing_matches_python(c_driver):
    recs = _records()
    stdin = b"".join(struct.pack("<I", len(r)) + r for r in recs)
    out = subprocess.run([str(c_driver)], input=stdin, capture_output=True, check=True, timeout=30).stdout
    pos = 0
    for r in recs:
        crc, elen = struct.unpack_from("<II", out, pos)
        pos += 8
        enc = out[pos:pos + elen]
        pos += elen
        (dlen,) = struct.unpack_from("<i", out, pos)
        pos += 4
        dec = out[pos:pos + max(dlen, 0)]
        pos += max(dlen, 0)
        assert crc == zlib.crc32(r)
        assert enc == P.cobs_encode(r)
        expected = P.cobs_decode(r)
        assert (None if dlen < 0 else dec) == expected, r[:20].hex()
    assert pos == len(out)


# ---- the client on links without a working device: errors, never hangs ----

def test_client_on_a_loopback_times_out_with_a_clear_error():
    """loop:// echoes the requests: well-formed frames, but never a reply."""
    link = open_link("loop://", timeout=1.0)
    client = HarnessClient(link, timeout=0.2, retries=2)
    t0 = time.monotonic()
    with pytest.raises(DeviceError) as err:
        client.hello()
    assert time.monotonic() - t0 < 3 * 0.2 + 0.5
    msg = str(err.value)
    assert "loop://" in msg and "HELLO" in msg and "3 attempts" in msg and "timed out" in msg
    assert "received" in msg and "00 " in msg  # the echoed bytes, in hex
    assert client.stale_replies >= 3


def test_client_on_a_refused_port_fails_fast():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    t0 = time.monotonic()
    with pytest.raises(DeviceError, match=f"127.0.0.1:{port}"):
        open_link(f"socket://127.0.0.1:{port}", timeout=1.0)
    assert time.monotonic() - t0 < 2


def test_client_resends_on_garbage_and_reports_it(monkeypatch):
    """A 'device' that answers everything with line noise: bounded retries, hex of what came."""
    link = open_link("loop://", timeout=1.0)
    noise = bytes([0x13, 0x37, 0x00, 0xAA, 0xBB, 0x00])
    monkeypatch.setattr(link, "write", lambda data: link._port.write(noise))
    client = HarnessClient(link, "my-board", timeout=0.5, retries=3)
    t0 = time.monotonic()
    with pytest.raises(DeviceError) as err:
        client.reset()
    assert time.monotonic() - t0 < 4 * 0.5 + 0.5
    msg = str(err.value)
    assert msg.startswith("device my-board: RESET failed") and "corrupted reply" in msg and "13 37 00 aa" in msg
    assert client.retries_used == 3


def test_spec_python_and_c_agree_on_codes():
    """docs/protocol.md, protocol.py and tinyc_harness.c name the same commands and statuses."""
    import re

    from util import REPO
    doc = (REPO / "docs" / "protocol.md").read_text()
    c_src = (runtime_dir() / "src" / "tinyc_harness.c").read_text()
    doc_cmds = {name: int(code, 16) for code, name in re.findall(r"^\| (0x0[0-9a-f]) \| ([A-Z_]+) \|", doc, re.MULTILINE)}
    doc_status = {name: int(code) for code, name in re.findall(r"^\| (\d+) \| ([A-Z_]+) \|", doc, re.MULTILINE)}
    c_cmds = {name: int(code, 16) for name, code in re.findall(r"CMD_([A-Z_]+) = (0x[0-9A-F]+)", c_src)}
    c_status = {name: int(code) for name, code in re.findall(r"ST_([A-Z_]+) = (\d+)", c_src)}
    py_cmds = {c.name: int(c) for c in P.Cmd}
    py_status = {s.name: int(s) for s in P.Status}
    assert doc_cmds == c_cmds == py_cmds
    assert doc_status == c_status == py_status
    assert f"`PROTOCOL_VERSION` is {P.PROTOCOL_VERSION}" in doc
    assert f"#define TINYC_HARNESS_PROTOCOL_VERSION {P.PROTOCOL_VERSION}u" in \
        (runtime_dir() / "include" / "tinyc_harness.h").read_text()
    assert f"#define TINYC_HARNESS_MAX_PAYLOAD {P.DEFAULT_MAX_PAYLOAD}u" in \
        (runtime_dir() / "include" / "tinyc_harness.h").read_text()
