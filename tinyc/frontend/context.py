"""What an op's ONNX import handler sees: the node, its attributes, and what is known so far."""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np
import onnx
from onnx import helper

from tinyc.errors import ShapeError, UnsupportedError
from tinyc.ir import Graph, Node


class ImportContext:
    """One ONNX node being imported into `graph` (which already holds its inputs' tensors)."""

    def __init__(self, onnx_node: onnx.NodeProto, graph: Graph, opset: int, node_name: str) -> None:
        self.onnx_node = onnx_node
        self.graph = graph
        self.opset = opset
        self.name = node_name
        self.op_type = onnx_node.op_type
        self.inputs = list(onnx_node.input)
        self.outputs = list(onnx_node.output)
        self._attrs = {a.name: helper.get_attribute_value(a) for a in onnx_node.attribute}
        for k, v in list(self._attrs.items()):
            if isinstance(v, bytes):
                self._attrs[k] = v.decode()
            elif isinstance(v, list) and v and isinstance(v[0], bytes):
                self._attrs[k] = [x.decode() for x in v]
            elif isinstance(v, onnx.TensorProto):
                from tinyc.frontend.validate import tensor_to_array

                self._attrs[k] = tensor_to_array(v, f"node '{node_name}' ({self.op_type}): attribute '{k}' tensor")

    # -- attributes and inputs ---------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        return self._attrs.get(name, default)

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] != ""

    def shape(self, i: int) -> tuple[int, ...]:
        return self.graph.tensor(self.inputs[i]).shape

    def dtype(self, i: int) -> str:
        return self.graph.tensor(self.inputs[i]).dtype

    def const(self, i: int) -> np.ndarray | None:
        """Value of input i if it is a constant (initializer or folded), else None."""
        if not self.has_input(i):
            return None
        return self.graph.constant(self.inputs[i])

    def require_const(self, i: int, what: str) -> np.ndarray:
        value = self.const(i)
        if value is None:
            self.unsupported(f"input {i} ({what}) must be a constant known at compile time")
        return value

    # -- results ------------------------------------------------------------------------------
    def unsupported(self, message: str) -> NoReturn:
        raise UnsupportedError(f"node '{self.name}' ({self.op_type}): {message}")

    def invalid(self, message: str) -> NoReturn:
        """The node is malformed (attributes or shapes ONNX forbids; onnxruntime refuses it too)."""
        raise ShapeError(f"node '{self.name}' ({self.op_type}): {message}")

    def make_node(
        self, op: str, inputs: list[str] | None = None, outputs: list[str] | None = None, **attrs: Any
    ) -> Node:
        return Node(
            self.name,
            op,
            list(self.inputs if inputs is None else inputs),
            list(self.outputs if outputs is None else outputs),
            attrs,
            source=self.name,
        )

    def set_constant(self, output_index: int, value: np.ndarray) -> list[Node]:
        """Define an output as a compile-time constant (no node emitted)."""
        self.graph.add_constant(self.outputs[output_index], np.asarray(value))
        return []

    def add_constant(self, suffix: str, value: np.ndarray) -> str:
        return self.graph.add_constant(self.graph.unique_name(f"{self.name}_{suffix}"), np.asarray(value))
