"""Model importers (ONNX today)."""

from tinyc.frontend.onnx_import import add_node, import_onnx, load_onnx, parse_input_shapes

__all__ = ["add_node", "import_onnx", "load_onnx", "parse_input_shapes"]
