"""The serial harness as a desktop process: build it for a compiled model and start it.

The firmware harness (runtime_c/src/tinyc_harness.c) and the generated harness main are the
same code a board runs; only the port differs (runtime_c/ports/host: TCP instead of a UART,
nanoseconds instead of cycles). So the whole protocol — framing, retries, error replies, bit
exact outputs — is testable with nothing but a C compiler, and a board or an emulator then
only adds its port.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tinyc.version import __version__
from tinyc.errors import BuildError, DeviceError, RunError
from tinyc.resources import runtime_dir

HOST_CFLAGS = "-std=c99 -O2 -Wall -Wextra -Werror -pedantic"
BUILD_DIR = "build-harness-host"
EXE_NAME = "harness_host"
_LISTEN_RE = re.compile(r"tinyc-port: listening on ([0-9.]+):(\d+)")


def _manifest(project_dir: Path) -> dict[str, Any]:
    path = project_dir / "tinyc.json"
    if not path.is_file():
        raise RunError(f"{project_dir} is not a tinyc output folder (no tinyc.json); run `tinyc compile` first")
    return json.loads(path.read_text())


def model_sources(project_dir: str | os.PathLike) -> list[Path]:
    """The generated model files (not the runtime, not a main): what the model hash covers."""
    project = Path(project_dir)
    prefix = _manifest(project)["prefix"]
    names = [f"{prefix}.c", f"{prefix}.h", f"{prefix}_weights.c", f"{prefix}_weights.h"]
    return [project / n for n in names if (project / n).is_file()]


def model_hash(project_dir: str | os.PathLike) -> str:
    """The hash a firmware of this project reports in HELLO: 16 hex digits of sha256 over the
    generated model sources, computed as board projects compute it (tinyc.device.project)."""
    from tinyc.device.project import model_hash as hash_files

    return hash_files({f.name: f.read_text() for f in model_sources(project_dir)})


def harness_context(
    project_dir: str | os.PathLike, counter_kind: str = "ns", hash_: str | None = None
) -> dict[str, Any]:
    """The render context of templates/project/harness_main.c.j2 for a compiled project: the
    manifest's render keys (rebuilt from tinyc.json and the generated header when the manifest
    does not carry them), arena_bytes, nlayers, version, model_hash and counter_kind."""
    from tinyc.numerics.text import c_identifier
    from tinyc.ops.base import ctype

    project = Path(project_dir)
    manifest = _manifest(project)
    prefix = manifest["prefix"]
    header = (project / f"{prefix}.h").read_text()

    def define(name: str) -> int:
        m = re.search(rf"#define {prefix.upper()}_{name} (\d+)", header)
        if m is None:
            raise RunError(f"{project / (prefix + '.h')} lacks {prefix.upper()}_{name}; recompile the model")
        return int(m.group(1))

    def views(kind: str, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        used: set[str] = set()
        out = []
        for k, spec in enumerate(specs):
            ident = f"{kind}_{c_identifier(spec['name'], f'{kind}{k}')}"
            while ident in used:
                ident += "_"
            used.add(ident)
            count = 1
            for d in spec["shape"]:
                count *= int(d)
            out.append({"ident": ident, "ctype": ctype(spec["dtype"]), "count": count})
        return out

    render = manifest.get("render") or {
        "prefix": prefix,
        "model": manifest.get("model", prefix),
        "inputs": views("in", manifest["inputs"]),
        "outputs": views("out", manifest["outputs"]),
    }
    return dict(
        render,
        arena_bytes=define("ARENA_BYTES"),
        nlayers=define("NUM_LAYERS"),
        version=__version__,
        model_hash=hash_ if hash_ is not None else model_hash(project),
        counter_kind=counter_kind,
    )


def render_harness_main(context: Mapping[str, Any]) -> str:
    """templates/project/harness_main.c.j2 rendered the way tinyc renders project files."""
    from tinyc.codegen.emitter import template_env

    env = template_env()
    return env.get_template("project/harness_main.c.j2").render(**context)


def build_host_harness(
    project_dir: str | os.PathLike, cc: str = "cc", cflags: str = HOST_CFLAGS, context: Mapping[str, Any] | None = None
) -> Path:
    """Compile the project's model + runtime + harness + host port into one executable
    (<project>/build-harness-host/harness_host) and return its path. Skipped when nothing
    changed since the last build."""
    project = Path(project_dir)
    build = project / BUILD_DIR
    build.mkdir(parents=True, exist_ok=True)
    main_c = build / "harness_main.c"
    text = render_harness_main(context if context is not None else harness_context(project))
    if not main_c.is_file() or main_c.read_text() != text:
        main_c.write_text(text)
    rt_project, rt_tinyc = project / "runtime", runtime_dir()
    runtime_srcs = sorted((rt_project / "src").glob("*.c"))
    if not any(p.name == "tinyc_harness.c" for p in runtime_srcs):  # project written before the harness existed
        runtime_srcs.append(rt_tinyc / "src" / "tinyc_harness.c")
    sources = model_sources(project)
    sources = (
        [p for p in sources if p.suffix == ".c"]
        + runtime_srcs
        + [rt_tinyc / "ports" / "host" / "tinyc_port_host.c", main_c]
    )
    exe = build / EXE_NAME
    cmd = [
        cc,
        *shlex.split(cflags),
        "-I",
        str(project),
        "-I",
        str(rt_project / "include"),
        "-I",
        str(rt_tinyc / "include"),
        *map(str, sources),
        "-o",
        str(exe),
        "-lm",
    ]
    digest = hashlib.sha256("\0".join(cmd).encode())
    for src in (
        sources
        + sorted(project.glob("*.h"))
        + sorted((rt_project / "include").glob("*.h"))
        + sorted((rt_tinyc / "include").glob("*.h"))
    ):
        digest.update(src.read_bytes())
    stamp = build / ".harness-sources"
    if exe.is_file() and stamp.is_file() and stamp.read_text() == digest.hexdigest():
        return exe
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        raise BuildError(f"C compiler '{cc}' not found (install gcc or pass cc=...)") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"building the host harness in {build} took over 300 s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
        raise BuildError(f"building the host harness in {build} failed:\n{tail}")
    stamp.write_text(digest.hexdigest())
    return exe


class HostHarness:
    """A running host harness process, listening on a free 127.0.0.1 port.

    Use as a context manager; `url` is what transport.open_link takes. The process serves one
    connection and exits when it ends (or on EXIT, with its code); close() stops it in any
    case (terminate, then kill) and reaps it."""

    def __init__(
        self, exe: str | os.PathLike, start_timeout: float = 10.0, env: Mapping[str, str] | None = None
    ) -> None:
        self.exe = Path(exe)
        self._lines: list[str] = []
        self._ready = threading.Event()
        self.host, self.port = "127.0.0.1", 0
        full_env = dict(os.environ, **(env or {}), TINYC_PORT_LISTEN="0")
        try:
            self.proc = subprocess.Popen(
                [str(self.exe)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=full_env,
                text=True,
                errors="replace",
            )
        except OSError as exc:
            raise DeviceError(f"cannot start host harness {self.exe}: {exc}") from None
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        if not self._ready.wait(start_timeout):
            self.close()
            raise DeviceError(
                f"host harness {self.exe} did not start listening within {start_timeout:g} s; "
                f"its output: {self.log.strip() or '(none)'}"
            )
        if not self.port:
            self.close()
            raise DeviceError(
                f"host harness {self.exe} exited before listening; its output: {self.log.strip() or '(none)'}"
            )

    def _read_log(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.append(line)
            m = _LISTEN_RE.search(line)
            if m and not self.port:
                self.host, self.port = m.group(1), int(m.group(2))
                self._ready.set()
        self._ready.set()  # exited: unblock the constructor

    @property
    def url(self) -> str:
        return f"socket://{self.host}:{self.port}"

    @property
    def log(self) -> str:
        """Everything the process printed so far."""
        return "".join(self._lines)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): a device that hangs without closing the link."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """Kill it abruptly: a device that dies (its end of the link closes)."""
        if self.alive():
            self.proc.kill()

    def wait(self, timeout: float) -> int:
        """Exit status, waiting at most `timeout` seconds (DeviceError if still running). Once it
        has exited, `log` holds all it printed (the reader thread has drained the pipe)."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise DeviceError(f"host harness {self.exe} still running after {timeout:g} s") from None
        self._reader.join(timeout)
        return code

    def close(self) -> None:
        if self.alive():
            try:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.terminate()
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        deadline = time.monotonic() + 5
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                self.proc.wait(0.5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._reader.join(2)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> HostHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
