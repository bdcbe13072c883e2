"""The TFLite frontend: a .tflite flatbuffer (read with the ``tflite`` package) into tinyc's IR."""

from tinyc.frontend.tflite.convert import import_tflite, is_tflite_model, load_tflite, supported_builtins

__all__ = ["import_tflite", "is_tflite_model", "load_tflite", "supported_builtins"]
