"""Signal and vision ops (DFT, STFT, windows, MelWeightMatrix, GridSample, AffineGrid, RoiAlign,
NonMaxSuppression): the numpy golden models against onnx's reference, and small real models
compiled with gcc against onnxruntime."""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from util import compile_ir, ort_run  # noqa: E402

import tinyc  # noqa: E402
from tinyc.errors import UnsupportedError  # noqa: E402
from tinyc.ops.dft import dft_reference  # noqa: E402
from tinyc.ops.grid_sample import grid_sample  # noqa: E402
from tinyc.ops.nms import nms_select, padded_nms  # noqa: E402
from tinyc.ops.roi_align import roi_align  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=20):
    """inputs / outputs: (name, numpy dtype, shape or None)."""
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        nodes, "t",
        [vi(n, helper.np_dtype_to_tensor_dtype(np.dtype(d)), s) for n, d, s in inputs],
        [vi(n, helper.np_dtype_to_tensor_dtype(np.dtype(d)), s) for n, d, s in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def _ref(op, inputs, opset=22, **attrs):
    """onnx's reference implementation of one node on numpy inputs."""
    names = [f"i{k}" for k in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], **attrs)
    m = _model([node], [(n, v.dtype, v.shape) for n, v in zip(names, inputs)], [("y", np.float32, None)],
               opset=opset)
    return ReferenceEvaluator(m).run(None, dict(zip(names, inputs)))[0]


def _rel(got, exp):
    return float(np.abs(got - exp).max() / max(np.abs(exp).max(), 1e-30))


# -- golden models vs onnx's reference (no builds) -----------------------------------------------
def test_grid_sample_golden_matches_onnx_reference():
    rng = np.random.default_rng(0)
    for mode, pad, align in itertools.product(["nearest", "linear", "cubic"], ["zeros", "border", "reflection"], [0, 1]):
        x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
        g = rng.uniform(-2.6, 2.6, (2, 3, 6, 2)).astype(np.float32)  # well outside [-1, 1]: padding matters
        exp = _ref("GridSample", [x, g], mode=mode, padding_mode=pad, align_corners=align)
        np.testing.assert_allclose(grid_sample(x, g, mode, pad, bool(align)), exp, atol=1e-6, err_msg=f"{mode} {pad}")
    x = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    g = rng.uniform(-1.5, 1.5, (1, 2, 3, 2, 3)).astype(np.float32)
    exp = _ref("GridSample", [x, g], mode="linear", padding_mode="reflection", align_corners=0)
    np.testing.assert_allclose(grid_sample(x, g, "linear", "reflection", False), exp, atol=1e-6)


def test_dft_golden_matches_onnx_reference():
    rng = np.random.default_rng(1)
    for inverse, onesided, c in [(0, 0, 1), (0, 1, 1), (0, 0, 2), (1, 0, 2), (1, 1, 2)]:
        x = rng.standard_normal((2, 7, 3, c)).astype(np.float32)
        n = 9 if not (inverse and onesided) else 12
        exp = _ref("DFT", [x, np.array(n, np.int64), np.array(1, np.int64)], opset=20, inverse=inverse,
                   onesided=onesided)
        got = dft_reference(x, 1, n, bool(inverse), bool(onesided))
        np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-5)


def test_roi_align_golden_matches_onnx_reference():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    rois = np.array([[0, 0, 7, 8], [1.5, 2.2, 6.1, 5.3], [-2, -1, 3, 2], [4, 4, 12, 11]], np.float32)
    bidx = np.array([0, 1, 1, 0], np.int64)
    for mode, ctm, sr in [("avg", "half_pixel", 2), ("avg", "output_half_pixel", 0), ("max", "half_pixel", 3)]:
        exp = _ref("RoiAlign", [x, rois, bidx], mode=mode, coordinate_transformation_mode=ctm, sampling_ratio=sr,
                   output_height=3, output_width=4, spatial_scale=0.75)
        got = roi_align(x, rois, bidx, dict(mode=mode, out_h=3, out_w=4, sampling_ratio=sr, scale=0.75,
                                            half_pixel=ctm == "half_pixel"))
        np.testing.assert_allclose(got, exp, atol=1e-6, err_msg=f"{mode} {ctm}")


def _nms_case(seed, n=12, batches=2, classes=2, spread=10.0, sizes=(1.0, 4.0)):
    rng = np.random.default_rng(seed)
    ctr = rng.uniform(0, spread, (batches, n, 2)).astype(np.float32)
    size = rng.uniform(*sizes, (batches, n, 2)).astype(np.float32)
    boxes = np.concatenate([ctr - size / 2, ctr + size / 2], axis=-1)  # [y1, x1, y2, x2]
    boxes[:, ::3] = boxes[:, ::3, [2, 3, 0, 1]]  # some flipped corners
    scores = rng.uniform(0, 1, (batches, classes, n)).astype(np.float32)
    scores[:, :, 5] = scores[:, :, 4]  # a tie
    return boxes, scores


