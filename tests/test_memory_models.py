"""The planner on real models: every compile runs the overlap checker (a bad plan never reaches
C), and the arena stays close to the lower bound."""
from __future__ import annotations

import pytest

import tinyc
from tinyc.codegen import generate
from tinyc.memory import MemoryPlan, PlanError
from tinyc.memory import liveness
from util import MLPERF, MLPERF_MODELS, REPO


def test_compile_rejects_an_overlapping_plan(monkeypatch):
    graph = tinyc.load(REPO / "examples/digits/digits_cnn.onnx")

    def everything_at_zero(buffers, alignment=16):
        size = max(b.size for b in buffers)
        return MemoryPlan({b.name: 0 for b in buffers}, size + (-size) % 16, 0, "broken", {"broken": size})

    monkeypatch.setattr(liveness, "plan_memory", everything_at_zero)
    with pytest.raises(PlanError, match="overlap"):
        generate(graph)


@pytest.mark.parametrize("name", MLPERF_MODELS)
def test_arena_close_to_lower_bound(name):
    gen = generate(tinyc.load(MLPERF / name / "model.onnx"))
    plan = gen.layout.plan
    assert plan.arena_bytes <= 1.10 * plan.lower_bound_bytes, plan.strategies
    assert len(plan.strategies) >= 2
