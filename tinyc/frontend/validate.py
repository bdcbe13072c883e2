"""Model validation before import: a malformed or inconsistent ONNX model is refused up front,
in one line that names the tensor or node, never with a traceback from deeper down.

The rule of thumb is onnxruntime's: a model it refuses (at load or at its first run) tinyc
refuses too. What onnx itself can tell is asked of onnx — the checker in full mode (which runs
strict shape and type inference), the operator schemas' type constraints — and what it cannot
(sizes of initializer payloads, declared types that disagree with inference, a graph without
outputs, opsets nobody released) is checked here. Per-operator shape rules (pads, kernels,
groups, bias lengths...) live with each op in tinyc/ops and run during import.
"""

from __future__ import annotations

import re
from typing import Any
from collections.abc import Iterator

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tinyc.errors import ModelLoadError, ShapeError, UnsupportedError

#: The oldest ai.onnx opset tinyc imports: the op handlers understand the older forms of the ops
#: they import (legacy broadcasting, attributes that became inputs...) or refuse them by name.
MIN_OPSET = 1

_DEFAULT_DOMAINS = ("", "ai.onnx")


def max_opset() -> int:
    """The newest *released* ai.onnx opset the installed onnx knows (onnx.helper.VERSION_TABLE).
    onnxruntime refuses models stamped with a newer, unreleased opset, and so does tinyc."""
    released = max((int(row[2]) for row in helper.VERSION_TABLE), default=onnx.defs.onnx_opset_version())
    return min(released, onnx.defs.onnx_opset_version())


def opset_range() -> str:
    return f"{MIN_OPSET} to {max_opset()}"


# -- names and element types ---------------------------------------------------------------------
def dtype_name(elem_type: int) -> str:
    """An ONNX element type's name, or its number when ONNX defines none (never raises)."""
    try:
        return TensorProto.DataType.Name(int(elem_type))
    except ValueError:
        return f"{int(elem_type)} (not an ONNX data type)"


def is_known_dtype(elem_type: int) -> bool:
    return int(elem_type) in TensorProto.DataType.values()


def type_str(elem_type: int) -> str:
    """The schema spelling of a tensor type: tensor(float), tensor(int8)..."""
    return f"tensor({TensorProto.DataType.Name(int(elem_type)).lower()})"


def _where(path: list[str]) -> str:
    return " → ".join(path) if path else "the model"


def _label(msg: Any, kind: str, index: int) -> str:
    """A readable name for one message in the model tree (used only for error locations)."""
    name = ""
    try:
        name = msg.name if hasattr(msg, "name") and isinstance(msg.name, str) else ""
    except Exception:  # the name itself may be the undecodable field
        name = ""
    if kind == "node":
        op = msg.op_type if isinstance(msg.op_type, str) else "?"
        return f"node '{name}' ({op})" if name else f"node #{index} ({op})"
    return f"{kind} '{name}'" if name else f"{kind} #{index}"


_KINDS = {
    "node": "node",
    "input": "input",
    "output": "output",
    "initializer": "initializer",
    "value_info": "value_info",
    "attribute": "attribute",
    "sparse_initializer": "sparse initializer",
    "functions": "function",
}


def _check_utf8(msg: Any, path: list[str]) -> None:
    """Every string field must be valid UTF-8 (protobuf hands back bytes where it is not)."""
    for fd, val in msg.ListFields():
        repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
        if fd.type == fd.TYPE_MESSAGE:
            if fd.message_type.name == "TensorProto" and fd.name in ("initializer", "t", "tensors"):
                items = list(val) if repeated else [val]
                kind = "initializer" if fd.name == "initializer" else "tensor"
                for i, t in enumerate(items):
                    _check_utf8_shallow(t, path + [_label(t, kind, i)])
                continue
            items = list(val) if repeated else [val]
            for i, v in enumerate(items):
                item_kind = _KINDS.get(fd.name)
                _check_utf8(v, path + ([_label(v, item_kind, i)] if item_kind else []))
        elif fd.type == fd.TYPE_STRING:
            items = list(val) if repeated else [val]
            for v in items:
                if isinstance(v, bytes):
                    raise ModelLoadError(
                        f"{_where(path)}: field '{fd.name}' is not valid UTF-8 ({v[:40]!r}); the file is corrupted"
                    )


