"""`tinyc validate` for every target: the compiled model's outputs vs the golden model (tinyc's
reference executor on the graph the code came from) vs an independent reference on the source
model (onnxruntime for ONNX, TFLite Micro's interpreter for .tflite), and accuracy with labels.

The target only supplies a function that runs the checked data (a board over the serial
harness, the host library, an OpenCL device); everything compared and reported is here, so a
board, the host and OpenCL give the same fields. The metric definitions live in
tinyc.numerics.metrics; the JSON fields are described in docs/validation.md.

Bit-exactness is always decided on the target's own values (int8 for int8 outputs). The error
metrics are computed on what the user sees (`tinyc.quantize.output_view`): dequantized floats
for an --io-dtype int8 output unless ``raw``, the integers otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tinyc.errors import RunError, UsageError
from tinyc.numerics.metrics import accuracy, error_metrics, top1_agreement
from tinyc.quantize.feeds import prepare_feeds, stack_outputs
from tinyc.quantize.io import to_float_output
from tinyc.quantize.output_view import dequantized_outputs, present_outputs
from tinyc.reference.compare import compare_float

#: The references `against` may name ("auto": TFLite Micro for a .tflite, onnxruntime otherwise).
ORACLES = ("auto", "onnxruntime", "tflm", "none")

#: What a target's run function gives back: the outputs (stacked as `tinyc run` does) and the
#: fields of the result it measured (per_inference, units, board, ...).
TargetRun = Callable[[Mapping[str, np.ndarray]], tuple[Mapping[str, np.ndarray], Mapping[str, Any]]]


def validate_outputs(
    out_dir: str | Path,
    manifest: Mapping[str, Any],
    data: Mapping[str, Any],
    run: TargetRun,
    graph: Any,
    source: str | None,
    labels: np.ndarray | None = None,
    against: str = "auto",
    raw: bool = False,
    who: str = "device",
    output: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Run `data` through `run` and compare (see the module docstring). `who` names the target in
    the table ("device", "host", "OpenCL"); `output` saves the target's outputs as an .npz
    (dequantized unless `raw`, as `tinyc run` does). The result is JSON-serialisable."""
    import tinyc.reference
    from tinyc.quantize.feeds import LABEL_KEYS

    names = {s["name"] for s in manifest["inputs"]}
    if labels is None:
        labels = next((np.asarray(data[k]) for k in LABEL_KEYS if k in data and k not in names), None)
    checked = prepare_feeds(manifest, data)  # label keys that are not model inputs are left out
    oracle = _oracle(against, source)
    n, mode = checked.n, checked.mode
    feeds = checked.arrays
    outputs, measured = run(feeds)
    gold: dict[str, list[np.ndarray]] = {o["name"]: [] for o in manifest["outputs"]}
    for k in range(n):
        res = tinyc.reference.run_graph(graph, checked.model(k))
        for o in manifest["outputs"]:
            gold[o["name"]].append(np.asarray(res[o["name"]]).reshape(o["shape"]))
    golden = stack_outputs(gold, mode)
    integer = bool(graph.has_integer_activations())
    tflm = ort = None
    if oracle == "tflm":
        assert source is not None
        tflm = _tflm_outputs(source, [checked.model(k) for k in range(n)], manifest, mode)
    elif oracle == "onnxruntime" and source:
        ort = _onnxruntime_outputs(source, feeds, manifest, n, mode)
    deq = set() if raw else dequantized_outputs(out_dir, manifest)
    result: dict[str, Any] = {
        "model": manifest["model"],
        "samples": n,
        "target": who,
        **dict(measured),
        "reference": oracle,
        "raw": bool(raw),
        "outputs": {},
    }
    ok = True
    for o in manifest["outputs"]:
        name = o["name"]
        d, g = np.asarray(outputs[name]), np.asarray(golden[name])
        shown = name in deq
        close = compare_float(d, g)  # NaN-aware: a NaN (or inf) output is a result to compare too
        entry: dict[str, Any] = {
            "dtype": str(d.dtype),
            "shape": list(d.shape),
            "values": "dequantized" if shown else str(d.dtype),
            "max_abs_diff_vs_golden": close.max_abs_diff,
            "bit_exact_vs_golden": bool(np.array_equal(d, g, equal_nan=d.dtype.kind == "f")),
        }
        entry["golden_ok"] = entry["bit_exact_vs_golden"] if integer else close.ok
        ok &= entry["golden_ok"]
        entry["vs_golden"] = _compare(_view(o, d, shown), _view(o, g, shown))
        if ort is not None and name in ort:
            ref = np.asarray(ort[name]).reshape(d.shape)
            if ref.dtype.kind == "f":  # the source model gives float: compare what the output stands for
                mine, theirs = to_float_output(o, d), ref
            else:
                mine, theirs = _view(o, d, shown), _view(o, ref, shown)
            entry["max_abs_diff_vs_onnxruntime"] = compare_float(mine, theirs).max_abs_diff
            entry["vs_onnxruntime"] = _compare(mine, theirs)
            if d.ndim >= 2 and d.shape[-1] > 1:
                entry["top1_agreement_vs_onnxruntime"] = top1_agreement(d, ref)
        if tflm is not None and name in tflm:
            r = np.asarray(tflm[name]).reshape(d.shape)
            entry["bit_exact_vs_tflm"] = bool(np.array_equal(d, r, equal_nan=d.dtype.kind == "f"))
            entry["max_abs_diff_vs_tflm"] = compare_float(d, r).max_abs_diff
            entry["vs_tflm"] = dict(
                _compare(_view(o, d, shown), _view(o, r, shown)), bit_exact=entry["bit_exact_vs_tflm"]
            )
            if integer:
                ok &= entry["bit_exact_vs_tflm"]
            if d.ndim >= 2 and d.shape[-1] > 1:
                entry["top1_agreement_vs_tflm"] = top1_agreement(d, r)
        if labels is not None and d.ndim >= 2 and d.shape[-1] > 1:
            acc = accuracy(d, labels)
            if acc is not None:
                entry["accuracy"] = acc
        result["outputs"][name] = entry
    result["golden_ok"] = bool(ok)
    result["integer"] = integer
    if output is not None:
        saved = present_outputs(
            out_dir, manifest, {o["name"]: np.asarray(outputs[o["name"]]) for o in manifest["outputs"]}, raw
        )
        np.savez(output, **saved)  # type: ignore[arg-type]  # numpy's stubs match **kwds against allow_pickle
    return result


