"""The malformed-model reproducers of a mutation campaign (shared/reliability/): each must end in a
clean one-line `tinyc: error: …` (exit 2) or, where onnxruntime runs the model, in onnxruntime's
outputs. They stand for classes of defects; the classes themselves are tested where they are fixed
(test_names, test_nan_inf, test_model_validation, test_input_data) and fuzzed in test_fuzz."""
from __future__ import annotations

import numpy as np
import pytest

from tests.util import REPO, ort_run
from tinyc.cli import main

RELIABILITY = REPO.parent / "shared" / "reliability"

if not RELIABILITY.is_dir():  # pragma: no cover - CI always has shared/ beside the checkout
    pytest.skip("shared/reliability/ is not beside the checkout", allow_module_level=True)

#: reproducer → why it must be refused (onnxruntime refuses it too, or there is nothing to run)
REFUSED = {
    "m0023": "a name string with invalid UTF-8",
    "m0166": "an input of element type 77",
    "m0192": "no graph outputs",
    "m0210": "a Conv with negative pads",
    "m0376": "an initializer whose float_data and raw_data are both empty",
    "m0500": "a Gemm bias of 11 elements for 10 outputs",
}


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("tinyc: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_with_one_line(name, tmp_path, capsys):
    model = RELIABILITY / f"{name}.onnx"
    for argv in (["inspect", str(model)], ["compile", str(model), "-o", str(tmp_path / "out"), "--build"]):
        assert main(argv) == 2, (name, REFUSED[name])
        _one_error_line(capsys.readouterr().err)


def test_nan_weight_gives_onnxruntimes_nan(tmp_path, capsys):
    model = RELIABILITY / "m0176.onnx"
    x = np.random.default_rng(0).random((1, 1, 8, 8), dtype=np.float32)
    np.savez(tmp_path / "x.npz", input=x)
    assert main(["compile", str(model), "-o", str(tmp_path / "out")]) == 0
    assert main(["run", str(tmp_path / "out"), "--input", str(tmp_path / "x.npz"),
                 "--output", str(tmp_path / "y.npz")]) == 0
    (ref,) = ort_run(str(model), {"input": x})
    with np.load(tmp_path / "y.npz") as y:
        got = y[next(iter(y.files))]
    assert np.isnan(ref).any()
    np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_injected_name_is_not_executed(tmp_path, capfd):
    model = RELIABILITY / "name_injection.onnx"
    data = RELIABILITY / "name_injection_x.npz"
    assert main(["compile", str(model), "-o", str(tmp_path / "out"), "--build"]) == 0
    assert main(["run", str(tmp_path / "out"), "--input", str(data), "--output", str(tmp_path / "y.npz")]) == 0
    captured = capfd.readouterr()
    assert "INJECTED" not in captured.out + captured.err
    import onnx
    (name,) = [i.name for i in onnx.load(str(model)).graph.input]
    with np.load(data) as d:
        (x,) = [d[k] for k in d.files]   # stored under 'x', the alias a one-input model takes
    (ref,) = ort_run(str(model), {name: x})
    with np.load(tmp_path / "y.npz") as y:
        got = y[next(iter(y.files))]
    np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-5, atol=1e-5)