def _check_utf8_shallow(t: Any, path: list[str]) -> None:
    """A tensor's strings (name, doc, external-data keys) without walking its payload."""
    for fd, val in t.ListFields():
        if fd.type == fd.TYPE_STRING and fd.name != "string_data":
            repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
            for v in list(val) if repeated else [val]:
                if isinstance(v, bytes):
                    raise ModelLoadError(
                        f"{_where(path)}: field '{fd.name}' is not valid UTF-8 ({v[:40]!r}); the file is corrupted"
                    )
        elif fd.type == fd.TYPE_MESSAGE and fd.name == "external_data":
            for e in val:
                _check_utf8_shallow(e, path)


def _value_infos(graph: onnx.GraphProto) -> Iterator[tuple[str, onnx.ValueInfoProto]]:
    for vi in graph.input:
        yield "input", vi
    for vi in graph.output:
        yield "output", vi
    for vi in graph.value_info:
        yield "value_info", vi


def _check_elem_types(model: onnx.ModelProto) -> None:
    for kind, vi in _value_infos(model.graph):
        if vi.type.HasField("tensor_type"):
            et = vi.type.tensor_type.elem_type
            if not is_known_dtype(et):
                raise ModelLoadError(f"{kind} '{vi.name}' has element type {int(et)}, which is not an ONNX data type")
    for t in model.graph.initializer:
        if not is_known_dtype(t.data_type):
            raise ModelLoadError(
                f"initializer '{t.name}' has element type {int(t.data_type)}, which is not an ONNX data type"
            )


def _check_opsets(model: onnx.ModelProto) -> None:
    seen = [o for o in model.opset_import if o.domain in _DEFAULT_DOMAINS]
    if not seen:
        return  # onnx defaults to opset 1 for the default domain; the checker has its say
    v = int(seen[0].version)
    if not MIN_OPSET <= v <= max_opset():
        raise UnsupportedError(
            f"model uses ai.onnx opset {v}; tinyc handles ai.onnx opsets {opset_range()} "
            f"(the released ONNX opsets; onnxruntime refuses unreleased ones too)"
        )


def _check_outputs(model: onnx.ModelProto) -> None:
    if not model.graph.output:
        raise ModelLoadError(
            "the model declares no graph outputs, so it computes nothing (onnxruntime cannot run it either)"
        )
    names = [o.name for o in model.graph.output]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ModelLoadError(f"graph output(s) {', '.join(repr(d) for d in dup)} declared more than once")
    inputs = [i.name for i in model.graph.input]
    dup = sorted({n for n in inputs if inputs.count(n) > 1})
    if dup:
        raise ModelLoadError(f"graph input(s) {', '.join(repr(d) for d in dup)} declared more than once")


# -- initializer payloads --------------------------------------------------------------------------
#: integer types stored in int32_data, and the range a value must lie in
_INT32_RANGES: dict[int, tuple[int, int]] = {  # keyed by TensorProto.data_type (an int)
    TensorProto.INT8: (-128, 127),
    TensorProto.UINT8: (0, 255),
    TensorProto.INT16: (-32768, 32767),
    TensorProto.UINT16: (0, 65535),
    TensorProto.BOOL: (0, 1),
    TensorProto.FLOAT16: (0, 65535),
    TensorProto.BFLOAT16: (0, 65535),
}
_TYPED_FIELD: dict[int, tuple[str, int]] = {
    TensorProto.FLOAT: ("float_data", 1),
    TensorProto.COMPLEX64: ("float_data", 2),
    TensorProto.DOUBLE: ("double_data", 1),
    TensorProto.COMPLEX128: ("double_data", 2),
    TensorProto.INT64: ("int64_data", 1),
    TensorProto.UINT32: ("uint64_data", 1),
    TensorProto.UINT64: ("uint64_data", 1),
    TensorProto.INT32: ("int32_data", 1),
    **{k: ("int32_data", 1) for k in _INT32_RANGES},
}


