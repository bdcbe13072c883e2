"""Code generation: schedule + memory plan + templates → C sources, manifest and report."""

from tinyc.codegen.pipeline import GeneratedProject, generate

__all__ = ["GeneratedProject", "generate"]
