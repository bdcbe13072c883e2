"""Numpy interpreter of the IR: the oracle for generated code (and later the calibration engine)."""

from tinyc.reference.executor import run_graph

__all__ = ["run_graph"]