def check_payload(t: onnx.TensorProto, what: str = "initializer") -> None:
    """A tensor's payload must match its declared shape and type (onnxruntime refuses it otherwise):
    raw_data of exactly the right size, or typed values of the right count and range."""
    label = f"{what} '{t.name}'"
    if not is_known_dtype(t.data_type) or t.data_type == TensorProto.UNDEFINED:
        raise ModelLoadError(f"{label} has element type {dtype_name(t.data_type)}")
    dims = [int(d) for d in t.dims]
    if any(d < 0 for d in dims):
        raise ModelLoadError(f"{label} has a negative dimension in its shape {dims}")
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    tname = dtype_name(t.data_type)
    external = t.data_location == TensorProto.EXTERNAL
    if t.HasField("raw_data") and not external and t.data_type != TensorProto.STRING:
        try:
            np_dt = helper.tensor_dtype_to_np_dtype(t.data_type)
            packed_bits: dict[int, int] = {TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.FLOAT4E2M1: 4}
            bits = packed_bits.get(t.data_type)
            need = (count * bits + 7) // 8 if bits else count * np.dtype(np_dt).itemsize
        except Exception:
            need = None
        if need is not None and len(t.raw_data) != need:
            raise ModelLoadError(
                f"{label}: raw_data holds {len(t.raw_data)} bytes, but shape {dims} of {tname} needs {need}"
            )
    elif not external and t.data_type in _TYPED_FIELD:
        field, per = _TYPED_FIELD[t.data_type]
        have = len(getattr(t, field))
        if have != count * per:
            raise ModelLoadError(
                f"{label}: {field} holds {have} values, but shape {dims} of {tname} needs {count * per}"
            )
        if t.data_type in _INT32_RANGES and have:
            lo, hi = _INT32_RANGES[t.data_type]
            vals = np.asarray(t.int32_data, np.int64)
            if vals.min() < lo or vals.max() > hi:
                bad = int(vals[(vals < lo) | (vals > hi)][0])
                raise ModelLoadError(f"{label}: value {bad} is out of range for {tname} ({lo}..{hi})")


