"""Seeded, deterministic mutators for fuzzing tinyc's inputs.

Every mutator is a pure function of its input and a seed: the same (input, seed) always gives the
same bytes, so a failing case is reproduced from the seed printed with it. Each returns
``(data: bytes, what: str)`` where ``what`` says in a few words what was done (it becomes part of
the case id in reports).

Families:
- byte level: ``mutate_bytes`` (bit flips, truncation, insertion, duplication, zeroed ranges) of any file;
- ONNX protobuf level: ``mutate_model`` (names incl. invalid UTF-8 and C injection text, elem_types,
  dims, attributes, initializers, rewiring, op types, opsets, graph outputs, value_info);
- data files: ``mutate_data`` (.npz/.npy: dtypes, shapes, keys, NaN/Inf, ranges, broken zips, pickles);
- board files: ``mutate_board`` (TOML from boards/*.toml: types, missing keys, unknown values,
  regions, quoting, invalid UTF-8);
- tuning-log lines: ``mutate_log_line`` (knob types, huge ints, nesting, BOM, truncation, bad UTF-8).

The sentinel ``INJECTED`` appears in every injection payload: the oracle flags a case whose build or
run prints it or whose built binary has a symbol of that name.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import io
import json
import math
import multiprocessing
import os
import pickle
import random
import re
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SENTINEL = "INJECTED"
#: Text that, pasted unescaped into C, CMake, a linker script or a shell line, defines a symbol
#: named INJECTED or prints INJECTED_RAN (spelt so that the payload itself never contains that
#: word: an error message quoting the payload is not an injection).
INJECTIONS = [
    "*/ int INJECTED; /*",
    "x */ __attribute__((constructor)) static void INJECTED(void) { puts(\"INJECTED\" \"_RAN\"); } /*",
    "\"; int INJECTED = 1; static const char *_z = \"",
    "a\nint INJECTED;\n//",
    "x\\\nint INJECTED;",
    "x\")\nmessage(WARNING \"INJECTED\" \"_RAN\")\n#(",
    "$(echo INJECTED''_RAN)",
    "`echo INJECTED''_RAN`",
    "x; echo INJECTED''_RAN #",
    "INJECTED */ #define main INJECTED",
    "a'b\"c\\d\te\rf",
    "??/\nint INJECTED;",
]
#: Length-preserving placeholder replaced by invalid UTF-8 after serialisation.
_BAD_UTF8_MARK = "ZQBADUTF8MARKQZ"
_BAD_UTF8_BYTES = [b"\xff\xfe\xfd", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"]


def _patch_bad_utf8(data: bytes, rng: random.Random) -> bytes:
    """Replace every placeholder with invalid UTF-8 of the same length (protobuf lengths stay valid)."""
    mark = _BAD_UTF8_MARK.encode()
    if mark not in data:
        return data
    bad = rng.choice(_BAD_UTF8_BYTES)
    repl = (bad * (len(mark) // len(bad) + 1))[:len(mark)]
    return data.replace(mark, repl)


# ---------------------------------------------------------------- byte level

def mutate_bytes(data: bytes, seed: int) -> tuple[bytes, str]:
    """One to three byte-level edits of `data`."""
    rng = random.Random(seed)
    buf = bytearray(data)
    ops = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if not buf:
            buf += bytes([rng.randrange(256)])
        kind = rng.choice(["flip", "flip", "flips", "truncate", "insert", "duplicate", "zero", "byte"])
        n = len(buf)
        if kind == "flip":
            i = rng.randrange(n)
            buf[i] ^= 1 << rng.randrange(8)
            ops.append(f"flip@{i}")
        elif kind == "flips":
            k = rng.randint(2, 16)
            for _ in range(k):
                buf[rng.randrange(n)] ^= 1 << rng.randrange(8)
            ops.append(f"flip{k}")
        elif kind == "truncate":
            i = rng.randrange(n)
            del buf[i:]
            ops.append(f"trunc@{i}")
        elif kind == "insert":
            i = rng.randrange(n + 1)
            k = rng.choice([1, 2, 4, 8, 64, 1024])
            buf[i:i] = bytes(rng.randrange(256) for _ in range(k))
            ops.append(f"ins{k}@{i}")
        elif kind == "duplicate":
            i = rng.randrange(n)
            j = min(n, i + rng.choice([1, 4, 16, 256, 4096]))
            at = rng.randrange(n + 1)
            buf[at:at] = buf[i:j]
            ops.append(f"dup{j - i}@{at}")
        elif kind == "zero":
            i = rng.randrange(n)
            j = min(n, i + rng.choice([1, 4, 16, 256]))
            buf[i:j] = bytes(j - i)
            ops.append(f"zero{j - i}@{i}")
        else:
            i = rng.randrange(n)
            buf[i] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
            ops.append(f"byte@{i}")
    return bytes(buf), "bytes:" + ",".join(ops)


# ---------------------------------------------------------------- ONNX protobuf level

_HUGE = [2 ** 31 - 1, 2 ** 31, 2 ** 32 + 1, 2 ** 40, 2 ** 62, 2 ** 63 - 1]
_ELEM_TYPES = [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 77, 1000, -1, 2 ** 30]
_OP_TYPES = ["Relu", "Sigmoid", "Add", "Mul", "Conv", "MaxPool", "AveragePool", "Identity", "Softmax", "Transpose",
             "Reshape", "Gemm", "MatMul", "Flatten", "Concat", "Gather", "Squeeze", "Unsqueeze", "Sqrt", "Div",
             "QuantizeLinear", "DequantizeLinear", "BatchNormalization", "GlobalAveragePool", "LSTM", "If", "Loop",
             "Bogus", "", "relu", "Conv ", "Conv\x00"]
_OPSETS = [0, 1, 6, 7, 9, 10, 11, 12, 14, 17, 18, 19, 21, 22, 99, 10000, -1]


def _names(model) -> list[tuple[str, Any, str]]:
    """(kind, object, field) sites that hold a tensor or node name."""
    g = model.graph
    sites: list[tuple[str, Any, str]] = []
    for v in list(g.input) + list(g.output) + list(g.value_info):
        sites.append(("value", v, "name"))
    for t in g.initializer:
        sites.append(("init", t, "name"))
    for n in g.node:
        sites.append(("node", n, "name"))
    return sites


def _tensor_names(model) -> list[str]:
    g = model.graph
    names = {v.name for v in g.input} | {t.name for t in g.initializer}
    for n in g.node:
        names.update(o for o in n.output if o)
    return sorted(names)


def _rename_everywhere(model, old: str, new: str) -> None:
    g = model.graph
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.name == old:
            v.name = new
    for t in g.initializer:
        if t.name == old:
            t.name = new
    for n in g.node:
        for i, x in enumerate(n.input):
            if x == old:
                n.input[i] = new
        for i, x in enumerate(n.output):
            if x == old:
                n.output[i] = new


def _weird_name(rng: random.Random) -> str:
    return rng.choice(INJECTIONS + [_BAD_UTF8_MARK, "", " ", "0abc", "int", "main", "static", "a" * 5000,
                                    "名前", "x/y\\z", "a.b-c:d", "%s%n%x", "\x01\x02", "NaN", "1e3"])


def _m_name(model, rng):
    g = model.graph
    if rng.random() < 0.6:
        names = _tensor_names(model) + [v.name for v in g.output]
        old = rng.choice(names)
        new = _weird_name(rng)
        _rename_everywhere(model, old, new)
        return f"rename-tensor {new[:24]!r}"
    kind, obj, field = rng.choice(_names(model) + [("graph", g, "name")] * 2 + [("doc", g, "doc_string")])
    new = _weird_name(rng)
    setattr(obj, field, new)
    return f"rename-{kind}-only {new[:24]!r}"


def _value_infos(model):
    g = model.graph
    return [v for v in list(g.input) + list(g.output) + list(g.value_info) if v.type.HasField("tensor_type")]


def _m_elem_type(model, rng):
    g = model.graph
    t = rng.choice(_ELEM_TYPES)
    if g.initializer and rng.random() < 0.3:
        init = rng.choice(list(g.initializer))
        init.data_type = t
        return f"init-dtype {init.name[:20]}={t}"
    vis = _value_infos(model)
    if not vis:
        return "noop"
    v = rng.choice(vis)
    v.type.tensor_type.elem_type = t
    return f"elem_type {v.name[:20]}={t}"


def _m_dims(model, rng):
    vis = [v for v in _value_infos(model) if v.type.tensor_type.HasField("shape")]
    if not vis:
        return "noop"
    v = rng.choice(vis)
    shape = v.type.tensor_type.shape
    r = rng.random()
    if r < 0.15:
        shape.dim.add().dim_value = rng.choice([1, 2, 0])
        return f"dims {v.name[:20]} +dim"
    if r < 0.25 and len(shape.dim):
        del shape.dim[rng.randrange(len(shape.dim))]
        return f"dims {v.name[:20]} -dim"
    if r < 0.3:
        v.type.tensor_type.ClearField("shape")
        return f"dims {v.name[:20]} no-shape"
    if not len(shape.dim):
        shape.dim.add().dim_value = 0
        return f"dims {v.name[:20]} scalar->[0]"
    d = shape.dim[rng.randrange(len(shape.dim))]
    if rng.random() < 0.2:
        d.dim_param = rng.choice(["N", "batch", "", SENTINEL + " */"])
        return f"dims {v.name[:20]} param"
    val = rng.choice([0, -1, -7, 2, 3, 7, 1000] + _HUGE)
    d.dim_value = val
    return f"dims {v.name[:20]}={val}"


def _attr_values(name: str, rng: random.Random, old):
    from onnx import AttributeProto
    if old is not None and old.type == AttributeProto.INTS:
        n = len(old.ints)
        choice = rng.choice(["zero", "neg", "huge", "short", "long", "empty", "one"])
        if choice == "zero":
            return [0] * n, choice
        if choice == "neg":
            return [-rng.randint(1, 5) for _ in range(n)], choice
        if choice == "huge":
            return [rng.choice(_HUGE) for _ in range(n)], choice
        if choice == "short":
            return list(old.ints)[:max(0, n - 1)], choice
        if choice == "long":
            return list(old.ints) + [1, 1], choice
        if choice == "empty":
            return [], choice
        v = list(old.ints)
        if v:
            v[rng.randrange(n)] = rng.choice([0, -1, 3, 100])
        return v, "one"
    defaults = {
        "pads": lambda: [rng.choice([-2, -1, 0, 1, 5, 2 ** 31]) for _ in range(rng.choice([2, 4, 3, 8]))],
        "strides": lambda: [rng.choice([0, -1, 1, 2, 9, 2 ** 40]) for _ in range(rng.choice([1, 2, 3]))],
        "dilations": lambda: [rng.choice([0, -1, 1, 2, 50]) for _ in range(rng.choice([1, 2, 3]))],
        "kernel_shape": lambda: [rng.choice([0, -1, 1, 3, 99, 2 ** 31]) for _ in range(rng.choice([1, 2, 3]))],
        "perm": lambda: rng.choice([[0, 0, 1, 2], [3, 2, 1], [0, 1, 2, 3, 4], [-1, 0, 1, 2], [0, 5, 1, 2], []]),
        "group": lambda: rng.choice([0, -1, 2, 3, 7, 16, 2 ** 40]),
        "axis": lambda: rng.choice([-100, -5, -1, 3, 4, 100, 2 ** 40]),
        "auto_pad": lambda: rng.choice([b"SAME_UPPER", b"SAME_LOWER", b"VALID", b"NOTSET", b"BOGUS", b""]),
    }
    if name in defaults:
        return defaults[name](), "set"
    if old is not None and old.type == AttributeProto.INT:
        return rng.choice([0, -1, 2, 2 ** 40, -2 ** 40]), "int"
    if old is not None and old.type == AttributeProto.FLOAT:
        return rng.choice([math.nan, math.inf, -math.inf, 0.0, -1.0, 1e30]), "float"
    return rng.choice([0, -1, 2 ** 40, 1.5, b"x"]), "any"


def _m_attribute(model, rng):
    from onnx import helper
    g = model.graph
    if not g.node:
        return "noop"
    node = rng.choice(list(g.node))
    names = ["pads", "strides", "dilations", "kernel_shape", "group", "auto_pad", "axis", "perm"]
    existing = {a.name: a for a in node.attribute}
    r = rng.random()
    if existing and r < 0.6:
        name = rng.choice(sorted(existing))
    elif existing and r < 0.7:
        name = rng.choice(sorted(existing))
        attrs = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend(attrs)
        return f"attr {node.op_type}.{name} removed"
    elif existing and r < 0.78:
        a = existing[rng.choice(sorted(existing))]
        node.attribute.append(copy.deepcopy(a))
        return f"attr {node.op_type}.{a.name} duplicated"
    else:
        name = rng.choice(names)
    old = existing.get(name)
    value, how = _attr_values(name, rng, old)
    if rng.random() < 0.08:  # wrong attribute type
        value, how = (1.5 if isinstance(value, (list, int)) else [1, 2]), "wrongtype"
    try:
        new = helper.make_attribute(name, value)
    except Exception:
        new = helper.make_attribute(name, 1)
    attrs = [a for a in node.attribute if a.name != name] + [new]
    del node.attribute[:]
    node.attribute.extend(attrs)
    return f"attr {node.op_type}.{name} {how}"


def _m_initializer(model, rng):
    from onnx import TensorProto, numpy_helper
    g = model.graph
    floats = [t for t in g.initializer if t.data_type == TensorProto.FLOAT]
    inits = list(g.initializer)
    if not inits:
        return "noop"
    t = rng.choice(floats) if floats and rng.random() < 0.8 else rng.choice(inits)
    try:
        arr = numpy_helper.to_array(t).copy()
    except Exception:
        arr = None
    choice = rng.choice(["nan", "inf", "ninf", "huge", "to_float_data", "float_data_and_raw", "truncate", "extend",
                         "dims", "empty", "zero_dims", "denormal"])
    if choice in ("nan", "inf", "ninf", "huge", "denormal") and arr is not None and arr.size \
            and arr.dtype.kind == "f":
        flat = arr.reshape(-1)
        k = rng.choice([1, 1, 2, flat.size])
        idx = [rng.randrange(flat.size) for _ in range(k)]
        val = {"nan": np.nan, "inf": np.inf, "ninf": -np.inf, "huge": 3e38, "denormal": 1e-45}[choice]
        flat[idx] = val
        t.CopyFrom(numpy_helper.from_array(flat.reshape(arr.shape).astype(arr.dtype), t.name))
        return f"init {choice}x{k} {t.name[:20]}"
    if choice == "to_float_data" and arr is not None and arr.dtype == np.float32:
        t.ClearField("raw_data")
        del t.float_data[:]
        t.float_data.extend(arr.reshape(-1).tolist())
        return f"init float_data {t.name[:20]}"
    if choice == "float_data_and_raw" and arr is not None and arr.dtype == np.float32:
        t.float_data.extend(arr.reshape(-1).tolist()[:max(1, arr.size // 2)])
        if rng.random() < 0.5:
            t.raw_data = b""
        return f"init float_data+raw {t.name[:20]}"
    if choice in ("truncate", "extend") and t.raw_data:
        raw = t.raw_data
        if choice == "truncate":
            t.raw_data = raw[:rng.randrange(len(raw))]
        else:
            t.raw_data = raw + raw[:rng.choice([1, 3, 4, len(raw)])]
        return f"init raw {choice} {t.name[:20]}"
    if choice == "dims" and len(t.dims):
        i = rng.randrange(len(t.dims))
        t.dims[i] = rng.choice([0, -1, t.dims[i] + 1, max(0, t.dims[i] - 1), 2 ** 40])
        return f"init dims {t.name[:20]}"
    if choice == "zero_dims":
        del t.dims[:]
        return f"init dims removed {t.name[:20]}"
    t.ClearField("raw_data")
    del t.float_data[:]
    del t.int64_data[:]
    del t.int32_data[:]
    return f"init emptied {t.name[:20]}"


def _m_rewire(model, rng):
    g = model.graph
    if not g.node:
        return "noop"
    node = rng.choice(list(g.node))
    names = _tensor_names(model)
    r = rng.random()
    if r < 0.3 and len(node.input):
        i = rng.randrange(len(node.input))
        node.input[i] = rng.choice(names)
        return f"rewire {node.op_type} in{i}"
    if r < 0.45 and len(node.input):
        i = rng.randrange(len(node.input))
        node.input[i] = rng.choice(["", "does_not_exist"])
        return f"rewire {node.op_type} in{i} dangling"
    if r < 0.55 and len(node.input):
        del node.input[rng.randrange(len(node.input))]
        return f"rewire {node.op_type} input removed"
    if r < 0.62:
        node.input.append(rng.choice(names + [""]))
        return f"rewire {node.op_type} extra input"
    if r < 0.72 and len(node.output):
        del node.output[rng.randrange(len(node.output))]
        return f"rewire {node.op_type} output removed"
    if r < 0.78:
        node.output.append(rng.choice(names + ["extra_out"]))
        return f"rewire {node.op_type} extra output"
    if r < 0.86:
        nodes = list(g.node)
        del g.node[:]
        victim = rng.randrange(len(nodes))
        g.node.extend(nodes[:victim] + nodes[victim + 1:])
        return f"node {nodes[victim].op_type} removed"
    if r < 0.93:
        nodes = list(g.node)
        i, j = rng.randrange(len(nodes)), rng.randrange(len(nodes))
        nodes[i], nodes[j] = nodes[j], nodes[i]
        del g.node[:]
        g.node.extend(nodes)
        return "nodes swapped"
    g.node.append(copy.deepcopy(node))
    return f"node {node.op_type} duplicated"


def _m_op_type(model, rng):
    g = model.graph
    if not g.node:
        return "noop"
    node = rng.choice(list(g.node))
    old = node.op_type
    node.op_type = rng.choice(_OP_TYPES)
    if rng.random() < 0.1:
        node.domain = rng.choice(["com.microsoft", "ai.onnx.ml", "bogus.domain"])
    return f"op {old}->{node.op_type!r}"


def _m_opset(model, rng):
    r = rng.random()
    if r < 0.7 and len(model.opset_import):
        o = model.opset_import[0]
        o.version = rng.choice(_OPSETS)
        return f"opset {o.version}"
    if r < 0.8:
        del model.opset_import[:]
        return "opset none"
    if r < 0.9:
        model.ir_version = rng.choice([0, 1, 3, 4, 11, 12, 99, -1])
        return f"ir_version {model.ir_version}"
    o = model.opset_import.add()
    o.domain, o.version = rng.choice([("", 11), ("com.microsoft", 1), ("ai.onnx.ml", 3), ("bogus", 1)])
    return f"opset +{o.domain or 'ai.onnx'}:{o.version}"


def _m_outputs(model, rng):
    g = model.graph
    r = rng.random()
    if r < 0.3:
        del g.output[:]
        return "outputs removed"
    if r < 0.55 and len(g.output):
        g.output.append(copy.deepcopy(g.output[0]))
        return "output duplicated"
    if r < 0.8 and g.node:
        from onnx import helper, TensorProto
        node = rng.choice(list(g.node))
        if node.output:
            g.output.append(helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None))
            return f"output + intermediate {node.op_type}"
    if len(g.output):
        g.output[0].name = rng.choice(_tensor_names(model) + ["nowhere"])
        return "output renamed"
    return "noop"


def _m_value_info(model, rng):
    from onnx import helper, TensorProto
    g = model.graph
    if not g.node:
        return "noop"
    node = rng.choice(list(g.node))
    if not node.output:
        return "noop"
    t = rng.choice([TensorProto.FLOAT, TensorProto.INT8, TensorProto.INT64, TensorProto.DOUBLE, TensorProto.STRING, 77])
    shape = rng.choice([None, [], [1], [1, 10], [0, 3], [-1, 2], [2 ** 40], [1, 1, 1, 1, 1, 1]])
    vi = helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, shape)
    vi.type.tensor_type.elem_type = t
    g.value_info.append(vi)
    return f"value_info {node.op_type} t{t} {shape}"


MODEL_MUTATIONS: dict[str, Callable] = {
    "name": _m_name, "elem_type": _m_elem_type, "dims": _m_dims, "attribute": _m_attribute,
    "initializer": _m_initializer, "rewire": _m_rewire, "op_type": _m_op_type, "opset": _m_opset,
    "outputs": _m_outputs, "value_info": _m_value_info,
}
_WEIGHTS = {"name": 3, "elem_type": 2, "dims": 2, "attribute": 4, "initializer": 3, "rewire": 2, "op_type": 2,
            "opset": 1, "outputs": 1, "value_info": 1}


def mutate_model(data: bytes, seed: int, kinds: list[str] | None = None) -> tuple[bytes, str]:
    """Parse an ONNX model and apply one (sometimes two) protobuf-level mutations; serialised bytes."""
    import onnx
    rng = random.Random(seed)
    model = onnx.load_from_string(data)
    kinds = kinds or list(MODEL_MUTATIONS)
    weights = [_WEIGHTS.get(k, 1) for k in kinds]
    whats = []
    for _ in range(1 if rng.random() < 0.85 else 2):
        kind = rng.choices(kinds, weights)[0]
        whats.append(f"{kind}:{MODEL_MUTATIONS[kind](model, rng)}")
    out = model.SerializeToString()
    return _patch_bad_utf8(out, rng), " + ".join(whats)


# ---------------------------------------------------------------- data files

def _npz(arrays: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _npy(arr: Any, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


DATA_MUTATIONS = [
    "float64", "int32", "int64_huge", "uint8", "bool", "complex64", "strings", "object", "float16",
    "rank+1", "rank-1", "zero_samples", "wrong_inner", "transposed", "scalar", "huge_dim1",
    "empty_npz", "extra_key", "wrong_key", "two_keys_wrong", "nan", "inf", "ninf", "huge_values", "denormal",
    "truncated_zip", "corrupt_zip_byte", "not_a_zip", "npy_not_npz", "pickle_npy", "zero_bytes",
    "labels_wrong_len", "labels_strings", "labels_float_nan", "many_samples", "key_injection", "key_bad_utf8",
    "npy_header_lie", "nested_npz", "fortran_order", "big_endian", "int8_range", "y_only", "structured",
    "datetime", "dup_keys",
]


def mutate_data(spec: dict[str, tuple[int, ...]], seed: int, kind: str | None = None) -> tuple[bytes, str]:
    """A malformed input file for a model whose inputs are `spec` = {name: full shape incl. batch}.
    Returns the file's bytes (normally .npz) and the mutation's name."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    kind = kind or rng.choice(DATA_MUTATIONS)
    names = list(spec)
    n = rng.choice([1, 2, 3])

    def good(name: str, dtype=np.float32) -> np.ndarray:
        shape = spec[name]
        return nrng.random((n,) + tuple(shape[1:]) if shape and shape[0] == 1 else (n,) + tuple(shape)).astype(dtype)

    arrays = {k: good(k) for k in names}
    first = names[0]
    base = arrays[first]
    if kind in ("float64", "uint8", "bool", "float16"):
        arrays[first] = base.astype({"float64": np.float64, "uint8": np.uint8, "bool": np.bool_,
                                     "float16": np.float16}[kind])
    elif kind == "int32":
        arrays[first] = (base * 100).astype(np.int32)
    elif kind == "int64_huge":
        arrays[first] = np.full(base.shape, 2 ** 62, dtype=np.int64)
    elif kind == "int8_range":
        arrays[first] = np.full(base.shape, 1000, dtype=np.int16)
    elif kind == "complex64":
        arrays[first] = base.astype(np.complex64) + 1j
    elif kind == "strings":
        arrays[first] = np.full(base.shape, "abc", dtype="<U3")
    elif kind == "object":
        arrays[first] = np.array([object()] * base.size, dtype=object).reshape(base.shape)
    elif kind == "datetime":
        arrays[first] = np.zeros(base.shape, dtype="datetime64[s]")
    elif kind == "structured":
        arrays[first] = np.zeros(base.shape, dtype=[("a", "<f4"), ("b", "<i4")])
    elif kind == "rank+1":
        arrays[first] = base[..., None]
    elif kind == "rank-1":
        arrays[first] = base.reshape(base.shape[:-2] + (-1,)) if base.ndim >= 2 else base.reshape(-1)
    elif kind == "zero_samples":
        arrays[first] = base[:0]
    elif kind == "wrong_inner":
        shp = list(base.shape)
        shp[-1] += 1
        arrays[first] = nrng.random(shp).astype(np.float32)
    elif kind == "transposed":
        arrays[first] = np.ascontiguousarray(base.T)
    elif kind == "scalar":
        arrays[first] = np.float32(1.0)
    elif kind == "huge_dim1":
        arrays[first] = np.zeros((1, 2 ** 20) if base.ndim == 2 else (1,) + (1,) * (base.ndim - 2) + (2 ** 20,),
                                 np.float32)
    elif kind == "empty_npz":
        arrays = {}
    elif kind == "extra_key":
        arrays["extra"] = nrng.random(3).astype(np.float32)
    elif kind == "wrong_key":
        arrays = {"not_an_input": base}
    elif kind == "two_keys_wrong":
        arrays = {"a": base, "b": base}
    elif kind in ("nan", "inf", "ninf", "huge_values", "denormal"):
        v = {"nan": np.nan, "inf": np.inf, "ninf": -np.inf, "huge_values": 3e38, "denormal": 1e-45}[kind]
        flat = base.reshape(-1)
        flat[[rng.randrange(flat.size) for _ in range(rng.choice([1, 3]))]] = v
    elif kind == "labels_wrong_len":
        arrays["y"] = np.arange(n + 3)
    elif kind == "labels_strings":
        arrays["y"] = np.array(["cat"] * n)
    elif kind == "labels_float_nan":
        arrays["y"] = np.full(n, np.nan)
    elif kind == "many_samples":
        shape = spec[first]
        arrays[first] = nrng.random((64,) + tuple(shape[1:] if shape and shape[0] == 1 else shape)).astype(np.float32)
    elif kind == "key_injection":
        arrays = {rng.choice(INJECTIONS): base}
    elif kind == "key_bad_utf8":
        data = _npz({_BAD_UTF8_MARK: base})
        return _patch_bad_utf8(data, rng), kind
    elif kind == "fortran_order":
        arrays[first] = np.asfortranarray(base)
    elif kind == "big_endian":
        arrays[first] = base.astype(">f4")
    elif kind == "y_only":
        arrays = {"y": np.arange(n)}
    elif kind == "nested_npz":
        return _npz({first: np.frombuffer(_npz(arrays), dtype=np.uint8)}), kind
    elif kind == "dup_keys":
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                z.writestr(first + ".npy", _npy(base))
                z.writestr(first + ".npy", _npy(base[:0]))
        return buf.getvalue(), kind
    elif kind == "npy_header_lie":
        raw = _npy(base)
        raw = raw.replace(repr(base.shape).encode(), repr((10 ** 6,) + base.shape[1:]).encode(), 1)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr(first + ".npy", raw)
        return buf.getvalue(), kind
    elif kind == "truncated_zip":
        data = _npz(arrays)
        return data[:rng.randrange(1, len(data))], kind
    elif kind == "corrupt_zip_byte":
        data = bytearray(_npz(arrays))
        for _ in range(rng.choice([1, 4])):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data), kind
    elif kind == "not_a_zip":
        return rng.choice([b"hello world\n", b"PK\x03\x04garbage", b"\x93NUMPY", b"\x00" * 100]), kind
    elif kind == "npy_not_npz":
        return _npy(base), kind
    elif kind == "pickle_npy":
        return _npy(np.array([{"x": 1}], dtype=object), allow_pickle=True), kind
    elif kind == "zero_bytes":
        return b"", kind
    return _npz(arrays), kind