def test_nms_golden_and_fold_match_onnx_reference():
    """The golden model vs onnx's reference, and an all-constant ONNX node folds to that result."""
    for seed, center in [(3, 0), (4, 1)]:
        boxes, scores = _nms_case(seed)
        cfg = [np.array([4], np.int64), np.array([0.3], np.float32), np.array([0.2], np.float32)]
        node = helper.make_node("NonMaxSuppression", ["b", "s", "m", "i", "t"], ["y"], center_point_box=center)
        m = _model([node], [("b", np.float32, boxes.shape), ("s", np.float32, scores.shape), ("m", np.int64, [1]),
                            ("i", np.float32, [1]), ("t", np.float32, [1])], [("y", np.int64, ["k", 3])], opset=11)
        exp = ReferenceEvaluator(m).run(None, dict(zip("bsmit", [boxes, scores, *cfg])))[0]
        np.testing.assert_array_equal(nms_select(boxes, scores, 4, 0.3, 0.2, bool(center)), exp)
        graph = tinyc.load(m, bind=dict(zip("bsmit", [boxes, scores, *cfg])))
        np.testing.assert_array_equal(graph.constant("y"), exp)
        with pytest.raises(UnsupportedError, match=r"num_selected, 3\] depends on the run-time boxes"):
            tinyc.load(m, bind=dict(zip("mit", cfg)))


def test_windows_fold_to_onnx_values():
    for op, periodic in itertools.product(["HannWindow", "HammingWindow", "BlackmanWindow"], [0, 1]):
        node = helper.make_node(op, ["n"], ["y"], periodic=periodic)
        m = _model([node], [], [("y", np.float32, ["n"])], inits={"n": np.array(16, np.int32)}, opset=17)
        exp = ReferenceEvaluator(m).run(None, {})[0]
        graph = tinyc.load(m)
        assert not graph.nodes
        np.testing.assert_allclose(graph.constant("y"), exp, rtol=1e-6, atol=1e-7)


# -- real models through gcc vs onnxruntime ------------------------------------------------------
def _audio_frontend():
    """log-mel spectrogram: Hann-windowed STFT -> power -> mel filterbank (MatMul) -> Log."""
    n_fft, hop, mels = 64, 32, 10
    nodes = [
        helper.make_node("HannWindow", ["n_fft"], ["win"]),
        helper.make_node("STFT", ["x", "hop", "win", "n_fft64"], ["spec"], onesided=1),
        helper.make_node("Mul", ["spec", "spec"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "last"], ["power"], keepdims=0),
        helper.make_node("MelWeightMatrix", ["mels", "n_fft", "rate", "lo", "hi"], ["mel_w"]),
        helper.make_node("MatMul", ["power", "mel_w"], ["mel"]),
        helper.make_node("Add", ["mel", "eps"], ["mel_eps"]),
        helper.make_node("Log", ["mel_eps"], ["y"]),
    ]
    inits = {"n_fft": np.array(n_fft, np.int32), "n_fft64": np.array(n_fft, np.int64), "hop": np.array(hop, np.int64),
             "last": np.array([-1], np.int64), "mels": np.array(mels, np.int32), "rate": np.array(8000, np.int32),
             "lo": np.array(60.0, np.float32), "hi": np.array(3800.0, np.float32), "eps": np.array(1e-6, np.float32)}
    return _model(nodes, [("x", np.float32, [1, 512, 1])], [("y", np.float32, ["a", "b", "c"])], inits, opset=17)


def test_audio_frontend_vs_onnxruntime(tmp_path):
    m = _audio_frontend()
    t = np.arange(512, dtype=np.float32) / 8000
    x = (np.sin(2 * np.pi * 440 * t) + 0.3 * np.sin(2 * np.pi * 1700 * t)).astype(np.float32)[None, :, None]
    x += np.random.default_rng(5).standard_normal(x.shape).astype(np.float32) * 0.01
    exp = ort_run(m, {"x": x})[0]
    tinyc.compile(m, tmp_path / "m", build=True)
    got = tinyc.run(tmp_path / "m", {"x": x})["y"]
    assert got.shape == exp.shape == (1, 15, 10)
    assert _rel(got, exp) < 1e-4


