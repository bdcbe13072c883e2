"""Run, profile and validate a firmware project on its board: build, flash, talk the harness protocol.

One session per command: an emulated board's QEMU is started for it and stopped after it; a real
board is flashed only when the firmware it reports (HELLO's model hash) is not this project's.
N inferences of an npz with a leading sample dimension go over one session, without reflashing.

Counts: the firmware reports ticks of its counter. On real boards those are core cycles (DWT, or
SysTick at the core clock). Under QEMU there are no cycles: with ``-icount shift=S,sleep=off`` one
guest instruction advances virtual time by 2^S ns, so ticks / (clock_hz * 2^S / 1e9) is the number
of executed instructions — deterministic, and reported under that name.
"""

from __future__ import annotations

import json
import os
import pickle
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from tinyc.errors import DeviceError, RunError, UsageError
from tinyc.quantize.feeds import prepare_feeds, stack_outputs, to_model_input
from tinyc.device.validation import (  # noqa: F401  (re-exported: the CLI prints and checks through here)
    ORACLES,
    check_validation,
    validate_outputs,
    validation_table,
)

#: What `validate` compares against: the graph the firmware was generated from (for the golden model).
GOLDEN_GRAPH = "golden_graph.pkl"


@dataclass
class CounterUnits:
    """How to read the firmware's ticks on this board."""

    name: str  # "instructions" (QEMU icount) or "cycles"
    ticks_per_unit: float
    note: str

    def convert(self, ticks: int | float) -> float:
        return float(ticks) / self.ticks_per_unit


def counter_units(board: Mapping[str, Any]) -> CounterUnits:
    """Instructions for emulated boards (see the module docstring), cycles for real ones."""
    if board.get("emulated"):
        shift = int(board["emulator"]["icount_shift"])
        factor = float(board["cpu"]["clock_hz"]) * (1 << shift) / 1e9
        return CounterUnits(
            "instructions",
            factor,
            f"QEMU instruction counts (-icount shift={shift}: {factor:g} SysTick ticks per instruction), not cycles",
        )
    kind = board.get("cycle_counter", {}).get("kind", "dwt")
    return CounterUnits("cycles", 1.0, f"core cycles ({kind.upper()} counter)")


@dataclass
class DeviceConnection:
    """An open harness session on a board."""

    client: Any  # tinyc.device.client.HarnessClient
    session: Any  # tinyc.device.flashers.DeviceSession
    board: dict[str, Any]
    manifest: dict[str, Any]
    info: dict[str, Any]
    units: CounterUnits


def _project(project_dir: str | os.PathLike) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    from tinyc.codegen.manifest import load_manifest
    from tinyc.device.project import load_project_board

    out = Path(project_dir)
    manifest = load_manifest(out)
    if "board" not in manifest:
        raise UsageError(f"{out} is a host project; compile with --board to run on a device")
    return out, manifest, load_project_board(out)


def _with_log(exc: DeviceError, session: Any) -> DeviceError:
    """A device error, plus the emulator's last words when it died (a crash report, a lockup)."""
    if session is not None and hasattr(session, "alive") and not session.alive():
        tail = "\n".join(str(session.log).strip().splitlines()[-12:])
        return DeviceError(
            f"{exc}\n  the emulator exited (code {session.returncode})" + (f"; its output:\n{tail}" if tail else "")
        )
    return exc


