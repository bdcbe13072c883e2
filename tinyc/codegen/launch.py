"""Launch metadata of a rendered kernel: how many work-items it runs on and how much work-group
local memory it takes, recorded by the dialect's macros while the kernel renders.

The kernel templates import their dialect without the render context (`{% import dialect_macros
as d %}`: Jinja then caches the imported macros), so the macros cannot see a per-kernel variable.
They call the `launch` template global instead; `render_kernel` binds it to a fresh `Launch` for
the one render, so what a kernel needs travels as data next to its code, not inside it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import jinja2


@dataclass
class Launch:
    """What the dialect's macros declared while one kernel rendered."""

    #: the extent of every parallel loop, as the template wrote it (a number or a C expression)
    parallel_extents: list[str] = field(default_factory=list)
    #: the work-group local memory each `kernel(..., local_bytes=N)` asked for
    local_requests: list[int] = field(default_factory=list)

    @property
    def global_size(self) -> int:
        """Work-items to launch: the extent of the kernel's one parallel loop; 1 (a serial kernel)
        when it has none, several (a later loop may read what another work-item wrote) or one whose
        extent is not a number known at compile time."""
        if len(self.parallel_extents) != 1 or not self.parallel_extents[0].isdigit():
            return 1
        return max(1, int(self.parallel_extents[0]))

    @property
    def local_bytes(self) -> int:
        """Bytes of work-group local memory the kernel takes as its third argument; 0 for none."""
        return max(self.local_requests, default=0)


_CURRENT: ContextVar[Launch | None] = ContextVar("tinyc_launch", default=None)


class LaunchRecorder:
    """The `launch` template global: each call records into the kernel being rendered and
    renders as nothing, so a macro writes `{{ launch.parallel(extent) }}` where it opens a loop.
    Outside `render_kernel` (a project file, a C-only render) the calls are ignored."""

    def parallel(self, extent: Any) -> str:
        launch = _CURRENT.get()
        if launch is not None:
            launch.parallel_extents.append(str(extent))
        return ""

    def local(self, nbytes: Any) -> str:
        launch = _CURRENT.get()
        if launch is not None:
            launch.local_requests.append(int(nbytes))
        return ""


#: registered as the `launch` global of tinyc's template environment (tinyc.codegen.emitter)
LAUNCH = LaunchRecorder()


@contextmanager
def recording() -> Iterator[Launch]:
    """A fresh `Launch` that the dialect's macros fill while the block runs."""
    launch = Launch()
    token = _CURRENT.set(launch)
    try:
        yield launch
    finally:
        _CURRENT.reset(token)


def render_kernel(template: jinja2.Template, context: Mapping[str, Any]) -> tuple[str, Launch]:
    """A kernel template's code and the launch its dialect macros declared."""
    with recording() as launch:
        code = template.render(**context)
    return code, launch
