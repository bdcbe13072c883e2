"""Host side of the serial harness: requests, bounded retries, and errors a user can act on.

Every request waits at most `timeout` seconds per attempt and is sent at most `retries + 1`
times, so a call returns or raises DeviceError within (retries + 1) x timeout (plus one
poll interval) whatever the device does: stay silent, send garbage, or die. A retry reuses
the request's sequence number, so the firmware answers it from its cache of the last reply
instead of running it twice.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable

from tinyc.device import protocol as P
from tinyc.device.transport import Link, LinkClosed, LinkError
from tinyc.errors import DeviceError, UsageError

DEFAULT_TIMEOUT = 2.0
DEFAULT_RETRIES = 3
DEFAULT_RUN_TIMEOUT = 60.0


class Profile(list):
    """Ticks per layer (a list of num_layers ints), plus the pass's other parts: the ticks of
    set_inputs and get_outputs, and the total of the profiling pass (which is their sum)."""

    def __init__(self, layers: list[int], set_inputs: int, get_outputs: int, total: int) -> None:
        super().__init__(layers)
        self.set_inputs = set_inputs
        self.get_outputs = get_outputs
        self.total = total


class _Retry(Exception):
    """An attempt failed in a way a resend can fix; the message says how."""


class HarnessClient:
    """Talks to a firmware running tinyc_harness_serve over `link`.

    `port_name` names the device in error messages (defaults to the link's URL)."""

    def __init__(
        self,
        link: Link,
        port_name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        run_timeout: float = DEFAULT_RUN_TIMEOUT,
    ) -> None:
        if timeout <= 0 or retries < 0:
            raise UsageError(f"timeout must be > 0 and retries >= 0 (got {timeout}, {retries})")
        self.link = link
        self.port_name = port_name or link.url
        self.timeout = timeout
        self.retries = retries
        self.run_timeout = run_timeout
        self.info: dict | None = None
        self.max_payload = P.DEFAULT_MAX_PAYLOAD
        self.retries_used = 0  # resends over the client's life (tests and diagnostics)
        self.stale_replies = 0  # well-formed replies to an earlier request, skipped
        # A random start makes a reply cached by an earlier session unlikely to match.
        self._seq = random.randrange(256)
        self._decoder = P.FrameDecoder(max_frame=2 * (P.HEADER_BYTES + 4096 + P.CRC_BYTES))

    # ---- the commands ----

    def hello(self) -> dict:
        """Handshake: checks the protocol version and returns what the firmware reports:
        board, model, model_hash, tinyc_version, protocol_version, counter, arena_bytes,
        num_layers, input_bytes, output_bytes, num_inputs, num_outputs, max_payload."""
        reply = self._transact(P.Cmd.HELLO, P.hello_request())
        info = self._parse("HELLO", reply.body, P.parse_hello)
        if info["protocol_version"] != P.PROTOCOL_VERSION:
            raise DeviceError(
                self._message(
                    "HELLO",
                    f"protocol version mismatch: the device speaks "
                    f"{info['protocol_version']}, this tinyc speaks {P.PROTOCOL_VERSION}; "
                    "rebuild the firmware with this tinyc",
                    reply.payload,
                )
            )
        if info["max_payload"] < 32:
            raise DeviceError(
                self._message("HELLO", f"device reports max_payload {info['max_payload']} (< 32)", reply.payload)
            )
        self.info = info
        self.max_payload = info["max_payload"]
        return dict(info)

    def write_input(self, data: bytes) -> None:
        """Send all model inputs (concatenated raw little-endian bytes, exactly input_bytes)."""
        info = self._ensure_hello()
        data = bytes(data)
        if len(data) != info["input_bytes"]:
            raise UsageError(f"the model on {self.port_name} takes {info['input_bytes']} input bytes, got {len(data)}")
        chunk = self.max_payload - 4
        for offset in range(0, len(data), chunk):
            self._transact(P.Cmd.WRITE_INPUT, P.write_input_request(offset, data[offset : offset + chunk]))

    def run(self, repeat: int = 1, timeout: float | None = None) -> int:
        """Run the model `repeat` times on the written inputs; the counter's total ticks for
        all of them (uint64). `timeout` (default run_timeout) bounds each attempt."""
        self._ensure_hello()
        if not 1 <= repeat <= 0xFFFFFFFF:
            raise UsageError(f"repeat must be between 1 and 2**32-1, got {repeat}")
        reply = self._transact(P.Cmd.RUN, P.run_request(repeat), timeout or self.run_timeout)
        ticks, _ = self._parse("RUN", reply.body, P.RUN_REPLY.unpack_from)
        return int(ticks)

    def run_layer(self, index: int, repeat: int = 1, timeout: float | None = None) -> list[int]:
        """Run layer `index` alone `repeat` times on the written inputs (untimed set-up and output
        copy around it); the ticks of each run. READ_OUTPUT then shows that layer's outputs."""
        info = self._ensure_hello()
        limit = (self.max_payload - 5) // 4
        if not 0 <= index < info["num_layers"]:
            raise UsageError(f"layer index {index} out of range (the firmware has {info['num_layers']} layers)")
        if not 1 <= repeat <= limit:
            raise UsageError(f"repeat must be between 1 and {limit}, got {repeat}")
        reply = self._transact(P.Cmd.RUN_LAYER, P.run_layer_request(index, repeat), timeout or self.run_timeout)
        body = reply.body
        if len(body) < 4 or len(body) != 4 + 4 * struct.unpack_from("<I", body)[0]:
            raise DeviceError(self._message("RUN_LAYER", f"malformed reply of {len(body)} bytes", reply.payload))
        count = struct.unpack_from("<I", body)[0]
        return list(struct.unpack_from(f"<{count}I", body, 4))

    def output_crc(self, offset: int, length: int) -> int:
        """CRC-32 (zlib's) of `length` output bytes from `offset`, computed on the device: checks
        a large output against an expected one without moving it over the link."""
        info = self._ensure_hello()
        if offset < 0 or length < 0 or offset + length > info["output_bytes"]:
            raise UsageError(f"output range {offset}+{length} outside the {info['output_bytes']} output bytes")
        reply = self._transact(P.Cmd.OUTPUT_CRC, P.output_crc_request(offset, length))
        if len(reply.body) != 4:
            raise DeviceError(
                self._message("OUTPUT_CRC", f"reply of {len(reply.body)} bytes, expected 4", reply.payload)
            )
        return int(struct.unpack("<I", reply.body)[0])

    def read_output(self, offset: int = 0, length: int | None = None) -> bytes:
        """Model outputs of the last run (concatenated raw little-endian bytes): all of them, or
        `length` bytes from `offset` (the tuner reads one candidate's output this way)."""
        info = self._ensure_hello()
        out = bytearray()
        chunk = self.max_payload - 1
        total = info["output_bytes"] - offset if length is None else length
        if offset < 0 or total < 0 or offset + total > info["output_bytes"]:
            raise UsageError(f"output range {offset}+{total} outside the {info['output_bytes']} output bytes")
        while len(out) < total:
            n = min(chunk, total - len(out))
            reply = self._transact(P.Cmd.READ_OUTPUT, P.read_output_request(offset + len(out), n))
            if len(reply.body) != n:
                raise DeviceError(
                    self._message("READ_OUTPUT", f"asked for {n} bytes, got {len(reply.body)}", reply.payload)
                )
            out += reply.body
        return bytes(out)

    def profile(self, timeout: float | None = None) -> Profile:
        """One profiling pass on the written inputs: ticks of every layer (num_layers ints);
        .set_inputs, .get_outputs and .total carry the rest of the pass."""
        info = self._ensure_hello()
        reply = self._transact(P.Cmd.PROFILE, b"", timeout or self.run_timeout)
        total, entries = self._parse("PROFILE", reply.body, P.PROFILE_REPLY.unpack_from)
        if entries != info["num_layers"] + 2:
            raise DeviceError(
                self._message("PROFILE", f"{entries} entries for {info['num_layers']} layers", reply.payload)
            )
        ticks: list[int] = []
        per = (self.max_payload - 1) // 4
        while len(ticks) < entries:
            n = min(per, entries - len(ticks))
            part = self._transact(P.Cmd.PROFILE_READ, P.profile_read_request(len(ticks), n))
            if len(part.body) != 4 * n:
                raise DeviceError(
                    self._message("PROFILE_READ", f"asked for {n} entries, got {len(part.body)} bytes", part.payload)
                )
            ticks += struct.unpack(f"<{n}I", part.body)
        return Profile(ticks[1:-1], ticks[0], ticks[-1], int(total))

    def layer_names(self) -> list[str]:
        """The name of every layer (its ONNX node), in execution order."""
        info = self._ensure_hello()
        return [
            self._transact(P.Cmd.LAYER_NAME, P.layer_name_request(i)).body.decode("utf-8", "replace")
            for i in range(info["num_layers"])
        ]

    def reset(self) -> None:
        """Clear the firmware's inputs, outputs and profile."""
        self._transact(P.Cmd.RESET)

    def exit(self, code: int = 0) -> None:
        """Stop the firmware with `code` (an emulator exits with it). The link closing right
        after the request counts as success: that is what exiting looks like."""
        try:
            self._transact(P.Cmd.EXIT, P.exit_request(code))
        except _LinkGone:
            pass

    def close(self) -> None:
        self.link.close()

    def __enter__(self) -> HarnessClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- one request/reply exchange ----

    def _ensure_hello(self) -> dict:
        return self.info if self.info is not None else self.hello()

    def _transact(self, cmd: P.Cmd, payload: bytes = b"", timeout: float | None = None) -> P.Packet:
        """Send one request and return its OK reply, resending (same seq) on a corrupted,
        missing or rejected-as-garbled exchange; DeviceError after retries+1 attempts."""
        name = cmd.name
        if len(payload) > self.max_payload:
            raise UsageError(f"{name} payload of {len(payload)} bytes exceeds max_payload {self.max_payload}")
        self._seq = (self._seq + 1) & 0xFF
        seq = self._seq
        request = P.frame(cmd, seq, payload)
        limit = timeout or self.timeout
        seen = _Received()
        failures: list[str] = []
        for attempt in range(self.retries + 1):
            if attempt:
                self.retries_used += 1
                self._decoder.reset()  # what is left of a damaged frame is not worth keeping
            try:
                self.link.write(request)
                reply = self._await(cmd, seq, time.monotonic() + limit, seen, limit)
            except _Retry as why:
                failures.append(str(why))
                continue
            except LinkClosed as exc:
                if cmd == P.Cmd.EXIT:
                    raise _LinkGone() from None
                raise DeviceError(
                    self._message(
                        name, f"the link closed: the device stopped, crashed or was disconnected ({_reason(exc)})", seen
                    )
                ) from None
            except LinkError as exc:
                raise DeviceError(self._message(name, _reason(exc), seen)) from None
            if reply.status != P.Status.OK:
                raise DeviceError(
                    self._message(
                        name,
                        f"device answered error {reply.status}: {P.describe_status(reply.status, reply.detail)}",
                        seen,
                    )
                )
            return reply
        raise DeviceError(
            self._message(
                name, f"no valid reply after {self.retries + 1} attempts ({'; '.join(_dedupe(failures))})", seen
            )
        )

    def _await(self, cmd: P.Cmd, seq: int, deadline: float, seen: _Received, limit: float) -> P.Packet:
        """Read until the reply to (cmd, seq) arrives; _Retry when resending is the remedy.

        `deadline` bounds the wait for the reply (long for RUN); once a frame has started,
        a gap longer than the normal timeout means its end was lost, so a RUN reply with a
        garbled delimiter costs one timeout, not run_timeout."""
        want = cmd | P.REPLY_FLAG
        while True:
            gap_deadline = deadline
            if self._decoder.pending():
                gap_deadline = min(deadline, time.monotonic() + self.timeout)
            data = self.link.read_some(gap_deadline)
            if not data:
                if self._decoder.pending():
                    raise _Retry(f"reply cut off ({self._decoder.pending()} bytes, then silence)")
                raise _Retry(f"timed out after {limit:g} s")
            seen.add(data)
            problem = None
            for raw in self._decoder.feed(data):
                if raw is None:
                    problem = problem or "over-long frame without delimiter (garbage on the line)"
                    continue
                try:
                    pkt = P.parse_packet(raw)
                except P.BadFrame as exc:
                    problem = problem or f"corrupted reply ({exc})"
                    continue
                if pkt.cmd == want and pkt.seq == seq:
                    return pkt
                if pkt.cmd == P.FRAME_ERROR_CMD:
                    problem = problem or (
                        f"device could not read the request: {P.describe_status(pkt.status, pkt.detail)}"
                    )
                else:
                    self.stale_replies += 1
            if problem:
                raise _Retry(problem)

    def _parse(self, name: str, body: bytes, fn: Callable):
        try:
            return fn(body)
        except (ValueError, struct.error) as exc:
            raise DeviceError(self._message(name, f"malformed reply ({exc})", body)) from None

    def _message(self, command: str, reason: str, received: bytes | _Received) -> str:
        if not isinstance(received, _Received):
            received = _Received(bytes(received))
        return (
            f"device {self.port_name}: {command} failed: {reason}; received {received.count} bytes: "
            f"{P.hex_preview(received.head, count=received.count)}"
        )


class _Received:
    """The bytes seen during one exchange, for the error message: the first KEEP and a count
    (a device flooding the line cannot grow memory)."""

    KEEP = 256

    def __init__(self, data: bytes = b"") -> None:
        self.head = bytearray()
        self.count = 0
        self.add(data)

    def add(self, data: bytes) -> None:
        self.count += len(data)
        if len(self.head) < self.KEEP:
            self.head += data[: self.KEEP - len(self.head)]


class _LinkGone(Exception):
    """EXIT's link closed: the expected end of a session."""


def _reason(exc: Exception) -> str:
    """A transport error's text without its URL prefix (the client message names the port)."""
    text = str(exc)
    return text.split(": ", 1)[1] if ": " in text else text


def _dedupe(items: list[str]) -> list[str]:
    """Repeated failure reasons once, with a count."""
    out: list[str] = []
    for item in dict.fromkeys(items):
        n = items.count(item)
        out.append(f"{item} (x{n})" if n > 1 else item)
    return out