@contextmanager
def connect(
    project_dir: str | os.PathLike,
    port: str | None = None,
    timeout: float = 2.0,
    run_timeout: float = 120.0,
    progress: bool | None = None,
    build: Callable[..., Any] | None = None,
) -> Iterator[DeviceConnection]:
    """Flash/start the firmware, handshake; stop the emulator afterwards. `build(out, progress=...)`
    (the board target's build: tinyc.targets.board) runs first when given, after the project and
    its data are checked; the device side itself only talks to built firmware."""
    from tinyc.device import flashers
    from tinyc.device.client import HarnessClient
    from tinyc.device.transport import open_link

    out, manifest, board = _project(project_dir)
    if build is not None:
        build(out, progress=progress)
    elf = out / manifest["firmware"]
    session = None
    client = None
    try:
        if not board.get("emulated") and port:
            client = _try_existing(port, manifest, timeout, run_timeout)
        if client is None:
            session = flashers.start(board, elf, port=port)
            client = HarnessClient(
                open_link(session.url, timeout),
                port_name=port or f"{board['name']} (QEMU, {session.url})",
                timeout=timeout,
                run_timeout=run_timeout,
            )
        info = client.hello()
        if info["model_hash"] != manifest["model_hash"]:
            raise DeviceError(
                f"{client.port_name} runs model '{info['model']}' (hash {info['model_hash']}), not "
                f"this project's '{manifest['model']}' ({manifest['model_hash']}); flash it again"
            )
        yield DeviceConnection(client, session, board, manifest, info, counter_units(board))
    except DeviceError as exc:
        raise _with_log(exc, session) from None
    finally:
        if client is not None:
            if session is not None and board.get("emulated") and session.alive():
                try:
                    client.exit(0)
                    session.wait_exit(2.0)
                except Exception:  # noqa: BLE001  (closing below stops it either way)
                    pass
            client.close()
        if session is not None:
            session.close()


def _try_existing(port: str, manifest: dict[str, Any], timeout: float, run_timeout: float) -> Any:
    """A client on `port` when the board already runs this project's firmware, else None (flash it)."""
    from tinyc.device.client import HarnessClient
    from tinyc.device.transport import open_link

    try:
        client = HarnessClient(
            open_link(port, timeout), port_name=port, timeout=timeout, run_timeout=run_timeout, retries=1
        )
        if client.hello()["model_hash"] == manifest["model_hash"]:
            return client
        client.close()
    except DeviceError:
        pass
    return None


# -------------------------------------------------------------------------------- bytes <-> arrays


