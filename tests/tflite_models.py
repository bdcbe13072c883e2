"""Build .tflite flatbuffers from a small Python description, for per-operator tests of the TFLite frontend.

Why this exists: the tests may not use TensorFlow (it is not installed and must not be), so there is no converter
to ask for a model. Instead a test describes the graph - tensors (`T`), operators (`Op`), graph inputs and outputs -
and `build` writes the flatbuffer with the `tflite` package's flatc-generated builder functions, laid out the way
the TFLite converter lays it out (empty sentinel buffer 0, one buffer per constant, operator codes carrying both the
deprecated int8 code and the int32 code, model version 3, file identifier "TFL3"). `tflm_run` then executes the
model in TFLite Micro's own interpreter, which is the reference the frontend's output is compared against.

Operator options are written generically: the op code names its BuiltinOptions union member (explicit table for the
few whose name is not derivable, CamelCase + "Options" for the rest), and each option is set through the generated
`<Table>Add<Field>` function, so every builtin operator's options work without a per-op writer here.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
import tflite

__all__ = ["Op", "T", "build", "single_op", "tflm_available", "tflm_run"]

# dtype name -> (tflite.TensorType value, little-endian numpy dtype the constant data is written in)
_DTYPES: dict[str, tuple[int, np.dtype]] = {
    name: (getattr(tflite.TensorType, name.upper()), np.dtype(name).newbyteorder("<"))
    for name in (
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "float32",
        "float64",
        "bool",
    )
}

# Ops whose options table is not "<CamelCase op name>Options" (several ops share one table).
_OPTIONS_TABLE_OF_OP: dict[str, str] = {
    "AVERAGE_POOL_2D": "Pool2DOptions",
    "MAX_POOL_2D": "Pool2DOptions",
    "L2_POOL_2D": "Pool2DOptions",
    "MEAN": "ReducerOptions",
    "SUM": "ReducerOptions",
    "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions",
    "REDUCE_PROD": "ReducerOptions",
    "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions",
    "L2_NORMALIZATION": "L2NormOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions",
    "MAXIMUM": "MaximumMinimumOptions",
    "MINIMUM": "MaximumMinimumOptions",
    "CONV_3D_TRANSPOSE": "Conv3DOptions",
    "RANDOM_STANDARD_NORMAL": "RandomOptions",
    "RANDOM_UNIFORM": "RandomOptions",
    "MULTINOMIAL": "RandomOptions",
}

# Option fields whose value is an enum: a string value is looked up in this enum class of the `tflite` package.
_ENUM_OF_FIELD: dict[str, str] = {
    "padding": "Padding",
    "fused_activation_function": "ActivationFunctionType",
    "output_type": "TensorType",
    "in_data_type": "TensorType",
    "out_data_type": "TensorType",
    "out_type": "TensorType",
    "idx_out_type": "TensorType",
    "quantized_bias_type": "TensorType",
    "weights_format": "FullyConnectedOptionsWeightsFormat",
    "kernel_type": "LSTMKernelType",
    "mode": "MirrorPadMode",
    "combiner": "CombinerType",
    "type": "LSHProjectionType",
    "comparison_direction": "StablehloComparisonDirection",
    "compare_type": "StablehloComparisonType",
    "precision_config": "StablehloPrecisionConfig",
    "algorithm": "RngAlgorithm",
    "reduce_function": "ReduceWindowFunction",
}


@dataclass
class T:
    """One tensor of the graph.

    A tensor with `data` is a constant: its bytes go into a buffer of its own, cast to `dtype` and written
    little-endian. `scale` set means the tensor gets a quantization table (per-channel along `quantized_dimension`
    when it has more than one entry); `zero_point` defaults to zeros of the scale's length. `variable` marks
    LSTM/SVDF state (`is_variable`); such a tensor may carry initial data, but TFLite Micro points a tensor that has
    buffer data at the read-only flatbuffer, so for TFLM leave variable tensors without data (it zeroes them).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "int8"
    data: np.ndarray | None = None
    scale: float | Sequence[float] | np.ndarray | None = None
    zero_point: int | Sequence[int] | np.ndarray | None = None
    quantized_dimension: int = 0
    variable: bool = False
    shape_signature: tuple[int, ...] | None = None


