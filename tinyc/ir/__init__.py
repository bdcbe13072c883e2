"""Graph IR shared by every stage of the pipeline."""

from tinyc.ir.graph import DTYPE_BYTES, Graph, Node, QuantParams, Tensor

__all__ = ["DTYPE_BYTES", "Graph", "Node", "QuantParams", "Tensor"]
