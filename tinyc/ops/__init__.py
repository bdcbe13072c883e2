"""Operator definitions: one module per op family, each registering OpDefs on import.

`load_all()` imports every module in this package, so adding an op is adding a file.
"""

from __future__ import annotations

import importlib
import threading
import pkgutil

from tinyc.ops.base import OpDef, all_ops, get_op, onnx_op, register, register_instance, supported_onnx_ops

_LOADED = False
_LOADING = False
_LOCK = threading.RLock()


def load_all() -> None:
    """Import every op module once. Thread-safe: a thread arriving while another imports waits
    until the registry is complete (code generation in parallel build threads needs every op);
    a call from inside an op module's own import (same thread) returns at once."""
    global _LOADED, _LOADING
    if _LOADED:
        return
    with _LOCK:
        if _LOADED or _LOADING:
            return
        _LOADING = True
        try:
            for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
                if info.name not in ("base",) and not info.name.startswith("_"):
                    importlib.import_module(f"{__name__}.{info.name}")
        finally:
            _LOADING = False
        _LOADED = True


__all__ = ["OpDef", "all_ops", "get_op", "load_all", "onnx_op", "register", "register_instance", "supported_onnx_ops"]
