"""The OpenCL target: an output folder with the program and packed weights, and a pyopencl runner.

The runner holds one context and one in-order command queue per model: the weights are uploaded
once into one read-only buffer, the arena is one device buffer at the memory plan's size, and every
kernel takes those two buffers (its operands are fixed offsets in them). Each inference writes the
inputs at their arena offsets, enqueues the kernels in order and reads the outputs back; with
`profile=True` every kernel's time comes from its event's profiling counters.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import numpy as np

from tinyc.errors import BuildError, RunError, UsageError
from tinyc.quantize.feeds import prepare_feeds, stack_outputs, to_model_input
from tinyc.codegen.manifest import MANIFEST, load_manifest
from tinyc.targets.host import _write_if_changed


def write_project(
    out_dir: Path, files: Mapping[str, str], blobs: Mapping[str, bytes], manifest: dict[str, Any]
) -> None:
    """The program, the weights blob and tinyc.json (which says it is an OpenCL folder)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        _write_if_changed(out_dir / name, text)
    for name, data in blobs.items():
        path = out_dir / name
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
    public = {k: v for k, v in manifest.items() if k != "render"}
    _write_if_changed(out_dir / MANIFEST, json.dumps(public, indent=2) + "\n")


def is_opencl(out_dir: str | os.PathLike) -> bool:
    return load_manifest(Path(out_dir)).get("target") == "opencl"


# ------------------------------------------------------------------------------------------
# platforms and devices
def _cl() -> Any:
    try:
        import pyopencl
    except ImportError:
        raise RunError(
            "the OpenCL target needs pyopencl (pip install 'tinyc[opencl]') and an OpenCL "
            "driver (on Linux without a GPU: the PoCL CPU driver, e.g. apt-get install "
            "pocl-opencl-icd)"
        ) from None
    return pyopencl


def _platforms() -> list[Any]:
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # the ICD loader reports "no platform" as an error (PLATFORM_NOT_FOUND_KHR)
        platforms = []
    if not platforms:
        raise RunError(
            "no OpenCL platform found: install an OpenCL driver (a GPU vendor's, or PoCL for "
            "the CPU: apt-get install pocl-opencl-icd) and check it with `tinyc devices`"
        )
    return platforms


def _devices(platform: Any) -> list[Any]:
    try:
        return list(platform.get_devices())
    except Exception:  # a platform without devices raises DEVICE_NOT_FOUND
        return []


@dataclass
class DeviceInfo:
    """One OpenCL device as `tinyc devices` lists it."""

    id: str  # "platform:device", as --device takes it
    platform: str
    name: str
    kind: str  # GPU, CPU, accelerator
    version: str
    compute_units: int
    global_mem_bytes: int
    max_alloc_bytes: int
    default: bool = False


def _kind(device: Any) -> str:
    cl = _cl()
    t = device.type
    return "GPU" if t & cl.device_type.GPU else "CPU" if t & cl.device_type.CPU else "accelerator"


def list_devices() -> list[DeviceInfo]:
    """Every device of every platform; the one `select_device(None)` picks is marked default."""
    infos = []
    for p, platform in enumerate(_platforms()):
        for d, dev in enumerate(_devices(platform)):
            infos.append(
                DeviceInfo(
                    f"{p}:{d}",
                    platform.name.strip(),
                    dev.name.strip(),
                    _kind(dev),
                    dev.version.strip(),
                    int(dev.max_compute_units),
                    int(dev.global_mem_size),
                    int(dev.max_mem_alloc_size),
                )
            )
    if infos:
        chosen = _default_id(infos)
        for info in infos:
            info.default = info.id == chosen
    return infos


def _default_id(infos: list[DeviceInfo]) -> str:
    gpus = [i for i in infos if i.kind == "GPU"]
    return (gpus or infos)[0].id


