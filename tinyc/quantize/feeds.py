"""Input data from outside: read, checked and converted in one place before it reaches a kernel.

Every runner takes user data the same way — the host library (ctypes or, for sanitizer builds,
its runner executable), a board over the serial harness, an OpenCL device, `validate`'s golden
model and onnxruntime, and calibration — so the rules live here, once:

- files (`load_arrays`): an ``.npz`` (one array per input) or an ``.npy`` (one array, for a
  one-input model). ``allow_pickle`` stays False: data files are never unpickled. A missing file,
  a directory, a truncated or corrupt archive, a pickle-only file or an object array is one clear
  line, never a traceback.
- names (`prepare_feeds`): every model input present; arrays that are neither a model input nor
  labels (a key named ``labels``) are refused by name, so a typo is not silently ignored. A
  one-input model also takes its data under ``x`` (the key an ``.npy`` or a bare array is read
  as) — never under some other key by guess. Every key error lists the expected and the found keys.
- dtype: numbers or bool only; strings, bytes, Python objects, complex, datetimes and records are
  refused.
- shape: the model's shape (one inference), one extra leading dim N (N inferences) or, for a model
  with batch 1, N in place of that batch; every input with the same N; N = 0 is refused.
- values, per input (`check_values`):
  * integer (or bool) data for an integer input must fit the input's dtype — refused with the
    offending flat index, the value and the allowed range (an int8 input is never fed 300 wrapped
    to 44). Integer data for an int8 input with a grid is taken as the quantized values as they are.
  * float data for an int8 input with a grid is quantized with the model's own rounding (ONNX
    QuantizeLinear: half to even, saturating), but NaN and ±Inf are refused with their index:
    NaN has no int8 value at all, and an infinity would only become a silent 127/-128 whose
    C-side analogue (float -> integer conversion of an infinity) is undefined behaviour, so the
    host, the golden model and a float-I/O build could not be relied on to agree.
  * float data for an integer input without a grid is refused (never truncated).
  * float data for a float input is passed on unchanged, NaN and ±Inf included (IEEE semantics
    are what a float model computes with); only finite values that a narrower float type cannot
    hold (float64 1e300 for a float32 input) are refused rather than silently made infinite.

Why here: `tinyc.quantize` is the lowest layer with a user of it (calibration), and every other
user (targets, device, api, tune) sits above it, so all import it without cycles.
`tinyc.quantize.io.to_model_input` and `tinyc.targets.host.batch_size`/`sample`/... are this
module's functions re-exported under their old names.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from tinyc.errors import RunError, TinycError, UsageError

#: Keys of a data file that hold labels, not model inputs (ignored unless the model has such an input).
#: Only an explicit name: a 'y' or 'label' array is refused like any other stray key, never guessed.
LABEL_KEYS = ("labels",)

_KIND_NAMES = {
    "U": "strings",
    "S": "bytes",
    "O": "Python objects",
    "c": "complex numbers",
    "V": "raw records",
    "M": "datetimes",
    "m": "timedeltas",
}


class ArrayFile(dict):
    """The arrays read from one file; `npy` marks an .npy (a single array under the key 'x')."""

    def __init__(self, arrays: Mapping[str, np.ndarray], path: Path, npy: bool) -> None:
        super().__init__(arrays)
        self.path = path
        self.npy = npy


# -------------------------------------------------------------------------------- files


def load_arrays(path: str | os.PathLike, what: str = "input file", error: type[TinycError] = RunError) -> ArrayFile:
    """The arrays of an .npz (by key) or an .npy (one array, key 'x'), read without unpickling.
    Every failure is `error` with one line naming `what` and the file."""
    p = Path(path)
    if not p.exists():
        raise error(f"{what} {p} does not exist")
    if p.is_dir():
        raise error(f"{what} {p} is a directory, not an .npz/.npy file")
    try:
        with open(p, "rb") as f:
            head = f.read(8)
    except OSError as exc:
        raise error(f"{what} {p}: cannot read it ({exc.strerror or exc})") from None
    if head.startswith(b"PK"):
        return ArrayFile(_read_npz(p, what, error), p, npy=False)
    if head.startswith(b"\x93NUMPY"):
        return ArrayFile({"x": _read_npy(p, what, error)}, p, npy=True)
    raise error(
        f"{what} {p} is not a readable .npz/.npy file (neither a zip archive nor an .npy header"
        f"{'; it is empty' if not head else ''})"
    )


def _read_npy(p: Path, what: str, error: type[TinycError]) -> np.ndarray:
    try:
        arr = np.load(p, allow_pickle=False)
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise error(
                f"{what} {p} holds Python objects (it needs unpickling, which tinyc never does); save a numeric array"
            ) from None
        raise error(f"{what} {p} is not a readable .npz/.npy file (truncated or corrupt: {exc})") from None
    except Exception as exc:  # noqa: BLE001  (EOFError, OSError, format errors of all kinds)
        raise error(
            f"{what} {p} is not a readable .npz/.npy file (truncated or corrupt: {type(exc).__name__}: {exc})"
        ) from None
    return np.asarray(arr)


def _read_npz(p: Path, what: str, error: type[TinycError]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    try:
        with np.load(p, allow_pickle=False) as z:
            for key in z.files:
                try:
                    out[key] = np.asarray(z[key])
                except ValueError as exc:
                    if "allow_pickle" in str(exc):
                        raise error(
                            f"{what} {p}: array '{key}' holds Python objects (it needs unpickling, "
                            "which tinyc never does); save a numeric array"
                        ) from None
                    raise
    except TinycError:
        raise
    except Exception as exc:  # noqa: BLE001  (BadZipFile, CRC errors, truncated members, ...)
        kind = (
            "truncated or corrupt"
            if isinstance(exc, (zipfile.BadZipFile, EOFError, ValueError, OSError))
            else "unreadable"
        )
        raise error(f"{what} {p} is not a readable .npz/.npy file ({kind}: {type(exc).__name__}: {exc})") from None
    if not out:
        raise error(f"{what} {p} holds no arrays")
    return out


def load_one_array(path: str | os.PathLike, what: str, error: type[TinycError] = UsageError) -> np.ndarray:
    """One numeric array from an .npy (or an .npz holding exactly one array): --bind, --labels."""
    data = load_arrays(path, what, error)
    if len(data) != 1:
        raise error(
            f"{what} {data.path} holds {len(data)} arrays ({', '.join(data)}); give an .npy or an .npz with one array"
        )
    arr = next(iter(data.values()))
    kind = _KIND_NAMES.get(arr.dtype.kind)
    if kind:
        raise error(f"{what} {data.path} holds {arr.dtype} data ({kind}); give numbers or bool")
    return arr


# -------------------------------------------------------------------------------- names, dtypes, shapes


def resolve_input_names(manifest: Mapping[str, Any], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A one-input model also accepts data whose array is called 'x' (an .npy, or a bare array,
    is read under that key). Any other key must be the input's name: no guessing."""
    names = [s["name"] for s in manifest["inputs"]]
    out = dict(inputs)
    if len(names) == 1 and names[0] not in out and "x" in out:
        out[names[0]] = out.pop("x")
    return out