@dataclass
class Op:
    """One operator: `code` is a `tflite.BuiltinOperator` name (or "CUSTOM" with `custom_code`).

    `inputs` are tensor names, None for an omitted optional input (written as index -1, as the converter does).
    `options` are the builtin options by snake_case field name; values may be numbers, bools, sequences (for
    vector fields such as ReshapeOptions.new_shape), enum member names ("SAME", "RELU6", "INT32", ...) or strings.
    `options=None` writes no options table at all; `{}` writes an empty one (all schema defaults).
    Two fields beyond the tensor/op basics: `intermediates` (tensor names; full TFLite's int8 LSTM reads gate scales
    from them, TFLite Micro's does not) and `custom_options` (raw bytes, e.g. a flexbuffer for a CUSTOM op).
    """

    code: str
    inputs: list[str | None]
    outputs: list[str]
    options: dict[str, Any] | None = None
    custom_code: str | None = None
    version: int = 1
    intermediates: list[str] = field(default_factory=list)
    custom_options: bytes | None = None


def _camel(snake: str) -> str:
    """FUSED_ACTIVATION or fused_activation -> FusedActivation (the generated functions' spelling, up to case)."""
    return "".join(part[:1].upper() + part[1:].lower() for part in snake.split("_"))


def _enum_members(enum_name: str) -> dict[str, int]:
    """The members of a flatc-generated enum class (plain class attributes holding ints)."""
    cls = getattr(tflite, enum_name)
    return {k: v for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


@functools.cache
def _options_tables() -> dict[str, tuple[str, int, int]]:
    """lower-case table name -> (table name, union tag, 1 for BuiltinOptions or 2 for BuiltinOptions2)."""
    tables: dict[str, tuple[str, int, int]] = {}
    for union, which in (("BuiltinOptions2", 2), ("BuiltinOptions", 1)):  # BuiltinOptions wins on a clash
        for name, tag in _enum_members(union).items():
            if name != "NONE":
                tables[name.lower()] = (name, tag, which)
    return tables


def _builtin_code(code: str) -> int:
    members = _enum_members("BuiltinOperator")
    if code not in members:
        raise ValueError(f"unknown TFLite builtin operator {code!r}")
    return members[code]


def _options_table_of(code: str) -> tuple[str, int, int] | None:
    """The options table of an op code, or None when the op has none (LOGISTIC, TANH, RELU, ...).

    The derived name is matched case-insensitively because the schema capitalises acronyms and suffixes
    (Conv2DOptions, UnidirectionalSequenceLSTMOptions, SVDFOptions, BatchMatMulOptions, SpaceToBatchNDOptions).
    """
    tables = _options_tables()
    explicit = _OPTIONS_TABLE_OF_OP.get(code)
    if explicit is not None:
        return tables[explicit.lower()]
    return tables.get((_camel(code) + "Options").lower())


def _table_fields(table: str) -> dict[str, str]:
    """Normalised field name (no underscores, lower case) -> CamelCase field name, from `<Table>Add<Field>`."""
    prefix = f"{table}Add"
    return {name[len(prefix) :].lower(): name[len(prefix) :] for name in dir(tflite) if name.startswith(prefix)}


def _snake(camel: str) -> str:
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(camel))


