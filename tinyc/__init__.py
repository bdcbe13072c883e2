"""tinyc: compile ONNX models to static, allocation-free C for microcontrollers and desktops."""

from tinyc.version import __version__

from tinyc.api import (
    analyze,
    build_project,
    compile,
    compile_models,
    devices,
    flash,
    inspect,
    load,
    profile,  # noqa: E402  (API needs __version__)
    run,
    run_on_board,
    validate,
)

__all__ = [
    "__version__",
    "analyze",
    "build_project",
    "compile",
    "compile_models",
    "devices",
    "flash",
    "inspect",
    "load",
    "profile",
    "run",
    "run_on_board",
    "validate",
]
