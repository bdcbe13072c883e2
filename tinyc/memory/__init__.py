"""Static memory planning: liveness → offsets in one arena → an overlap checker that proves it."""

from tinyc.memory.checker import PlanError, check_plan
from tinyc.memory.liveness import ALIGNMENT, MemoryLayout, build_buffers, plan_graph_memory
from tinyc.memory.planner import Buffer, MemoryPlan, lower_bound_bytes, plan_memory

__all__ = [
    "ALIGNMENT",
    "Buffer",
    "MemoryLayout",
    "MemoryPlan",
    "PlanError",
    "build_buffers",
    "check_plan",
    "lower_bound_bytes",
    "plan_graph_memory",
    "plan_memory",
]
