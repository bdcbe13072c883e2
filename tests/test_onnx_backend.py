"""ONNX backend conformance (tests/onnx_suite.py): no case may fail or crash; refusals must be clear.

The whole suite runs once per session (~1-2 min on 2 cores); `-m "not slow"` keeps only the quick
named-case check.
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import onnx_suite  # noqa: E402

from tinyc.ops import onnx_op, supported_onnx_ops  # noqa: E402

# Measured 1953 passes (of 2033 cases, onnx 1.23.2) at the last regeneration of docs/ops.md; a drop
# below this means something shared broke.
PASS_FLOOR = 1940
NAMED_CASES = ["test_relu", "test_conv_with_strides_padding", "test_gemm_default_matrix_bias",
               "test_maxpool_2d_pads", "test_softmax_axis_0"]


@functools.lru_cache(maxsize=1)
def _cases() -> tuple[onnx_suite.Case, ...]:
    return tuple(onnx_suite.collect_cases())


@pytest.fixture(scope="session")
def suite() -> onnx_suite.SuiteRun:
    return onnx_suite.run_suite(jobs=os.cpu_count(), cases=list(_cases()))


def _listing(results: list[onnx_suite.Result]) -> str:
    return "\n".join(f"  {r.status} {r.key}{' [bound: ' + ', '.join(r.bound) + ']' if r.bound else ''}: {r.reason}"
                     for r in sorted(results, key=lambda r: r.key))


@pytest.mark.slow
def test_no_case_fails_or_errors(suite):
    bad = suite.by_status("fail", "error")
    if bad:
        pytest.fail(f"{len(bad)} ONNX backend case(s) fail or error:\n{_listing(bad)}", pytrace=False)


@pytest.mark.slow
def test_classification_is_sane(suite):
    counts = suite.counts()
    assert len(suite.results) == len(_cases())
    assert counts["pass"] >= PASS_FLOOR, f"only {counts['pass']} cases pass (floor {PASS_FLOOR}): {counts}"
    registered = set(supported_onnx_ops())
    for r in suite.by_status("unsupported-op"):
        ops = r.reason.removeprefix("not registered: ").split(", ")
        assert ops and all(op and op not in registered and (("." in op) or onnx_op(op) is None) for op in ops), r
    for r in suite.by_status("unsupported", "error", "fail"):
        assert r.reason, r


def test_named_cases_pass():
    """A quick smoke test: a few common ops compile, build and match onnx's expected outputs."""
    registered = set(supported_onnx_ops())
    cases = [c for c in _cases() if c.suite == "node" and c.name in NAMED_CASES
             and not onnx_suite.unregistered_ops(c.model)]
    assert {c.op for c in cases} <= registered
    if not cases:
        pytest.skip("none of the named cases' ops is registered")
    run = onnx_suite.run_suite(jobs=2, cases=cases)
    bad = [r for r in run.results if r.status != "pass"]
    if bad:
        pytest.fail(_listing(bad), pytrace=False)
