"""UNIDIRECTIONAL_SEQUENCE_LSTM and SVDF (int8) against TFLite Micro, bit for bit, and their state
semantics: reset at every inference by default, kept across inferences with set_keep_state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tflite_micro")

from tests.tflite_check import check_model, golden, random_int8  # noqa: E402
from tests.tflite_models import T, single_op, tflm_run  # noqa: E402
from tinyc.errors import UnsupportedError  # noqa: E402

GATES = ("input", "forget", "cell", "output")


def lstm_model(
    seed: int,
    batch: int,
    steps: int,
    n_in: int,
    n_cell: int,
    time_major: bool = False,
    x_zp: int = 0,
    h_zp: int = 0,
    cell_power: int = -11,
    cell_clip: float = 0.0,
    s_w: float = 0.02,
    extra: dict[int, T] | None = None,
) -> tuple[bytes, tuple[int, ...]]:
    """An int8 LSTM in TFLite Micro's form (24 inputs, int16 cell state, int32 biases, variable
    states without data); `extra` fills optional inputs by index (to test refusals)."""
    r = np.random.default_rng(seed)
    s_in, s_h = 0.05, 1 / 128
    shape = (steps, batch, n_in) if time_major else (batch, steps, n_in)
    x = T("x", shape, scale=s_in, zero_point=x_zp)

    def weights(name: str, cols: int, scale: float) -> T:
        return T(name, (n_cell, cols), data=r.integers(-127, 128, (n_cell, cols)), scale=scale)

    s_in_w = s_w * r.uniform(0.5, 1.5, 4)  # a weight scale of its own per gate
    w_in = [weights(f"input_to_{g}", n_in, float(sw)) for g, sw in zip(GATES, s_in_w)]
    w_rec = [weights(f"recurrent_to_{g}", n_cell, s_w * float(r.uniform(0.5, 1.5))) for g in GATES]
    biases = [
        T(f"{g}_bias", (n_cell,), "int32", data=r.integers(-3000, 3000, n_cell), scale=s_in * float(sw))
        for g, sw in zip(GATES, s_in_w)
    ]
    h_state = T("output_state", (batch, n_cell), scale=s_h, zero_point=h_zp, variable=True)
    c_state = T("cell_state", (batch, n_cell), "int16", scale=2.0**cell_power, zero_point=0, variable=True)
    y = T("y", (*shape[:2], n_cell), scale=s_h, zero_point=h_zp)
    inputs: list[T | None] = [x, *w_in, *w_rec, None, None, None, *biases, None, None, h_state, c_state]
    inputs += [None] * 4
    for i, t in (extra or {}).items():
        inputs[i] = t
    opts = {"fused_activation_function": "TANH", "cell_clip": cell_clip, "proj_clip": 0.0, "time_major": time_major}
    return single_op("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [y], opts), shape


def svdf_model(
    seed: int, batch: int, n_in: int, units: int, rank: int, memory: int, state_dtype: str = "int16", x_zp: int = 0,
    y_zp: int = 0, activation: str = "NONE", state_zp: int = 0,
) -> tuple[bytes, tuple[int, ...]]:
    """An int8 SVDF in TFLite Micro's form (int16 or int8 weights_time and state, int32 bias)."""
    r = np.random.default_rng(seed)
    filters = units * rank
    s_in, s_wf, s_out = 0.05, 0.01, 0.05
    s_wt, s_st = (2.0**-10, 2.0**-8) if state_dtype == "int16" else (0.01, 0.05)
    lim = 1000 if state_dtype == "int16" else 127
    x = T("x", (batch, n_in), scale=s_in, zero_point=x_zp)
    wf = T("weights_feature", (filters, n_in), data=r.integers(-127, 128, (filters, n_in)), scale=s_wf)
    wt_data = r.integers(-lim, lim + 1, (filters, memory))
    wt = T("weights_time", (filters, memory), state_dtype, data=wt_data, scale=s_wt)
    bias = T("bias", (units,), "int32", data=r.integers(-2000, 2000, units), scale=s_st * s_wt)
    state_shape = (batch, memory * filters)
    state = T("activation_state", state_shape, state_dtype, scale=s_st, zero_point=state_zp, variable=True)
    y = T("y", (batch, units), scale=s_out, zero_point=y_zp)
    opts = {"rank": rank, "fused_activation_function": activation}
    return single_op("SVDF", [x, wf, wt, bias, state], [y], opts), (batch, n_in)