def devices_table(infos: list[DeviceInfo]) -> str:
    """One row per device; `*` marks the one `tinyc run` uses without --device."""
    if not infos:
        return "no OpenCL devices found"
    rows = [f"  {'id':<6} {'kind':<11} {'CUs':>4} {'memory':>9}  {'device':<40}  platform / version"]
    for i in infos:
        rows.append(
            f"{'*' if i.default else ' '} {i.id:<6} {i.kind:<11} {i.compute_units:>4} "
            f"{i.global_mem_bytes / 2**20:>6.0f} MB  {i.name[:40]:<40}  {i.platform} / {i.version}"
        )
    return "\n".join(rows + ["(* = default: the first GPU, else the first device; choose with --device ID)"])


def select_device(spec: str | None) -> Any:
    """The device "platform:device" names (indices from `tinyc devices`); by default the first
    GPU, else the first device."""
    platforms = _platforms()
    if spec is None:
        infos = list_devices()
        if not infos:
            raise RunError("the OpenCL platforms found have no devices (`tinyc devices` lists them)")
        spec = _default_id(infos)
    p_text, sep, d_text = str(spec).partition(":")
    try:
        p, d = int(p_text), int(d_text or 0)
    except ValueError:
        raise UsageError(
            f"--device '{spec}': expected PLATFORM:DEVICE indices such as 0:0 (see `tinyc devices`)"
        ) from None
    if not 0 <= p < len(platforms):
        raise UsageError(f"--device '{spec}': there are {len(platforms)} OpenCL platform(s) (see `tinyc devices`)")
    devs = _devices(platforms[p])
    if not 0 <= d < len(devs):
        raise UsageError(
            f"--device '{spec}': platform {p} ({platforms[p].name.strip()}) has {len(devs)} "
            f"device(s) (see `tinyc devices`)"
        )
    return devs[d]


# ------------------------------------------------------------------------------------------
# the runner
def build_options(device: Any) -> list[str]:
    """OpenCL C 1.2, and correctly rounded division/sqrt where the device offers it (float results
    then differ from the C kernels' only in the math library's functions)."""
    cl = _cl()
    opts = ["-cl-std=CL1.2"]
    if device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
        opts.append("-cl-fp32-correctly-rounded-divide-sqrt")
    return opts


