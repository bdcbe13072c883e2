"""Read a .tflite flatbuffer into plain Python records, with the maintained ``tflite`` parser.

Why a separate step: the flatbuffer accessors are lazy views into the file's bytes with one
method per schema field; the converters want values (numpy arrays, option dicts keyed by the
schema's snake_case names, builtin names instead of codes). Everything the converters read is
taken out here, once, and checked for the things no converter can fix (file identifier,
subgraph count, buffers that do not match their tensor, float16 tensors, sparse tensors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinyc.errors import ModelLoadError, UnsupportedError

#: TFLite TensorType name -> numpy dtype name (the types tinyc can hold).
TENSOR_TYPES: dict[str, str] = {
    "FLOAT32": "float32",
    "FLOAT16": "float16",
    "FLOAT64": "float64",
    "INT8": "int8",
    "UINT8": "uint8",
    "INT16": "int16",
    "UINT16": "uint16",
    "INT32": "int32",
    "UINT32": "uint32",
    "INT64": "int64",
    "BOOL": "bool",
}


@dataclass
class TflTensor:
    """One tensor of subgraph 0: shape as stored (batch included), dtype, constant data, grid."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None = None
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    quantized_dimension: int = 0
    is_variable: bool = False
    shape_signature: tuple[int, ...] | None = None

    @property
    def quantized(self) -> bool:
        return self.scale is not None and self.scale.size > 0

    @property
    def per_channel(self) -> bool:
        return self.scale is not None and self.scale.size > 1


@dataclass
class TflOperator:
    """One operator: builtin name ("CONV_2D"), or "CUSTOM" with its custom code; inputs/outputs
    are tensor indices (-1: an omitted optional input); options by snake_case field name."""

    index: int
    name: str
    version: int
    inputs: list[int]
    outputs: list[int]
    options: dict[str, Any] = field(default_factory=dict)
    custom_code: str | None = None
    intermediates: list[int] = field(default_factory=list)


@dataclass
class TflModel:
    description: str
    tensors: list[TflTensor]
    operators: list[TflOperator]
    inputs: list[int]
    outputs: list[int]
    subgraphs: int = 1
    subgraph_name: str = ""


def _enum_names(enum_cls: type) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


_SKIP = re.compile(r"^(Init|GetRootAs.*|.*BufferHasIdentifier|.*Length|.*IsNone|.*AsNumpy)$")


def _read_table(table: Any) -> dict[str, Any]:
    """Every scalar and vector field of a flatc-generated table object, by snake_case name."""
    out: dict[str, Any] = {}
    cls = type(table)
    for attr in dir(cls):
        if attr.startswith("_") or _SKIP.match(attr):
            continue
        fn = getattr(table, attr)
        if not callable(fn):
            continue
        if hasattr(cls, attr + "AsNumpy"):
            v = getattr(table, attr + "AsNumpy")()
            out[_snake(attr)] = (
                [] if isinstance(v, int) else [int(x) if np.issubdtype(type(x), np.integer) else x for x in v.tolist()]
            )
            continue
        try:
            v = fn()
        except TypeError:
            continue  # accessor of a vector element (needs an index) or of a sub-table
        if isinstance(v, (bool, int, float, bytes)):
            out[_snake(attr)] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    return out


def _options(op: Any, names: dict[int, str]) -> tuple[str | None, dict[str, Any]]:
    import tflite

    kind = op.BuiltinOptionsType()
    if not kind:
        return None, {}
    table_name = names.get(kind)
    table = op.BuiltinOptions()
    cls = getattr(tflite, table_name or "", None)
    if table is None or cls is None:
        return table_name, {}
    opts = cls()
    opts.Init(table.Bytes, table.Pos)
    return table_name, _read_table(opts)


def is_tflite_bytes(buf: bytes) -> bool:
    """A TFLite flatbuffer carries the file identifier "TFL3" at bytes 4..8."""
    return len(buf) >= 8 and buf[4:8] == b"TFL3"


def read_tflite(buf: bytes, source: str = "model") -> TflModel:
    """Parse `buf` (the file's bytes); refuse what is not a TFLite model with a one-line error."""
    if not is_tflite_bytes(buf):
        raise ModelLoadError(f"{source}: not a TFLite model (no 'TFL3' file identifier)")
    try:
        import tflite
        from tflite.BuiltinOperator import BuiltinOperator
        from tflite.BuiltinOptions import BuiltinOptions
        from tflite.TensorType import TensorType
    except ImportError as exc:  # pragma: no cover - tflite is a dependency
        raise ModelLoadError(f"{source}: reading .tflite needs the 'tflite' package ({exc})") from None
    try:
        return _read(
            buf, source, tflite, _enum_names(BuiltinOperator), _enum_names(BuiltinOptions), _enum_names(TensorType)
        )
    except (ModelLoadError, UnsupportedError):
        raise
    except Exception as exc:  # a corrupt flatbuffer surfaces as any error inside the accessors
        raise ModelLoadError(f"{source}: malformed TFLite flatbuffer ({type(exc).__name__}: {exc})") from None