# ---------------------------------------------------------------- board files

def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON string escapes are valid TOML basic strings
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(str(v))


def dump_toml(data: dict[str, Any]) -> str:
    """A minimal TOML writer for board dicts (top-level keys, one level of tables, inline deeper)."""
    lines = []
    for k, v in data.items():
        if not isinstance(v, dict):
            lines.append(f"{json.dumps(k)} = {_toml_value(v)}")
    for k, v in data.items():
        if isinstance(v, dict):
            lines.append(f"\n[{json.dumps(k)}]")
            for kk, vv in v.items():
                lines.append(f"{json.dumps(kk)} = {_toml_value(vv)}")
    return "\n".join(lines) + "\n"


BOARD_MUTATIONS = ["description_inject", "cflags_inject", "ldflags_inject", "qemu_inject", "type_swap", "missing_key", "missing_table", "unknown_value", "overlap", "huge", "negative",
                   "string_inject", "name_inject", "bad_utf8", "truncate", "unaligned", "table_to_scalar",
                   "extra_key", "float_for_int", "nan", "dup_key", "byte_flip", "empty", "list_of_nonstrings"]
_UNKNOWN = {"core": ["cortex-m99", "", "x86", "cortex-m4 ", SENTINEL], "fpu": ["fpv9", "none ", "", "neon"],
            "float_abi": ["hardest", "", "HARD"], "driver": ["pl011", ""], "kind": ["dsp", "", "HOST", "cpu"],
            "tool": ["dfu-util", "", "rm -rf"], "image": ["srec", ""], "machine": ["mps2-an999", "", "a b"]}


