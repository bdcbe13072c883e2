"""LOG_SOFTMAX from .tflite against TFLite Micro: int8 bit-exact (TflmLogSoftmax), float32 close."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("tflite_micro")

from tests.tflite_check import check_model  # noqa: E402
from tests.tflite_models import T, single_op  # noqa: E402
from tinyc.errors import UnsupportedError  # noqa: E402
from tinyc.frontend.tflite import import_tflite  # noqa: E402
from tinyc.ops.tflm_log_softmax import log_softmax_params  # noqa: E402

OUT_GRID = (16.0 / 256.0, 127)


def model(shape: tuple[int, ...], grid: tuple[float, int], out_grid: tuple[float, int] = OUT_GRID) -> bytes:
    x = T("x", shape, "int8", scale=grid[0], zero_point=grid[1])
    y = T("y", shape, "int8", scale=out_grid[0], zero_point=out_grid[1])
    return single_op("LOG_SOFTMAX", [x], [y])


def rows(shape: tuple[int, ...], seed: int, spread: int) -> np.ndarray:
    """Random int8 rows of values within `spread` of a random row maximum (so exps neither all vanish nor all tie)."""
    rng = np.random.default_rng(seed)
    n = shape[-1]
    flat = rng.integers(-128, 128, size=(int(np.prod(shape[:-1], dtype=np.int64)), 1))
    x = flat - rng.integers(0, spread + 1, size=(flat.shape[0], n))
    return np.clip(x, -128, 127).astype(np.int8).reshape(shape)


# (shape, input grid, spread of values below the row maximum, host C)
CASES = [
    ((60, 1), (0.1, 0), 255, False),
    ((40, 2), (0.5, -128), 255, False),
    ((30, 10), (0.01, 127), 255, True),
    ((25, 10), (0.05, -7), 40, False),
    ((12, 100), (0.2, 3), 255, False),
    ((10, 100), (0.03, -100), 255, True),
    ((6, 1000), (0.25, 50), 255, False),
    ((2, 3, 1000), (0.013, -60), 255, False),
    ((20, 4, 10), (0.37, 100), 20, False),
]


@pytest.mark.parametrize("shape,grid,spread,c", CASES, ids=[f"{s}-{g[0]}-{g[1]}" for s, g, _, _ in CASES])
def test_log_softmax_int8(
    shape: tuple[int, ...], grid: tuple[float, int], spread: int, c: bool, tmp_path: Path
) -> None:
    check_model(model(shape, grid), [rows(shape, sum(shape) + grid[1] + 128, spread)], tmp_path, c=c)


@pytest.mark.parametrize("scale", [0.5, 0.3, 0.1])
def test_log_softmax_int8_diff_min(scale: float, tmp_path: Path) -> None:
    """Rows whose differences sit around diff_min (the exp cut-off) and -255, with several maxima."""
    diff_min = log_softmax_params(scale)[4]
    assert diff_min > -255
    base = [0, 0, diff_min, diff_min + 1, diff_min - 1, -255, -1, diff_min + 2]
    x = np.array([np.roll(np.asarray(base) + top, k) for k, top in enumerate(range(127, 127 - 8 * 16, -16))])
    x = np.clip(x, -128, 127).astype(np.int8)
    check_model(model(x.shape, (scale, 0)), [x], tmp_path, c=scale == 0.5)


def test_log_softmax_int8_extremes(tmp_path: Path) -> None:
    """Constant rows, one-hot rows and the full int8 range in one row."""
    x = np.stack(
        [
            np.full(256, -128),
            np.full(256, 127),
            np.where(np.arange(256) == 7, 127, -128),
            np.arange(-128, 128),
            np.arange(127, -129, -1),
        ]
    ).astype(np.int8)
    check_model(model(x.shape, (0.07, -20)), [x], tmp_path)


def test_log_softmax_float(tmp_path: Path) -> None:
    x, y = T("x", (3, 2, 10), "float32"), T("y", (3, 2, 10), "float32")
    data = np.random.default_rng(0).uniform(-8, 8, (3, 2, 10)).astype(np.float32)
    check_model(single_op("LOG_SOFTMAX", [x], [y]), [data], tmp_path, c=True, atol=1e-4)


@pytest.mark.parametrize(
    "out_grid,match", [((1 / 256, -128), "16/256 and zero point 127"), ((16 / 256, 0), "16/256 and zero point 127")]
)
def test_log_softmax_int8_wrong_output_grid_refused(out_grid: tuple[float, int], match: str) -> None:
    with pytest.raises(UnsupportedError, match=match):
        import_tflite(model((2, 5), (0.1, 0), out_grid))


def test_log_softmax_int8_tiny_scale_refused() -> None:
    with pytest.raises(UnsupportedError, match="too small"):
        import_tflite(model((2, 5), (1e-9, 0)))
