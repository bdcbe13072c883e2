"""Graph passes, run in a fixed order by `run_passes` (see pipeline.py)."""

from tinyc.passes.pipeline import run_passes

__all__ = ["run_passes"]
