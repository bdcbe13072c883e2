"""docs/adding-an-op.md shows real code: it must match the files it names, and the op must work."""
from __future__ import annotations

import re

import numpy as np
import onnx.backend.test.case.node as node_cases

import tinyc
from util import REPO


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_adding_an_op_doc_matches_the_code():
    doc = (REPO / "docs" / "adding-an-op.md").read_text()
    assert _blocks(doc, "python")[0] == (REPO / "tinyc/ops/shrink.py").read_text()
    assert _blocks(doc, "jinja")[0] == (REPO / "templates/kernels/shrink.c.j2").read_text()


def test_adding_an_op_example_runs(tmp_path):
    doc = (REPO / "docs" / "adding-an-op.md").read_text()
    snippet = _blocks(doc, "python")[1].replace('"out/shrink"', repr(str(tmp_path / "shrink")))
    scope: dict = {}
    exec(snippet.replace("print(", "result = ("), scope)  # noqa: S102 - our own doc
    np.testing.assert_allclose(scope["result"], [-1.5, 0, 0, 0, 1.5])


def test_shrink_node_tests_pass(tmp_path):
    cases = [c for c in node_cases.collect_testcases(None) if c.name.startswith("test_shrink") and "expanded" not in c.name]
    assert cases
    for case in cases:
        tinyc.compile(case.model, tmp_path / case.name)
        for inputs, outputs in case.data_sets:
            feeds = {vi.name: x for vi, x in zip(case.model.graph.input, inputs)}
            got = tinyc.run(tmp_path / case.name, feeds)
            for vi, expected in zip(case.model.graph.output, outputs):
                np.testing.assert_allclose(got[vi.name], expected, rtol=case.rtol, atol=case.atol)