def _read(
    buf: bytes, source: str, tflite: Any, op_names: dict[int, str], opt_names: dict[int, str], types: dict[int, str]
) -> TflModel:
    model = tflite.Model.GetRootAsModel(buf, 0)
    if model.SubgraphsLength() < 1:
        raise ModelLoadError(f"{source}: the TFLite model has no subgraph")
    sg = model.Subgraphs(0)
    buffers = model.BuffersLength()
    tensors: list[TflTensor] = []
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        name = (t.Name() or b"").decode("utf-8", "replace") or f"tensor_{i}"
        tname = types.get(t.Type(), str(t.Type()))
        if tname not in TENSOR_TYPES:
            raise UnsupportedError(
                f"{source}: tensor {i} '{name}' has element type {tname}, which tinyc does not support"
            )
        if t.Sparsity() is not None:
            raise UnsupportedError(f"{source}: tensor {i} '{name}' is sparse; densify the model before compiling")
        dtype = TENSOR_TYPES[tname]
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        sig = tuple(int(d) for d in t.ShapeSignatureAsNumpy()) if t.ShapeSignatureLength() else None
        data = None
        b = t.Buffer()
        if 0 < b < buffers:
            raw = model.Buffers(b)
            n = raw.DataLength()
            if n == 0 and raw.Offset() > 1:
                off, size = int(raw.Offset()), int(raw.Size())
                if off + size > len(buf):
                    raise ModelLoadError(f"{source}: tensor {i} '{name}': buffer {b} lies outside the file")
                blob = bytes(buf[off : off + size])
            else:
                blob = raw.DataAsNumpy().tobytes() if n else b""
            if blob:
                count = int(np.prod(shape, dtype=np.int64)) if shape else 1
                arr = np.frombuffer(blob, dtype=np.dtype(dtype).newbyteorder("<"))
                if arr.size != count:
                    raise ModelLoadError(
                        f"{source}: tensor {i} '{name}' holds {arr.size} values in buffer {b}, its shape {list(shape)} needs {count}"
                    )
                data = arr.astype(dtype).reshape(shape).copy()
        scale = zp = None
        qdim = 0
        q = t.Quantization()
        if q is not None and q.ScaleLength():
            scale = np.asarray(q.ScaleAsNumpy(), np.float32).reshape(-1)
            zp = (
                np.asarray(q.ZeroPointAsNumpy(), np.int64).reshape(-1)
                if q.ZeroPointLength()
                else np.zeros(scale.size, np.int64)
            )
            qdim = int(q.QuantizedDimension())
        tensors.append(TflTensor(i, name, shape, dtype, data, scale, zp, qdim, bool(t.IsVariable()), sig))
    ops: list[TflOperator] = []
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        builtin = max(int(code.BuiltinCode()), int(code.DeprecatedBuiltinCode()))
        name = op_names.get(builtin, f"BUILTIN_{builtin}")
        custom = code.CustomCode().decode("utf-8", "replace") if name == "CUSTOM" and code.CustomCode() else None
        _, opts = _options(op, opt_names)
        ins = [int(v) for v in op.InputsAsNumpy()] if op.InputsLength() else []
        outs = [int(v) for v in op.OutputsAsNumpy()] if op.OutputsLength() else []
        inter = [int(v) for v in op.IntermediatesAsNumpy()] if op.IntermediatesLength() else []
        for j in ins + outs + inter:
            if j >= len(tensors) or j < -1:
                raise ModelLoadError(
                    f"{source}: operator {i} ({name}) refers to tensor {j}, the subgraph has {len(tensors)}"
                )
        ops.append(TflOperator(i, name, int(code.Version()), ins, outs, opts, custom, inter))
    desc = (model.Description() or b"").decode("utf-8", "replace")
    sg_inputs = [int(v) for v in sg.InputsAsNumpy()] if sg.InputsLength() else []
    sg_outputs = [int(v) for v in sg.OutputsAsNumpy()] if sg.OutputsLength() else []
    for kind, idx in (("input", sg_inputs), ("output", sg_outputs)):
        bad = [j for j in idx if not 0 <= j < len(tensors)]
        if bad:
            raise ModelLoadError(
                f"{source}: subgraph {kind} refers to tensor {bad[0]}, the subgraph has {len(tensors)}"
            )
    sgname = (sg.Name() or b"").decode("utf-8", "replace")
    return TflModel(desc, tensors, ops, sg_inputs, sg_outputs, int(model.SubgraphsLength()), sgname)
