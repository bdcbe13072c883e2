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

    # -- subgraphs (If / Loop / Scan) ------------------------------------------------------------
    def graph_attr(self, name: str) -> onnx.GraphProto:
        """A GraphProto attribute (a body or branch), kept undecoded."""
        for a in self.onnx_node.attribute:
            if a.name == name and a.type == onnx.AttributeProto.GRAPH:
                return a.g
        self.invalid(f"missing graph attribute '{name}'")

    def inline_subgraph(self, graph_proto: onnx.GraphProto) -> list[str]:
        """Import a subgraph's nodes into the current graph (outer names visible); returns its
        output names. A folded If imports its taken branch this way."""
        from tinyc.frontend.onnx_import import inline_subgraph

        return inline_subgraph(graph_proto, self.graph, self.opset, self.name)

    def import_subgraph(
        self,
        graph_proto: onnx.GraphProto,
        input_types: list[tuple[tuple[int, ...], str]],
        constants: dict[int, np.ndarray] | None = None,
    ) -> tuple[Graph, list[str]]:
        """Import a Loop/Scan body as its own Graph with static input types; returns it and the
        non-constant outer tensors it reads (which the node must take as extra inputs).
        `constants` binds inputs (by index) to values instead."""
        from tinyc.frontend.onnx_import import import_subgraph

        return import_subgraph(graph_proto, self.graph, input_types, self.opset, self.name, constants)