def pack_inputs(manifest: Mapping[str, Any], feeds: Mapping[str, np.ndarray]) -> bytes:
    """All inputs, manifest order, raw little-endian: the WRITE_INPUT layout. Each input is one
    sample, checked and converted by tinyc.quantize.feeds (a bad value never reaches the board)."""
    parts = []
    for spec in manifest["inputs"]:
        if spec["name"] not in feeds:
            raise RunError(f"input data lacks model input {spec['name']}")
        arr = to_model_input(spec, feeds[spec["name"]])
        if list(arr.shape) != list(spec["shape"]):
            raise UsageError(f"input '{spec['name']}' has shape {list(arr.shape)}, the model takes {spec['shape']}")
        parts.append(np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<"), copy=False)).tobytes())
    return b"".join(parts)


def unpack_outputs(manifest: Mapping[str, Any], data: bytes) -> dict[str, np.ndarray]:
    """READ_OUTPUT bytes -> one array per output."""
    outs, pos = {}, 0
    for spec in manifest["outputs"]:
        dt = np.dtype(spec["dtype"]).newbyteorder("<")
        n = int(np.prod(spec["shape"], dtype=np.int64)) * dt.itemsize
        if pos + n > len(data):
            raise DeviceError(f"the device sent {len(data)} output bytes, the model has more ({pos + n}+)")
        outs[spec["name"]] = (
            np.frombuffer(data[pos : pos + n], dtype=dt).astype(dt.newbyteorder("=")).reshape(spec["shape"])
        )
        pos += n
    return outs


# -------------------------------------------------------------------------------- run


@dataclass
class DeviceRun:
    """Outputs of N inferences and what each cost."""

    outputs: dict[str, np.ndarray]
    ticks: list[int]
    units: CounterUnits
    info: dict[str, Any]

    @property
    def per_inference(self) -> float:
        return self.units.convert(sum(self.ticks) / max(1, len(self.ticks)))


def run_on_device(
    project_dir: str | os.PathLike,
    inputs: Mapping[str, np.ndarray],
    port: str | None = None,
    progress: bool | None = None,
    **connect_options: Any,
) -> DeviceRun:
    """Run every sample of `inputs` (shapes as for the host: exact, or a leading N) on the board."""
    from tinyc.progress import track

    _, manifest, _ = _project(project_dir)
    data = prepare_feeds(manifest, inputs)  # checked before the firmware is built or flashed
    n = data.n
    results: dict[str, list[np.ndarray]] = {o["name"]: [] for o in manifest["outputs"]}
    ticks: list[int] = []
    show = False if n < 4 else progress  # a bar on a terminal, else one plain line (tinyc.progress)
    with connect(project_dir, port, progress=progress, **connect_options) as dev:
        for k in track(range(n), f"inferences on {dev.board['name']}", unit="inf", show=show):
            dev.client.write_input(pack_inputs(manifest, data.raw(k)))
            ticks.append(dev.client.run(1))
            for name, value in unpack_outputs(manifest, dev.client.read_output()).items():
                results[name].append(value)
        return DeviceRun(stack_outputs(results, data.mode), ticks, dev.units, dict(dev.info))


# -------------------------------------------------------------------------------- profile


def profile_on_device(
    project_dir: str | os.PathLike,
    inputs: Mapping[str, np.ndarray] | None = None,
    port: str | None = None,
    **connect_options: Any,
) -> dict[str, Any]:
    """Per-layer counts of one inference (the first sample of `inputs`, zeros when none), with the
    MACs of each layer from report.json, MACs per count and share of the total; plus RUN's total
    for the same input, so the two can be checked against each other."""
    out, manifest, board = _project(project_dir)
    if inputs is not None:
        feeds = prepare_feeds(manifest, inputs).raw(0)
    else:
        feeds = {s["name"]: np.zeros(s["shape"], s["dtype"]) for s in manifest["inputs"]}
    macs_by_kernel = layer_macs(out)
    with connect(project_dir, port, **connect_options) as dev:
        dev.client.write_input(pack_inputs(manifest, feeds))
        run_ticks = dev.client.run(1)
        prof = dev.client.profile()
        names = dev.client.layer_names()
        units = dev.units
    total = sum(prof)
    layers = []
    for i, t in enumerate(prof):
        count = units.convert(t)
        macs = macs_by_kernel.get(i, 0)
        layers.append(
            {
                "index": i,
                "name": names[i] if i < len(names) else f"layer{i}",
                "ticks": int(t),
                units.name: round(count, 1),
                "macs": macs,
                f"macs_per_{units.name[:-1]}": (macs / count) if count else 0.0,
                "share": (t / total) if total else 0.0,
            }
        )
    total_macs = sum(macs_by_kernel.values())
    run_units = units.convert(run_ticks)
    return {
        "board": board["name"],
        "model": manifest["model"],
        "units": units.name,
        "units_note": units.note,
        "layers": layers,
        "profile_total": units.convert(prof.total),
        "layers_total": units.convert(total),
        "run_total": run_units,
        "macs": total_macs,
        f"macs_per_{units.name[:-1]}": (total_macs / run_units) if run_units else 0.0,
        "ticks": {
            "run": int(run_ticks),
            "profile": int(prof.total),
            "layers": int(total),
            "set_inputs": int(prof.set_inputs),
            "get_outputs": int(prof.get_outputs),
        },
    }


def layer_macs(out_dir: str | os.PathLike) -> dict[int, int]:
    """MACs per code layer (the `_run_layer` index report.json calls "kernel"; view and alias nodes
    have none), summed where several graph nodes make one layer: every profile's MACs column."""
    report = json.loads((Path(out_dir) / "report.json").read_text())
    macs: dict[int, int] = {}
    for layer in report.get("layers", []):
        if layer.get("kernel") is not None:
            macs[int(layer["kernel"])] = macs.get(int(layer["kernel"]), 0) + int(layer["macs"])
    return macs


def profile_table(p: Mapping[str, Any]) -> str:
    """A plain-text table of `profile_on_device`'s result."""
    u = p["units"]
    per = f"macs_per_{u[:-1]}"
    rows = [f"{'#':>3}  {'layer':<32} {u:>14} {'MACs':>12} {'MACs/' + u[:5]:>10} {'share':>7}"]
    for layer in p["layers"]:
        rows.append(
            f"{layer['index']:>3}  {layer['name'][:32]:<32} {layer[u]:>14,.0f} {layer['macs']:>12,} "
            f"{layer[per]:>10.3f} {100 * layer['share']:>6.1f}%"
        )
    rows.append(f"     {'layers total':<32} {p['layers_total']:>14,.0f} {p['macs']:>12,}")
    rows.append(f"     {'RUN (one inference)':<32} {p['run_total']:>14,.0f}              {p[per]:>10.3f}")
    rows.append(f"  ({p['units_note']})")
    return "\n".join(rows)


# -------------------------------------------------------------------------------- validate


def save_golden_graph(out_dir: Path, graph: Any, source_model: str | None) -> None:
    """Keep the graph the firmware came from (and where the ONNX model is) for `validate`."""
    with open(out_dir / GOLDEN_GRAPH, "wb") as f:
        pickle.dump({"graph": graph, "source_model": source_model}, f)


#: the only globals a golden graph written by `save_golden_graph` refers to: the IR's dataclasses and
#: numpy's array reconstruction (numpy 1.x and 2.x module names)
_GOLDEN_GLOBALS = frozenset(
    {
        ("tinyc.ir.graph", "Graph"),
        ("tinyc.ir.graph", "Node"),
        ("tinyc.ir.graph", "Tensor"),
        ("tinyc.ir.graph", "QuantParams"),
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.multiarray", "scalar"),
    }
)


class _GoldenUnpickler(pickle.Unpickler):
    """A project folder may come from someone else, and unpickling can call any importable function
    (os.system, ...): only the classes a golden graph is made of may be loaded."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _GOLDEN_GLOBALS:
            raise pickle.UnpicklingError(f"it refers to {module}.{name}")
        return super().find_class(module, name)


def _load_golden(out: Path) -> tuple[Any, str | None]:
    path = out / GOLDEN_GRAPH
    if not path.is_file():
        raise UsageError(f"{out} has no {GOLDEN_GRAPH}: compile the model again with this tinyc to validate it")
    try:
        with open(path, "rb") as f:
            data = _GoldenUnpickler(f).load()
        graph = data["graph"]
    except Exception as exc:  # UnpicklingError, EOFError, a wrong structure, ...
        raise UsageError(
            f"{path} is not a golden graph written by tinyc ({type(exc).__name__}: {exc}); refusing "
            f"to load it (pickled files can run code): compile the model again to validate it"
        ) from None
    from tinyc.ir import Graph

    if not isinstance(graph, Graph):
        raise UsageError(
            f"{path} is not a golden graph written by tinyc (it holds a {type(graph).__name__}): "
            f"compile the model again to validate it"
        )
    return graph, data.get("source_model")


def load_golden_graph(out_dir: str | os.PathLike) -> tuple[Any, str | None]:
    """The golden graph saved at compile and the source model's path (for every target's validate);
    a missing or foreign file is a UsageError that says to compile again."""
    return _load_golden(Path(out_dir))


def validate_on_device(
    project_dir: str | os.PathLike,
    data: Mapping[str, np.ndarray],
    port: str | None = None,
    labels: np.ndarray | None = None,
    against: str = "auto",
    raw: bool = False,
    output: str | os.PathLike[str] | None = None,
    **connect_options: Any,
) -> dict[str, Any]:
    """Device vs the golden model (must be equal bit for bit for int8 graphs; float within 1e-4
    relative), vs an independent reference on the source model — onnxruntime for ONNX, TFLite
    Micro's interpreter for .tflite (`against`: "auto", "onnxruntime", "tflm" or "none"; for
    TFLite Micro bit-exactness) — and accuracy against labels (`labels`, or a 'labels' key in
    `data`); RMSE, cosine and max/mean errors per output and comparison (tinyc.device.validation)."""
    out, manifest, board = _project(project_dir)
    graph, source = _load_golden(out)

    def on_board(feeds: Mapping[str, np.ndarray]) -> tuple[Mapping[str, np.ndarray], dict[str, Any]]:
        dev = run_on_device(out, feeds, port, **connect_options)
        return dev.outputs, {"board": board["name"], "per_inference": dev.per_inference, "units": dev.units.name}

    return validate_outputs(
        out, manifest, data, on_board, graph, source, labels=labels, against=against, raw=raw, output=output
    )