def tensor_to_array(t: onnx.TensorProto, what: str = "initializer") -> np.ndarray:
    """numpy_helper.to_array after ``check_payload``: one clear line naming the tensor instead of
    numpy's reshape errors."""
    check_payload(t, what)
    label = f"{what} '{t.name}'"
    try:
        return numpy_helper.to_array(t)
    except Exception as exc:
        raise ModelLoadError(
            f"{label}: could not decode its data ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None


# -- declared types vs inference, and the schemas' type constraints -------------------------------
def _infer_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto] | None:
    """Types onnx infers for every value, with the declared output and value_info types removed
    (so they cannot steer inference). None when onnx cannot infer this model."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.value_info[:]
    for vi in m.graph.output:
        vi.type.Clear()
    try:
        inferred = onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=False, data_prop=True)
    except Exception:
        return None
    types: dict[str, onnx.TypeProto] = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.WhichOneof("value") is not None:
            types[vi.name] = vi.type
    for t in inferred.graph.initializer:
        tp = onnx.TypeProto()
        tp.tensor_type.elem_type = t.data_type
        for d in t.dims:
            tp.tensor_type.shape.dim.add().dim_value = d
        types[t.name] = tp
    return types


def _shape_of(tt: onnx.TypeProto.Tensor) -> list[int | None] | None:
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]


def _show(elem: int, shape: list[int | None] | None) -> str:
    s = "" if shape is None else "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"
    return f"{type_str(elem) if elem else 'tensor(?)'}{' ' + s if s else ''}"


def _check_declared(model: onnx.ModelProto, types: dict[str, onnx.TypeProto]) -> None:
    producer = {o: n for n in model.graph.node for o in n.output}
    for kind, vi in _value_infos(model.graph):
        if kind == "input" or vi.name not in types or not vi.type.HasField("tensor_type"):
            continue
        inf = types[vi.name]
        if not inf.HasField("tensor_type"):
            continue
        d, i = vi.type.tensor_type, inf.tensor_type
        d_shape, i_shape = _shape_of(d), _shape_of(i)
        type_bad = bool(d.elem_type and i.elem_type and d.elem_type != i.elem_type)
        shape_bad = (
            d_shape is not None
            and i_shape is not None
            and (
                len(d_shape) != len(i_shape)
                or any(a is not None and b is not None and a != b for a, b in zip(d_shape, i_shape))
            )
        )
        if type_bad or shape_bad:
            n = producer.get(vi.name)
            by = ""
            if n is not None:
                label = f"'{n.name}'" if n.name else f"#{list(model.graph.node).index(n)}"
                by = f" (output of node {label} ({n.op_type}))"
            what = "graph output" if kind == "output" else "value_info"
            err = ModelLoadError if type_bad else ShapeError
            raise err(
                f"{what} '{vi.name}' is declared {_show(d.elem_type, d_shape)}, but onnx inference gives "
                f"{_show(i.elem_type, i_shape)}{by}"
            )


_VARIADIC = onnx.defs.OpSchema.FormalParameterOption.Variadic


def _check_type_constraints(model: onnx.ModelProto, types: dict[str, onnx.TypeProto], opset: int) -> None:
    """Inputs and outputs that an operator's schema binds to one type parameter (T) must share one
    element type, and it must be one the constraint allows (onnxruntime refuses the model otherwise)."""
    for idx, node in enumerate(model.graph.node):
        if node.domain not in _DEFAULT_DOMAINS:
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, "")
        except Exception:
            continue  # unknown op or version: the checker reports it
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        bound: dict[str, tuple[str, str]] = {}
        where = f"node '{node.name}' ({node.op_type})" if node.name else f"node #{idx} ({node.op_type})"
        for role, names, params in (("input", node.input, schema.inputs), ("output", node.output, schema.outputs)):
            for i, name in enumerate(names):
                if not name or not params:
                    continue
                p = params[min(i, len(params) - 1)]
                if i >= len(params) and p.option != _VARIADIC:
                    continue
                tp = types.get(name)
                if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.elem_type:
                    continue
                et = tp.tensor_type.elem_type
                ts = type_str(et)
                key = p.type_str
                homogeneous = getattr(p, "is_homogeneous", True)
                if key not in allowed:  # a literal type such as tensor(int64)
                    if key.startswith("tensor(") and ts != key:
                        raise ModelLoadError(f"{where}: {role} '{name}' ({p.name}) is {ts}, the operator takes {key}")
                    continue
                if ts not in allowed[key]:
                    ok = ", ".join(sorted(a[7:-1] for a in allowed[key] if a.startswith("tensor(")))
                    raise ModelLoadError(
                        f"{where}: {role} '{name}' ({p.name}) is {ts}, which type {key} does not allow (allowed: {ok})"
                    )
                if not homogeneous and i >= len(params) - 1 and p.option == _VARIADIC:
                    continue
                if key in bound and bound[key][1] != ts:
                    other, ots = bound[key]
                    raise ModelLoadError(
                        f"{where}: '{other}' is {ots} but {role} '{name}' is {ts}; type "
                        f"{key} binds them to one element type"
                    )
                bound.setdefault(key, (name, ts))


# -- the onnx checker --------------------------------------------------------------------------------
def _checker_message(exc: BaseException) -> str:
    """The checker's first line, with "(op_type:Conv, node name: c1): [ShapeInferenceError] ..."
    turned into "node 'c1' (Conv): ..."."""
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else type(exc).__name__
    for prefix in ("[ShapeInferenceError] Inference error(s): ", "[TypeInferenceError] Inference error(s): "):
        if first.startswith(prefix):
            first = first[len(prefix) :]
    m = re.match(r"\(op_type:([^,)]+)(?:, node name: ([^)]*))?\):\s*(.*)", first)
    if m:
        op, name, rest = m.group(1), m.group(2), m.group(3)
        rest = re.sub(r"^\[(Shape|Type)InferenceError\]\s*", "", rest)
        first = f"node '{name}' ({op}): {rest}" if name else f"a {op} node: {rest}"
    return first


def run_checker(model: onnx.ModelProto) -> None:
    """onnx.checker in full mode (structure, then strict shape and type inference). Every error it
    can raise (ValidationError, InferenceError, and the ValueError/UnicodeDecodeError escaping its
    bindings) becomes one line."""
    try:
        try:
            onnx.checker.check_model(model, full_check=True)
        except ValueError as exc:
            if "2GB" not in str(exc) and "too large" not in str(exc):
                raise
            onnx.checker.check_model(model)  # too large to serialise in memory: structure only
    except onnx.shape_inference.InferenceError as exc:
        raise ShapeError(f"onnx shape inference rejects the model: {_checker_message(exc)}") from None
    except UnicodeDecodeError:
        raise ModelLoadError(
            "the ONNX checker rejected the model: a string in the file is not valid UTF-8 (the file is corrupted)"
        ) from None
    except Exception as exc:  # ValidationError, ValueError, anything else its bindings raise
        raise ModelLoadError(f"the ONNX checker rejected the model: {_checker_message(exc)}") from None


# -- quantization scales ---------------------------------------------------------------------------
_FLT_MIN = float(np.finfo(np.float32).tiny)


def check_scales(where: str, what: str, scale: np.ndarray, zero_ok: bool = False) -> None:
    """Quantization scales must be finite, positive and normal (a zero or subnormal scale divides
    to infinity; onnxruntime runs such models but their outputs are meaningless). `zero_ok`: a
    per-channel weight scale may be exactly 0 (a channel whose weights are all zero)."""
    s = np.asarray(scale, np.float64).reshape(-1)
    if s.size == 0:
        raise UnsupportedError(f"{where}: {what} is empty")
    bad = ~np.isfinite(s) | (s < 0) | ((s != 0) & (np.abs(s) < _FLT_MIN)) | ((s == 0) & (not zero_ok))
    if np.any(bad):
        v = float(s[bad][0])
        kind = (
            "not finite"
            if not np.isfinite(v)
            else "negative"
            if v < 0
            else "zero"
            if v == 0
            else "subnormal (below 1.18e-38)"
        )
        raise UnsupportedError(
            f"{where}: {what} {v:g} is {kind}; quantization scales must be finite, positive and normal floats"
        )


def _scale_inputs(schema: Any, node: onnx.NodeProto) -> list[tuple[int, str]]:
    return [
        (i, p.name)
        for i, p in enumerate(schema.inputs)
        if i < len(node.input) and node.input[i] and "scale" in p.name.lower()
    ]


def check_node_scales(node: onnx.NodeProto, opset: int, where: str, const: Any) -> None:
    """Scale inputs of quantization ops (named so by their schema: x_scale, y_scale, w_scale...),
    when constant. `const(name)` gives a tensor's constant value or None."""
    if node.domain not in _DEFAULT_DOMAINS:
        return
    if "quant" not in node.op_type.lower() and not node.op_type.startswith("QLinear"):
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except Exception:
        return
    for i, pname in _scale_inputs(schema, node):
        value = const(node.input[i])
        if value is None or np.asarray(value).dtype.kind != "f":
            continue
        # the weights' per-channel scale of QLinearMatMul (b_scale) or of a constant's
        # DequantizeLinear may be 0 for an all-zero channel
        weights = (node.op_type == "QLinearMatMul" and pname == "b_scale") or (
            node.op_type == "DequantizeLinear" and const(node.input[0]) is not None
        )
        check_scales(where, pname, value, zero_ok=weights)


# -- entry points ------------------------------------------------------------------------------------
def validate_structure(model: onnx.ModelProto) -> None:
    """Checks that need no inference: strings, element types, opset range, outputs, payloads."""
    _check_utf8(model, [])
    _check_elem_types(model)
    _check_opsets(model)
    _check_outputs(model)
    for t in model.graph.initializer:
        check_payload(t)


def validate_semantics(model: onnx.ModelProto, opset: int) -> None:
    """Declared types vs inference, schema type constraints, then the onnx checker in full mode."""
    types = _infer_types(model)
    if types is not None:
        _check_declared(model, types)
        _check_type_constraints(model, types, opset)
    run_checker(model)
