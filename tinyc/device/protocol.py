"""The serial harness wire format: COBS framing, CRC-32, packets, commands and status codes.

Pure functions and data, no I/O, so they can be tested byte for byte against the firmware's
C implementation (runtime_c/src/tinyc_harness.c). docs/protocol.md is the specification;
every constant here has the same name there.

A packet is ``cmd u8 | seq u8 | payload | crc32 u32 LE`` (CRC over cmd, seq and payload); on the
wire it travels COBS-encoded between 0x00 delimiters. A reply's payload starts with a status byte.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum

PROTOCOL_VERSION = 1
HEADER_BYTES = 2
CRC_BYTES = 4
DEFAULT_MAX_PAYLOAD = 256
REPLY_FLAG = 0x80
FRAME_ERROR_CMD = 0xFF
MAX_STRING = 63


class Cmd(IntEnum):
    """Request command codes; a reply carries ``cmd | 0x80``."""

    HELLO = 0x01
    WRITE_INPUT = 0x02
    RUN = 0x03
    READ_OUTPUT = 0x04
    PROFILE = 0x05
    PROFILE_READ = 0x06
    LAYER_NAME = 0x07
    RESET = 0x08
    EXIT = 0x09
    RUN_LAYER = 0x0A
    OUTPUT_CRC = 0x0B


class Status(IntEnum):
    """First payload byte of every reply: 0 is success, anything else an error with a u32 detail."""

    OK = 0
    BAD_CRC = 1
    OVERSIZE = 2
    TRUNCATED = 3
    BAD_COBS = 4
    UNKNOWN_CMD = 5
    BAD_LENGTH = 6
    BAD_RANGE = 7
    BAD_ARG = 8
    MODEL_ERROR = 9
    VERSION = 10
    UNSUPPORTED = 11


STATUS_TEXT = {
    Status.OK: "ok",
    Status.BAD_CRC: "the device saw a frame with a wrong CRC",
    Status.OVERSIZE: "frame larger than the device accepts",
    Status.TRUNCATED: "frame too short or cut off",
    Status.BAD_COBS: "frame is not valid COBS",
    Status.UNKNOWN_CMD: "unknown command",
    Status.BAD_LENGTH: "request body has the wrong length for this command",
    Status.BAD_RANGE: "offset/length outside the buffer",
    Status.BAD_ARG: "invalid argument",
    Status.MODEL_ERROR: "the model returned an error status",
    Status.VERSION: "protocol version mismatch",
    Status.UNSUPPORTED: "not supported by this firmware",
}

# Frame-level problems: the device could not read the request at all, so resending helps.
FRAME_STATUSES = frozenset({Status.BAD_CRC, Status.OVERSIZE, Status.TRUNCATED, Status.BAD_COBS})


def crc32(data: bytes) -> int:
    """CRC-32/IEEE (zlib's), the same function as tinyc_harness_crc32."""
    return zlib.crc32(data) & 0xFFFFFFFF


def cobs_encode(data: bytes) -> bytes:
    """Consistent Overhead Byte Stuffing: the result has no 0x00 byte and is at most
    len + len // 254 + 1 long. Same algorithm as tinyc_harness_cobs_encode."""
    out = bytearray()
    block = bytearray()
    for k, b in enumerate(data):
        if b:
            block.append(b)
        if b == 0 or len(block) == 0xFE:
            out.append(len(block) + 1)
            out += block
            block.clear()
            if b and k + 1 == len(data):
                return bytes(out)  # a full block ends the data: no empty block after it
    out.append(len(block) + 1)
    out += block
    return bytes(out)


def cobs_decode(data: bytes) -> bytes | None:
    """Inverse of cobs_encode; None for input that is not valid COBS."""
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        code = data[i]
        i += 1
        if code == 0 or i + code - 1 > n:
            return None
        block = data[i : i + code - 1]
        if 0 in block:
            return None
        out += block
        i += code - 1
        if code != 0xFF and i < n:
            out.append(0)
    return bytes(out)


def frame(cmd: int, seq: int, payload: bytes = b"") -> bytes:
    """A packet ready for the wire: 0x00, COBS(cmd seq payload crc32), 0x00. The leading
    delimiter ends whatever partial frame the other side may still hold (resync)."""
    body = bytes([cmd & 0xFF, seq & 0xFF]) + payload
    return b"\x00" + cobs_encode(body + struct.pack("<I", crc32(body))) + b"\x00"


@dataclass(frozen=True)
class Packet:
    """One decoded, CRC-checked packet."""

    cmd: int
    seq: int
    payload: bytes

    @property
    def status(self) -> int:
        """A reply's status byte (-1 for an empty payload)."""
        return self.payload[0] if self.payload else -1

    @property
    def body(self) -> bytes:
        """A reply's payload after the status byte."""
        return self.payload[1:]

    @property
    def detail(self) -> int:
        """An error reply's u32 detail (0 when absent)."""
        b = self.body
        return struct.unpack_from("<I", b)[0] if len(b) >= 4 else 0


class BadFrame(ValueError):
    """A frame that is not valid COBS, too short, or fails its CRC."""


def parse_packet(encoded: bytes) -> Packet:
    """Decode the bytes between two delimiters; raises BadFrame saying what is wrong."""
    raw = cobs_decode(encoded)
    if raw is None:
        raise BadFrame("not valid COBS")
    if len(raw) < HEADER_BYTES + CRC_BYTES:
        raise BadFrame(f"only {len(raw)} bytes after decoding")
    body, (crc,) = raw[:-CRC_BYTES], struct.unpack("<I", raw[-CRC_BYTES:])
    if crc32(body) != crc:
        raise BadFrame(f"CRC {crc:08x} != computed {crc32(body):08x}")
    return Packet(body[0], body[1], body[2:])


class FrameDecoder:
    """Splits a byte stream at 0x00 delimiters. A frame that grows past `max_frame` bytes
    without a delimiter is dropped and reported as None when its delimiter comes (a device
    spewing garbage cannot grow memory without bound); empty frames (two delimiters in a
    row) are skipped."""

    def __init__(self, max_frame: int = 4096) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self._overflow = False

    def feed(self, data: bytes) -> list[bytes | None]:
        """Complete frames (still COBS-encoded) in the order they ended; keeps the unfinished tail."""
        frames: list[bytes | None] = []
        parts = bytes(data).split(b"\x00")
        for k, part in enumerate(parts):
            if not self._overflow:
                self._buf += part
                if len(self._buf) > self.max_frame:
                    self._buf.clear()
                    self._overflow = True
            if k < len(parts) - 1:  # a delimiter follows this part
                if self._overflow:
                    frames.append(None)
                elif self._buf:
                    frames.append(bytes(self._buf))
                self._buf.clear()
                self._overflow = False
        return frames

    def pending(self) -> int:
        """Bytes of an unfinished frame."""
        return len(self._buf)

    def reset(self) -> None:
        """Forget an unfinished frame."""
        self._buf.clear()
        self._overflow = False


# ---- request payloads (what the host sends) ----


def hello_request(version: int = PROTOCOL_VERSION) -> bytes:
    return bytes([version])


def write_input_request(offset: int, data: bytes) -> bytes:
    return struct.pack("<I", offset) + bytes(data)


def run_request(repeat: int) -> bytes:
    return struct.pack("<I", repeat)


def run_layer_request(index: int, repeat: int) -> bytes:
    return struct.pack("<II", index, repeat)


def output_crc_request(offset: int, length: int) -> bytes:
    return struct.pack("<II", offset, length)


def read_output_request(offset: int, length: int) -> bytes:
    return struct.pack("<IH", offset, length)


def profile_read_request(first: int, count: int) -> bytes:
    return struct.pack("<IH", first, count)


def layer_name_request(index: int) -> bytes:
    return struct.pack("<I", index)


def exit_request(code: int) -> bytes:
    return struct.pack("<i", code)


# ---- reply bodies (what the device answers, after the status byte) ----

HELLO_FIXED = struct.Struct("<BBHIIIIHH")
HELLO_STRINGS = ("board", "model", "model_hash", "tinyc_version", "counter")


def parse_hello(body: bytes) -> dict:
    """HELLO's reply body -> dict (fixed fields, then five length-prefixed strings)."""
    if len(body) < HELLO_FIXED.size:
        raise ValueError(f"HELLO reply has {len(body)} bytes, needs at least {HELLO_FIXED.size}")
    (version, _flags, max_payload, arena, layers, in_bytes, out_bytes, n_in, n_out) = HELLO_FIXED.unpack_from(body)
    info = {
        "protocol_version": version,
        "max_payload": max_payload,
        "arena_bytes": arena,
        "num_layers": layers,
        "input_bytes": in_bytes,
        "output_bytes": out_bytes,
        "num_inputs": n_in,
        "num_outputs": n_out,
    }
    pos = HELLO_FIXED.size
    for key in HELLO_STRINGS:
        if pos >= len(body):
            info[key] = ""
            continue
        n = body[pos]
        info[key] = body[pos + 1 : pos + 1 + n].decode("utf-8", "replace")
        pos += 1 + n
    return info


def hello_reply(info: dict) -> bytes:
    """The HELLO reply body for `info` (used by tests and host-side simulators)."""
    out = bytearray(
        HELLO_FIXED.pack(
            info["protocol_version"],
            0,
            info["max_payload"],
            info["arena_bytes"],
            info["num_layers"],
            info["input_bytes"],
            info["output_bytes"],
            info.get("num_inputs", 1),
            info.get("num_outputs", 1),
        )
    )
    for key in HELLO_STRINGS:
        s = str(info.get(key, "")).encode()[:MAX_STRING]
        out += bytes([len(s)]) + s
    return bytes(out)


RUN_REPLY = struct.Struct("<QI")  # total ticks, repeat
PROFILE_REPLY = struct.Struct("<QI")  # total ticks of the pass, entries (num_layers + 2)


def describe_status(status: int, detail: int) -> str:
    """A human sentence for an error reply."""
    try:
        st = Status(status)
    except ValueError:
        return f"unknown status {status} (detail {detail})"
    text = STATUS_TEXT[st]
    if st == Status.VERSION:
        return f"{text}: the device speaks protocol version {detail}, this tinyc speaks {PROTOCOL_VERSION}"
    if st == Status.MODEL_ERROR:
        return f"{text} {detail}"
    if st == Status.BAD_RANGE:
        return f"{text} (the buffer has {detail} bytes/entries)"
    if st == Status.UNKNOWN_CMD:
        return f"{text} 0x{detail:02x}"
    if st in (Status.OVERSIZE, Status.BAD_ARG) and detail:
        return f"{text} (limit {detail})"
    return text


def hex_preview(data: bytes | bytearray, limit: int = 48, count: int | None = None) -> str:
    """'00 1a ff ...' of at most `limit` bytes, saying how many more there were (of `count`
    in all, when `data` is only the head of what arrived)."""
    total = len(data) if count is None else count
    shown = " ".join(f"{b:02x}" for b in bytes(data[:limit]))
    if total > min(limit, len(data)):
        shown += f" ... (+{total - min(limit, len(data))} more)"
    return shown or "(none)"
