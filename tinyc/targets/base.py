"""The Target interface: everything the pipeline, the API and the tuner ask of a place code runs.

A target is chosen once — by `tinyc.targets.registry.get_target` from the compile options, or by
`project_target` from a compiled folder — and every later step asks it instead of comparing target
names: which schedule target (and so which `Isa`) codegen renders for, how the project folder is
written and checked, how it is built, run and profiled, and how the tuning log keys its records.
The tuner's measurers (tinyc.tune.measure) are chosen per Target class; they live with the tuner
because they measure its batches.

The device side (tinyc.device) sits below this layer: a board target uses it to flash and talk
to the firmware, passing its own build as the step before flashing.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tinyc.errors import RunError, UsageError
from tinyc.ir import Graph
from tinyc.ir.isa import Isa


def load_inputs(inputs: Any, what: str = "input file") -> Mapping[str, Any]:
    """Input data as given: an .npz/.npy path (read without unpickling), a mapping name -> array,
    or one array for a one-input model. Checked against the model by every runner through
    tinyc.quantize.feeds.prepare_feeds (names, dtype, shape, N >= 1, values)."""
    from tinyc.quantize.feeds import load_arrays

    if isinstance(inputs, (str, os.PathLike)):
        return load_arrays(inputs, what, RunError)
    if isinstance(inputs, Mapping):
        return dict(inputs)
    if isinstance(inputs, np.ndarray):
        return {"x": inputs}
    raise UsageError(
        "inputs must be a path to an .npz/.npy file, a mapping of name -> array, or one array (one-input models)"
    )


def refuse_device(device: str | None) -> None:
    """Only an OpenCL folder runs on a chosen device: a `device` for any other folder is an error."""
    if device is not None:
        raise UsageError("--device is for folders compiled with --target opencl")


class Target(ABC):
    """One kind of output folder: host library, OpenCL program, firmware project or firmware library."""

    #: what report.json and the tuning log call it (a board's name for board targets)
    name: str
    #: the schedule target codegen renders for ("host", "opencl", "mcu+dsp", ...)
    schedule_target: str
    #: whether a compiled folder runs on a chosen OpenCL device (`device` = "platform:device"); the
    #: tuning log then keys its records by that device's name
    selects_device: bool = False
    #: whether it is a microcontroller board (RAM budget, board features for the cost model)
    board: dict[str, Any] | None = None

    @property
    def isa(self) -> Isa:
        """What the generated code may use: the parsed schedule target."""
        return Isa.parse(self.schedule_target)

    def report_fields(self) -> dict[str, Any]:
        """What report.json says about the target, beyond "target"."""
        return {}

    @abstractmethod
    def write_project(self, out: Path, gen: Any, graph: Graph, source_model: str | None) -> None:
        """Write the generated sources (`gen`: tinyc.codegen.GeneratedProject) as this target's folder."""

    def check(self, report: Mapping[str, Any], manifest: Mapping[str, Any]) -> None:
        """Refuse a compiled model that cannot work on the target (a board's flash and RAM)."""
        return None  # what compiled runs on the host and on an OpenCL device

    @abstractmethod
    def build(self, out: Path, force: bool = False) -> dict[str, Any]:
        """Build the folder with the target's toolchain; what it returns goes into the result report."""

    def run(self, out: Path, inputs: Any, port: str | None = None, device: str | None = None) -> dict[str, np.ndarray]:
        """Outputs of the compiled model for `inputs` (see `tinyc.api.run`)."""
        from tinyc.targets import host

        refuse_device(device)
        return host.run_batch(out, load_inputs(inputs))

    def device_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Options for the device side's session (tinyc.device.runner): a board adds its build."""
        return dict(options)

    def run_on_board(self, out: Path, inputs: Any, port: str | None = None, **options: Any) -> Any:
        """Outputs and counts over the serial harness (`DeviceRun`; a board folder only: the device
        side names the folder it refuses)."""
        from tinyc.device.runner import run_on_device

        return run_on_device(out, load_inputs(inputs), port=port, **self.device_options(options))

    def profile(
        self,
        out: Path,
        inputs: Any = None,
        port: str | None = None,
        device: str | None = None,
        repeat: int = 10,
        **options: Any,
    ) -> dict[str, Any]:
        """Per-layer counts on the board (see `tinyc.api.profile`)."""
        from tinyc.device.runner import profile_on_device

        refuse_device(device)
        feeds = load_inputs(inputs) if inputs is not None else None
        return profile_on_device(out, feeds, port=port, **self.device_options(options))

    def validate(
        self,
        out: Path,
        data: Any,
        port: str | None = None,
        labels: Any = None,
        against: str = "auto",
        device: str | None = None,
        raw: bool = False,
        output: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Device outputs vs the golden model and onnxruntime or TFLite Micro (see `tinyc.api.validate`)."""
        from tinyc.device.runner import validate_on_device

        refuse_device(device)
        feeds = load_inputs(data, "data file")
        return validate_on_device(
            out,
            feeds,
            port=port,
            labels=labels,
            against=against,
            raw=raw,
            output=output,
            **self.device_options(options),
        )

    def flash(self, out: Path, port: str | None = None, **options: Any) -> dict[str, Any]:
        """Flash (or start) the firmware and return its HELLO (see `tinyc.api.flash`)."""
        from tinyc.device.runner import connect

        with connect(out, port, **self.device_options(options)) as dev:
            return dict(dev.info, units=dev.units.name)