# ---------------------------------------------------------------------------------------------------------------
# LSTM


@pytest.mark.parametrize(
    "batch, steps, time_major, x_zp, h_zp, cell_power, clip",
    [
        (1, 5, False, 0, 0, -11, 0.0),
        (2, 4, False, 3, -5, -11, 0.0),
        (3, 3, True, -7, 2, -12, 0.0),
        (2, 6, True, 0, 0, -10, 1.5),
        (2, 3, False, 0, 0, -15, 0.0),
    ],
)
def test_int8_lstm_golden(
    batch: int, steps: int, time_major: bool, x_zp: int, h_zp: int, cell_power: int, clip: float
) -> None:
    model, shape = lstm_model(batch * 10 + steps, batch, steps, 6, 5, time_major, x_zp, h_zp, cell_power, clip)
    rng = np.random.default_rng(1)
    for _ in range(3):
        check_model(model, [random_int8(shape, rng)])


def test_int8_lstm_saturating_gates() -> None:
    """Large weights drive the gates into the table's saturated ends and the int16 clamps."""
    model, shape = lstm_model(5, 2, 4, 8, 6, s_w=0.2)
    check_model(model, [random_int8(shape, np.random.default_rng(2))])


@pytest.mark.parametrize("time_major", [False, True])
def test_int8_lstm_host_c(time_major: bool, tmp_path: Path) -> None:
    model, shape = lstm_model(7, 2, 4, 5, 7, time_major, x_zp=2, h_zp=-3)
    check_model(model, [random_int8(shape, np.random.default_rng(3))], tmp_path, c=True)


@pytest.mark.parametrize(
    "index, what",
    [(9, "peephole"), (16, "projection"), (20, "layer normalization")],
)
def test_int8_lstm_variants_refused(index: int, what: str) -> None:
    dtype = "int16" if index in (9, 20) else "int8"
    extra = T("extra", (5,) if index != 16 else (5, 5), dtype, data=np.ones(5 if index != 16 else 25), scale=0.01)
    model, shape = lstm_model(1, 1, 2, 4, 5, extra={index: extra})
    with pytest.raises(UnsupportedError, match=what):
        golden(model, [np.zeros(shape, np.int8)])


# ---------------------------------------------------------------------------------------------------------------
# SVDF


@pytest.mark.parametrize(
    "batch, rank, memory, state_dtype, x_zp, y_zp, state_zp",
    [
        (1, 1, 4, "int16", 0, 0, 0),
        (2, 2, 5, "int16", 4, -3, 0),
        (3, 1, 3, "int8", -2, 5, 0),
        (2, 2, 8, "int8", 0, 0, 6),
    ],
)
def test_int8_svdf_golden(
    batch: int, rank: int, memory: int, state_dtype: str, x_zp: int, y_zp: int, state_zp: int
) -> None:
    """Reset state: int8 states start at their zero point (TFLite Micro's reset), int16 at 0."""
    model, shape = svdf_model(batch + rank, batch, 7, 3, rank, memory, state_dtype, x_zp, y_zp, state_zp=state_zp)
    rng = np.random.default_rng(4)
    for _ in range(3):
        check_model(model, [random_int8(shape, rng)])


def test_int8_svdf_fused_activation_ignored_as_tflm() -> None:
    """TFLite Micro's integer SVDF applies no fused activation; tinyc computes the same integers."""
    model, shape = svdf_model(9, 2, 6, 4, 2, 4, activation="RELU")
    check_model(model, [random_int8(shape, np.random.default_rng(5))])


@pytest.mark.parametrize("rank, state_dtype", [(1, "int16"), (2, "int8")])
def test_int8_svdf_host_c(rank: int, state_dtype: str, tmp_path: Path) -> None:
    model, shape = svdf_model(11, 2, 6, 4, rank, 5, state_dtype, x_zp=1, y_zp=2)
    check_model(model, [random_int8(shape, np.random.default_rng(6))], tmp_path, c=True)


