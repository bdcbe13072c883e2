"""TFLite shape, data-movement and reduction builtins (tinyc/frontend/tflite/ops_shape.py) against TFLite Micro.

Each case builds a one-operator model with tests/tflite_models.py (no TensorFlow), runs it in TFLite Micro's
interpreter and checks tinyc's golden model (and, for one case per builtin, the generated host C): int8 bit for
bit, float32 to tolerance. The int8 MEAN / SUM cases cover both of TFLite Micro's paths (equal grids: truncating
integer mean; differing grids: the requantized sum with 1/n folded into the multiplier).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("tflite_micro")

from tests.tflite_check import check_model, random_int8  # noqa: E402
from tests.tflite_models import T, single_op  # noqa: E402

from tinyc.errors import UnsupportedError  # noqa: E402
from tinyc.frontend.tflite import import_tflite  # noqa: E402

DTYPES = ("int8", "float32")
GRID = (0.05, 3)


def act(name: str, shape: tuple[int, ...], dtype: str, grid: tuple[float, int] = GRID) -> T:
    """An activation tensor: int8 on `grid`, or float32."""
    if dtype == "int8":
        return T(name, shape, "int8", scale=grid[0], zero_point=grid[1])
    return T(name, shape, dtype)


def const(name: str, values: Any, dtype: str = "int32") -> T:
    arr = np.asarray(values)
    return T(name, arr.shape, dtype, data=arr)


def data(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "int8":
        return random_int8(shape, rng)
    return rng.uniform(-2, 2, shape).astype(np.float32)


def check(model: bytes, inputs: list[np.ndarray], tmp: Path, c: bool = False, atol: float = 1e-5) -> None:
    check_model(model, inputs, tmp, c=c, atol=atol)


def one_in(
    code: str, shape: tuple[int, ...], out_shape: tuple[int, ...], dtype: str, tmp: Path, options: Any = None,
    consts: tuple[T, ...] = (), c: bool = False, out_dtype: str | None = None, out_grid: tuple[float, int] = GRID,
) -> None:
    """A model with one data input x, constant inputs `consts` and one output y."""
    x = act("x", shape, dtype)
    y_dtype = out_dtype or dtype
    y = act("y", out_shape, y_dtype, out_grid) if y_dtype in DTYPES else T("y", out_shape, y_dtype)
    check(single_op(code, [x], [y], options, consts=list(consts)), [data(shape, dtype)], tmp, c)


# -- reshapes -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_squeeze(dtype: str, tmp_path: Path) -> None:
    one_in("SQUEEZE", (1, 3, 1, 4), (3, 4), dtype, tmp_path, {"squeeze_dims": [0, 2]}, c=dtype == "int8")


@pytest.mark.parametrize("dtype", DTYPES)
def test_expand_dims(dtype: str, tmp_path: Path) -> None:
    one_in("EXPAND_DIMS", (3, 4), (3, 1, 4), dtype, tmp_path, {}, (const("axis", [1]),), c=dtype == "int8")


@pytest.mark.parametrize(("dtype", "perm"), [("int8", [0, 3, 1, 2]), ("int8", [2, 0, 3, 1]), ("float32", [3, 2, 1, 0])])
def test_transpose(dtype: str, perm: list[int], tmp_path: Path) -> None:
    shape = (2, 3, 4, 5)
    one_in("TRANSPOSE", shape, tuple(shape[p] for p in perm), dtype, tmp_path, None, (const("perm", perm),),
           c=perm == [0, 3, 1, 2])


@pytest.mark.parametrize(("dtype", "code", "shape", "out"), [
    ("int8", "DEPTH_TO_SPACE", (1, 2, 3, 8), (1, 4, 6, 2)),
    ("float32", "DEPTH_TO_SPACE", (2, 2, 2, 9), (2, 6, 6, 1)),
    ("int8", "SPACE_TO_DEPTH", (1, 4, 6, 3), (1, 2, 3, 12)),
    ("float32", "SPACE_TO_DEPTH", (2, 6, 3, 2), (2, 2, 1, 18)),
])
def test_space_depth(dtype: str, code: str, shape: tuple[int, ...], out: tuple[int, ...], tmp_path: Path) -> None:
    bs = 3 if 9 in shape or 18 in out else 2
    one_in(code, shape, out, dtype, tmp_path, {"block_size": bs}, c=dtype == "int8" and code == "DEPTH_TO_SPACE")


# -- concatenation, pack, unpack, split -----------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "axis"), [("int8", 3), ("int8", -3), ("float32", 1)])
def test_concatenation(dtype: str, axis: int, tmp_path: Path) -> None:
    shapes = [(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)]
    ins = [act(f"x{i}", s, dtype) for i, s in enumerate(shapes)]
    out = list(shapes[0])
    out[axis] *= 3
    model = single_op("CONCATENATION", ins, [act("y", tuple(out), dtype)], {"axis": axis})  # type: ignore[arg-type]
    check(model, [data(s, dtype, i) for i, s in enumerate(shapes)], tmp_path, c=axis == 3)


def test_concatenation_refuses_mixed_grids(tmp_path: Path) -> None:
    ins = [act("a", (1, 4), "int8"), act("b", (1, 4), "int8", (0.1, 0))]
    model = single_op("CONCATENATION", ins, [act("y", (1, 8), "int8")], {"axis": 1})  # type: ignore[arg-type]
    with pytest.raises(UnsupportedError, match="without rescaling"):
        import_tflite(model)


@pytest.mark.parametrize(("dtype", "axis"), [("int8", 0), ("int8", -1), ("float32", 1)])
def test_pack(dtype: str, axis: int, tmp_path: Path) -> None:
    shape = (2, 3)
    out = list(shape)
    out.insert(axis % 3 if axis >= 0 else len(shape) + 1 + axis, 2)
    ins = [act("a", shape, dtype), act("b", shape, dtype)]
    y = act("y", tuple(out), dtype)
    model = single_op("PACK", ins, [y], {"axis": axis, "values_count": 2})  # type: ignore[arg-type]
    check(model, [data(shape, dtype, 0), data(shape, dtype, 1)], tmp_path, c=axis == 0)


@pytest.mark.parametrize(("dtype", "axis"), [("int8", 1), ("float32", 0)])
def test_unpack(dtype: str, axis: int, tmp_path: Path) -> None:
    shape = (2, 3, 4)
    n = shape[axis]
    rest = tuple(d for a, d in enumerate(shape) if a != axis)
    outs = [act(f"y{j}", rest, dtype) for j in range(n)]
    model = single_op("UNPACK", [act("x", shape, dtype)], outs, {"num": n, "axis": axis})
    check(model, [data(shape, dtype)], tmp_path, c=dtype == "int8")


@pytest.mark.parametrize(("dtype", "axis"), [("int8", 2), ("float32", -1)])
def test_split(dtype: str, axis: int, tmp_path: Path) -> None:
    shape = (2, 3, 6)
    outs = [act(f"y{j}", (2, 3, 2), dtype) for j in range(3)]
    model = single_op("SPLIT", [const("axis", [axis]), act("x", shape, dtype)], outs, {"num_splits": 3})
    check(model, [data(shape, dtype)], tmp_path, c=dtype == "int8")


@pytest.mark.parametrize(("dtype", "sizes"), [("int8", [1, -1, 2]), ("float32", [3, 2, 2])])
def test_split_v(dtype: str, sizes: list[int], tmp_path: Path) -> None:
    shape = (2, 7, 3)
    real = [s if s >= 0 else 7 - sum(v for v in sizes if v >= 0) for s in sizes]
    outs = [act(f"y{j}", (2, s, 3), dtype) for j, s in enumerate(real)]
    ins = [act("x", shape, dtype), const("sizes", sizes), const("axis", [1])]
    model = single_op("SPLIT_V", ins, outs, {"num_splits": 3})
    check(model, [data(shape, dtype)], tmp_path, c=dtype == "int8")


# -- pad -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_pad(dtype: str, tmp_path: Path) -> None:
    pads = [[0, 0], [1, 2], [2, 0], [0, 1]]
    one_in("PAD", (1, 3, 3, 2), (1, 6, 5, 3), dtype, tmp_path, None, (const("pads", pads),), c=dtype == "int8")


@pytest.mark.parametrize("dtype", DTYPES)
def test_padv2(dtype: str, tmp_path: Path) -> None:
    pads = np.array([[1, 1], [0, 2], [1, 0]], np.int32)
    value = const("v", [-77], "int8") if dtype == "int8" else const("v", [1.5], "float32")
    if dtype == "int8":
        value.scale, value.zero_point = GRID
    x = act("x", (2, 3, 2), dtype)
    model = single_op("PADV2", [x], [act("y", (4, 5, 3), dtype)], None, consts=[const("pads", pads), value])
    check(model, [data((2, 3, 2), dtype)], tmp_path, c=dtype == "int8")


@pytest.mark.parametrize(("dtype", "mode"), [("int8", "REFLECT"), ("int8", "SYMMETRIC"), ("float32", "SYMMETRIC")])
def test_mirror_pad(dtype: str, mode: str, tmp_path: Path) -> None:
    pads = [[0, 0], [2, 1], [1, 3 if mode == "SYMMETRIC" else 2], [0, 0]]
    w = 7 if mode == "SYMMETRIC" else 6
    one_in("MIRROR_PAD", (1, 3, 3, 2), (1, 6, w, 2), dtype, tmp_path, {"mode": mode}, (const("pads", pads),),
           c=mode == "REFLECT")


# -- slicing, gathering ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_slice(dtype: str, tmp_path: Path) -> None:
    one_in("SLICE", (2, 5, 6), (1, 3, 4), dtype, tmp_path, None, (const("b", [1, 1, 2]), const("s", [-1, 3, -1])),
           c=dtype == "int8")


@pytest.mark.parametrize(("dtype", "begin", "end", "strides", "opts", "out"), [
    ("int8", [0, 1, 0], [2, 5, 6], [1, 2, 1], {}, (2, 2, 6)),
    ("int8", [0, -1, 5], [0, 0, 0], [1, -1, -2], {"begin_mask": 1, "end_mask": 7}, (2, 5, 3)),
    ("int8", [1, 2, 0], [2, 3, 6], [1, 1, 1], {"shrink_axis_mask": 3}, (6,)),
    ("int8", [1, -2, 0], [0, 100, 6], [1, 1, 3], {"end_mask": 1}, (1, 2, 2)),
    ("float32", [-10, 4, -1], [10, 0, -7], [1, -1, -1], {"shrink_axis_mask": 1}, (4, 6)),
])
def test_strided_slice(dtype: str, begin: list[int], end: list[int], strides: list[int], opts: dict[str, int],
                       out: tuple[int, ...], tmp_path: Path) -> None:
    consts = (const("b", begin), const("e", end), const("s", strides))
    one_in("STRIDED_SLICE", (2, 5, 6), out, dtype, tmp_path, opts, consts, c=opts == {})


@pytest.mark.parametrize(("dtype", "axis", "ind"), [("int8", 1, [[2, 0], [1, 1]]), ("float32", 0, [1, 0, 1]),
                                                     ("int8", -1, [3])])
def test_gather(dtype: str, axis: int, ind: list[Any], tmp_path: Path) -> None:
    shape = (2, 3, 4)
    ax = axis % 3
    idx = np.asarray(ind)
    out = (*shape[:ax], *idx.shape, *shape[ax + 1 :])
    one_in("GATHER", shape, out, dtype, tmp_path, {"axis": axis}, (const("i", idx),), c=axis == 1)


def test_gather_runtime_indices(tmp_path: Path) -> None:
    x, i = act("x", (5, 3), "int8"), T("i", (4,), "int32")
    model = single_op("GATHER", [x, i], [act("y", (4, 3), "int8")], {"axis": 0})
    check(model, [data((5, 3), "int8"), np.array([4, 0, 2, 2], np.int32)], tmp_path, c=True)


@pytest.mark.parametrize(("dtype", "size", "align", "half"), [
    ("int8", (6, 9), False, False), ("int8", (5, 7), True, False), ("int8", (7, 4), False, True),
    ("float32", (2, 8), False, True), ("float32", (9, 3), True, False),
])
def test_resize_nearest(dtype: str, size: tuple[int, int], align: bool, half: bool, tmp_path: Path) -> None:
    opts = {"align_corners": align, "half_pixel_centers": half}
    one_in("RESIZE_NEAREST_NEIGHBOR", (1, 3, 4, 2), (1, *size, 2), dtype, tmp_path, opts, (const("size", list(size)),),
           c=size == (6, 9))


# -- arg min/max, reductions -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "code", "axis", "out_dtype"), [
    ("int8", "ARG_MAX", 2, "int32"), ("int8", "ARG_MIN", 0, "int32"), ("float32", "ARG_MAX", -1, "int32"),
    ("float32", "ARG_MIN", 1, "int32"),
])
def test_arg_min_max(dtype: str, code: str, axis: int, out_dtype: str, tmp_path: Path) -> None:
    shape = (3, 4, 5)
    out = tuple(d for a, d in enumerate(shape) if a != axis % 3)
    x = act("x", shape, dtype)
    y = T("y", out, out_dtype)
    model = single_op(code, [x], [y], {"output_type": out_dtype.upper()}, consts=[const("a", [axis])])
    inp = data(shape, dtype)
    if dtype == "int8":
        inp = (inp // 64).astype(np.int8)  # many ties: the first index wins in TFLite Micro
    check(model, [inp], tmp_path, c=code == "ARG_MAX" and dtype == "int8")


@pytest.mark.parametrize(("dtype", "axes", "keep"), [("int8", [1, 2], True), ("int8", [-1], False),
                                                     ("float32", [0, 2], False)])
def test_reduce_max(dtype: str, axes: list[int], keep: bool, tmp_path: Path) -> None:
    shape = (2, 3, 4)
    red = {a % 3 for a in axes}
    out = tuple(1 if a in red else d for a, d in enumerate(shape) if keep or a not in red)
    one_in("REDUCE_MAX", shape, out, dtype, tmp_path, {"keep_dims": keep}, (const("axes", axes),), c=keep)


@pytest.mark.parametrize(("code", "dtype", "axes", "keep", "out_grid"), [
    ("MEAN", "int8", [1, 2], True, GRID),          # equal grids: still requantized (rounded mean)
    ("MEAN", "int8", [0, 2], False, (0.02, -5)),   # requantized, transposed reduction
    ("MEAN", "int8", [3], False, (0.13, 7)),
    ("MEAN", "float32", [1, 2], True, GRID),
    ("SUM", "int8", [1], True, (0.4, -2)),
    ("SUM", "int8", [1, 2, 3], False, GRID),
    ("SUM", "float32", [0, 3], False, GRID),
])
def test_mean_sum(
    code: str, dtype: str, axes: list[int], keep: bool, out_grid: tuple[float, int], tmp_path: Path
) -> None:
    shape = (2, 5, 3, 7)
    red = set(axes)
    out = tuple(1 if a in red else d for a, d in enumerate(shape) if keep or a not in red)
    one_in(code, shape, out, dtype, tmp_path, {"keep_dims": keep}, (const("axes", axes),), out_grid=out_grid,
           c=axes in ([0, 2], [1]))


def test_shape_inputs_must_be_constant() -> None:
    x, perm = act("x", (2, 3), "int8"), T("perm", (2,), "int32")
    model = single_op("TRANSPOSE", [x, perm], [act("y", (3, 2), "int8")])
    with pytest.raises(UnsupportedError, match="perm"):
        import_tflite(model)


# -- batch matmul ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "a_shape", "b_shape", "adj_x", "adj_y"), [
    ("int8", (2, 3, 5), (2, 5, 4), False, False),
    ("int8", (2, 5, 3), (5, 4), True, False),
    ("int8", (1, 3, 5), (2, 4, 5), False, True),
    ("float32", (2, 3, 5), (2, 4, 5), False, True),
    ("float32", (2, 5, 3), (5, 4), True, False),
])
def test_batch_matmul(dtype: str, a_shape: tuple[int, ...], b_shape: tuple[int, ...], adj_x: bool, adj_y: bool,
                      tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    m = a_shape[-1] if adj_x else a_shape[-2]
    n = b_shape[-2] if adj_y else b_shape[-1]
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    a = act("a", a_shape, dtype, (0.04, -3))
    if dtype == "int8":
        b = T("b", b_shape, "int8", data=random_int8(b_shape, rng), scale=0.02, zero_point=5)
    else:
        b = T("b", b_shape, "float32", data=rng.uniform(-1, 1, b_shape).astype(np.float32))
    y = act("y", (*batch, m, n), dtype, (0.1, 2))
    model = single_op("BATCH_MATMUL", [a, b], [y], {"adj_x": adj_x, "adj_y": adj_y})
    check(model, [data(a_shape, dtype)], tmp_path, c=not adj_x and not adj_y, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_matmul_runtime_rhs(dtype: str, tmp_path: Path) -> None:
    a, b = act("a", (2, 3, 4), dtype, (0.04, -3)), act("b", (2, 4, 5), dtype, (0.03, 1))
    model = single_op("BATCH_MATMUL", [a, b], [act("y", (2, 3, 5), dtype, (0.1, 2))], {"adj_x": False})
    if dtype == "int8":
        with pytest.raises(UnsupportedError, match="non-constant rhs"):
            import_tflite(model)
    else:
        check(model, [data((2, 3, 4), dtype, 1), data((2, 4, 5), dtype, 2)], tmp_path, c=True, atol=1e-4)


# -- transpose conv --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "padding", "stride", "out_hw", "per_channel", "fused"), [
    ("int8", "SAME", 2, (8, 10), True, "NONE"),
    ("int8", "VALID", 2, (9, 11), False, "RELU"),
    ("int8", "SAME", 1, (4, 5), True, "RELU6"),
    ("int8", "VALID", 3, (12, 15), True, "NONE"),
    ("float32", "SAME", 2, (8, 10), False, "NONE"),
    ("float32", "VALID", 2, (9, 11), False, "NONE"),
])
def test_transpose_conv(dtype: str, padding: str, stride: int, out_hw: tuple[int, int], per_channel: bool, fused: str,
                        tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    ic, oc, k = 3, 4, 3
    x = act("x", (1, 4, 5, ic), dtype, (0.05, -7))
    y = act("y", (1, *out_hw, oc), dtype, (0.2, 4))
    shape = const("shape", [1, *out_hw, oc])
    if dtype == "int8":
        s_w = rng.uniform(0.005, 0.02, oc) if per_channel else 0.01
        w = T("w", (oc, k, k, ic), "int8", data=random_int8((oc, k, k, ic), rng), scale=s_w,
              zero_point=[0] * oc if per_channel else 0, quantized_dimension=0)
        bias = T("b", (oc,), "int32", data=rng.integers(-500, 500, oc), scale=0.05 * np.asarray(s_w) * np.ones(oc),
                 zero_point=[0] * oc)
    else:
        w = T("w", (oc, k, k, ic), "float32", data=rng.uniform(-1, 1, (oc, k, k, ic)).astype(np.float32))
        bias = T("b", (oc,), "float32", data=rng.uniform(-1, 1, oc).astype(np.float32))
    opts = {"padding": padding, "stride_h": stride, "stride_w": stride, "fused_activation_function": fused}
    model = single_op("TRANSPOSE_CONV", [shape, w, x, bias], [y], opts)
    check(model, [data((1, 4, 5, ic), dtype)], tmp_path, c=padding == "SAME" and stride == 2, atol=1e-4)


# -- bilinear resize -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "size", "align", "half"), [
    ("int8", (6, 9), False, False), ("int8", (5, 7), True, False), ("int8", (7, 3), False, True),
    ("int8", (2, 2), False, True), ("float32", (6, 9), False, False), ("float32", (5, 7), True, False),
    ("float32", (7, 3), False, True),
])
def test_resize_bilinear(dtype: str, size: tuple[int, int], align: bool, half: bool, tmp_path: Path) -> None:
    opts = {"align_corners": align, "half_pixel_centers": half}
    one_in("RESIZE_BILINEAR", (2, 3, 4, 3), (2, *size, 3), dtype, tmp_path, opts, (const("size", list(size)),),
           c=size in ((6, 9), (7, 3)))


# -- L2 normalization ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "shape", "zp", "scale"), [
    ("int8", (3, 4, 16), 0, 0.05), ("int8", (2, 7), -9, 0.5), ("int8", (5, 300), 4, 0.02),
    ("float32", (3, 4, 16), 0, 1.0),
])
def test_l2_normalization(dtype: str, shape: tuple[int, ...], zp: int, scale: float, tmp_path: Path) -> None:
    x = act("x", shape, dtype, (scale, zp))
    y = act("y", shape, dtype, (1 / 128, 0))
    model = single_op("L2_NORMALIZATION", [x], [y], {"fused_activation_function": "NONE"})
    inp = data(shape, dtype)
    if dtype == "int8":
        inp[0] = zp  # a row of zeros: acc = 0 takes TFLite's (INT32_MAX, 0) branch
        inp[1, ..., 0] = np.int8(zp + 1)
        inp[1, ..., 1:] = zp
    check(model, [inp], tmp_path, c=shape[-1] in (16, 7))


# -- log softmax -----------------------------------------------------------------------------------------------------
def test_log_softmax_float(tmp_path: Path) -> None:
    x, y = act("x", (3, 2, 10), "float32"), act("y", (3, 2, 10), "float32")
    check(single_op("LOG_SOFTMAX", [x], [y]), [data((3, 2, 10), "float32") * 4], tmp_path, c=True, atol=1e-4)


def test_log_softmax_int8(tmp_path: Path) -> None:
    """int8 LOG_SOFTMAX (once refused) now equals TFLite Micro; tests/test_tflite_log_softmax.py has the rest."""
    model = single_op("LOG_SOFTMAX", [act("x", (2, 5), "int8")], [act("y", (2, 5), "int8", (16 / 256, 127))])
    check(model, [data((2, 5), "int8")], tmp_path)