def test_spatial_transformer_vs_onnxruntime(tmp_path):
    """theta from a tiny localisation net (Gemm), AffineGrid, then bilinear GridSample."""
    rng = np.random.default_rng(6)
    w = (rng.standard_normal((6, 48)) * 0.02).astype(np.float32)
    b = np.array([0.9, 0.1, 0.05, -0.15, 1.1, 0.0], np.float32)
    nodes = [
        helper.make_node("Flatten", ["x"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w", "b"], ["t6"], transB=1),
        helper.make_node("Reshape", ["t6", "tshape"], ["theta"]),
        helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=0),
        helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear", padding_mode="border"),
    ]
    inits = {"w": w, "b": b, "tshape": np.array([2, 2, 3], np.int64), "size": np.array([2, 3, 5, 6], np.int64)}
    m = _model(nodes, [("x", np.float32, [2, 3, 4, 4])], [("y", np.float32, ["a", "b", "c", "d"])], inits, opset=20)
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    exp = ort_run(m, {"x": x})[0]
    tinyc.compile(m, tmp_path / "m", build=True)
    got = tinyc.run(tmp_path / "m", {"x": x})["y"]
    assert got.shape == exp.shape == (2, 3, 5, 6)
    assert _rel(got, exp) < 1e-4


def test_roi_align_vs_onnxruntime(tmp_path):
    """rois and batch indices as run-time inputs (a detector's proposals)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 12, 10)).astype(np.float32)
    rois = np.array([[0, 0, 9, 11], [2.5, 1.2, 8.1, 6.3], [-1, -2, 4, 3], [3, 5, 14, 13]], np.float32)
    bidx = np.array([1, 0, 1, 0], np.int64)
    for mode, ctm, sr in [("avg", "half_pixel", 0), ("max", "output_half_pixel", 2)]:
        node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], mode=mode, coordinate_transformation_mode=ctm,
                                output_height=3, output_width=3, sampling_ratio=sr, spatial_scale=0.5)
        m = _model([node], [("x", np.float32, x.shape), ("rois", np.float32, rois.shape), ("bi", np.int64, [4])],
                   [("y", np.float32, ["a", "b", "c", "d"])], opset=16)
        feeds = {"x": x, "rois": rois, "bi": bidx}
        exp = ort_run(m, feeds)[0]
        tinyc.compile(m, tmp_path / mode, build=True)
        got = tinyc.run(tmp_path / mode, feeds)["y"]
        assert got.shape == exp.shape == (4, 4, 3, 3)
        assert _rel(got, exp) < 1e-4, mode


@pytest.mark.parametrize("center", [False, True])
def test_nms_fixed_max_count_kernel(tmp_path, center):
    """The padded kernel (selected [max_total, 3] + count) through gcc vs onnx's reference selection."""
    from tinyc.ir import Graph, Tensor
    boxes, scores = _nms_case(8 + center, n=16, batches=2, classes=3, spread=4.0, sizes=(2.0, 5.0))
    if center:
        boxes = np.concatenate([(boxes[..., 1::-1] + boxes[..., 3:1:-1]) / 2,
                                np.abs(boxes[..., 3:1:-1] - boxes[..., 1::-1])], axis=-1)
    g = Graph("nms")
    for name, v in (("boxes", boxes), ("scores", scores)):
        g.add_tensor(Tensor(name, v.shape, "float32"))
        g.inputs.append(name)
    padded_nms(g, "boxes", "scores", "sel", "count", max_per_class=8, iou=0.3, score_threshold=0.15, center=center)
    g.outputs += ["sel", "count"]
    compile_ir(g, tmp_path / "p")
    got = tinyc.run(tmp_path / "p", {"boxes": boxes, "scores": scores})

    node = helper.make_node("NonMaxSuppression", ["b", "s", "m", "i", "t"], ["y"], center_point_box=int(center))
    m = _model([node], [("b", np.float32, boxes.shape), ("s", np.float32, scores.shape)], [("y", np.int64, ["k", 3])],
               {"m": np.array([8], np.int64), "i": np.array([0.3], np.float32), "t": np.array([0.15], np.float32)},
               opset=11)
    exp = ReferenceEvaluator(m).run(None, {"b": boxes, "s": scores})[0]
    count = int(got["count"][0])
    assert got["sel"].shape == (2 * 3 * 8, 3)
    assert 0 < count < 48 and count == len(exp)
    np.testing.assert_array_equal(got["sel"][:count], exp)
    assert (got["sel"][count:] == -1).all()


def test_dft_kernels_vs_onnxruntime(tmp_path):
    """Forward complex, one-sided real and inverse one-sided DFTs (odd and even lengths) in one model."""
    rng = np.random.default_rng(9)
    nodes = [
        helper.make_node("DFT", ["xc", "", "ax1"], ["f"]),
        helper.make_node("DFT", ["xr", "n16", "ax1"], ["r"], onesided=1),
        helper.make_node("DFT", ["r", "n16", "ax1"], ["back"], inverse=1, onesided=1),
    ]
    inits = {"ax1": np.array(1, np.int64), "n16": np.array(16, np.int64)}
    m = _model(nodes, [("xc", np.float32, [2, 11, 3, 2]), ("xr", np.float32, [2, 13, 1])],
               [("f", np.float32, ["a", "b", "c", "d"]), ("r", np.float32, ["a", "b", "c"]), ("back", np.float32, ["a", "b", "c"])], inits, opset=20)
    feeds = {"xc": rng.standard_normal((2, 11, 3, 2)).astype(np.float32),
             "xr": rng.standard_normal((2, 13, 1)).astype(np.float32)}
    exp = ort_run(m, feeds)
    tinyc.compile(m, tmp_path / "m", build=True)
    got = tinyc.run(tmp_path / "m", feeds)
    for name, e in zip(["f", "r", "back"], exp):
        assert got[name].shape == e.shape, name
        assert _rel(got[name], e) < 1e-4, name


def test_fft_and_direct_variants_vs_onnxruntime(tmp_path):
    """Lengths with radix 4, 2, 3, 5 and 7 passes, forward and inverse, complex and real input:
    the fft variant and the direct variant each against onnxruntime and float64 numpy."""
    from tinyc.ops import get_op
    rng = np.random.default_rng(10)
    specs = [("a", 12, 1, 2), ("b", 80, 0, 1), ("c", 126, 0, 2), ("d", 49, 1, 2), ("e", 30, 0, 2)]
    nodes, inputs, outputs, inits, feeds = [], [], [], {"ax": np.array(1, np.int64)}, {}
    for name, n, inverse, c in specs:
        inits[f"n_{name}"] = np.array(n, np.int64)
        nodes.append(helper.make_node("DFT", [f"x_{name}", f"n_{name}", "ax"], [f"y_{name}"], name=f"dft_{name}",
                                      inverse=inverse))
        inputs.append((f"x_{name}", np.float32, [2, n - 3, c]))  # zero-padded to n
        outputs.append((f"y_{name}", np.float32, ["a", "b", "c"]))
        feeds[f"x_{name}"] = rng.standard_normal((2, n - 3, c)).astype(np.float32)
    m = _model(nodes, inputs, outputs, inits, opset=20)
    exp = dict(zip([o[0] for o in outputs], ort_run(m, feeds)))
    graph = tinyc.load(m)
    op = get_op("DFT")
    assert all(op.knobs(nd, graph)["variant"][0] == "fft" for nd in graph.nodes if nd.attrs["inverse"] or
               nd.attrs["n"] >= 64)
    for variant in ("fft", "direct"):
        compile_ir(graph, tmp_path / variant, {nd.name: {"variant": variant} for nd in graph.nodes})
        got = tinyc.run(tmp_path / variant, feeds)
        for k, e in exp.items():
            assert got[k].shape == e.shape, k
            assert _rel(got[k], e) < 1e-4, (variant, k)  # onnxruntime itself is off by up to ~3e-5 here
            name, n, inverse, _ = specs[[sp[0] for sp in specs].index(k[2:])]
            exact = dft_reference(feeds[f"x_{name}"], 1, n, bool(inverse), False)
            assert _rel(got[k], exact) < 1e-6, (variant, k)  # vs float64 numpy: float32 rounding only


def test_mel_weight_matrix_kernel_vs_onnx_reference(tmp_path):
    """Edge frequencies fed at run time: the kernel builds the filterbank; onnx's reference decides."""
    node = helper.make_node("MelWeightMatrix", ["mels", "dft", "rate", "lo", "hi"], ["y"])
    inits = {"mels": np.array(12, np.int32), "dft": np.array(128, np.int32), "rate": np.array(16000, np.int32)}
    m = _model([node], [("lo", np.float32, []), ("hi", np.float32, [])], [("y", np.float32, [65, 12])], inits,
               opset=17)
    graph = tinyc.load(m)
    assert [nd.op for nd in graph.nodes] == ["MelWeightMatrix"]
    tinyc.compile(m, tmp_path / "m", build=True)
    for lo, hi in [(50.0, 7000.0), (0.0, 8000.0), (300.0, 3400.0)]:
        feeds = {"lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
        exp = ReferenceEvaluator(m).run(None, feeds)[0]
        got = tinyc.run(tmp_path / "m", feeds)["y"]
        assert got.shape == exp.shape == (65, 12)
        np.testing.assert_allclose(got, exp, rtol=1e-6, atol=1e-7)
        assert (exp > 0).sum() > 12  # triangles, not an empty matrix
