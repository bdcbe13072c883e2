"""Registered implementations: the variants of one op, each with what it needs and what it costs.

An op with several kernels (a baseline, register tiles, DSP / MVE micro-kernels, depthwise rows,
an OpenCL work-item grid, ...) lists them in ``OpDef.implementations``. Each names its template,
says when it applies (shapes, dtypes, declared numeric facts such as "the weights fit 16-bit
products", and the ISA of the schedule target), which knobs it reads, how much scratch memory it
needs and how much a default should prefer it. The op's schedule then only *selects* one (its
``variant`` knob, and for the SIMD forms the ``mac`` knob); each op's ``implementation`` method
finds it (``by_name``) in the schedule completed with the target's default, and the op sizes the
scratch and fills the template from that same choice, so variant choice and scratch sizing cannot
disagree (CMSIS-NN pairs each kernel with its buffer size the same way; TVM registers
implementations with a priority).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tinyc.errors import UnsupportedError

if TYPE_CHECKING:
    from tinyc.ir import Graph, Node

Schedule = dict[str, Any]
#: (node, graph) -> whether the implementation can compute this node exactly.
Predicate = Callable[["Node", "Graph"], bool]
#: (node, graph, complete schedule) -> extra arena bytes while the kernel runs.
ScratchFn = Callable[["Node", "Graph", Schedule], int]


def always(node: Node, graph: Graph) -> bool:
    """The predicate of an implementation that computes every node its op accepts."""
    return True


def no_scratch(node: Node, graph: Graph, schedule: Schedule) -> int:
    """The scratch size of an implementation that needs none."""
    return 0


@dataclass(frozen=True)
class Implementation:
    """One kernel variant of an op.

    `name` is the value of the op's selecting knob (``variant``; the SIMD forms are named by
    ``mac``), `template` its file under ``templates/kernels``. `applies` holds for the nodes it
    computes exactly (shapes, dtypes, numeric facts); `needs` is the ISA feature its code needs
    (an extension such as "dsp", the family "opencl", or None for portable C): the op's
    ``knob_isa`` reports it, so defaults and search spaces offer it only to targets whose ``Isa``
    has it. `knobs` are the schedule knobs it reads (the others are moot for it; declared here,
    while each op's ``canonical_schedule`` still applies its own rules), `scratch` its scratch
    size. `priority` orders the selecting knob's values, best first (ties: the first listed); each
    op's ``default_schedule`` then picks per target from shapes. `selected_by`: the knob whose
    value is `name` ("variant"; "mac" for the SIMD micro-kernels, which run inside a tiled variant)."""

    name: str
    template: str
    applies: Predicate = always
    needs: str | None = None
    knobs: tuple[str, ...] = ()
    scratch: ScratchFn = no_scratch
    priority: int | Callable[[Node, Graph], int] = 0
    selected_by: str = "variant"

    def rank(self, node: Node, graph: Graph) -> int:
        """The default preference for this node (a shape may change it: `priority` as a function)."""
        return self.priority(node, graph) if callable(self.priority) else self.priority


def applicable(
    impls: Sequence[Implementation], node: Node, graph: Graph, knob: str = "variant"
) -> list[Implementation]:
    """The implementations selected by `knob` that compute `node`, best default first: the order
    of the knob's values in the op's knob space, for every target (``knob_isa`` and
    ``tinyc.schedule.knob_allowed`` keep a target to the ones its ISA has)."""
    ok = [i for i in impls if i.selected_by == knob and i.applies(node, graph)]
    return sorted(ok, key=lambda i: -i.rank(node, graph))


def selected_need(impls: Sequence[Implementation], knob: str, value: Any) -> str | None:
    """What the code of the implementation that `knob` = `value` selects needs (its `needs`: an
    ISA extension or family); None when it is portable or the value selects no implementation."""
    for impl in impls:
        if impl.selected_by == knob and impl.name == value:
            return impl.needs
    return None


def by_name(impls: Sequence[Implementation], name: str, where: str) -> Implementation:
    """The implementation called `name` (a schedule's variant), or a clear error naming the node."""
    for impl in impls:
        if impl.name == name:
            return impl
    raise UnsupportedError(f"{where}: no implementation '{name}' (implementations: {', '.join(i.name for i in impls)})")