class OpenCLModel:
    """A compiled OpenCL folder loaded on one device: program built, weights uploaded, arena allocated."""

    def __init__(self, out_dir: str | os.PathLike, device: str | None = None, profile: bool = False) -> None:
        cl = _cl()
        out = Path(out_dir)
        self.manifest = load_manifest(out)
        if self.manifest.get("target") != "opencl":
            raise UsageError(f"{out} was not compiled for OpenCL (compile with --target opencl)")
        spec = self.manifest["opencl"]
        self.device = select_device(device)
        self.context = cl.Context([self.device])
        props = cl.command_queue_properties.PROFILING_ENABLE if profile else 0
        self.queue = cl.CommandQueue(self.context, properties=props)
        self.profile = profile
        self._check_limits(spec)
        source = (out / spec["program"]).read_text()
        try:
            self.program = cl.Program(self.context, source).build(options=build_options(self.device))
        except cl.RuntimeError as exc:  # BUILD_PROGRAM_FAILURE: the message carries the build log
            log = str(exc)
            raise BuildError(
                f"OpenCL program {out / spec['program']} failed to build on {self.device.name.strip()}:\n{_tail(log)}"
            ) from None
        mf = cl.mem_flags
        weights = (out / spec["weights"]).read_bytes()
        self.weights = cl.Buffer(
            self.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.frombuffer(weights, np.uint8)
        )
        self.arena = cl.Buffer(self.context, mf.READ_WRITE, size=max(16, int(spec["arena_bytes"])))
        self.kernels = []
        for k in spec["kernels"]:
            kern = getattr(self.program, k["fn"])
            local = int(k.get("local_bytes") or 0)
            if local:  # a third argument: the work-group's local memory (see the manifest's local_bytes)
                self._check_local(k, local)
                kern.set_args(self.arena, self.weights, cl.LocalMemory(local))
            else:
                kern.set_args(self.arena, self.weights)
            self.kernels.append((k, kern, self._launch(k, kern)))
        self.inputs = self.manifest["inputs"]
        self.outputs = self.manifest["outputs"]
        self.last_times_ns: list[int] = []
        self.last_span_ns = 0

    def _check_limits(self, spec: dict[str, Any]) -> None:
        """A buffer beyond the device's allocation limit is refused with the numbers, before
        the driver fails somewhere less clear."""
        limit = int(self.device.max_mem_alloc_size)
        for what, size in (("arena", spec["arena_bytes"]), ("weights", spec["weights_bytes"])):
            if size > limit:
                raise RunError(
                    f"the model's {what} buffer needs {size:,} B but {self.device.name.strip()} "
                    f"allocates at most {limit:,} B per buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE)"
                )
        total = int(spec["arena_bytes"]) + int(spec["weights_bytes"])
        if total > int(self.device.global_mem_size):
            raise RunError(
                f"arena + weights need {total:,} B but {self.device.name.strip()} has "
                f"{int(self.device.global_mem_size):,} B of global memory"
            )

    def _check_local(self, k: dict[str, Any], nbytes: int) -> None:
        """A kernel whose local memory the device lacks is refused with the numbers (its schedule's
        local_mem knob is what asks for it)."""
        have = int(self.device.local_mem_size)
        if nbytes > have:
            raise RunError(
                f"kernel {k['fn']} ('{k['name']}') needs {nbytes:,} B of local memory but "
                f"{self.device.name.strip()} has {have:,} B (CL_DEVICE_LOCAL_MEM_SIZE); "
                f"compile that layer with the schedule knob local_mem=0"
            )

    def _launch(self, k: dict[str, Any], kern: Any) -> tuple[tuple[int], tuple[int] | None]:
        """(global, local) sizes: the local size knob, capped by what device and kernel allow;
        the global size rounded up to a multiple of it (the kernels' loops skip the extra items).
        Kernels that share work within a work-group read the local size they get
        (get_local_size), so capping never changes a result."""
        cl = _cl()
        n = max(1, int(k["global_size"]))
        local = int(k.get("local_size") or 0)
        if n == 1 or local <= 0:
            return (n,), None
        cap = min(
            int(self.device.max_work_group_size),
            int(kern.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device)),
        )
        local = max(1, min(local, cap))
        return (-(-n // local) * local,), (local,)

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cl = _cl()
        io = self.manifest["opencl"]
        for spec, place in zip(self.inputs, io["inputs"]):
            arr = np.ascontiguousarray(to_model_input(spec, feeds[spec["name"]]))
            if arr.nbytes:
                cl.enqueue_copy(self.queue, self.arena, arr, dst_offset=int(place["offset"]), is_blocking=False)
        events = []
        try:
            for position in range(len(self.kernels)):
                events.append(self.launch(position))
            outs = {}
            for spec, place in zip(self.outputs, io["outputs"]):
                arr = np.empty(spec["shape"], dtype=spec["dtype"])
                if arr.nbytes:
                    buf = self.weights if place["buffer"] == "weights" else self.arena
                    cl.enqueue_copy(self.queue, arr, buf, src_offset=int(place["offset"]), is_blocking=False)
                outs[spec["name"]] = arr
            self.queue.finish()
        except cl.Error as exc:
            raise RunError(f"OpenCL run failed on {self.device.name.strip()}: {exc}") from None
        if self.profile:
            self.last_times_ns = [int(e.profile.end - e.profile.start) for e in events]
            self.last_span_ns = int(events[-1].profile.end - events[0].profile.start) if events else 0
        return outs

    def launch(self, position: int) -> Any:
        """Enqueue the kernel at `position` (program order) with its launch sizes; its event."""
        _, kern, (gsize, lsize) = self.kernels[position][:3]
        return _cl().enqueue_nd_range_kernel(self.queue, kern, gsize, lsize)

    def kernel_times(self) -> list[dict[str, Any]]:
        """Per-kernel device time of the last inference (needs profile=True)."""
        if not self.profile:
            raise UsageError("kernel times need the model loaded with profile=True")
        return [
            {
                "index": k["index"],
                "name": k["name"],
                "op": k["op"],
                "fn": k["fn"],
                "ns": t,
                "global_size": g[0],
                "local_size": (loc[0] if loc else 0),
            }
            for (k, _, (g, loc)), t in zip(self.kernels, self.last_times_ns)
        ]


def _tail(log: str, lines: int = 60) -> str:
    rows = log.strip().splitlines()
    return "\n".join(rows[-lines:])


def run_batch(
    out_dir: str | os.PathLike, inputs: Mapping[str, np.ndarray], device: str | None = None, profile: bool = False
) -> dict[str, np.ndarray]:
    """`tinyc.targets.host.run_batch` on an OpenCL device (same input conventions). With profile,
    the outputs also hold "__kernel_ns__": per-kernel device times [inferences, kernels]."""
    feeds = prepare_feeds(load_manifest(Path(out_dir)), inputs)  # the data is checked before a device is touched
    model = OpenCLModel(out_dir, device=device, profile=profile)
    manifest = model.manifest
    n = feeds.n
    results: dict[str, list[np.ndarray]] = {o["name"]: [] for o in manifest["outputs"]}
    times = []
    from tinyc.progress import track

    for k in track(range(n), "inferences", unit="inference", show=False if n < 200 else None):
        for name, value in model(feeds.raw(k)).items():
            results[name].append(value)
        if profile:
            times.append(model.last_times_ns)
    out = stack_outputs(results, feeds.mode)
    if profile:
        out["__kernel_ns__"] = np.asarray(times, dtype=np.int64)
    return out


def run_measured(
    out_dir: str | os.PathLike, inputs: Mapping[str, np.ndarray], device: str | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """`run_batch` with event profiling on, plus what one inference took on the device: the median
    span from the first kernel's start to the last one's end (as `tinyc profile` calls RUN)."""
    import statistics

    feeds = prepare_feeds(load_manifest(Path(out_dir)), inputs)
    model = OpenCLModel(out_dir, device=device, profile=True)
    results: dict[str, list[np.ndarray]] = {o["name"]: [] for o in model.outputs}
    spans: list[int] = []
    for k in range(feeds.n):
        for name, value in model(feeds.raw(k)).items():
            results[name].append(value)
        spans.append(model.last_span_ns)
    name = model.device.name.strip()
    measured = {
        "board": f"opencl:{name}",
        "per_inference": float(statistics.median(spans)) if spans else 0.0,
        "units": "ns",
        "units_note": f"OpenCL event profiling on {name}: first kernel's start to last one's end, median",
    }
    return stack_outputs(results, feeds.mode), measured


def validate_opencl(
    out_dir: str | os.PathLike,
    data: Mapping[str, Any],
    device: str | None = None,
    labels: np.ndarray | None = None,
    against: str = "auto",
    raw: bool = False,
    output: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """`tinyc validate` on an OpenCL folder, on `device`: the program's outputs vs the golden model
    vs onnxruntime or TFLite Micro (tinyc.device.validation; the same fields as a board's)."""
    from tinyc.device.runner import load_golden_graph
    from tinyc.device.validation import validate_outputs

    out = Path(out_dir)
    manifest = load_manifest(out)
    graph, source = load_golden_graph(out)
    return validate_outputs(
        out,
        manifest,
        data,
        lambda feeds: run_measured(out, feeds, device=device),
        graph,
        source,
        labels=labels,
        against=against,
        raw=raw,
        who="OpenCL",
        output=output,
    )
