"""Import a .tflite model (subgraph 0) into a tinyc Graph, operator by operator.

The operators keep TFLite's NHWC layout (tinyc's int8 kernels are channels-last, so no transposes
are inserted) and, for integer models, TFLite Micro's arithmetic: every requantizing node gets
TFLite's double rounding, and ops whose integer steps differ from tinyc's own (average pooling,
softmax, the activations) become nodes that compute exactly TFLite Micro's integers.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from pathlib import Path

import numpy as np

from tinyc.errors import ModelLoadError, ShapeError, UnsupportedError
from tinyc.frontend.tflite.context import CONVERTERS, QRANGE, TflContext
from tinyc.frontend.tflite.reader import TflModel, TflOperator, is_tflite_bytes, read_tflite
from tinyc.ir import Graph, QuantParams, Tensor

_LOADED = False


def _load_converters() -> None:
    global _LOADED
    if _LOADED:
        return
    import tinyc.frontend.tflite as pkg
    from tinyc.ops import load_all

    load_all()
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("ops_"):
            importlib.import_module(f"{pkg.__name__}.{info.name}")
    _LOADED = True


def supported_builtins() -> list[str]:
    """The TFLite builtin operators tinyc converts."""
    _load_converters()
    return sorted(CONVERTERS)


def is_tflite_model(model: object) -> bool:
    """A path to a .tflite file, or a TFLite flatbuffer's bytes."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return is_tflite_bytes(bytes(model[:8]))
    if isinstance(model, (str, os.PathLike)):
        p = Path(model)
        if p.suffix.lower() == ".tflite":
            return True
        try:
            with open(p, "rb") as f:
                return is_tflite_bytes(f.read(8))
        except OSError:
            return False
    return False


def load_tflite(model: str | os.PathLike | bytes) -> tuple[TflModel, str]:
    """(parsed model, default graph name) from a path or bytes."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return read_tflite(bytes(model), "model"), "model"
    p = Path(model)
    try:
        buf = p.read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"cannot read model '{p}': {exc.strerror or exc}") from None
    return read_tflite(buf, p.name), p.stem


def _describe(model: TflModel, op: TflOperator) -> str:
    ins = [model.tensors[i].name for i in op.inputs if i >= 0]
    outs = [model.tensors[i].name for i in op.outputs if i >= 0]
    kind = f"custom op '{op.custom_code}'" if op.name == "CUSTOM" else op.name
    return f"#{op.index} {kind} ({', '.join(ins)} -> {', '.join(outs)})"


def check_supported(model: TflModel) -> None:
    """Refuse, in one message, every operator tinyc cannot convert and the model-wide blockers."""
    _load_converters()
    f16 = [t for t in model.tensors if t.dtype == "float16"]
    if f16:
        raise UnsupportedError(
            f"float16 model: {len(f16)} tensors are float16 (e.g. '{f16[0].name}'); tinyc compiles float32 "
            "and full-integer int8 .tflite models: convert without float16 weights, or quantize to int8"
        )
    lstm_like = {"UNIDIRECTIONAL_SEQUENCE_LSTM", "SVDF"}
    state = {i for op in model.operators if op.name in lstm_like for i in op.inputs + op.intermediates if i >= 0}
    produced = {i for op in model.operators for i in op.outputs} | set(model.inputs)
    i16 = [t for t in model.tensors if t.dtype == "int16" and t.index in produced and t.index not in state]
    if i16:
        raise UnsupportedError(
            f"int16 activations (16x8 quantization) are not supported: tensor '{i16[0].name}' is int16; "
            "quantize the model with int8 activations (full-integer int8)"
        )

    bad = [op for op in model.operators if op.name not in CONVERTERS]
    if bad:
        names = sorted({str(op.custom_code) if op.name == "CUSTOM" else op.name for op in bad})
        raise UnsupportedError(
            f"TFLite operators tinyc does not support ({', '.join(str(n) for n in names)}): "
            + "; ".join(_describe(model, op) for op in bad)
        )


def import_tflite(model: str | os.PathLike | bytes, name: str | None = None) -> Graph:
    """Import subgraph 0 of a .tflite model (path or bytes) into a tinyc Graph with static shapes."""
    tfl, default_name = load_tflite(model)
    g = Graph(name=name or default_name)
    names: dict[int, str] = {}
    for i in tfl.inputs:
        t = tfl.tensors[i]
        if t.data is not None:
            continue
        if any(d < 0 for d in t.shape) or (t.shape_signature and any(d < 0 for d in t.shape_signature[1:])):
            raise ShapeError(f"input '{t.name}' has a dynamic shape {list(t.shape_signature or t.shape)}")
        quant = None
        if t.quantized:
            assert t.scale is not None and t.zero_point is not None
            if t.per_channel:
                raise UnsupportedError(f"input '{t.name}' is quantized per channel")
            quant = QuantParams(np.asarray(t.scale[0], np.float32), np.asarray(t.zero_point[0], np.int64))
        if t.dtype in QRANGE and quant is None:
            raise UnsupportedError(f"input '{t.name}' is {t.dtype} without quantization parameters")
        g.add_tensor(Tensor(t.name, tuple(t.shape), t.dtype, None, quant))
        g.inputs.append(t.name)
        names[i] = t.name
        g.io_layout[t.name] = "NHWC" if len(t.shape) == 4 else ""
    check_supported(tfl)
    for op in tfl.operators:
        ctx = TflContext(tfl, g, names, op)
        try:
            CONVERTERS[op.name](ctx)
        except (UnsupportedError, ShapeError, ModelLoadError):
            raise
        except Exception as exc:  # a converter bug or a malformed operator: still name the operator
            raise UnsupportedError(f"{ctx.where}: could not import: {type(exc).__name__}: {exc}") from exc
        for j in op.outputs:
            if j >= 0 and j not in names:
                raise UnsupportedError(f"{ctx.where}: output '{tfl.tensors[j].name}' was not produced")
    for i in tfl.outputs:
        if i not in names:
            raise ModelLoadError(f"graph output '{tfl.tensors[i].name}' is not produced by any operator")
        g.outputs.append(names[i])
        g.output_names.append(tfl.tensors[i].name)
    g.remove_unused_tensors()
    from tinyc.ops.rounding import set_requant_rounding

    # every requantizing node rounds as TFLite Micro does (double rounding): set here, once, for all converters
    set_requant_rounding(g, "tflite", overwrite=True)
    return g
