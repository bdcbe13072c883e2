"""A TCP proxy that damages a byte stream on purpose, to test that the harness client survives
a bad link (or fails cleanly and quickly).

    proxy = FaultProxy("127.0.0.1", device_port)     # the client connects to proxy.url instead
    proxy.d2c.corrupt(at=3)                          # flip byte 3 of what the device sends next
    proxy.c2d.drop(count=None)                       # swallow everything the client sends from now
    proxy.d2c.delay(2.0)                             # hold the device's next bytes for 2 s
    proxy.d2c.cut(at=5)                              # close both connections after 5 more bytes

Each direction (c2d: client to device, d2c: device to client) has its own rules. `at` counts
bytes of that direction from the moment the rule is added, so a test arms a rule while the
link is idle and it hits the next request or reply. One thread per direction; a delay sleeps
only its own direction.
"""
from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field


@dataclass
class Rule:
    kind: str                  # corrupt | drop | delay | cut | inject
    start: int                 # absolute byte index in the direction's stream
    count: int | None = 1      # bytes affected (None: all from start on)
    xor: int = 0xFF
    seconds: float = 0.0
    data: bytes = b""
    spare_zeros: bool = False
    done: bool = field(default=False)

    def covers(self, pos: int) -> bool:
        return pos >= self.start and (self.count is None or pos < self.start + self.count)


class Direction:
    """The rules and byte count of one direction of the proxied stream."""

    def __init__(self, name: str, stop: threading.Event) -> None:
        self.name = name
        self.bytes = 0           # bytes that went through the pump (before faults)
        self.rules: list[Rule] = []
        self._lock = threading.Lock()
        self._stop = stop

    def _add(self, rule: Rule) -> Rule:
        with self._lock:
            rule.start += self.bytes
            self.rules.append(rule)
        return rule

    def corrupt(self, at: int = 0, count: int | None = 1, xor: int = 0xFF, spare_zeros: bool = False) -> Rule:
        """XOR `count` bytes (None: all) starting `at` bytes from now; with spare_zeros, 0x00
        bytes (frame delimiters) pass unharmed, so frames stay frames but fail their CRC."""
        return self._add(Rule("corrupt", at, count, xor=xor, spare_zeros=spare_zeros))

    def drop(self, at: int = 0, count: int | None = 1) -> Rule:
        """Swallow `count` bytes (None: everything) starting `at` bytes from now."""
        return self._add(Rule("drop", at, count))

    def delay(self, seconds: float, at: int = 0) -> Rule:
        """Hold the stream for `seconds` when it reaches byte `at` from now (once)."""
        return self._add(Rule("delay", at, None, seconds=seconds))

    def cut(self, at: int = 0) -> Rule:
        """Close both connections when the stream reaches byte `at` from now."""
        return self._add(Rule("cut", at, None))

    def inject(self, data: bytes, at: int = 0) -> Rule:
        """Insert `data` before byte `at` from now (line noise)."""
        return self._add(Rule("inject", at, None, data=bytes(data)))

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def process(self, data: bytes) -> tuple[list[bytes | float], bool]:
        """Apply the rules to the next chunk: a list of byte strings to send and delays (float
        seconds) to wait, and whether to cut the connection after them."""
        out: list[bytes | float] = []
        buf = bytearray()
        with self._lock:
            for i, b in enumerate(data):
                pos = self.bytes + i
                dropped = False
                for r in self.rules:
                    if r.done or pos < r.start:
                        continue
                    if r.kind == "cut":
                        self.bytes += i
                        return out + [bytes(buf)], True
                    if r.kind == "delay":
                        r.done = True
                        out += [bytes(buf), r.seconds]
                        buf = bytearray()
                    elif r.kind == "inject":
                        r.done = True
                        buf += r.data
                    elif r.kind == "drop" and r.covers(pos):
                        dropped = True
                    elif r.kind == "corrupt" and r.covers(pos) and not (r.spare_zeros and b == 0):
                        b ^= r.xor
                if not dropped:
                    buf.append(b)
            self.bytes += len(data)
        return out + [bytes(buf)], False


class FaultProxy:
    """Listens on 127.0.0.1 (free port); each client connection is piped to the upstream."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._stop = threading.Event()
        self.c2d = Direction("client->device", self._stop)
        self.d2c = Direction("device->client", self._stop)
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(4)
        self._server.settimeout(0.1)
        self.port = self._server.getsockname()[1]
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.cut_done = threading.Event()
        t = threading.Thread(target=self._accept_loop, daemon=True)
        t.start()
        self._threads.append(t)

    @property
    def url(self) -> str:
        return f"socket://127.0.0.1:{self.port}"

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                device = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            for s in (client, device):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.settimeout(0.1)
            with self._lock:
                self._socks += [client, device]
            for src, dst, direction in ((client, device, self.c2d), (device, client, self.d2c)):
                t = threading.Thread(target=self._pump, args=(src, dst, direction, (client, device)), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, direction: Direction,
              pair: tuple[socket.socket, socket.socket]) -> None:
        while not self._stop.is_set():
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:  # EOF: pass it on
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            parts, cut = direction.process(data)
            try:
                for part in parts:
                    if isinstance(part, float):
                        if self._stop.wait(part):
                            return
                    elif part:
                        dst.sendall(part)
            except OSError:
                break
            if cut:
                self._cut(pair)
                return
        self._cut(pair)

    def _cut(self, pair: tuple[socket.socket, socket.socket]) -> None:
        for s in pair:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.cut_done.set()

    def close(self) -> None:
        """Stop everything; shutdown() wakes the threads blocked in accept/recv at once."""
        self._stop.set()
        with self._lock:
            socks = [self._server] + self._socks
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(2)
        for s in socks:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
