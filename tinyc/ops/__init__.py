"""Operator definitions: one module per op family, each registering OpDefs on import.

`load_all()` imports every module in this package, so adding an op is adding a file.
"""
from __future__ import annotations

import importlib
import pkgutil

from tinyc.ops.base import OpDef, all_ops, get_op, onnx_op, register, register_instance, supported_onnx_ops

_LOADED = False


def load_all() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name not in ("base",) and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


__all__ = ["OpDef", "all_ops", "get_op", "load_all", "onnx_op", "register", "register_instance",
           "supported_onnx_ops"]
