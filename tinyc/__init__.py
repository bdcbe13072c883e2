"""tinyc: compile ONNX models to static, allocation-free C for microcontrollers and desktops."""
__version__ = "0.1.0"

from tinyc.api import compile, inspect, load, run  # noqa: E402  (API needs __version__)

__all__ = ["__version__", "compile", "inspect", "load", "run"]
