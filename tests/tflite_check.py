"""Check a .tflite model converted by tinyc against TFLite Micro's interpreter (test support).

``check_model`` runs the model three ways on the same inputs: TFLite Micro (the oracle), tinyc's
numpy golden model of the imported graph, and — when ``c=True`` — the generated host C. Integer
outputs must be identical; float outputs agree to ``rtol``/``atol``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tests.tflite_models import tflm_run


def golden(model: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """tinyc's numpy golden model of the imported graph on one set of inputs."""
    from tinyc.frontend.tflite import import_tflite
    from tinyc.passes import run_passes
    from tinyc.reference.executor import run_graph

    g = import_tflite(model)
    run_passes(g, io_layout="onnx", int8=None)
    out = run_graph(g, dict(zip(g.inputs, inputs)))
    return [np.asarray(out[n]) for n in g.outputs]


def host_c(model: bytes, inputs: list[np.ndarray], tmp: Path) -> list[np.ndarray]:
    """The generated host C program's outputs (compiled with the host compiler)."""
    import tinyc.api as api

    path = tmp / "model.tflite"
    path.write_bytes(model)
    out = tmp / "host"
    api.compile(str(path), out, target="host")
    g = api.load(str(path))
    res = api.run(out, {n: np.asarray(x)[None] for n, x in zip(g.inputs, inputs)})
    return [np.asarray(v)[0] for v in res.values()]


def _same(what: str, got: list[np.ndarray], ref: list[np.ndarray], rtol: float, atol: float) -> None:
    assert len(got) == len(ref), f"{what}: {len(got)} outputs, TFLite Micro gives {len(ref)}"
    for k, (a, b) in enumerate(zip(got, ref)):
        a = np.asarray(a).reshape(np.asarray(b).shape)
        if np.asarray(b).dtype.kind in "iub":
            diff = np.abs(a.astype(np.int64) - np.asarray(b).astype(np.int64))
            assert diff.max(initial=0) == 0, (
                f"{what}: output {k} differs from TFLite Micro in {int((diff > 0).sum())} of {diff.size} "
                f"values (max {int(diff.max())})"
            )
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{what}: output {k}")


def check_model(
    model: bytes, inputs: list[np.ndarray], tmp: Path | None = None, c: bool = False, rtol: float = 1e-5, atol: float = 1e-5
) -> list[np.ndarray]:
    """Assert tinyc (golden, and host C when `c` and `tmp` are given) equals TFLite Micro; returns TFLite Micro's outputs."""
    ref = tflm_run(model, inputs)
    _same("golden model", golden(model, inputs), ref, rtol, atol)
    if c:
        assert tmp is not None
        _same("host C", host_c(model, inputs, tmp), ref, rtol, atol)
    return ref


def random_int8(shape: Any, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(-128, 128, size=shape, dtype=np.int64).astype(np.int8)
