"""`tinyc validate` reads the golden graph a board project keeps (golden_graph.pkl). A project folder
may come from someone else, and unpickling can run code: only the IR's classes and numpy arrays
load; anything else is refused in one line, never executed."""
from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import tinyc
import tinyc.reference
from tests.util import REPO
from tinyc.device.runner import GOLDEN_GRAPH, _load_golden, save_golden_graph
from tinyc.errors import UsageError

DIGITS = REPO / "examples" / "digits" / "digits_cnn.onnx"


def test_golden_graph_round_trip(tmp_path):
    x = np.random.default_rng(0).random((1, 1, 8, 8), dtype=np.float32)
    for quantize, calib in (("none", None), ("int8", {"input": np.random.default_rng(1).random((8, 1, 8, 8),
                                                                                              dtype=np.float32)})):
        graph = tinyc.load(str(DIGITS), quantize=quantize, calib=calib)
        save_golden_graph(tmp_path, graph, str(DIGITS))
        loaded, source = _load_golden(tmp_path)
        assert source == str(DIGITS)
        want, got = tinyc.reference.run_graph(graph, {"input": x}), tinyc.reference.run_graph(loaded, {"input": x})
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch INJECTED_BY_PICKLE",))


@pytest.mark.parametrize("content", [
    pickle.dumps({"graph": _Payload(), "source_model": None}),   # code on load
    pickle.dumps({"graph": [1, 2, 3]}),                          # not a graph
    b"\x80\x04garbage",                                          # corrupt
])
def test_foreign_pickle_is_refused_not_run(tmp_path, content, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / GOLDEN_GRAPH).write_bytes(content)
    with pytest.raises(UsageError, match="not a golden graph written by tinyc"):
        _load_golden(tmp_path)
    assert not (tmp_path / "INJECTED_BY_PICKLE").exists()


def test_mutated_golden_graph_loads_or_is_refused(tmp_path):
    """Byte-level mutations of a real golden graph: each loads as a Graph or is refused in one line."""
    from tests.mutators import mutate_bytes
    from tinyc.ir import Graph
    save_golden_graph(tmp_path, tinyc.load(str(DIGITS)), str(DIGITS))
    good = (tmp_path / GOLDEN_GRAPH).read_bytes()
    for seed in range(60):
        bad, what = mutate_bytes(good, 9000 + seed)
        (tmp_path / GOLDEN_GRAPH).write_bytes(bad)
        try:
            graph, _ = _load_golden(tmp_path)
        except UsageError as exc:
            assert "\n" not in str(exc), (seed, what)
        else:
            assert isinstance(graph, Graph), (seed, what)
