"""LayerNormalization/RMSNormalization/LpNormalization/GlobalLpPool, DepthToSpace/SpaceToDepth, GatherElements/
ScatterElements, Trilu, CumSum, Mod, BitShift, IsNaN/IsInf, Range, EyeLike: compiled C and the numpy
reference against onnxruntime (fixed seeds), a sanitizer run, and clear UnsupportedErrors.
Many ops share one model so each build covers many cases."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinyc
import tinyc.reference
from tinyc.errors import UnsupportedError

NP2ONNX = {np.dtype(k): v for k, v in [("float32", TensorProto.FLOAT), ("float64", TensorProto.DOUBLE),
                                       ("int8", TensorProto.INT8), ("uint8", TensorProto.UINT8),
                                       ("int16", TensorProto.INT16), ("uint16", TensorProto.UINT16),
                                       ("int32", TensorProto.INT32), ("uint32", TensorProto.UINT32),
                                       ("int64", TensorProto.INT64), ("uint64", TensorProto.UINT64),
                                       ("bool", TensorProto.BOOL)]}
n = helper.make_node


def _c(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], outputs: list[str],
           inits: list[onnx.TensorProto] = (), opset: int = 18) -> onnx.ModelProto:
    from util import inferred_model
    return inferred_model(nodes, inputs, outputs, inits, opset=opset, ir_version=10, name="t")


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    res = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return dict(zip([o.name for o in model.graph.output], res))


def _compare(got: dict[str, np.ndarray], exp: dict[str, np.ndarray], what: str, tol: float = 1e-5) -> None:
    for name, e in exp.items():
        g = got[name]
        assert g.shape == e.shape, f"{name} ({what}): shape {g.shape} != {e.shape}"
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=tol, atol=tol, err_msg=f"{name} ({what})")
        else:
            assert g.dtype == e.dtype, f"{name} ({what}): dtype {g.dtype} != {e.dtype}"
            np.testing.assert_array_equal(g, e, err_msg=f"{name} ({what})")


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp: Path, exp: dict[str, np.ndarray] | None = None,
           tol: float = 1e-5) -> None:
    exp = exp if exp is not None else _ort(model, feeds)
    _compare(tinyc.reference.run_graph(tinyc.load(model), feeds), exp, "numpy reference", tol)
    tinyc.compile(model, tmp, build=True)
    _compare(tinyc.run(tmp, feeds), exp, "C", tol)


def _float_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 8, 3, 4)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    special = np.array([1.0, np.nan, np.inf, -np.inf, -0.0, 3.5], np.float32)
    ind = rng.integers(-3, 3, (2, 4, 3, 4)).astype(np.int64)
    upd = rng.standard_normal((2, 4, 3, 4)).astype(np.float32)
    a = (rng.standard_normal((3, 4)) * 5).astype(np.float32)
    d = rng.choice([-2.5, 1.5, 3.0], (4,)).astype(np.float32)
    nodes = [
        n("LayerNormalization", ["x", "w", "b"], ["ln", "ln_mean", "ln_inv"], axis=2, epsilon=1e-3),
        n("LayerNormalization", ["x", "wc"], ["ln_c"], axis=1),   # constant scale broadcast over (8, 3, 4)
        n("LpNormalization", ["x"], ["lp1"], axis=1, p=1),
        n("LpNormalization", ["x"], ["lp2"], axis=-1, p=2),
        n("DepthToSpace", ["x"], ["d2s_dcr"], blocksize=2, mode="DCR"),
        n("DepthToSpace", ["x"], ["d2s_crd"], blocksize=2, mode="CRD"),
        n("SpaceToDepth", ["x4"], ["s2d"], blocksize=2),
        n("CumSum", ["x", "ax1"], ["cs"]),
        n("CumSum", ["x", "axm1"], ["cs_er"], exclusive=1, reverse=1),
        n("Trilu", ["x", "k1"], ["triu"], upper=1),
        n("Trilu", ["x"], ["tril"], upper=0),
        n("GatherElements", ["x", "ind"], ["ge"], axis=2),
        n("ScatterElements", ["x", "ind", "upd"], ["se"], axis=2, reduction="add"),
        n("IsNaN", ["sp"], ["isnan"]),
        n("IsInf", ["sp"], ["isinf"]),
        n("IsInf", ["sp"], ["isposinf"], detect_negative=0),
        n("Mod", ["a", "d"], ["fmod"], fmod=1),
        n("GlobalLpPool", ["x"], ["glp2"]),
        n("GlobalLpPool", ["x"], ["glp1"], p=1),
    ]
    inits = [_c("wc", np.float32(1.5) * np.ones((3, 4), np.float32)), _c("ax1", np.array(1, np.int64)),
             _c("axm1", np.array([-1], np.int32)), _c("k1", np.array(1, np.int64))]
    feeds = {"x": x, "w": w, "b": b, "x4": rng.standard_normal((1, 3, 4, 6)).astype(np.float32), "sp": special,
             "ind": ind, "upd": upd, "a": a, "d": d}
    outs = [o for nd in nodes for o in nd.output]
    return _model(nodes, feeds, outs, inits, opset=18), feeds


def _int_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(8)
    ai = rng.integers(-20, 20, (3, 4)).astype(np.int32)
    bi = rng.choice([-7, -3, 2, 5], (4,)).astype(np.int32)
    u8 = rng.integers(0, 255, (3, 4)).astype(np.uint8)
    s8 = rng.integers(0, 9, (4,)).astype(np.uint8)
    u32 = rng.integers(0, 2 ** 31, (3, 4)).astype(np.uint32)
    s32 = rng.integers(0, 31, (3, 4)).astype(np.uint32)
    nodes = [
        n("Mod", ["ai", "bi"], ["mod_i"]),
        n("Mod", ["ai", "bi"], ["fmod_i"], fmod=1),
        n("BitShift", ["u8", "s8"], ["shl8"], direction="LEFT"),
        n("BitShift", ["u32", "s32"], ["shr32"], direction="RIGHT"),
        n("CumSum", ["ai", "ax0"], ["cs_i"], exclusive=1),
        n("Trilu", ["li", "km1"], ["tril_i64"], upper=0),
        n("Range", ["r0", "r1", "r2"], ["rng"]),
        n("EyeLike", ["ai"], ["eye"], k=1, dtype=TensorProto.FLOAT),
        n("GatherElements", ["ai", "gi"], ["ge_i"], axis=1),
    ]
    inits = [_c("ax0", np.array(0, np.int32)), _c("km1", np.array(-1, np.int64)), _c("r0", np.array(10, np.int32)),
             _c("r1", np.array(-3, np.int32)), _c("r2", np.array(-4, np.int32)),
             _c("gi", np.array([[0, -1], [3, 2], [1, 1]], np.int64))]
    feeds = {"ai": ai, "bi": bi, "u8": u8, "s8": s8, "u32": u32, "s32": s32,
             "li": rng.integers(-9, 9, (2, 3, 4)).astype(np.int64)}
    outs = [o for nd in nodes for o in nd.output]
    return _model(nodes, feeds, outs, inits, opset=18), feeds


def test_float_ops_vs_onnxruntime(tmp_path: Path) -> None:
    m, feeds = _float_model()
    _check(m, feeds, tmp_path / "f", tol=2e-5)


def test_int_ops_vs_onnxruntime(tmp_path: Path) -> None:
    m, feeds = _int_model()
    _check(m, feeds, tmp_path / "i")


def test_rms_norm_and_float_mod_floor(tmp_path: Path) -> None:
    """RMSNormalization (opset 23) and float Mod with fmod=0 (numpy's floored mod; onnxruntime
    refuses it), checked against numpy directly."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    w = rng.standard_normal((5,)).astype(np.float32)
    a = np.array([-4.0, 4.0, -0.0, 5.5, -5.5, 7.0], np.float32)
    b = np.array([3.0, -3.0, 2.0, np.inf, 2.5, 0.0], np.float32)
    nodes = [n("RMSNormalization", ["x", "w"], ["rms"], axis=-1, epsilon=1e-4),
             n("Mod", ["a", "b"], ["mod"])]
    m = _model(nodes, {"x": x, "w": w, "a": a, "b": b}, ["rms", "mod"], opset=23)
    rms = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + np.float32(1e-4)) * w
    with np.errstate(all="ignore"):
        mod = np.mod(a, b)
    _check(m, {"x": x, "w": w, "a": a, "b": b}, tmp_path / "r", exp={"rms": rms.astype(np.float32), "mod": mod})


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_sanitizers_clean(tmp_path: Path) -> None:
    """The kernels run clean under AddressSanitizer and UBSan (runtime indices clamp, shifts by
    >= the width, integer Mod by zero and MIN % -1, signed wrap in CumSum/ScatterElements)."""
    rng = np.random.default_rng(10)
    xi = np.array([[np.iinfo(np.int32).max, np.iinfo(np.int32).min, 7, -9]], np.int32)
    di = np.array([[1, -1, 0, 4]], np.int32)
    s8 = np.array([128, 251, 100, 3], np.uint8)  # BitShift is defined on unsigned types only
    sh8 = np.array([1, 9, 255, 7], np.uint8)
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    ind = np.array([[[0, 5, -1]], [[-9, 1, 2]]], np.int64)  # out-of-range runtime indices are clamped
    nodes = [n("Mod", ["xi", "di"], ["m0"]), n("Mod", ["xi", "di"], ["m1"], fmod=1),
             n("CumSum", ["xi", "ax"], ["cs"]),
             n("BitShift", ["s8", "sh8"], ["l8"], direction="LEFT"),
             n("BitShift", ["s8", "sh8"], ["r8"], direction="RIGHT"),
             n("GatherElements", ["x", "ind"], ["ge"], axis=1),
             n("ScatterElements", ["x", "ind", "upd"], ["se"], axis=1, reduction="max"),
             n("LayerNormalization", ["x", "w"], ["ln"], axis=1),
             n("LpNormalization", ["x"], ["lp"], axis=1)]
    feeds = {"xi": xi, "di": di, "s8": s8, "sh8": sh8, "x": x, "ind": ind,
             "upd": rng.standard_normal((2, 1, 3)).astype(np.float32), "w": np.ones((4, 3), np.float32)}
    m = _model(nodes, feeds, [nd.output[0] for nd in nodes], [_c("ax", np.array(1, np.int64))], opset=18)
    graph = tinyc.load(m)
    exp = tinyc.reference.run_graph(graph, feeds)
    from util import sanitized_run
    got = sanitized_run(m, feeds, tmp_path)
    _compare(got, exp, "C under sanitizers")
    # the reference agrees with onnx.reference on the well-defined cases
    assert list(exp["l8"]) == [0, 0, 0, 128] and list(exp["r8"]) == [64, 0, 0, 0]
    assert list(exp["m0"][0]) == [0, 0, 0, 3] and list(exp["m1"][0]) == [0, 0, 0, -1]