@functools.cache
def _vector_dtype(table: str, camel: str) -> np.dtype:
    """Element dtype of a vector option field, read back from the generated reader.

    The generated `Start<Field>Vector` only knows the element size; the reader's `<Field>AsNumpy` knows the type,
    so a throwaway table holding an empty vector in that field is built and read back.
    """
    b = flatbuffers.Builder(64)
    getattr(tflite, f"{table}Start{camel}Vector")(b, 0)
    vec = b.EndVector()
    getattr(tflite, f"{table}Start")(b)
    getattr(tflite, f"{table}Add{camel}")(b, vec)
    b.Finish(getattr(tflite, f"{table}End")(b))
    reader = getattr(tflite, table).GetRootAs(b.Output(), 0)
    as_numpy = getattr(reader, f"{camel}AsNumpy", None)
    if as_numpy is None:
        raise ValueError(f"{table}.{_snake(camel)} is a vector of tables; not supported by this builder")
    return np.dtype(as_numpy().dtype)


def _enum_value(table: str, key: str, value: str) -> int | None:
    """A string option value resolved through the field's enum class; None when the field is not an enum."""
    enum_name = _ENUM_OF_FIELD.get(key)
    if enum_name is None and isinstance(getattr(tflite, f"{table}{_camel(key)}", None), type):
        enum_name = f"{table}{_camel(key)}"  # a table-scoped enum, e.g. FullyConnectedOptionsWeightsFormat
    if enum_name is None:
        return None
    members = _enum_members(enum_name)
    if value.upper() not in members:
        raise ValueError(f"{table}.{key}: {value!r} is not a member of tflite.{enum_name} ({', '.join(members)})")
    return members[value.upper()]