def _keys(keys: Sequence[str]) -> str:
    return ", ".join(repr(k) for k in keys) if keys else "none"


def _expected_found(names: Sequence[str], found: Sequence[str]) -> str:
    alias = " (or 'x')" if len(names) == 1 and names[0] != "x" else ""
    return f"expected keys: {_keys(names)}{alias}, plus an optional 'labels'; found keys: {_keys(found)}"


def check_names(manifest: Mapping[str, Any], inputs: Mapping[str, Any], source: Any = None) -> None:
    """Every model input present; nothing else but labels."""
    names = [s["name"] for s in manifest["inputs"]]
    if getattr(source, "npy", False) and len(names) != 1:
        raise RunError(
            f"{source.path} is an .npy file holding one array; the model has {len(names)} inputs "
            f"({', '.join(names)}): give an .npz with one array per input"
        )
    found = list(source if isinstance(source, Mapping) else inputs)  # the keys as the user gave them
    missing = [n for n in names if n not in inputs]
    if missing:
        raise RunError(
            f"input data lacks model input(s) {', '.join(missing)} (npz keys must be the model's input "
            f"names): {_expected_found(names, found)}"
        )
    extra = [k for k in inputs if k not in names and k not in LABEL_KEYS]
    if extra:
        raise RunError(
            f"input data has array(s) {', '.join(repr(k) for k in extra)} that are not model inputs "
            f"(labels go under 'labels' or --labels): {_expected_found(names, found)}"
        )


