"""What a schedule target can execute: the one place a target string is parsed.

Schedules, defaults and search spaces are chosen per *schedule target*, a short string: "host",
"opencl", or "mcu" followed by the ISA extensions of the board's core ("mcu+dsp", "mcu+dsp+mve").
Stages below the targets layer (ops, schedule, codegen) must not compare such strings themselves;
they ask an `Isa` whether it has what a kernel variant needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: ISA extensions a kernel variant may need; a Cortex-M core has a subset (boards' [cpu] dsp / mve).
ISA_EXTENSIONS = ("dsp", "mve")
#: Target families: a desktop CPU, a microcontroller, an OpenCL device (work-item grids, vector types, local memory).
FAMILIES = ("host", "mcu", "opencl")


@dataclass(frozen=True)
class Isa:
    """A parsed schedule target: its family and the ISA extensions its core has."""

    family: str
    extensions: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, target: str) -> Isa:
        """ "mcu+dsp+mve" -> Isa("mcu", {"dsp", "mve"}); "host" -> Isa("host")."""
        family, *exts = target.split("+")
        return cls(family, frozenset(e for e in exts if e))

    @classmethod
    def of_board(cls, board: Mapping[str, Any]) -> Isa:
        """A board definition's core: "mcu" plus the extensions its [cpu] table enables."""
        cpu = board.get("cpu", {})
        return cls("mcu", frozenset(ext for ext in ISA_EXTENSIONS if cpu.get(ext)))

    @property
    def name(self) -> str:
        """The schedule target string (extensions in ISA_EXTENSIONS order)."""
        return "+".join([self.family] + [e for e in ISA_EXTENSIONS if e in self.extensions])

    @property
    def work_items(self) -> bool:
        """Whether kernels run as OpenCL work-items (grids, vector types, local memory)."""
        return self.family == "opencl"

    def has(self, need: str | None) -> bool:
        """Whether code needing `need` (an extension such as "dsp", a family such as "opencl",
        or None for portable code) may be chosen for this target."""
        return need is None or need in self.extensions or need == self.family


def isa_of(target: str) -> frozenset[str]:
    """The ISA extensions named in a target string ("mcu+dsp+mve" -> {"dsp", "mve"})."""
    return Isa.parse(target).extensions