def _option_value(b: flatbuffers.Builder, table: str, key: str, camel: str, value: Any) -> Any:
    """What the generated `Add<Field>` takes: a scalar, or the offset of a vector/string created beforehand."""
    if isinstance(value, str):
        enum = _enum_value(table, key, value)
        return enum if enum is not None else b.CreateString(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        start = getattr(tflite, f"{table}Start{camel}Vector", None)
        if start is None:
            raise ValueError(f"{table}.{key} is not a vector field, got {value!r}")
        items = [_enum_value(table, key, v) if isinstance(v, str) else v for v in value]
        dtype = _vector_dtype(table, camel)
        arr = np.asarray(items).astype(dtype)
        prepend = getattr(b, "Prepend" + dtype.name.capitalize())
        start(b, len(arr))
        for v in arr[::-1]:
            prepend(v.item())
        return b.EndVector()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _write_options(b: flatbuffers.Builder, op: Op) -> tuple[int, int, int] | None:
    """Write the op's options table; (union tag, offset, 1 or 2 for builtin_options(_2)) or None."""
    table_info = _options_table_of(op.code) if op.code != "CUSTOM" else None
    if op.options is None:
        return None
    if table_info is None:
        raise ValueError(f"{op.code} has no builtin options table, but options {sorted(op.options)} were given")
    table, tag, which = table_info
    fields = _table_fields(table)
    values = []
    for key, value in op.options.items():
        camel = fields.get(key.replace("_", "").lower())
        if camel is None:
            known = ", ".join(_snake(c) for c in fields.values())
            raise ValueError(f"unknown option {key!r} for {op.code}: table {table} has fields: {known}")
        # vectors and strings must exist before the table is started
        values.append((getattr(tflite, f"{table}Add{camel}"), _option_value(b, table, key, camel, value)))
    getattr(tflite, f"{table}Start")(b)
    for add, value in values:
        add(b, value)
    return tag, getattr(tflite, f"{table}End")(b), which


def _tensor_bytes(t: T) -> bytes:
    """A constant's data in the tensor's dtype, little-endian, C order; its size must match the shape."""
    _, dtype = _DTYPES[t.dtype]
    arr = np.asarray(t.data)
    if arr.size != int(np.prod(t.shape, dtype=np.int64)):
        raise ValueError(f"tensor {t.name!r}: data has {arr.size} elements, shape {t.shape} needs {np.prod(t.shape)}")
    return np.ascontiguousarray(arr.astype(dtype)).tobytes()


def _vector(b: flatbuffers.Builder, start: Any, values: Sequence[Any], prepend: Any) -> int:
    """A vector through the generated `Start<Field>Vector`; `prepend` writes one element (back to front)."""
    start(b, len(values))
    for v in reversed(values):
        prepend(v)
    return b.EndVector()


def _int32s(b: flatbuffers.Builder, start: Any, values: Sequence[int]) -> int:
    return _vector(b, start, [int(v) for v in values], b.PrependInt32)


def _offsets(b: flatbuffers.Builder, start: Any, offsets: Sequence[int]) -> int:
    return _vector(b, start, offsets, b.PrependUOffsetTRelative)


def _data_vector(b: flatbuffers.Builder, payload: bytes) -> int:
    """Buffer.data: the schema asks for 16-byte alignment (force_align), which the generated helper drops."""
    b.StartVector(1, len(payload), 16)
    b.head = b.head - len(payload)
    b.Bytes[b.head : b.head + len(payload)] = payload
    return b.EndVector()


def _quantization(b: flatbuffers.Builder, t: T) -> int | None:
    if t.scale is None:
        if t.zero_point is not None:
            raise ValueError(f"tensor {t.name!r}: zero_point given without scale")
        return None
    scales = [float(s) for s in np.atleast_1d(np.asarray(t.scale, dtype=np.float64))]
    if t.zero_point is None:
        zps = [0] * len(scales)
    else:
        zps = [int(z) for z in np.atleast_1d(np.asarray(t.zero_point))]
        if len(zps) == 1 and len(scales) > 1:
            zps = zps * len(scales)
    if len(zps) != len(scales):
        raise ValueError(f"tensor {t.name!r}: {len(scales)} scales but {len(zps)} zero points")
    if len(scales) > 1:
        dim = t.quantized_dimension
        if not 0 <= dim < len(t.shape) or t.shape[dim] != len(scales):
            raise ValueError(f"tensor {t.name!r}: {len(scales)} scales do not match shape {t.shape} axis {dim}")
    scale_vec = _vector(b, tflite.QuantizationParametersStartScaleVector, scales, b.PrependFloat32)
    zp_vec = _vector(b, tflite.QuantizationParametersStartZeroPointVector, zps, b.PrependInt64)
    tflite.QuantizationParametersStart(b)
    tflite.QuantizationParametersAddScale(b, scale_vec)
    tflite.QuantizationParametersAddZeroPoint(b, zp_vec)
    tflite.QuantizationParametersAddQuantizedDimension(b, t.quantized_dimension)
    return tflite.QuantizationParametersEnd(b)


def build(
    tensors: list[T], ops: list[Op], inputs: list[str], outputs: list[str], description: str = "tinyc test"
) -> bytes:
    """The .tflite flatbuffer of one subgraph ("main") holding `tensors` and `ops` in order.

    `inputs`/`outputs` are the subgraph's graph inputs and outputs by tensor name. Raises ValueError for duplicate
    or unknown tensor names, unknown dtypes, op codes or option fields.
    """
    index: dict[str, int] = {}
    for i, t in enumerate(tensors):
        if t.name in index:
            raise ValueError(f"duplicate tensor name {t.name!r}")
        if t.dtype not in _DTYPES:
            raise ValueError(f"tensor {t.name!r}: unknown dtype {t.dtype!r} (known: {', '.join(_DTYPES)})")
        index[t.name] = i

    def ref(name: str | None, where: str, optional: bool = False) -> int:
        if name is None and optional:
            return -1
        if name not in index:
            raise ValueError(f"{where}: unknown tensor {name!r}")
        return index[name]

    b = flatbuffers.Builder(1024)

    # buffers: 0 is the empty sentinel; each constant owns one; data-less tensors point at 0
    payloads: list[bytes] = []
    tensor_buffer: list[int] = []
    for t in tensors:
        if t.data is None:
            tensor_buffer.append(0)
        else:
            payloads.append(_tensor_bytes(t))
            tensor_buffer.append(len(payloads))
    buffer_offsets = []
    for payload in [b"", *payloads]:
        data = _data_vector(b, payload) if payload else None
        tflite.BufferStart(b)
        if data is not None:
            tflite.BufferAddData(b, data)
        buffer_offsets.append(tflite.BufferEnd(b))

    tensor_offsets = []
    for t, buf in zip(tensors, tensor_buffer, strict=True):
        name = b.CreateString(t.name)
        shape = _int32s(b, tflite.TensorStartShapeVector, t.shape)
        signature = None
        if t.shape_signature is not None:
            signature = _int32s(b, tflite.TensorStartShapeSignatureVector, t.shape_signature)
        quant = _quantization(b, t)
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, _DTYPES[t.dtype][0])
        tflite.TensorAddBuffer(b, buf)
        tflite.TensorAddName(b, name)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        if t.variable:
            tflite.TensorAddIsVariable(b, True)
        if signature is not None:
            tflite.TensorAddShapeSignature(b, signature)
        tensor_offsets.append(tflite.TensorEnd(b))

    # operator codes, one per distinct (code, custom code, version), in order of first use
    opcode_keys: list[tuple[int, str | None, int]] = []
    operator_offsets = []
    for k, op in enumerate(ops):
        where = f"op {k} ({op.code})"
        if op.code == "CUSTOM" and not op.custom_code:
            raise ValueError(f"{where}: a CUSTOM op needs custom_code")
        key = (_builtin_code(op.code), op.custom_code, op.version)
        if key not in opcode_keys:
            opcode_keys.append(key)
        ins = _int32s(b, tflite.OperatorStartInputsVector, [ref(n, where, optional=True) for n in op.inputs])
        outs = _int32s(b, tflite.OperatorStartOutputsVector, [ref(n, where) for n in op.outputs])
        inter = None
        if op.intermediates:
            inter = _int32s(b, tflite.OperatorStartIntermediatesVector, [ref(n, where) for n in op.intermediates])
        custom = b.CreateByteVector(bytes(op.custom_options)) if op.custom_options is not None else None
        options = _write_options(b, op)
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, opcode_keys.index(key))
        tflite.OperatorAddInputs(b, ins)
        tflite.OperatorAddOutputs(b, outs)
        if options is not None:
            tag, offset, which = options
            if which == 1:
                tflite.OperatorAddBuiltinOptionsType(b, tag)
                tflite.OperatorAddBuiltinOptions(b, offset)
            else:
                tflite.OperatorAddBuiltinOptions2Type(b, tag)
                tflite.OperatorAddBuiltinOptions2(b, offset)
        if custom is not None:
            tflite.OperatorAddCustomOptions(b, custom)
        if inter is not None:
            tflite.OperatorAddIntermediates(b, inter)
        operator_offsets.append(tflite.OperatorEnd(b))

    sg_tensors = _offsets(b, tflite.SubGraphStartTensorsVector, tensor_offsets)
    sg_inputs = _int32s(b, tflite.SubGraphStartInputsVector, [ref(n, "graph inputs") for n in inputs])
    sg_outputs = _int32s(b, tflite.SubGraphStartOutputsVector, [ref(n, "graph outputs") for n in outputs])
    sg_ops = _offsets(b, tflite.SubGraphStartOperatorsVector, operator_offsets)
    sg_name = b.CreateString("main")
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, sg_tensors)
    tflite.SubGraphAddInputs(b, sg_inputs)
    tflite.SubGraphAddOutputs(b, sg_outputs)
    tflite.SubGraphAddOperators(b, sg_ops)
    tflite.SubGraphAddName(b, sg_name)
    subgraph = tflite.SubGraphEnd(b)

    code_offsets = []
    for builtin, custom_code, version in opcode_keys:
        custom_str = b.CreateString(custom_code) if custom_code is not None else None
        tflite.OperatorCodeStart(b)
        # the int8 field holds codes up to 127; larger ones say PLACEHOLDER_FOR_GREATER_OP_CODES (127) there
        tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(builtin, 127))
        tflite.OperatorCodeAddBuiltinCode(b, builtin)
        if custom_str is not None:
            tflite.OperatorCodeAddCustomCode(b, custom_str)
        tflite.OperatorCodeAddVersion(b, version)
        code_offsets.append(tflite.OperatorCodeEnd(b))

    codes_vec = _offsets(b, tflite.ModelStartOperatorCodesVector, code_offsets)
    subgraphs_vec = _offsets(b, tflite.ModelStartSubgraphsVector, [subgraph])
    buffers_vec = _offsets(b, tflite.ModelStartBuffersVector, buffer_offsets)
    desc = b.CreateString(description)
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddOperatorCodes(b, codes_vec)
    tflite.ModelAddSubgraphs(b, subgraphs_vec)
    tflite.ModelAddDescription(b, desc)
    tflite.ModelAddBuffers(b, buffers_vec)
    b.Finish(tflite.ModelEnd(b), b"TFL3")
    return bytes(b.Output())


