"""Target dialects: what differs between plain C, SIMD C and OpenCL C lives here and in
`templates/dialects/<name>.j2`, never in a kernel template."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    name: str
    macros: str  # template with kernel()/parallel_for()/... macros
    float_suffix: str = "f"


C99 = Dialect("c", "dialects/c.j2")
OPENCL = Dialect("opencl", "dialects/opencl.j2")
DIALECTS = {"c": C99, "opencl": OPENCL}