def _leaves(d: dict[str, Any], prefix=()) -> list[tuple[tuple[str, ...], Any]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _leaves(v, prefix + (k,))
        else:
            out.append((prefix + (k,), v))
    return out


def _set(d: dict, path: tuple[str, ...], value: Any) -> None:
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value


def _del(d: dict, path: tuple[str, ...]) -> None:
    for k in path[:-1]:
        d = d[k]
    del d[path[-1]]


def mutate_board(text: str, seed: int, kind: str | None = None) -> tuple[bytes, str]:
    """A malformed variant of a board file's TOML text; bytes (may be invalid UTF-8)."""
    rng = random.Random(seed)
    kind = kind or rng.choice(BOARD_MUTATIONS)
    board = tomllib.loads(text)
    leaves = _leaves(board)
    path, value = rng.choice(leaves)
    what = f"{kind} {'.'.join(path)}"
    if kind == "type_swap":
        new = {bool: lambda: rng.choice([1, "true"]), int: lambda: rng.choice([str(value), float(value), True, [value]]),
               str: lambda: rng.choice([1, True, [value], {"a": value}]), list: lambda: "a b",
               float: lambda: "1.0"}.get(type(value), lambda: 0)()
        _set(board, path, new)
    elif kind == "missing_key":
        _del(board, path)
    elif kind == "missing_table":
        tables = [k for k, v in board.items() if isinstance(v, dict)]
        if tables:
            t = rng.choice(tables)
            del board[t]
            what = f"{kind} {t}"
    elif kind == "unknown_value":
        cands = [p for p, _ in leaves if p[-1] in _UNKNOWN]
        if cands:
            p = rng.choice(cands)
            _set(board, p, rng.choice(_UNKNOWN[p[-1]]))
            what = f"{kind} {'.'.join(p)}"
    elif kind == "overlap" and "memory" in board:
        m = board["memory"]
        m["ram_origin"] = m.get("flash_origin", 0) + rng.choice([0, 16, m.get("flash_size", 4096) // 2])
        what = kind
    elif kind in ("huge", "negative", "unaligned", "float_for_int", "nan"):
        ints = [p for p, v in leaves if isinstance(v, int) and not isinstance(v, bool)] or [path]
        p = rng.choice(ints)
        val = {"huge": lambda: rng.choice([2 ** 63 - 1, 2 ** 32, 2 ** 40, 10 ** 18]),
               "negative": lambda: rng.choice([-1, -16, -2 ** 63]),
               "unaligned": lambda: rng.choice([1, 3, 17, 4097]),
               "float_for_int": lambda: rng.choice([1.5, 0.0, 1e300]),
               "nan": lambda: rng.choice([math.nan, math.inf, -math.inf])}[kind]()
        _set(board, p, val)
        what = f"{kind} {'.'.join(p)}={val}"
    elif kind in ("string_inject", "name_inject"):
        strs = [p for p, v in leaves if isinstance(v, str)] or [("description",)]
        p = ("name",) if kind == "name_inject" else rng.choice(strs)
        _set(board, p, rng.choice(INJECTIONS))
        what = f"{kind} {'.'.join(p)}"
    elif kind == "description_inject":
        board["description"] = rng.choice(INJECTIONS)
        what = kind
    elif kind in ("cflags_inject", "ldflags_inject"):
        tc = board.get("toolchain")
        key = kind.split("_")[0]
        if isinstance(tc, dict):
            tc[key] = str(tc.get(key, "")) + " " + rng.choice(["$(echo INJECTED''_RAN)", "`echo INJECTED''_RAN`",
                                                               "; echo INJECTED''_RAN", "\"; echo INJECTED''_RAN; \"",
                                                               "-DINJECTED_FLAG=\"*/\"", "\n", "-O0"])
        what = f"{kind} {key}"
    elif kind == "qemu_inject":
        em = board.get("emulator")
        if isinstance(em, dict):
            em[rng.choice(["qemu", "machine"])] = rng.choice(["qemu-system-arm; echo INJECTED''_RAN",
                                                            "$(echo INJECTED''_RAN)", "mps2-an386 -d in_asm"])
        what = kind
    elif kind == "extra_key":
        _set(board, rng.choice([p for p in [("bogus",), ("cpu", "bogus"), ("memory", "extra_region"),
                                            ("toolchain", "bogus")] if len(p) == 1 or isinstance(board.get(p[0]), dict)]), 1)
    elif kind == "table_to_scalar":
        tables = [k for k, v in board.items() if isinstance(v, dict)] or ["cpu"]
        t = rng.choice(tables)
        board[t] = rng.choice([1, "x", [1, 2]])
        what = f"{kind} {t}"
    elif kind == "list_of_nonstrings":
        if "flasher" in board and isinstance(board["flasher"], dict):
            board["flasher"]["args"] = rng.choice([[1, 2], [["a"]], ["ok", True], [SENTINEL + "; echo INJECTED''_RAN"]])
        what = kind
    out = dump_toml(board).encode()
    if kind == "bad_utf8":
        strs = [p for p, v in leaves if isinstance(v, str)] or [("description",)]
        p = rng.choice(strs)
        _set(board, p, _BAD_UTF8_MARK)
        out = _patch_bad_utf8(dump_toml(board).encode(), rng)
        what = f"{kind} {'.'.join(p)}"
    elif kind == "truncate":
        raw = text.encode()
        out = raw[:rng.randrange(len(raw))]
    elif kind == "dup_key":
        line = rng.choice([ln for ln in text.splitlines() if "=" in ln and not ln.startswith("#")])
        out = (text + "\n" + line + "\n").encode() if rng.random() < 0.5 else text.replace(line, line + "\n" + line, 1).encode()
    elif kind == "byte_flip":
        out, w = mutate_bytes(text.encode(), seed)
        what = f"{kind} {w}"
    elif kind == "empty":
        out = rng.choice([b"", b"\n", b"# nothing\n", b"\xef\xbb\xbf"])
    return out, what


# ---------------------------------------------------------------- tuning-log lines

LOG_MUTATIONS = ["knob_str", "knob_float", "knob_bool", "knob_none", "knob_list", "knob_dict", "knob_huge",
                 "knob_negative", "knob_unknown", "knobs_not_object", "cycles_str", "cycles_nan", "cycles_huge",
                 "cycles_negative", "status_unknown", "missing_field", "deep_nesting", "deep_knob", "bom", "truncated",
                 "bad_utf8", "nul_bytes", "not_object", "crlf", "long_line", "dup_keys", "key_inject",
                 "board_type", "knob_inject", "huge_exponent", "empty_knobs_ok", "key_int", "private_knob"]


def mutate_log_line(record: dict[str, Any], seed: int, kind: str | None = None) -> tuple[bytes, str]:
    """One malformed JSON Lines record (without the trailing newline unless the mutation adds one)."""
    rng = random.Random(seed)
    kind = kind or rng.choice(LOG_MUTATIONS)
    r = copy.deepcopy(record)
    knobs = r.get("knobs") or {}
    knob = rng.choice(sorted(knobs)) if knobs else "oc_tile"
    raw: bytes | None = None
    if kind == "knob_str":
        knobs[knob] = str(knobs.get(knob, 4))
    elif kind == "knob_float":
        v = knobs.get(knob, 4)
        knobs[knob] = float(v) if isinstance(v, int) else 4.0
    elif kind == "knob_bool":
        knobs[knob] = rng.choice([True, False])
    elif kind == "knob_none":
        knobs[knob] = None
    elif kind == "knob_list":
        knobs[knob] = [knobs.get(knob, 1)]
    elif kind == "knob_dict":
        knobs[knob] = {"v": knobs.get(knob, 1)}
    elif kind == "knob_huge":
        knobs[knob] = rng.choice([2 ** 64, 10 ** 30, 2 ** 31])
    elif kind == "knob_negative":
        knobs[knob] = rng.choice([-1, 0, -2 ** 63])
    elif kind == "knob_unknown":
        knobs["bogus_knob"] = 1
    elif kind == "knob_inject":
        knobs[knob] = rng.choice(INJECTIONS)
    elif kind == "private_knob":
        knobs["_scratch_bytes"] = rng.choice(["x", 2 ** 70, None])
    elif kind == "knobs_not_object":
        r["knobs"] = rng.choice([[1, 2], "oc_tile=4", 4, None])
    elif kind == "cycles_str":
        r["cycles"] = "123"
    elif kind == "cycles_nan":
        raw = json.dumps(r).replace(json.dumps(r["cycles"]), rng.choice(["NaN", "Infinity", "-Infinity"]), 1).encode() \
            if "cycles" in r else None
    elif kind == "cycles_huge":
        r["cycles"] = rng.choice([10 ** 400, 2 ** 64])
    elif kind == "huge_exponent":
        raw = json.dumps(r).replace(json.dumps(r.get("cycles")), "1e999", 1).encode()
    elif kind == "cycles_negative":
        r["cycles"] = rng.choice([-1, 0, -1e300])
    elif kind == "status_unknown":
        r["status"] = rng.choice(["OK", "fast", 1, None, ""])
    elif kind == "missing_field":
        r.pop(rng.choice(["board", "key", "knobs", "status", "cycles", "op"]), None)
    elif kind == "board_type":
        r["board"] = rng.choice([1, None, ["host"], {"name": "host"}])
    elif kind == "key_int":
        r["key"] = rng.choice([1, None, [r.get("key")]])
    elif kind == "key_inject":
        r["key"] = rng.choice(INJECTIONS)
    elif kind == "deep_nesting":
        depth = rng.choice([1000, 100000])
        raw = ("[" * depth + "]" * depth).encode()
    elif kind == "deep_knob":
        depth = rng.choice([500, 50000])
        raw = json.dumps(r).replace(json.dumps(knobs), '{"oc_tile": ' + "[" * depth + "]" * depth + "}", 1).encode()
    elif kind == "empty_knobs_ok":
        r["knobs"] = {}
    elif kind == "long_line":
        knobs["pad"] = "x" * rng.choice([10 ** 5, 10 ** 6])
    line = raw if raw is not None else json.dumps(r).encode()
    if kind == "bom":
        line = b"\xef\xbb\xbf" + line
    elif kind == "truncated":
        line = line[:rng.randrange(1, len(line))]
    elif kind == "bad_utf8":
        i = rng.randrange(len(line))
        line = line[:i] + rng.choice(_BAD_UTF8_BYTES) + line[i:]
    elif kind == "nul_bytes":
        i = rng.randrange(len(line))
        line = line[:i] + b"\x00" + line[i:]
    elif kind == "not_object":
        line = rng.choice([b"[1, 2]", b"42", b"null", b'"str"', b"true"])
    elif kind == "crlf":
        line = line + b"\r"
    elif kind == "dup_keys":
        line = line[:-1] + b', "knobs": 5}'
    return line, kind


def dump_jsonl(records: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)




# ================================================================ the oracle
#
# Each case runs in a forked child process (so a hang is killed at its timeout and a crash of the
# ctypes-loaded library cannot take the runner down) with file descriptors 1 and 2 sent to a file
# (a constructor injected into the generated C writes there, not to sys.stdout). tinyc runs in
# process through tinyc.cli.main(argv), sys.stdout/sys.stderr captured, so a refusal is checked
# exactly as a user sees it: exit 2 and one line `tinyc: error: ...`. onnxruntime runs in its own
# child (a model that crashes onnxruntime counts as refused by it) and its answers are cached.


#: Outcomes that make a case fail.
FAILURES = ("traceback", "wrong", "accepted-invalid", "build-error", "crash", "hang", "injected")
#: Outcomes in table order.
OUTCOMES = ("refused", "ok-equal", "ok") + FAILURES
_RAN_RE = re.compile(r"INJECTED[ _]?(CODE )?RAN")


@dataclasses.dataclass
class Outcome:
    outcome: str
    detail: str = ""
    signature: str = ""      # what distinct failures are grouped by
    seconds: float = 0.0
    ort: str = ""            # onnxruntime's verdict (ok / refused: first line)

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES


#: Address-space limit of a case's process (a mutated model declaring a 2**40-element tensor must
#: end in a refusal or a MemoryError, not in the machine swapping).
MEM_LIMIT = 6 << 30


def _child(conn, fn, args, log_path, mem_limit):
    os.setpgid(0, 0)  # its own process group: a timeout kills cmake/QEMU children too
    if mem_limit:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    import faulthandler
    faulthandler.enable(file=2)  # a crash in C leaves its Python stack in the captured output
    try:
        res = fn(*args)
    except BaseException as exc:  # the harness itself failed: report it as a traceback
        res = Outcome("traceback", f"harness: {exc!r}", _exc_signature(exc))
    try:
        conn.send(res)
    finally:
        conn.close()
        os._exit(0)


def isolated(fn: Callable, args: tuple, timeout: float, mem_limit: int | None = MEM_LIMIT) -> tuple[Any, str, str]:
    """Run fn(*args) in a forked child: (result or None, 'ok'/'hang'/'crash: exit N', fd output)."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    with tempfile.NamedTemporaryFile(prefix="fuzz-out-", delete=False) as tmp:
        log_path = tmp.name
    proc = ctx.Process(target=_child, args=(child, fn, args, log_path, mem_limit))
    proc.start()
    child.close()
    result, status = None, "ok"
    if parent.poll(timeout):
        try:
            result = parent.recv()
        except EOFError:
            pass
    else:
        status = "hang"
    if proc.is_alive():
        proc.join(2 if status == "ok" else 0)
    if proc.is_alive() or status == "hang":
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass
        proc.join()
    if result is None and status == "ok":
        status = f"crash: exit {proc.exitcode}"
    try:
        output = Path(log_path).read_bytes().decode("utf-8", "replace")
    finally:
        os.unlink(log_path)
    return result, status, output


def _exc_signature(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in tb if "/tests/mutators.py" not in f.filename] or tb
    last = frames[-1] if frames else None
    where = f"{Path(last.filename).parent.name}/{Path(last.filename).name}:{last.lineno} {last.name}" if last else "?"
    # the first tinyc frame closest to the error, too: the project's code that let it through
    own = [f for f in frames if "/tinyc/" in f.filename]
    if own and own[-1] is not last:
        o = own[-1]
        where += f" (from tinyc/{o.filename.split('/tinyc/', 1)[1]}:{o.lineno} {o.name})"
    return f"{type(exc).__name__} at {where}"


@dataclasses.dataclass
class CliResult:
    rc: int
    out: str
    err: str
    exc: str = ""        # signature of an exception that escaped main()
    exc_text: str = ""


def cli(argv: list[str]) -> CliResult:
    """tinyc.cli.main(argv) in this process, stdout/stderr captured."""
    import contextlib
    from tinyc.cli import main
    out, err = io.StringIO(), io.StringIO()
    exc_sig = exc_text = ""
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # noqa: BLE001 - anything else escaping main is the defect we look for
            rc, exc_sig = -1, _exc_signature(exc)
            exc_text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-3000:]
    return CliResult(rc, out.getvalue(), err.getvalue(), exc_sig, exc_text)


def judge_cli(r: CliResult, what: str) -> Outcome | None:
    """None when the command succeeded; otherwise the outcome of its failure."""
    if r.exc:
        return Outcome("traceback", f"{what}: {r.exc_text.strip().splitlines()[-1][:300]}", f"{what}: {r.exc}")
    if r.rc == 0:
        return None
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    starts = [i for i, ln in enumerate(lines) if ln.startswith("tinyc: error:")]
    if r.rc == 2 and len(starts) == 1 and starts[0] == len(lines) - 1 and "Traceback" not in r.err:
        return Outcome("refused", lines[-1][:300])
    if r.rc == 2 and len(starts) == 1:
        first = lines[starts[0]]
        if re.search(r"building .* failed|cmake|compil", first, re.I):
            return Outcome("build-error", f"{what}: {first[:300]}", f"{what}: build failed: "
                           + _normalise(first)[:120])
        return Outcome("traceback", f"{what}: multi-line error: {first[:300]}",
                       f"{what}: multi-line error: {_normalise(first)[:100]}")
    return Outcome("traceback", f"{what}: exit {r.rc}: {r.err.strip()[-300:]}",
                   f"{what}: exit {r.rc} without a one-line error")


def _normalise(text: str) -> str:
    """An error message with paths, numbers and quoted names blurred (to group signatures)."""
    text = re.sub(r"/[^\s:'\"]+", "<path>", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    return re.sub(r"\d+", "N", text)


def injected_in(output: str, folder: Path | None) -> str:
    """Why this run counts as injected, or ''."""
    if _RAN_RE.search(output):
        return "INJECTED_RAN printed"
    if folder is not None and folder.is_dir():
        for f in folder.rglob("*"):
            if f.is_file() and (f.suffix in (".so", ".a", ".o", ".elf", ".axf") or os.access(f, os.X_OK)) \
                    and f.stat().st_size < 64 << 20:
                try:
                    proc = subprocess.run(["nm", "-a", str(f)], capture_output=True, text=True, timeout=30)
                except (OSError, subprocess.TimeoutExpired):
                    continue
                for line in proc.stdout.splitlines():
                    if line.split() and line.split()[-1] == SENTINEL:
                        return f"symbol {SENTINEL} in {f.name}"
                for tool in ("arm-none-eabi-nm",) if f.suffix in (".elf", ".a", ".o") and not proc.stdout else ():
                    try:
                        p2 = subprocess.run([tool, "-a", str(f)], capture_output=True, text=True, timeout=30)
                    except (OSError, subprocess.TimeoutExpired):
                        continue
                    if any(ln.split() and ln.split()[-1] == SENTINEL for ln in p2.stdout.splitlines()):
                        return f"symbol {SENTINEL} in {f.name}"
    return ""


# ---- comparing with onnxruntime

def close(ref: np.ndarray, got: np.ndarray, atol: float = 0.0) -> str:
    """'' when `got` matches onnxruntime's `ref` (NaN where NaN, same infinities, finite values within
    1e-4 of the output's scale, plus `atol`), else why not."""
    ref = np.asarray(ref)
    got = np.asarray(got)
    if ref.size != got.size:
        return f"size {got.shape} != onnxruntime {ref.shape}"
    if ref.dtype.kind not in "fc":
        if ref.dtype.kind == "b" or got.dtype.kind == "b":
            ok = np.array_equal(ref.reshape(-1).astype(bool), got.reshape(-1).astype(bool))
        else:
            ok = np.allclose(ref.reshape(-1).astype(np.float64), got.reshape(-1).astype(np.float64), atol=atol, rtol=0)
        return "" if ok else f"integer outputs differ (max |diff| {np.abs(ref.astype(np.float64) - got.astype(np.float64).reshape(ref.shape)).max()})"
    r = ref.reshape(-1).astype(np.float64)
    g = got.reshape(-1).astype(np.float64)
    rn, gn = np.isnan(r), np.isnan(g)
    if (rn != gn).any():
        return f"NaN mismatch: onnxruntime {int(rn.sum())} NaN, tinyc {int(gn.sum())}"
    ri, gi = np.isinf(r), np.isinf(g)
    if (ri != gi).any() or (r[ri] != g[gi]).any():
        return f"Inf mismatch: onnxruntime {int(ri.sum())} inf, tinyc {int(gi.sum())}"
    fin = ~(rn | ri)
    if not fin.any():
        return ""
    scale = max(1.0, float(np.abs(r[fin]).max()))
    diff = float(np.abs(r[fin] - g[fin]).max())
    tol = 1e-4 * scale + atol * 1.001 + 1e-6
    return "" if diff <= tol else f"max |diff| {diff:.3g} > tol {tol:.3g}"


def quant_step(model_bytes: bytes) -> dict[str, float]:
    """{graph output: scale of the DequantizeLinear that produces it} for QDQ models."""
    import onnx
    from onnx import numpy_helper
    try:
        m = onnx.load_from_string(model_bytes)
        inits = {t.name: t for t in m.graph.initializer}
        producers = {o: n for n in m.graph.node for o in n.output}
        steps = {}
        for out in m.graph.output:
            n = producers.get(out.name)
            hops = 0
            while n is not None and n.op_type in ("Reshape", "Flatten", "Squeeze", "Identity", "Transpose") and hops < 8:
                n, hops = producers.get(n.input[0]) if n.input else None, hops + 1
            if n is not None and n.op_type == "DequantizeLinear" and len(n.input) > 1 and n.input[1] in inits:
                steps[out.name] = float(np.abs(numpy_helper.to_array(inits[n.input[1]])).max())
        return steps
    except Exception:
        return {}


_ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
              "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
              "tensor(bool)": np.bool_, "tensor(float16)": np.float16, "tensor(int16)": np.int16,
              "tensor(uint16)": np.uint16}


def _ort_child(model_bytes: bytes, base_feeds: dict[str, np.ndarray], seed: int) -> dict[str, Any]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    so.intra_op_num_threads = 1
    try:
        sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        return {"status": "refused", "error": f"session: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__}"}
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        dtype = _ORT_TYPES.get(i.type)
        if dtype is None:
            return {"status": "refused", "error": f"input type {i.type}"}
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in i.shape]
        if int(np.prod(shape, dtype=np.float64)) > 4 << 20:
            return {"status": "refused", "error": f"input {shape} too large to feed"}
        base = base_feeds.get(i.name)
        if base is not None and tuple(base.shape) == tuple(shape) and base.dtype == dtype:
            feeds[i.name] = base
        elif dtype == np.bool_:
            feeds[i.name] = rng.random(shape) < 0.5
        elif np.dtype(dtype).kind == "f":
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[i.name] = rng.integers(-3, 4, shape).astype(dtype)
    try:
        outs = sess.run(None, feeds)
    except Exception as exc:
        return {"status": "refused", "error": f"run: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__}",
                "feeds": feeds}
    return {"status": "ok", "feeds": feeds, "outputs": {o.name: v for o, v in zip(sess.get_outputs(), outs)}}


def _ort_child_safe(model_bytes: bytes, base_feeds: dict[str, np.ndarray], seed: int) -> dict[str, Any]:
    try:
        return _ort_child(model_bytes, base_feeds, seed)
    except BaseException as exc:  # noqa: BLE001 - whatever onnxruntime (or making its feeds) raised
        return {"status": "refused", "error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"}


def ort_reference(model_bytes: bytes, base_feeds: dict[str, np.ndarray], cache_dir: Path | None,
                  timeout: float = 120) -> dict[str, Any]:
    """onnxruntime's verdict on a model (feeds made from its declared inputs), cached by content."""
    key = hashlib.sha256(model_bytes + pickle.dumps(sorted((k, v.tobytes()) for k, v in base_feeds.items()))).hexdigest()
    path = cache_dir / f"ort-{key[:32]}.pkl" if cache_dir else None
    if path is not None and path.is_file():
        try:
            cached = pickle.loads(path.read_bytes())
            if isinstance(cached, dict) and "status" in cached:
                return cached
        except Exception:
            pass
    res, status, _ = isolated(_ort_child_safe, (model_bytes, base_feeds, int(key[:8], 16)), timeout)
    if not isinstance(res, dict):
        why = res.detail if isinstance(res, Outcome) else status
        res = {"status": "refused", "error": f"onnxruntime {why}"}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(res))
        os.replace(tmp, path)
    return res