def tflm_available() -> bool:
    """Whether TFLite Micro's Python interpreter can be imported (tests needing it skip otherwise)."""
    try:
        from tflite_micro.python.tflite_micro import runtime  # noqa: F401
    except ImportError:
        return False
    return True


def tflm_run(model: bytes, inputs: list[np.ndarray], arena_size: int | None = None) -> list[np.ndarray]:
    """Run `model` once in the TFLite Micro interpreter; returns copies of all graph outputs, in order.

    `arena_size` defaults to 10x the model (TFLM's own heuristic) but at least 1 MiB, since these test models are
    tiny while kernels such as the LSTM need scratch space independent of the model size.
    """
    from tflite_micro.python.tflite_micro import runtime

    subgraph = tflite.Model.GetRootAs(model, 0).Subgraphs(0)
    if len(inputs) != subgraph.InputsLength():
        raise ValueError(f"model has {subgraph.InputsLength()} inputs, {len(inputs)} given")
    interpreter = runtime.Interpreter.from_bytes(model, arena_size=arena_size or max(10 * len(model), 1 << 20))
    for i, x in enumerate(inputs):
        interpreter.set_input(np.ascontiguousarray(x), i)
    interpreter.invoke()
    return [np.array(interpreter.get_output(i), copy=True) for i in range(subgraph.OutputsLength())]