def as_numeric(name: str, value: Any) -> np.ndarray:
    """`value` as a numeric (or bool) numpy array, else a RunError naming the input."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001  (ragged nested lists and the like)
        raise RunError(f"input '{name}' is not a rectangular array ({type(exc).__name__}: {exc})") from None
    from tinyc.numerics.dtypes import is_narrow  # bfloat16, float8, int4 ... (ml_dtypes) are numbers too

    kind = None if is_narrow(str(arr.dtype)) else _KIND_NAMES.get(arr.dtype.kind)
    if kind:
        raise RunError(f"input '{name}' holds {arr.dtype} data ({kind}); give numbers (int or float) or bool")
    return arr


def batch_size(manifest: Mapping[str, Any], inputs: Mapping[str, Any]) -> tuple[int, str]:
    """Check input names and shapes; return (N, mode) with mode 'exact', 'extra' or 'batch1'."""
    check_names(manifest, inputs)
    modes: set[str] = set()
    counts: set[int] = set()
    for spec in manifest["inputs"]:
        arr_shape = tuple(np.shape(inputs[spec["name"]]))
        shape = tuple(spec["shape"])
        if arr_shape == shape:
            modes.add("exact")
            counts.add(1)
        elif arr_shape[1:] == shape:
            modes.add("extra")
            counts.add(arr_shape[0])
        elif shape and shape[0] == 1 and len(arr_shape) == len(shape) and arr_shape[1:] == shape[1:]:
            modes.add("batch1")
            counts.add(arr_shape[0])
        else:
            hint = f" or (N, {', '.join(map(str, shape[1:]))})" if shape and shape[0] == 1 else ""
            raise RunError(
                f"input '{spec['name']}' has shape {arr_shape}; expected {shape}, "
                f"(N, {', '.join(map(str, shape))}){hint} for N inferences"
            )
        if counts and min(counts) == 0:
            raise RunError(f"input '{spec['name']}' holds no samples (shape {arr_shape}); give at least one")
    if len(modes) > 1:
        raise RunError("inputs disagree: either every input holds N samples or none does")
    if len(counts) > 1:
        raise RunError(f"inputs disagree on the number of inferences: {sorted(counts)}")
    return (counts.pop() if counts else 1), (modes.pop() if modes else "exact")


def sample(arr: np.ndarray, shape: Sequence[int], mode: str, k: int) -> np.ndarray:
    """Sample k of an input in `mode` (see `batch_size`), in the model's shape."""
    arr = np.asarray(arr)
    if mode == "exact":
        return arr
    if mode == "extra":
        return arr[k]
    return arr[k : k + 1].reshape(shape)


def stack_outputs(results: Mapping[str, list[np.ndarray]], mode: str) -> dict[str, np.ndarray]:
    """Per-sample outputs back in the layout the inputs came in."""
    if mode == "exact":
        return {name: v[0] for name, v in results.items()}
    if mode == "extra":
        return {name: np.stack(v) for name, v in results.items()}
    return {
        name: np.concatenate([x.reshape(1, *x.shape[1:]) if x.ndim else x.reshape(1) for x in v])
        for name, v in results.items()
    }


# -------------------------------------------------------------------------------- values


def _where(arr: np.ndarray, mask: np.ndarray) -> tuple[int, Any, int]:
    """(flat index, value, count) of the first True in mask."""
    flat = np.flatnonzero(mask.reshape(-1))
    i = int(flat[0])
    return i, arr.reshape(-1)[i], int(flat.size)


def _at(arr: np.ndarray, i: int, count: int) -> tuple[str, str]:
    pos = f" (element {tuple(int(j) for j in np.unravel_index(i, arr.shape))})" if arr.ndim > 1 else ""
    more = f" (and {count - 1} more)" if count > 1 else ""
    return f"index {i}{pos}", more


