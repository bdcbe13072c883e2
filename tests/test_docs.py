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


# -- the int8 and the tunable example: taken from the doc, installed, compiled, checked -----------
#: Run in a fresh interpreter (the example registers an op: other tests must not see it). The
#: example's template is found through one more template folder, as if it sat in templates/kernels.
_HARNESS = """
import sys
from pathlib import Path
from tinyc.codegen.emitter import template_env

folder = Path(sys.argv[1])
template_env().loader.searchpath.append(str(folder))
from tinyc.ops import base, load_all
load_all()
base._REGISTRY.pop("Compress", None)  # tinyc ships a Compress of its own: the example takes its place
exec(compile((folder / "op.py").read_text(), "op.py", "exec"), {"__name__": "tinyc.ops.doc_example"})
exec(compile((folder / "check.py").read_text(), "check.py", "exec"), {"__name__": "__main__"})
"""


def _run_doc_example(tmp_path, module: str, template: str, template_name: str, check: str, out: str) -> None:
    import subprocess
    import sys

    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / template_name).write_text(template)
    (tmp_path / "op.py").write_text(module)
    assert f'OUT = Path("{out}")' in check
    (tmp_path / "check.py").write_text(check.replace(f'OUT = Path("{out}")', f"OUT = Path({str(tmp_path / 'out')!r})"))
    (tmp_path / "harness.py").write_text(_HARNESS)
    proc = subprocess.run([sys.executable, str(tmp_path / "harness.py"), str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _example(index: int) -> tuple[str, str, str]:
    doc = (REPO / "docs" / "adding-an-op.md").read_text()
    python, jinja = _blocks(doc, "python"), _blocks(doc, "jinja")
    assert len(python) == 6 and len(jinja) == 3  # shrink (module, use), compress and swish (module, check)
    return python[2 * index], jinja[index], python[2 * index + 1]


def test_adding_an_op_int8_example_runs(tmp_path):
    module, template, check = _example(1)
    assert 'template = "compress.c.j2"' in module and "int8_passthrough = True" in module
    _run_doc_example(tmp_path, module, template, "compress.c.j2", check, "out/compress")


def test_adding_an_op_tunable_example_runs(tmp_path):
    module, template, check = _example(2)
    assert 'template = "swish.c.j2"' in module and "def knobs" in module
    _run_doc_example(tmp_path, module, template, "swish.c.j2", check, "out/swish")


def test_the_template_op_shows_every_hook():
    """tinyc/ops/_template.py is the op to copy: it must list every OpDef hook, and the loader
    must not register it."""
    from tinyc.ops import all_ops
    from tinyc.ops._template import TemplateOp
    from tinyc.ops.base import OpDef

    hooks = {name for name in vars(OpDef) if not name.startswith("_")}
    missing = sorted(hooks - set(vars(TemplateOp)))
    assert not missing, f"tinyc/ops/_template.py lacks {missing}"
    assert TemplateOp.op not in all_ops()