# ---------------------------------------------------------------------------------------------------------------
# state semantics: reset per inference (default) and kept across inferences (set_keep_state)


def _tflm_stream(model: bytes, frames: list[np.ndarray]) -> list[np.ndarray]:
    """TFLite Micro invoked once per frame without reset: its states carry over."""
    from tflite_micro.python.tflite_micro import runtime

    interp = runtime.Interpreter.from_bytes(model, arena_size=1 << 20)
    outs = []
    for f in frames:
        interp.set_input(np.ascontiguousarray(f), 0)
        interp.invoke()
        outs.append(np.array(interp.get_output(0), copy=True))
    return outs


def _host(model: bytes, frames: list[np.ndarray], tmp: Path, keep: bool) -> np.ndarray:
    """The generated host C run on the frames in order, in one loaded library."""
    import tinyc.api as api
    from tinyc.ops.state import set_keep_state

    path = tmp / "model.tflite"
    path.write_bytes(model)
    g = api.load(str(path))
    assert set_keep_state(g, keep) == 1
    out = tmp / ("keep" if keep else "reset")
    api.compile(g, out, target="host")
    res = api.run(out, {g.inputs[0]: np.stack(frames)})
    return np.asarray(next(iter(res.values())))


def _golden_stream(model: bytes, frames: list[np.ndarray], keep: bool) -> list[np.ndarray]:
    from tinyc.frontend.tflite import import_tflite
    from tinyc.ops.state import set_keep_state
    from tinyc.passes import run_passes
    from tinyc.reference.executor import run_graph

    g = import_tflite(model)
    run_passes(g, io_layout="onnx", int8=None)
    set_keep_state(g, keep)
    return [np.asarray(run_graph(g, {g.inputs[0]: f})[g.outputs[0]]) for f in frames]


@pytest.mark.parametrize("op", ["lstm", "svdf", "svdf_int8_state"])
def test_state_reset_and_keep(op: str, tmp_path: Path) -> None:
    """Three frames a, b, a: with reset semantics (default) both a's give the same output, TFLite
    Micro's from a fresh interpreter; with keep_state the outputs follow TFLite Micro invoked three
    times without reset (host C, one loaded library, and the golden model)."""
    if op == "lstm":
        model, shape = lstm_model(21, 2, 3, 4, 5, h_zp=-4)
    elif op == "svdf":
        model, shape = svdf_model(22, 2, 5, 3, 2, 4)
    else:
        model, shape = svdf_model(23, 2, 5, 3, 1, 3, "int8", state_zp=-5)
    rng = np.random.default_rng(7)
    a, b = random_int8(shape, rng), random_int8(shape, rng)
    frames = [a, b, a]
    fresh = [tflm_run(model, [f])[0] for f in frames]
    stream = _tflm_stream(model, frames)
    assert not np.array_equal(stream[2], fresh[2]), "the test needs the state to matter"

    # reset semantics: the same input gives the same output, TFLite Micro's after reset()
    reset_c = _host(model, frames, tmp_path, keep=False)
    reset_g = _golden_stream(model, frames, keep=False)
    np.testing.assert_array_equal(reset_c[0], reset_c[2])
    for k in range(3):
        np.testing.assert_array_equal(reset_c[k], fresh[k])
        np.testing.assert_array_equal(reset_g[k], fresh[k])

    # keep_state: TFLite Micro's stream without reset
    keep_c = _host(model, frames, tmp_path, keep=True)
    keep_g = _golden_stream(model, frames, keep=True)
    for k in range(3):
        np.testing.assert_array_equal(keep_c[k], stream[k])
        np.testing.assert_array_equal(keep_g[k], stream[k])


# ---------------------------------------------------------------------------------------------------------------
# float32


