"""tinyc's graph IR: the common language between the frontend, passes, executor and codegen.

Deliberately small: a Graph owns Tensors (by name) and an ordered list of Nodes. Nodes refer
to tensors by name so passes can rewire edges without chasing object references.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, cast
from collections.abc import Iterator

import numpy as np

DTYPE_BYTES = {
    "float32": 4,
    "float64": 8,
    "float16": 2,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "bool": 1,
    # narrow types, stored as numpy/ml_dtypes store them (tinyc/numerics/dtypes.py): one element
    # per byte for the 8-bit floats, float4 and the 4-/2-bit integers
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2": 1,
    "float8_e5m2fnuz": 1,
    "float4_e2m1fn": 1,
    "float8_e8m0fnu": 1,
    "int4": 1,
    "uint4": 1,
    "int2": 1,
    "uint2": 1,
}


@dataclass
class QuantParams:
    """Affine quantization: real = scale * (q - zero_point); per-tensor or per-`axis`."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None


@dataclass
class Tensor:
    """A value in the graph. `data` is set for constants (weights, folded shapes)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    data: np.ndarray | None = None
    quant: QuantParams | None = None

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.size * DTYPE_BYTES[self.dtype]


@dataclass
class Node:
    """One operation. `op` is a tinyc op name (see tinyc.ops); `attrs` are normalised values."""

    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the ONNX node(s) this came from, for comments and error messages

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)


@dataclass
class Graph:
    name: str
    tensors: dict[str, Tensor] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    # Layout the caller sees at each graph input/output ("NCHW" etc.), kept for reports.
    io_layout: dict[str, str] = field(default_factory=dict)
    # Public names of the outputs (the ONNX names); `outputs` holds the internal tensor names,
    # which passes may rewire.
    output_names: list[str] = field(default_factory=list)
    # Import-time only (tinyc/ops/sequences.py, optional.py): an ONNX sequence value is a compile-time
    # list of tensor names, an optional one a tensor/sequence name or None (empty). Never in kernels.
    sequences: dict[str, list[str]] = field(default_factory=dict)
    optionals: dict[str, str | None] = field(default_factory=dict)
    # Import-time only: the node a constant was folded from (tinyc/ops/matmul_int4.py keeps a weight
    # folded from a 4-bit DequantizeLinear packed instead of as float32).
    folded_from: dict[str, Node] = field(default_factory=dict)

    def public_outputs(self) -> list[tuple[str, str]]:
        """(public name, internal tensor) per graph output."""
        names = self.output_names or self.outputs
        return list(zip(names, self.outputs))

    # -- tensors ---------------------------------------------------------------------------
    def add_tensor(self, tensor: Tensor) -> Tensor:
        self.tensors[tensor.name] = tensor
        return tensor

    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]

    def constant(self, name: str) -> np.ndarray | None:
        t = self.tensors.get(name)
        return None if t is None else t.data

    def add_constant(self, name: str, data: np.ndarray) -> str:
        data = np.asarray(data)
        # ascontiguousarray makes 0-d arrays 1-d; numpy's stubs type this reshape's result as 0-d
        data = cast(np.ndarray, np.ascontiguousarray(data).reshape(data.shape))
        if str(data.dtype) not in DTYPE_BYTES:
            from tinyc.errors import UnsupportedError

            raise UnsupportedError(f"constant '{name}' has unsupported element type {data.dtype}")
        self.add_tensor(Tensor(name, tuple(int(d) for d in data.shape), str(data.dtype), data))
        return name

    def unique_name(self, base: str) -> str:
        if base not in self.tensors and all(n.name != base for n in self.nodes):
            return base
        i = 1
        names = set(self.tensors) | {n.name for n in self.nodes}
        while f"{base}_{i}" in names:
            i += 1
        return f"{base}_{i}"

    # -- structure -------------------------------------------------------------------------
    def producers(self) -> dict[str, Node]:
        return {out: n for n in self.nodes for out in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        result: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    result.setdefault(i, []).append(n)
        return result

    def iter_nodes(self, op: str | None = None) -> Iterator[Node]:
        for n in list(self.nodes):
            if op is None or n.op == op:
                yield n

    def replace_uses(self, old: str, new: str) -> None:
        """Point every consumer (and graph output) of `old` at `new`."""
        for n in self.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]

    def has_integer_activations(self) -> bool:
        """Whether any computed (non-constant) tensor is int8/uint8: the graph is already quantized."""
        return any(t.dtype in ("int8", "uint8") for t in self.tensors.values() if not t.is_constant)

    def remove_unused_tensors(self) -> None:
        used = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            used.update(i for i in n.inputs if i)
            used.update(n.outputs)
        self.tensors = {k: v for k, v in self.tensors.items() if k in used}

    def topological_sort(self) -> None:
        """Order nodes so producers precede consumers (stable w.r.t. the current order)."""
        produced_by = self.producers()
        done: set[str] = set()
        ordered: list[Node] = []
        visiting: set[str] = set()

        def visit(node: Node) -> None:
            if node.name in done:
                return
            if node.name in visiting:
                raise ValueError(f"graph has a cycle through node '{node.name}'")
            visiting.add(node.name)
            for i in node.inputs:
                p = produced_by.get(i)
                if p is not None:
                    visit(p)
            visiting.discard(node.name)
            done.add(node.name)
            ordered.append(node)

        for n in self.nodes:
            visit(n)
        self.nodes = ordered

    def copy(self) -> Graph:
        return Graph(
            self.name,
            {k: dataclasses.replace(v) for k, v in self.tensors.items()},
            [
                dataclasses.replace(n, inputs=list(n.inputs), outputs=list(n.outputs), attrs=dict(n.attrs))
                for n in self.nodes
            ],
            list(self.inputs),
            list(self.outputs),
            dict(self.io_layout),
            list(self.output_names),
        )
