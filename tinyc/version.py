"""tinyc's version, in a module of its own: generated files, manifests and tuning logs record it,
and the modules that write them sit below ``tinyc.api``, which the package's ``__init__`` imports."""

__version__ = "0.1.0"