def test_unsupported_variations() -> None:
    x = np.zeros((1, 3, 4, 4), np.float32)
    cases = [
        (n("DepthToSpace", ["x"], ["y"], blocksize=2), "divisible"),
        (n("SpaceToDepth", ["x"], ["y"], blocksize=3), "divisible"),
        (n("LayerNormalization", ["x", "w"], ["y"], stash_type=11), "stash_type"),
        (n("LpNormalization", ["x"], ["y"], p=3), "p = 3"),
        (n("Range", ["s", "s", "s"], ["y"]), "constant"),
        (n("CumSum", ["x", "s64"], ["y"]), "constant"),
        (n("Mod", ["x", "x"], ["y"], fmod=2), "fmod"),
    ]
    for node, msg in cases:
        inputs = {"x": x, "s": np.zeros((), np.float32), "s64": np.zeros((), np.int64), "w": np.ones((4,), np.float32)}
        used = {k: v for k, v in inputs.items() if k in node.input}
        g = helper.make_graph([node], "t", [helper.make_tensor_value_info(k, NP2ONNX[v.dtype], v.shape)
                                            for k, v in used.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,  # Range gives rank 1
                                                             ["a"] if node.op_type == "Range" else ["a", "b", "c", "d"])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        with pytest.raises(UnsupportedError, match=msg):
            tinyc.load(m)