def _view(spec: Mapping[str, Any], values: np.ndarray, dequantize: bool) -> np.ndarray:
    """An output as the metrics see it: dequantized on its grid, or its own values."""
    return to_float_output(spec, values) if dequantize else values


def _compare(target: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
    """The error metrics of one output against one reference, plus top-1 agreement for outputs
    with classes (a last axis of 2 or more); "values" says what was compared ("float32" for
    dequantized or float outputs, "int8" for the integers themselves)."""
    m: dict[str, Any] = {"values": str(np.asarray(target).dtype)}
    m.update(error_metrics(target, reference))
    t = np.asarray(target)
    if t.ndim >= 2 and t.shape[-1] > 1:
        m["top1_agreement"] = top1_agreement(target, reference)
    return m


def _oracle(against: str, source: str | None) -> str:
    """The reference to compare with: "auto" picks TFLite Micro for a .tflite source, onnxruntime otherwise."""
    if against not in ORACLES:
        raise UsageError(f"--against must be one of {', '.join(ORACLES)}, got {against!r}")
    tflite = bool(source) and str(source).lower().endswith(".tflite")
    if against == "auto":
        return "none" if not source else ("tflm" if tflite else "onnxruntime")
    if against == "tflm" and not tflite:
        raise UsageError(f"--against tflm needs a .tflite source model; this project was compiled from {source}")
    if against == "onnxruntime" and tflite:
        raise UsageError("--against onnxruntime needs an ONNX source model; this project was compiled from a .tflite")
    if against != "none" and (not source or not Path(source).is_file()):
        raise UsageError(f"--against {against}: the source model {source} is not there any more")
    return against


def _tflm_outputs(
    source: str, samples: list[Mapping[str, np.ndarray]], manifest: Mapping[str, Any], mode: str
) -> dict[str, np.ndarray]:
    """TFLite Micro's own interpreter (the tflite-micro package) on the source .tflite, sample by sample,
    fed exactly the (quantized) inputs the target gets; the state is reset before every sample."""
    try:
        from tflite_micro.python.tflite_micro import runtime
    except ImportError:
        raise UsageError(
            "--against tflm needs TFLite Micro's interpreter: pip install 'tinyc[tflite]' (the tflite-micro package)"
        ) from None
    buf = Path(source).read_bytes()
    interp = runtime.Interpreter.from_bytes(buf, arena_size=max(10 * len(buf), 1 << 20))
    res: dict[str, list[np.ndarray]] = {o["name"]: [] for o in manifest["outputs"]}
    for one in samples:
        interp.reset()
        for i, spec in enumerate(manifest["inputs"]):
            interp.set_input(np.ascontiguousarray(np.asarray(one[spec["name"]]).astype(spec["dtype"])), i)
        interp.invoke()
        for j, spec in enumerate(manifest["outputs"]):
            res[spec["name"]].append(np.array(interp.get_output(j), copy=True).reshape(spec["shape"]))
    return stack_outputs(res, mode)


def _onnxruntime_outputs(
    source: str, feeds: Mapping[str, np.ndarray], manifest: Mapping[str, Any], n: int, mode: str
) -> dict[str, np.ndarray] | None:
    """onnxruntime on the source model (graph optimisations off: its fused int8 kernels round
    differently on some CPUs), sample by sample; None when onnxruntime or the model is missing."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    if not Path(source).is_file():
        return None
    from tinyc.quantize.feeds import sample

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    res: dict[str, list[np.ndarray]] = {k: [] for k in names}
    for k in range(n):
        one = {s["name"]: _ort_input(s, sample(feeds[s["name"]], s["shape"], mode, k)) for s in manifest["inputs"]}
        for name, v in zip(names, sess.run(None, one)):
            res[name].append(np.asarray(v))
    return stack_outputs(res, mode)


def _ort_input(spec: Mapping[str, Any], value: np.ndarray) -> np.ndarray:
    """The source model's view of an input: an int8-I/O model's ONNX input is float, so float data
    stays float and int8 data is dequantized on the input's grid; otherwise the manifest dtype."""
    arr = np.asarray(value)
    if spec.get("quant") is not None and arr.dtype.kind == "f":
        return arr.astype(np.float32)
    if spec.get("quant") is not None:  # int8 data for the int8 input: the float values it stands for
        return to_float_output(spec, arr.astype(spec["dtype"]))
    return arr.astype(spec["dtype"])


# -------------------------------------------------------------------------------- printing


def _num(x: Any, fmt: str = ".3g") -> str:
    return "n/a" if x is None else format(x, fmt)


def _metrics_row(label: str, m: Mapping[str, Any]) -> str:
    top1 = m.get("top1_agreement")
    return (
        f"      {label:<14} {_num(m['rmse']):>10} {_num(m['cosine'], '.6f'):>10} {_num(m['max_abs_error']):>10} "
        f"{_num(m['mean_abs_error']):>10} {'' if top1 is None else f'{100 * top1:.2f}%':>8}  {m.get('values', '')}"
    )


def validation_table(v: Mapping[str, Any]) -> str:
    """The summary line per output (as before) and, below it, the error metrics of each comparison."""
    who = v.get("target", "device")
    per = v.get("per_inference")
    where = v.get("board", who)
    head = f"validated '{v['model']}' on {where}: {v['samples']} samples"
    if per is not None:
        head += f", {per:,.0f} {v['units']} per inference"
    rows = [head]
    for name, e in v["outputs"].items():
        parts = [
            (
                f"{who} == golden model bit for bit"
                if e["bit_exact_vs_golden"]
                else f"{who} vs golden max |diff| {e['max_abs_diff_vs_golden']:.3g}"
            )
            + ("" if e["golden_ok"] else "  <-- MISMATCH")
        ]
        if "bit_exact_vs_tflm" in e:
            parts.append(
                "== TFLite Micro bit for bit"
                if e["bit_exact_vs_tflm"]
                else f"vs TFLite Micro max |diff| {e['max_abs_diff_vs_tflm']:.3g}  <-- DIFFERS"
            )
        if e.get("top1_agreement_vs_tflm") is not None:
            parts.append(f"top-1 agreement with TFLite Micro {100 * e['top1_agreement_vs_tflm']:.2f}%")
        if e.get("top1_agreement_vs_onnxruntime") is not None:
            parts.append(f"top-1 agreement with onnxruntime {100 * e['top1_agreement_vs_onnxruntime']:.2f}%")
        if "max_abs_diff_vs_onnxruntime" in e:
            parts.append(f"max |diff| vs onnxruntime {e['max_abs_diff_vs_onnxruntime']:.3g}")
        if "accuracy" in e:
            parts.append(f"accuracy {100 * e['accuracy']:.2f}%")
        rows.append(f"  {name}: " + "; ".join(parts))
        comparisons = [
            (label, e[key])
            for label, key in (
                ("golden model", "vs_golden"),
                ("onnxruntime", "vs_onnxruntime"),
                ("TFLite Micro", "vs_tflm"),
            )
            if key in e
        ]
        if comparisons:
            rows.append(
                f"      {'vs':<14} {'RMSE':>10} {'cosine':>10} {'max|err|':>10} {'mean|err|':>10} {'top-1':>8}  values"
            )
            rows += [_metrics_row(label, m) for label, m in comparisons]
    return "\n".join(rows)


def check_validation(v: Mapping[str, Any]) -> None:
    """Raise RunError when the target disagrees with the golden model (or an int8 .tflite with
    TFLite Micro)."""
    where = v.get("board", v.get("target", "the device"))
    if not v["golden_ok"]:
        who = v.get("target", "device")
        bad = [n for n, e in v["outputs"].items() if not e["golden_ok"]]
        if bad:
            raise RunError(f"{who} outputs differ from the golden model on {where}: {', '.join(bad)}")
        bad = [n for n, e in v["outputs"].items() if not e.get("bit_exact_vs_tflm", True)]
        raise RunError(f"{who} outputs differ from TFLite Micro on {where}: {', '.join(bad)}")