def check_values(spec: Mapping[str, Any], value: Any) -> np.ndarray:
    """The value rules of the module docstring for one input's data (any leading sample dims);
    returns the data as a numeric array. Raises RunError naming the input, index and value."""
    name = spec["name"]
    arr = as_numeric(name, value)
    dtype = np.dtype(spec.get("dtype", "float32"))
    if arr.size == 0:
        return arr
    if dtype.kind in "iu" and arr.dtype.kind in "iub":
        info = np.iinfo(dtype)
        if arr.dtype.kind != "b" and (int(arr.min()) < info.min or int(arr.max()) > info.max):
            i, v, count = _where(arr, (arr < info.min) | (arr > info.max))
            where, more = _at(arr, i, count)
            hint = ""
            if spec.get("quant") is not None:
                g = spec["quant"]
                hint = (
                    f"; {dtype} data is taken as the quantized values: give float data to have it quantized "
                    f"on the input's grid (scale {g['scale']:.6g}, zero point {g['zero_point']})"
                )
            raise RunError(
                f"input '{name}': value {int(v)} at {where} is outside {dtype} [{info.min}, {info.max}]{more}{hint}"
            )
    elif dtype.kind in "iu" and arr.dtype.kind == "f":
        grid = spec.get("quant")
        if grid is None:
            raise UsageError(
                f"input '{name}' is {dtype} without a quantization grid; give {dtype} data, not {arr.dtype}"
            )
        bad = ~np.isfinite(arr)
        if bad.any():
            i, v, count = _where(arr, bad)
            where, more = _at(arr, i, count)
            raise RunError(
                f"input '{name}': value {v} at {where} cannot be quantized to {dtype} (scale "
                f"{grid['scale']:.6g}, zero point {grid['zero_point']}): NaN and ±Inf are refused{more}"
            )
    elif dtype.kind == "f" and arr.dtype.kind == "f" and arr.dtype.itemsize > dtype.itemsize:
        top = float(np.finfo(dtype).max)
        with np.errstate(invalid="ignore"):
            bad = np.isfinite(arr) & (np.abs(arr) > top)
        if bad.any():
            i, v, count = _where(arr, bad)
            where, more = _at(arr, i, count)
            raise RunError(f"input '{name}': value {v:g} at {where} is outside {dtype}'s range (±{top:.4g}){more}")
    return arr


def to_model_input(spec: Mapping[str, Any], value: Any) -> np.ndarray:
    """A user's array as the model input `spec` takes it, after `check_values`: float data given to
    an int8 input is quantized on its grid (ONNX QuantizeLinear rounding, as the float model's first
    kernel would); integer data is cast only when it fits; float data for a float input as it is."""
    arr = check_values(spec, value)
    dtype = np.dtype(spec["dtype"])
    if arr.dtype.kind == "f" and dtype.kind in "iu":
        from tinyc.numerics.fixed_point import quantize

        grid = spec["quant"]
        info = np.iinfo(dtype)
        q = quantize(arr.astype(np.float32), np.float32(grid["scale"]), int(grid["zero_point"]), info.min, info.max)
        return np.asarray(q).astype(dtype)
    return arr.astype(dtype, copy=False)


# -------------------------------------------------------------------------------- all of it


@dataclass
class Feeds:
    """Checked input data: N samples in `mode`; `raw(k)` as given, `model(k)` as the model takes it."""

    specs: list[Mapping[str, Any]]
    arrays: dict[str, np.ndarray]
    n: int
    mode: str

    def raw(self, k: int) -> dict[str, np.ndarray]:
        return {s["name"]: sample(self.arrays[s["name"]], s["shape"], self.mode, k) for s in self.specs}

    def model(self, k: int) -> dict[str, np.ndarray]:
        return {
            s["name"]: to_model_input(s, sample(self.arrays[s["name"]], s["shape"], self.mode, k)) for s in self.specs
        }


def prepare_feeds(manifest: Mapping[str, Any], inputs: Mapping[str, Any]) -> Feeds:
    """Names, dtypes, shapes, N >= 1 and values of `inputs` against the manifest's inputs (each
    {name, shape, dtype[, quant]}); the one check every runner calls before anything runs."""
    if not isinstance(inputs, Mapping):
        raise UsageError("inputs must be a path to an .npz/.npy file or a mapping of name -> array")
    data = resolve_input_names(manifest, inputs)
    check_names(manifest, data, inputs)
    arrays = {s["name"]: as_numeric(s["name"], data[s["name"]]) for s in manifest["inputs"]}
    n, mode = batch_size(manifest, arrays)
    for spec in manifest["inputs"]:
        arrays[spec["name"]] = check_values(spec, arrays[spec["name"]])
    return Feeds(list(manifest["inputs"]), arrays, n, mode)