def _ort_first_line(ref: dict[str, Any]) -> str:
    return "ok" if ref["status"] == "ok" else f"refused: {ref.get('error', '')[:200]}"


def compare_outputs(ref_outs: dict[str, np.ndarray], got: dict[str, np.ndarray], steps: dict[str, float]) -> str:
    """'' when tinyc's outputs (by name, else by order) match onnxruntime's."""
    if len(got) != len(ref_outs):
        return f"{len(got)} outputs, onnxruntime has {len(ref_outs)}"
    got_list = list(got.items())
    for k, (name, ref) in enumerate(ref_outs.items()):
        value = got.get(name, got_list[k][1])
        why = close(ref, value, steps.get(name, 0.0))
        if why:
            return f"output {k}: {why}"
    return ""


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz (a bare .npy: {"x": array}); raises for anything else."""
    z = np.load(path, allow_pickle=False)
    if isinstance(z, np.ndarray):
        return {"x": z}
    with z:
        return {k: z[k] for k in z.files}


# ---- case bodies (run inside the isolated child)

def _model_case_body(model_bytes: bytes, work: str, ref: dict[str, Any], steps: dict[str, float]) -> Outcome:
    work_dir = Path(work)
    work_dir.mkdir(parents=True, exist_ok=True)
    model_path = work_dir / "model.onnx"
    model_path.write_bytes(model_bytes)
    out_dir = work_dir / "out"
    r = cli(["compile", model_path, "-o", out_dir, "--build"])
    bad = judge_cli(r, "compile")
    ort_ok = ref["status"] == "ok"
    if bad is not None:
        if bad.outcome == "build-error" and not ort_ok:
            bad.outcome = "accepted-invalid"
            bad.detail += f" | onnxruntime {_ort_first_line(ref)}"
            bad.signature = f"accepted-invalid: generated C does not build ({ref.get('error', '')[:60]})"
        return bad
    if not ort_ok:
        return Outcome("accepted-invalid", f"tinyc compiled it; onnxruntime {_ort_first_line(ref)}",
                       "accepted-invalid: " + _normalise(ref.get("error", ""))[:100])
    feeds = ref["feeds"]
    x_path = work_dir / "x.npz"
    try:
        np.savez(x_path, **feeds)
    except Exception as exc:
        return Outcome("ok", f"compiled; inputs not storable ({exc.__class__.__name__})")
    y_path = work_dir / "y.npz"
    r = cli(["run", out_dir, "--input", x_path, "--output", y_path])
    bad = judge_cli(r, "run")
    if bad is not None:
        return bad
    try:
        got = _load_npz(y_path)
    except Exception as exc:
        return Outcome("wrong", f"run wrote no readable outputs: {exc}", "wrong: no outputs file")
    why = compare_outputs(ref["outputs"], got, steps)
    if why:
        return Outcome("wrong", why, "wrong: " + re.sub(r"[\d.e+-]{2,}", "N", why)[:80])
    return Outcome("ok-equal")


def _finish(res: Any, status: str, output: str, work_dir: Path, seconds: float, ref_text: str = "") -> Outcome:
    if res is None:
        kind = "hang" if status == "hang" else "crash"
        res = Outcome(kind, f"{status}: {output.strip()[-300:]}", f"{kind}: {status}")
    why = injected_in(output, work_dir)
    if why:
        res = Outcome("injected", why, f"injected: {why.split(' in ')[0]}")
    res.seconds = seconds
    res.ort = res.ort or ref_text
    return res


#: Output steps a QDQ model may differ from onnxruntime by (default 1). ResNet-8's 1-LSB differences
#: compound over nine requantizing convolutions and residual adds (see tests/test_quant_models.py):
#: the unmutated model differs by up to 17 steps of its softmax output on test.npz[:20].
QDQ_STEPS = {"ic_qdq": 24}


def check_model(model_bytes: bytes, work_dir: Path, base_feeds: dict[str, np.ndarray] | None = None,
                cache_dir: Path | None = None, timeout: float = 180, qdq_steps: float = 1.0) -> Outcome:
    """Compile, build and run a (mutated) model with tinyc and compare with onnxruntime (QDQ models:
    within `qdq_steps` steps of the output's quantization grid)."""
    t0 = time.time()
    ref = ort_reference(model_bytes, base_feeds or {}, cache_dir)
    steps = {k: v * qdq_steps for k, v in quant_step(model_bytes).items()}
    res, status, output = isolated(_model_case_body, (model_bytes, str(work_dir), ref, steps), timeout)
    return _finish(res, status, output, Path(work_dir), time.time() - t0, _ort_first_line(ref))


_INVALID_KINDS = "cSUOMmVa"  # complex, bytes, str, object, datetime, timedelta, void/structured


def _data_case_body(command: str, data_path: str, ctx: dict[str, Any]) -> Outcome:
    work = Path(ctx["work"])
    work.mkdir(parents=True, exist_ok=True)
    if command == "run":
        y = work / "y.npz"
        r = cli(["run", ctx["host_project"], "--input", data_path, "--output", y])
    elif command == "validate":
        r = cli(["validate", ctx["fw_project"], "--data", data_path])
    elif command == "profile":
        r = cli(["profile", ctx["fw_project"], "--input", data_path])
    elif command == "quantize":
        r = cli(["quantize", ctx["model"], "--calib", data_path, "-o", work / "q.onnx"])
    else:
        raise ValueError(command)
    bad = judge_cli(r, command)
    if bad is not None:
        if bad.outcome == "refused" and "differ from the golden" in bad.detail:
            return Outcome("wrong", bad.detail, f"{command}: device differs from golden on malformed data")
        return bad
    # accepted: what did it accept?
    try:
        arrays = _load_npz(Path(data_path))
    except Exception:
        arrays = None
    if arrays is None:
        return Outcome("accepted-invalid", f"{command} accepted a file numpy cannot read without pickles",
                       f"accepted-invalid: {command}: unreadable data file")
    inputs = {k: v for k, v in arrays.items() if k != "y"}
    kinds = {v.dtype.kind for v in inputs.values()}
    if kinds & set(_INVALID_KINDS):
        return Outcome("accepted-invalid", f"{command} accepted dtype(s) {sorted(str(v.dtype) for v in inputs.values())}",
                       f"accepted-invalid: {command}: dtype {''.join(sorted(kinds & set(_INVALID_KINDS)))}")
    if command == "run":
        try:
            got = _load_npz(work / "y.npz")
        except Exception as exc:
            return Outcome("wrong", f"run wrote no readable outputs: {exc}", "wrong: run: no outputs file")
        name, shape = ctx["input_name"], tuple(ctx["input_shape"])
        x = inputs.get(name, inputs.get("x"))
        if x is None and len(inputs) == 1:
            x = next(iter(inputs.values()))
        if x is None:
            return Outcome("accepted-invalid", f"run accepted keys {sorted(arrays)}", "accepted-invalid: run: wrong keys")
        inner = shape[1:] if shape[0] == 1 else shape
        if x.size == 0 or x.size % int(np.prod(inner)):
            return Outcome("accepted-invalid", f"run accepted shape {x.shape} for {shape}",
                           "accepted-invalid: run: shape")
        xs = x.astype(np.float32).reshape((-1,) + tuple(shape))
        ref = _ort_batch(ctx["model"], ctx["input_name"], xs)
        out = next(iter(got.values()))
        why = close(ref, out)
        if why:
            return Outcome("wrong", f"run on {x.dtype}{list(x.shape)}: {why}", "wrong: run: " + why.split(":")[0][:40])
    return Outcome("ok")


def _ort_batch(model: str, name: str, xs: np.ndarray) -> np.ndarray:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    return np.stack([sess.run(None, {name: x})[0] for x in xs])


def check_data(command: str, data: bytes, work_dir: Path, ctx: dict[str, Any], timeout: float = 120) -> Outcome:
    """One malformed data file given to one command (run / validate / profile / quantize)."""
    t0 = time.time()
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / "data.npz"
    path.write_bytes(data)
    res, status, output = isolated(_data_case_body, (command, str(path), dict(ctx, work=str(work_dir))), timeout)
    return _finish(res, status, output, work_dir, time.time() - t0)


def _board_case_body(board_dir: str, work: str, ctx: dict[str, Any]) -> Outcome:
    work_dir = Path(work)
    r = cli(["boards", "--board-dir", board_dir])
    bad = judge_cli(r, "boards")
    if bad is not None and bad.outcome != "refused":
        return bad
    out = work_dir / "out"
    r = cli(["compile", ctx["model"], "-o", out, "--board", "fuzzboard", "--board-dir", board_dir, "--build"])
    bad = judge_cli(r, "compile --board")
    if bad is not None and bad.outcome == "build-error" and ctx.get("toolchain_changed"):
        # the board's own flags/compiler broke the build: the user's error, reported with the tool's output
        return Outcome("refused", bad.detail + " (board toolchain settings changed)")
    if bad is not None:
        return bad
    manifest = json.loads((out / "tinyc.json").read_text()) if (out / "tinyc.json").is_file() else {}
    host_board = not (out / "board.json").is_file() and manifest.get("board") is None  # runs on this machine
    if not host_board and not json.loads((out / "board.json").read_text()).get("emulated"):
        return Outcome("ok", "compiled and built (real board: not run)")
    r = cli(["run", out, "--input", ctx["x_path"], "--output", work_dir / "y.npz"])
    bad = judge_cli(r, "run --board")
    if bad is not None:
        return bad
    why = close(ctx["ref"], next(iter(_load_npz(work_dir / "y.npz").values())))
    if why:
        return Outcome("wrong", why, "wrong: board run: " + why.split(":")[0][:40])
    return Outcome("ok-equal")


def check_board(board_bytes: bytes, work_dir: Path, ctx: dict[str, Any], timeout: float = 240,
                base_text: str | None = None) -> Outcome:
    """A (mutated) board file as boards/fuzzboard.toml: list, compile+build the model for it, run if
    emulated. A build failure counts as a refusal when the mutation changed the board's [toolchain]
    (compared with `base_text`): the user's own flags broke the compiler; otherwise it is a defect."""
    t0 = time.time()
    changed = base_text is not None
    if base_text is not None:
        try:
            changed = tomllib.loads(board_bytes.decode()).get("toolchain") != tomllib.loads(base_text).get("toolchain")
        except Exception:
            changed = True
    ctx = dict(ctx, toolchain_changed=changed)
    work_dir = Path(work_dir)
    bdir = work_dir / "boards"
    bdir.mkdir(parents=True, exist_ok=True)
    (bdir / "fuzzboard.toml").write_bytes(board_bytes)
    res, status, output = isolated(_board_case_body, (str(bdir), str(work_dir), ctx), timeout)
    return _finish(res, status, output, work_dir, time.time() - t0)


def _log_case_body(log_path: str, work: str, ctx: dict[str, Any]) -> Outcome:
    import warnings
    warnings.simplefilter("default")
    work_dir = Path(work)
    out = work_dir / "out"
    build = ctx.get("build", True)
    r = cli(["compile", ctx["model"], "-o", out, "--tuning-log", log_path] + (["--build"] if build else []))
    bad = judge_cli(r, "compile --tuning-log")
    if bad is not None:
        return bad
    if not build:
        return Outcome("ok", "compiled (not built)")
    r = cli(["run", out, "--input", ctx["x_path"], "--output", work_dir / "y.npz"])
    bad = judge_cli(r, "run (tuned)")
    if bad is not None:
        return bad
    why = close(ctx["ref"], next(iter(_load_npz(work_dir / "y.npz").values())))
    if why:
        return Outcome("wrong", why, "wrong: tuned run: " + why.split(":")[0][:40])
    return Outcome("ok-equal")


def check_log(log_bytes: bytes, work_dir: Path, ctx: dict[str, Any], timeout: float = 180) -> Outcome:
    """A tuning log with corrupted line(s) used by `compile --tuning-log`, then the model run and compared."""
    t0 = time.time()
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / "tune.jsonl"
    path.write_bytes(log_bytes)
    res, status, output = isolated(_log_case_body, (str(path), str(work_dir), ctx), timeout)
    return _finish(res, status, output, work_dir, time.time() - t0)


# ---- fixtures shared by the test and the campaign

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"
MLPERF = REPO.parent / "shared" / "models" / "mlperf_tiny"
MLPERF_NAMES = ["mlperf_kws_dscnn", "mlperf_vww_mobilenetv1_025", "mlperf_ic_resnet8", "mlperf_ad_fc_autoencoder"]


def seed_models(include_mlperf: bool = True) -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    """{id: (model path, base feeds)}: digits plus the 8 MLPerf Tiny models that exist here."""
    rng = np.random.default_rng(1234)
    models = {"digits": (DIGITS, {"input": rng.random((1, 1, 8, 8)).astype(np.float32)})}
    if include_mlperf:
        for name in MLPERF_NAMES:
            folder = MLPERF / name
            if not (folder / "model.onnx").is_file():
                continue
            import onnx
            x = np.load(folder / "test.npz")["x"][:1].astype(np.float32)
            inp = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.input[0].name
            short = name.split("_")[1]
            models[short] = (folder / "model.onnx", {inp: x})
            if (folder / "model_int8_qdq.onnx").is_file():
                qinp = onnx.load(str(folder / "model_int8_qdq.onnx")).graph.input[0].name
                models[short + "_qdq"] = (folder / "model_int8_qdq.onnx", {qinp: x})
    return models


def digits_log_records() -> list[dict[str, Any]]:
    """Valid `tinyc tune` records for every tunable digits layer on the host (a legal non-default choice)."""
    import tinyc
    from tinyc.ops import get_op
    from tinyc.schedule import default_schedules
    from tinyc.tune.tasks import task_key
    g = tinyc.load(str(DIGITS))
    defaults = default_schedules(g)
    records = []
    for k, node in enumerate(g.nodes):
        opdef = get_op(node.op)
        legal = {} if opdef.alias else opdef.knobs(node, g)
        if not legal:
            continue
        knobs = dict(defaults.get(node.name, {}))
        for name, values in legal.items():
            if name in knobs and len(values) > 1:
                knobs[name] = values[(k + 1) % len(values)]
                break
        records.append({"board": "host", "target": "host", "key": task_key(node, g), "op": node.op,
                        "knobs": knobs, "cycles": 1000.0 + k, "status": "ok", "units": "ns", "repeats": 3,
                        "tinyc_version": tinyc.__version__, "time": 1.7e9})
    return records


def make_log(seed: int, records: list[dict[str, Any]]) -> tuple[bytes, str]:
    """A log of valid records with one or two corrupted ones (placed at random, often last)."""
    rng = random.Random(seed)
    lines = [json.dumps(r).encode() for r in records]
    whats = []
    for j in range(1 if rng.random() < 0.8 else 2):
        victim = rng.choice(records)
        bad, what = mutate_log_line(victim, seed * 7 + j)
        whats.append(what)
        lines.insert(rng.randrange(len(lines) + 1) if rng.random() < 0.6 else len(lines), bad)
    sep = b"\n"
    return sep.join(lines) + (b"\n" if rng.random() < 0.7 else b""), "+".join(whats)


def data_context(work: Path, with_firmware: bool = True) -> dict[str, Any]:
    """Compiled digits folders the data-file cases use: a host build and (emulated) firmware."""
    work = Path(work)
    host_dir, fw_dir = work / "digits_host", work / "digits_fw"
    if not (host_dir / "tinyc.json").is_file():
        r = cli(["compile", DIGITS, "-o", host_dir, "--build"])
        assert r.rc == 0, r.err + r.exc_text
    if with_firmware and not (fw_dir / "board.json").is_file():
        r = cli(["compile", DIGITS, "-o", fw_dir, "--board", "mps2-an386", "--build"])
        assert r.rc == 0, r.err + r.exc_text
    return {"host_project": str(host_dir), "fw_project": str(fw_dir), "model": str(DIGITS),
            "input_name": "input", "input_shape": [1, 1, 8, 8]}


def digits_run_context(work: Path) -> dict[str, Any]:
    """Input file and onnxruntime's outputs of digits, for the board and log cases."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    x = np.random.default_rng(7).random((1, 1, 8, 8)).astype(np.float32)
    np.savez(work / "digits_x.npz", input=x)
    ref = ort_reference(DIGITS.read_bytes(), {"input": x}, None)
    return {"model": str(DIGITS), "x_path": str(work / "digits_x.npz"), "ref": ref["outputs"]["logits"]}


def board_texts() -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted((REPO / "boards").glob("*.toml"))}


# ---------------------------------------------------------------- protocol frames

def _mutate_frame(frame_bytes: bytes, rng: random.Random) -> tuple[bytes, str]:
    kind = rng.choice(["bytes", "bytes", "drop_delim", "extra_delim", "garbage", "stale_seq", "long", "empty", "clean"])
    if kind == "bytes":
        return mutate_bytes(frame_bytes, rng.randrange(2 ** 31))[0], kind
    if kind == "drop_delim":
        return frame_bytes.rstrip(b"\x00"), kind
    if kind == "extra_delim":
        i = rng.randrange(len(frame_bytes) + 1)
        return frame_bytes[:i] + b"\x00" + frame_bytes[i:], kind
    if kind == "garbage":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))), kind
    if kind == "long":
        return bytes(rng.randrange(1, 256) for _ in range(rng.choice([5000, 9000, 20000]))) + frame_bytes, kind
    if kind == "empty":
        return b"\x00\x00\x00", kind
    return frame_bytes, kind


def fuzz_decoder(seed: int, count: int) -> dict[str, Any]:
    """`count` mutated frames through FrameDecoder + parse_packet + the reply parsers, in process.
    Allowed: BadFrame (parse_packet), ValueError/struct.error (reply body parsers, as the client
    catches them). A packet that parses must be the one that was sent."""
    import struct as _struct
    from tinyc.device import protocol as P
    rng = random.Random(seed)
    stats = {"frames": 0, "refused": 0, "ok-equal": 0, "traceback": 0, "wrong": 0, "failures": []}
    dec = P.FrameDecoder(max_frame=rng.choice([64, 512, 4096]))
    import collections
    recent: collections.deque = collections.deque(maxlen=8)
    for k in range(count):
        cmd, seq = rng.randrange(256), rng.randrange(256)
        payload = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 4, 20, 41, 200, 253, 254, 255, 300])))
        if rng.random() < 0.2:
            payload = P.hello_reply({"protocol_version": 1, "max_payload": 256, "arena_bytes": 1, "num_layers": 3,
                                     "input_bytes": 4, "output_bytes": 4, "board": "b", "model": "m"})
            payload = bytes([0]) + payload
        sent = P.frame(cmd, seq, payload)
        recent.append((cmd, seq, payload))
        data, kind = _mutate_frame(sent, rng)
        stats["frames"] += 1
        verdict = "refused"
        try:
            frames: list = []
            pos = 0
            while pos < len(data):
                step = rng.choice([1, 7, 64, len(data)])
                frames += dec.feed(data[pos:pos + step])
                pos += step
            if rng.random() < 0.5:
                frames += dec.feed(b"\x00")
            for raw in frames:
                if raw is None:
                    continue
                try:
                    pkt = P.parse_packet(raw)
                except P.BadFrame:
                    continue
                _ = (pkt.status, pkt.body, pkt.detail, P.describe_status(pkt.status, pkt.detail),
                     P.hex_preview(raw), P.hex_preview(pkt.payload, count=len(raw) + 5))
                try:
                    P.parse_hello(pkt.body)
                    P.RUN_REPLY.unpack_from(pkt.body) if len(pkt.body) >= P.RUN_REPLY.size else None
                except (ValueError, _struct.error):
                    pass
                if (pkt.cmd, pkt.seq, pkt.payload) in recent:
                    # this case's packet, or an earlier one completed now (its delimiter was dropped)
                    verdict = "ok-equal" if verdict == "refused" else verdict
                else:
                    verdict = "wrong"
                    if len(stats["failures"]) < 20:
                        stats["failures"].append({"seed": seed, "index": k, "kind": kind, "data": data.hex()[:2000],
                                                  "signature": "wrong: decoded packet differs from the one sent"})
        except Exception as exc:  # noqa: BLE001
            verdict = "traceback"
            dec.reset()
            if len(stats["failures"]) < 20:
                stats["failures"].append({"seed": seed, "index": k, "kind": kind, "data": data.hex()[:2000],
                                          "signature": _exc_signature(exc)})
        stats[verdict] += 1
    return stats


class FakeDevice:
    """A Link whose firmware answers every request correctly, then damages the reply bytes at
    random (and sometimes adds stale replies, frame errors or garbage)."""

    def __init__(self, rng: random.Random, damage: float = 0.35) -> None:
        from tinyc.device import protocol as P
        self.P = P
        self.rng = rng
        self.damage = damage
        self.url = "fake://fuzz"
        self.closed = False
        self.pending = bytearray()
        self.frames_sent = 0
        self.info = {"protocol_version": 1, "max_payload": rng.choice([32, 64, 256]), "arena_bytes": 1024,
                     "num_layers": rng.choice([1, 3, 9]), "input_bytes": 16, "output_bytes": rng.choice([4, 40, 300]),
                     "num_inputs": 1, "num_outputs": 1, "board": "fake", "model": "m", "model_hash": "0" * 16,
                     "tinyc_version": "0.1.0", "counter": "ns"}
        self.outputs = bytes(rng.randrange(256) for _ in range(self.info["output_bytes"]))
        self.ticks = [rng.randrange(2 ** 32) for _ in range(self.info["num_layers"] + 2)]
        self._dec = P.FrameDecoder()

    def _reply(self, cmd: int, seq: int, body: bytes) -> bytes:
        P = self.P
        if cmd == P.Cmd.HELLO:
            out = P.hello_reply(self.info)
        elif cmd == P.Cmd.RUN:
            out = P.RUN_REPLY.pack(12345, struct_unpack("<I", body)[0])
        elif cmd == P.Cmd.READ_OUTPUT:
            off, n = struct_unpack("<IH", body)
            out = self.outputs[off:off + n]
        elif cmd == P.Cmd.PROFILE:
            out = P.PROFILE_REPLY.pack(sum(self.ticks), len(self.ticks))
        elif cmd == P.Cmd.PROFILE_READ:
            first, n = struct_unpack("<IH", body)
            out = b"".join(t.to_bytes(4, "little") for t in self.ticks[first:first + n])
        elif cmd == P.Cmd.LAYER_NAME:
            out = f"layer{struct_unpack('<I', body)[0]}".encode()
        elif cmd == P.Cmd.OUTPUT_CRC:
            off, n = struct_unpack("<II", body)
            out = self.P.crc32(self.outputs[off:off + n]).to_bytes(4, "little")
        else:
            out = b""
        return P.frame(cmd | P.REPLY_FLAG, seq, b"\x00" + out)

    def write(self, data: bytes) -> None:
        for raw in self._dec.feed(data):
            if raw is None:
                continue
            pkt = self.P.parse_packet(raw)
            reply = self._reply(pkt.cmd, pkt.seq, pkt.payload)
            r = self.rng.random()
            if r < 0.05:
                self.pending += self.P.frame(pkt.cmd | self.P.REPLY_FLAG, (pkt.seq - 1) & 0xFF, b"\x00")
                self.frames_sent += 1
            elif r < 0.08:
                self.pending += self.P.frame(self.P.FRAME_ERROR_CMD, pkt.seq, bytes([self.rng.choice([1, 3, 4, 77])]) + b"\x01\x00\x00\x00")
                self.frames_sent += 1
            if self.rng.random() < self.damage:
                reply = _mutate_frame(reply, self.rng)[0]
            self.pending += reply
            self.frames_sent += 1

    def read_some(self, deadline: float) -> bytes:
        if not self.pending:
            return b""
        n = self.rng.choice([1, 3, 16, 4096])
        out = bytes(self.pending[:n])
        del self.pending[:n]
        return out

    def close(self) -> None:
        self.closed = True


def struct_unpack(fmt: str, data: bytes):
    import struct as _struct
    return _struct.unpack_from(fmt, data)


def fuzz_client(seed: int, sessions: int) -> dict[str, Any]:
    """HarnessClient sessions against FakeDevice: every call returns the right answer or raises a
    TinycError (DeviceError after its retries); anything else is a failure."""
    from tinyc.device.client import HarnessClient
    from tinyc.errors import TinycError
    rng = random.Random(seed)
    stats = {"frames": 0, "refused": 0, "ok-equal": 0, "traceback": 0, "wrong": 0, "failures": []}
    for k in range(sessions):
        dev = FakeDevice(rng)
        client = HarnessClient(dev, timeout=0.05, retries=rng.choice([0, 1, 3]), run_timeout=0.05)
        steps = [("hello", lambda: client.hello(), lambda v: v["output_bytes"] == dev.info["output_bytes"]),
                 ("run", lambda: client.run(1), lambda v: v == 12345),
                 ("read_output", lambda: client.read_output(), lambda v: v == dev.outputs),
                 ("output_crc", lambda: client.output_crc(0, dev.info["output_bytes"]),
                  lambda v: v == dev.P.crc32(dev.outputs)),
                 ("profile", lambda: client.profile(), lambda v: list(v) == dev.ticks[1:-1]),
                 ("layer_names", lambda: client.layer_names(),
                  lambda v: v == [f"layer{i}" for i in range(dev.info["num_layers"])])]
        for name, call, good in steps:
            try:
                value = call()
            except TinycError as exc:
                stats["refused"] += 1
                if "\n" in str(exc):
                    stats["traceback"] += 1
                    stats["failures"].append({"seed": seed, "session": k, "step": name,
                                              "signature": f"multi-line DeviceError in {name}"})
                continue
            except Exception as exc:  # noqa: BLE001
                stats["traceback"] += 1
                if len(stats["failures"]) < 20:
                    stats["failures"].append({"seed": seed, "session": k, "step": name,
                                              "signature": _exc_signature(exc)})
                continue
            if good(value):
                stats["ok-equal"] += 1
            else:
                stats["wrong"] += 1
                if len(stats["failures"]) < 20:
                    stats["failures"].append({"seed": seed, "session": k, "step": name,
                                              "signature": f"wrong: client {name} returned a wrong value"})
        stats["frames"] += dev.frames_sent
    return stats