def lstm_model_f32(
    seed: int, batch: int, steps: int, n_in: int, n_cell: int, time_major: bool, clip: float
) -> tuple[bytes, tuple[int, ...]]:
    r = np.random.default_rng(seed)
    shape = (steps, batch, n_in) if time_major else (batch, steps, n_in)

    def const(name: str, shp: tuple[int, ...], scale: float) -> T:
        return T(name, shp, "float32", data=r.normal(0, scale, shp))

    w_in = [const(f"input_to_{g}", (n_cell, n_in), 0.6) for g in GATES]
    w_rec = [const(f"recurrent_to_{g}", (n_cell, n_cell), 0.6) for g in GATES]
    biases = [const(f"{g}_bias", (n_cell,), 0.3) for g in GATES]
    h = T("output_state", (batch, n_cell), "float32", variable=True)
    c = T("cell_state", (batch, n_cell), "float32", variable=True)
    y = T("y", (*shape[:2], n_cell), "float32")
    inputs: list[T | None] = [T("x", shape, "float32"), *w_in, *w_rec, None, None, None, *biases, None, None, h, c]
    inputs += [None] * 4
    opts = {"fused_activation_function": "TANH", "cell_clip": clip, "proj_clip": 0.0, "time_major": time_major}
    return single_op("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [y], opts), shape


def svdf_model_f32(
    seed: int, batch: int, n_in: int, units: int, rank: int, memory: int, activation: str
) -> tuple[bytes, tuple[int, ...]]:
    r = np.random.default_rng(seed)
    filters = units * rank
    x = T("x", (batch, n_in), "float32")
    wf = T("weights_feature", (filters, n_in), "float32", data=r.normal(0, 0.5, (filters, n_in)))
    wt = T("weights_time", (filters, memory), "float32", data=r.normal(0, 0.5, (filters, memory)))
    bias = T("bias", (units,), "float32", data=r.normal(0, 0.5, units))
    state = T("activation_state", (batch, memory * filters), "float32", variable=True)
    y = T("y", (batch, units), "float32")
    opts = {"rank": rank, "fused_activation_function": activation}
    return single_op("SVDF", [x, wf, wt, bias, state], [y], opts), (batch, n_in)


@pytest.mark.parametrize("time_major, clip, c", [(False, 0.0, True), (True, 0.8, False)])
def test_float32_lstm(time_major: bool, clip: float, c: bool, tmp_path: Path) -> None:
    model, shape = lstm_model_f32(31, 2, 4, 3, 5, time_major, clip)
    x = np.random.default_rng(8).normal(0, 1.5, shape).astype(np.float32)
    check_model(model, [x], tmp_path, c=c)


@pytest.mark.parametrize("rank, activation, c", [(1, "NONE", True), (2, "RELU", False), (2, "TANH", False)])
def test_float32_svdf(rank: int, activation: str, c: bool, tmp_path: Path) -> None:
    model, shape = svdf_model_f32(32, 2, 5, 3, rank, 4, activation)
    x = np.random.default_rng(9).normal(0, 1.0, shape).astype(np.float32)
    check_model(model, [x], tmp_path, c=c)


def test_cli_keep_state_streams_like_tflm_without_reset(tmp_path: Path) -> None:
    """`tinyc compile --keep-state`: the host program carries the SVDF state across the frames of one
    run, as TFLite Micro invoked without reset; a model without a state refuses the flag."""
    import subprocess
    import sys

    import tinyc.api as api

    model, shape = svdf_model(24, 2, 5, 3, 2, 4)
    rng = np.random.default_rng(8)
    frames = [random_int8(shape, rng) for _ in range(3)]
    path = tmp_path / "svdf.tflite"
    path.write_bytes(model)
    out = tmp_path / "keep"
    r = subprocess.run(
        [sys.executable, "-m", "tinyc", "compile", str(path), "-o", str(out), "--keep-state"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    name = api.load(str(path)).inputs[0]
    got = np.asarray(next(iter(api.run(out, {name: np.stack(frames)}).values())))
    want = _tflm_stream(model, frames)
    assert not np.array_equal(want[2], tflm_run(model, [frames[2]])[0]), "the test needs the state to matter"
    for k in range(3):
        assert np.array_equal(got[k].reshape(want[k].shape), want[k])
    x = T("x", (1, 4), "float32")
    plain = tmp_path / "relu.tflite"
    plain.write_bytes(single_op("RELU", [x], [T("y", (1, 4), "float32")]))
    r = subprocess.run(
        [sys.executable, "-m", "tinyc", "compile", str(plain), "-o", str(tmp_path / "p"), "--keep-state"],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "no layer with a state" in r.stderr and "Traceback" not in r.stderr
