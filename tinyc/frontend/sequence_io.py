"""Sequence- and optional-typed graph inputs and outputs, with a structure fixed at compile time.

An ahead-of-time compiler has no run-time lists, but a sequence whose length and element shapes are
known when compiling is just a few tensors, the way `--input-shape` turns a dynamic dimension into a
fixed one. So the structure is given with the input shapes and flattened at import:

* a sequence input `x` given as a list of element shapes becomes one tensor input per element, named
  `x.0`, `x.1`, ... (`element_name`), and `Graph.sequences["x"]` lists them;
* an optional input `x` is compiled as present or absent: present, it is the tensor input `x` (or, for
  an optional sequence, the inputs `x.0`, `x.1`, ...); absent (`None`), it has no input at all;
* a sequence output `y` (its length is static once imported) becomes one tensor output per element,
  `y.0`, `y.1`, ...; an optional output holding a tensor is the output `y`, one holding a sequence the
  outputs `y.0`, ...; an empty optional or an empty sequence has no outputs.

Graph.inputs and Graph.outputs therefore stay plain tensor names: nothing below import knows about
sequences. Syntax: Python `input_shapes={"seq": [(2, 3), (2, 3)], "opt": None}`; on the command line
`--input-shape "seq=[2,3;2,3]"` (elements separated by `;`, `()` a scalar element, `[]` an empty
sequence) and `--input-shape opt=none`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from tinyc.errors import ShapeError, UnsupportedError, UsageError
from tinyc.ir import Graph, Node, Tensor

Shape = tuple[int, ...]
# What `input_shapes` gives for one input: a tensor shape, a sequence's element shapes, or None (an
# absent optional).
Structure = Shape | list[Shape] | None


def element_name(name: str, k: int) -> str:
    """The public tensor name of element k of sequence input or output `name`."""
    return f"{name}.{k}"


def is_structured(vi: onnx.ValueInfoProto) -> bool:
    """Whether a graph input/output is sequence- or optional-typed (not a plain tensor)."""
    return vi.type.WhichOneof("value") in ("sequence_type", "optional_type")


# -- parsing the structure ---------------------------------------------------------------------
def normalize(value: Any) -> Structure:
    """A Python `input_shapes` value: None, a shape (ints), or a list of shapes (a sequence)."""
    if value is None:
        return None
    items = list(value)
    if any(isinstance(v, (list, tuple)) for v in items):
        if not all(isinstance(v, (list, tuple)) for v in items):
            raise UsageError(f"input shape {value!r}: mix of dimensions and element shapes")
        return [tuple(int(d) for d in v) for v in items]
    return tuple(int(d) for d in items)


_SEQ_RE = re.compile(r"\[\s*(.*?)\s*\]")
_DIMS_RE = re.compile(r"[0-9]+(?:\s*[,x]\s*[0-9]+)*")


def parse_spec(text: str) -> tuple[bool, Structure]:
    """The command-line form of a structured value: `[2,3;2,3]` (a sequence), `[]` (empty), `none`
    (an absent optional). (False, None) when `text` is none of these: a plain `D0,D1,...` shape."""
    t = text.strip()
    if t.lower() == "none":
        return True, None
    m = _SEQ_RE.fullmatch(t)
    if not m:
        return False, None
    body = m.group(1)
    if not body:
        return True, []
    shapes: list[Shape] = []
    for part in body.split(";"):
        p = part.strip()
        if p in ("", "()"):
            shapes.append(())
        elif _DIMS_RE.fullmatch(p):
            shapes.append(tuple(int(d) for d in re.split(r"\s*[,x]\s*", p)))
        else:
            raise UsageError(f"--input-shape element '{part}': expected D0,D1,... or () for a scalar")
    return True, shapes


# -- inputs -------------------------------------------------------------------------------------
def value_names(model: onnx.ModelProto) -> set[str]:
    """Every value name the model's top-level graph uses (element names must not collide)."""
    g = model.graph
    names = {vi.name for vi in list(g.input) + list(g.output) + list(g.value_info)}
    names.update(t.name for t in g.initializer)
    for n in g.node:
        names.update(o for o in n.output if o)
    return names


def bind_input(g: Graph, vi: onnx.ValueInfoProto, value: Any, dtype_of: Callable[[int], str], taken: set[str]) -> None:
    """A bound sequence/optional input (a list of arrays, an array, or None): constant elements."""
    add_input(g, vi, {vi.name: structure_of(value)}, dtype_of, taken)
    for name, array in flatten_values(vi.name, value):
        g.inputs.remove(name)
        g.add_constant(name, array.astype(g.tensor(name).dtype))


def _tensor_dtype(tt: onnx.TypeProto.Tensor, dtype_of: Callable[[int], str]) -> str:
    return dtype_of(tt.elem_type)


def _check_dims(where: str, tt: onnx.TypeProto.Tensor, given: Shape) -> None:
    """A declared element shape (when the model has one) must agree with the given one."""
    if not tt.HasField("shape"):
        return
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim]
    if len(dims) != len(given):
        raise ShapeError(f"{where}: the model declares rank {len(dims)}, got shape {given}")
    for i, (a, b) in enumerate(zip(dims, given)):
        if a is not None and a != b:
            raise ShapeError(f"{where}: dimension {i} is fixed to {a} in the model, got {b}")