def single_op(
    code: str,
    inputs: list[T | None],
    outputs: list[T],
    options: dict[str, Any] | None = None,
    consts: Sequence[T] = (),
    *,
    custom_code: str | None = None,
    version: int = 1,
    intermediates: Sequence[T] = (),
    custom_options: bytes | None = None,
    description: str = "tinyc test",
) -> bytes:
    """The model of one operator.

    The op's inputs are `inputs` followed by `consts`; None in `inputs` is an omitted optional input. Graph inputs
    are the non-constant, non-variable tensors of `inputs`, in order; constants (tensors with data) may sit inside
    `inputs` and keep their position in the op's input list. Graph outputs are `outputs`. `intermediates` are extra
    tensors referenced only from the op's intermediates list.
    """
    op_inputs = [*inputs, *consts]
    tensors: list[T] = []
    for t in [*op_inputs, *outputs, *intermediates]:
        if t is not None and all(t is not seen for seen in tensors):
            tensors.append(t)
    graph_inputs = [t.name for t in inputs if t is not None and t.data is None and not t.variable]
    op = Op(
        code,
        [t.name if t is not None else None for t in op_inputs],
        [t.name for t in outputs],
        options,
        custom_code=custom_code,
        version=version,
        intermediates=[t.name for t in intermediates],
        custom_options=custom_options,
    )
    return build(tensors, [op], graph_inputs, [t.name for t in outputs], description)
