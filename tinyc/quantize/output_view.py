"""What `tinyc run` and `tinyc validate` show of a compiled model's outputs: the float values an
int8 output stands for, or (``raw``) the integers themselves.

An output is dequantized by default when tinyc put it on an int8 grid: ``--io-dtype int8`` on a
model whose source gives float (a float model quantized by tinyc, or a QDQ model: report.json
then carries a "quantization" summary). A model that is integer at import (a full-integer
.tflite, an int8 graph) gives its integers, as its source model does. The grid (scale, zero
point) is the manifest's (tinyc.quantize.io).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tinyc.quantize.io import to_float_output


def dequantized_outputs(out_dir: str | Path, manifest: Mapping[str, Any]) -> set[str]:
    """The names of the outputs shown dequantized by default (see the module docstring)."""
    graded = {o["name"] for o in manifest.get("outputs", []) if o.get("quant") is not None}
    if not graded:
        return set()
    if "io_dtype" in manifest:
        return graded if manifest["io_dtype"] == "int8" else set()
    try:
        report = json.loads((Path(out_dir) / "report.json").read_text())
    except (OSError, ValueError):
        return set()
    return graded if report.get("quantization") is not None else set()


def present_outputs(
    out_dir: str | Path, manifest: Mapping[str, Any], outputs: Mapping[str, np.ndarray], raw: bool = False
) -> dict[str, np.ndarray]:
    """`outputs` (the target's own dtypes) as run/validate return them: dequantized float32 for
    the outputs `dequantized_outputs` names, unless `raw`."""
    if raw:
        return dict(outputs)
    deq = dequantized_outputs(out_dir, manifest)
    specs = {o["name"]: o for o in manifest.get("outputs", [])}
    return {name: (to_float_output(specs[name], value) if name in deq else value) for name, value in outputs.items()}