def _missing(vi: onnx.ValueInfoProto) -> ShapeError:
    name = vi.name
    if vi.type.WhichOneof("value") == "sequence_type":
        how = (
            f'give its length and element shapes: --input-shape "{name}=[D0,D1;D0,D1]" '
            f"(input_shapes={{'{name}': [(D0, D1), (D0, D1)]}} in the Python API); "
            f"its tensors become the inputs {element_name(name, 0)}, {element_name(name, 1)}, ..."
        )
        kind = "a sequence"
    else:
        how = (
            f"say whether it is present: --input-shape {name}=D0,D1,... (present; "
            f'"{name}=[D0;D1]" for an optional sequence) or {name}=none (absent) '
            f"(input_shapes={{'{name}': (D0, D1)}} or {{'{name}': None}} in the Python API)"
        )
        kind = "an optional"
    return ShapeError(f"input '{name}' is {kind}, whose structure tinyc fixes at compile time: {how}")


def _add_sequence(
    g: Graph, name: str, elem: onnx.TypeProto, given: Structure, dtype_of: Callable[[int], str], taken: set[str]
) -> None:
    """Sequence `name` of tensors shaped `given` (a list of shapes): inputs name.0, name.1, ..."""
    if elem.WhichOneof("value") not in (None, "tensor_type"):
        raise UnsupportedError(f"input '{name}': a sequence of non-tensors is not supported")
    if given is None or (isinstance(given, tuple) and given):
        raise ShapeError(
            f"input '{name}' is a sequence: give a list of element shapes, e.g. --input-shape "
            f"\"{name}=[2,3;2,3]\" (input_shapes={{'{name}': [(2, 3), (2, 3)]}}), got {given}"
        )
    tt = elem.tensor_type
    dtype = _tensor_dtype(tt, dtype_of) if tt.elem_type else "float32"
    elements = []
    shapes: list[Shape] = list(given) if isinstance(given, list) else []  # () here: an empty sequence
    for k, shape in enumerate(shapes):
        ename = element_name(name, k)
        if ename in taken or ename in g.tensors:
            raise UnsupportedError(
                f"input '{name}': its element tensor would be named '{ename}', which the model already uses"
            )
        _check_dims(f"input '{name}' element {k}", tt, shape)
        g.add_tensor(Tensor(ename, tuple(int(d) for d in shape), dtype))
        g.inputs.append(ename)
        elements.append(ename)
    g.sequences[name] = elements


def add_input(
    g: Graph, vi: onnx.ValueInfoProto, shapes: dict[str, Any], dtype_of: Callable[[int], str], taken: set[str]
) -> None:
    """Flatten sequence/optional graph input `vi` into tensor inputs, per its structure in `shapes`.
    `taken`: every value name the model uses (element names must not collide with them)."""
    if vi.name not in shapes:
        raise _missing(vi)
    given = shapes[vi.name]
    kind = vi.type.WhichOneof("value")
    if kind == "sequence_type":
        _add_sequence(g, vi.name, vi.type.sequence_type.elem_type, given, dtype_of, taken)
        return
    elem = vi.type.optional_type.elem_type
    if given is None:
        g.optionals[vi.name] = None
        return
    g.optionals[vi.name] = vi.name
    if elem.WhichOneof("value") == "sequence_type":
        _add_sequence(g, vi.name, elem.sequence_type.elem_type, given, dtype_of, taken)
        return
    if not isinstance(given, tuple):
        raise ShapeError(
            f"input '{vi.name}' is an optional tensor: give its shape (--input-shape {vi.name}=D0,D1,...) "
            f"or none (absent), got a list of element shapes {given}"
        )
    tt = elem.tensor_type
    _check_dims(f"input '{vi.name}'", tt, given)
    g.add_tensor(Tensor(vi.name, given, dtype_of(tt.elem_type) if tt.elem_type else "float32"))
    g.inputs.append(vi.name)


# -- outputs ------------------------------------------------------------------------------------
def _output_tensor(g: Graph, src: str, public: str, add: Callable[[Graph, Node], None]) -> None:
    """One tensor output with public name `public`, copied from `src` by an Identity (the same tensor
    may appear twice in a sequence, or be a graph input; the cleanup passes remove what is redundant)."""
    dst = g.unique_name(public)
    add(g, Node(f"{public}__out", "Identity", [src], [dst], {}, source=public))
    g.outputs.append(dst)
    g.output_names.append(public)


def add_output(g: Graph, vi: onnx.ValueInfoProto, add: Callable[[Graph, Node], None]) -> None:
    """Flatten a sequence/optional graph output into tensor outputs (see the module doc)."""
    name = vi.name
    value: str | None = name
    if name in g.optionals:
        value = g.optionals[name]
        if value is None:
            return  # an empty optional: no outputs
    elif vi.type.WhichOneof("value") == "optional_type" and name not in g.tensors and name not in g.sequences:
        raise ShapeError(f"graph output '{name}' is not produced by any node")
    if value in g.sequences:
        for k, item in enumerate(g.sequences[value]):
            _output_tensor(g, item, element_name(name, k), add)
        return
    if vi.type.WhichOneof("value") == "sequence_type":
        raise UnsupportedError(f"graph output '{name}' is a sequence whose elements are not known at compile time")
    if value not in g.tensors:
        raise ShapeError(f"graph output '{name}' is not produced by any node")
    _output_tensor(g, value, name, add)


def flatten_values(name: str, value: Any) -> list[tuple[str, np.ndarray]]:
    """(public tensor name, array) pairs for one input/output value: an array, a list (a sequence)
    or None (an empty optional), by the naming rule above. For callers feeding compiled models."""
    if value is None:
        return []
    if isinstance(value, list):
        return [(element_name(name, k), np.asarray(v)) for k, v in enumerate(value)]
    return [(name, np.asarray(value))]


def structure_of(value: Any) -> Structure:
    """The `input_shapes` entry that compiles an input for `value` (array, list of arrays or None)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [tuple(np.asarray(v).shape) for v in value]
    return tuple(np.asarray(value).shape)
