"""What quantization did and what it cost in accuracy: the data behind report.json/report.md.

``quantization_summary`` (every int8 compile): calibration method, int8 vs float node counts,
the ops left in float and why, the per-tensor range table.
``compare_float_int8`` (``tinyc quantize --report``): runs the float graph and the int8 graph
(the golden integer model) on the same samples and measures, per int8 layer, the SNR and max
error of its dequantized output against the float tensor it stands for, plus output agreement
(top-1 against each other and against labels when given), weight and arena bytes of both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Mapping

import numpy as np

from tinyc.ir import Graph
from tinyc.memory import plan_graph_memory
from tinyc.numerics.fixed_point import dequantize
from tinyc.numerics.qparams import qparams_of
from tinyc.numerics.text import md_text
from tinyc.ops import get_op
from tinyc.quantize.flow import QuantizationResult
from tinyc.reference import run_graph
from tinyc.schedule import default_schedules


def quantization_summary(q: QuantizationResult) -> dict[str, Any]:
    low = q.lowering
    return {
        "mode": "calibrated" if q.method else "qdq",
        "calib_method": q.method,
        "calib_samples": q.samples,
        "int8_nodes": len(low.int8_nodes),
        "float_nodes": [{"name": n, "op": op, "reason": why} for n, op, why in low.float_nodes],
        "quantize_nodes": low.quantize_nodes,
        "dequantize_nodes": low.dequantize_nodes,
        "ranges": [{"tensor": r.name, "min": r.min, "max": r.max, "method": r.method} for r in q.ranges.values()],
    }


def summary_markdown(s: Mapping[str, Any]) -> str:
    lines = [
        "## Quantization",
        "",
        f"- source of the int8 grids: {'calibration (' + str(s['calib_method']) + ', ' + str(s['calib_samples']) + ' samples)' if s['mode'] == 'calibrated' else 'the QDQ model'}",
        f"- int8 kernels: {s['int8_nodes']}; Quantize/Dequantize boundaries: "
        f"{s['quantize_nodes']}/{s['dequantize_nodes']}",
        f"- ops left in float: {len(s['float_nodes'])}",
        "",
    ]
    if s["float_nodes"]:
        lines += ["| node | op | why float |", "|---|---|---|"]
        lines += [f"| {md_text(f['name'])} | {f['op']} | {md_text(f['reason'])} |" for f in s["float_nodes"]]
        lines.append("")
    if s["ranges"]:
        lines += ["### Calibrated ranges", "", "| tensor | min | max | method |", "|---|---:|---:|---|"]
        lines += [f"| {md_text(r['tensor'])} | {r['min']:.6g} | {r['max']:.6g} | {r['method']} |" for r in s["ranges"]]
        lines.append("")
    return "\n".join(lines)


@dataclass
class LayerError:
    node: str
    op: str
    tensor: str
    snr_db: float
    max_abs_error: float
    max_abs_float: float


@dataclass
class Comparison:
    samples: int
    layers: list[LayerError] = field(default_factory=list)
    outputs: dict[str, dict[str, float]] = field(default_factory=dict)
    top1_agreement: float | None = None
    top1_float: float | None = None
    top1_int8: float | None = None
    weights_bytes: tuple[int, int] = (0, 0)  # float, int8
    arena_bytes: tuple[int, int] = (0, 0)  # float, int8


def _snr_db(ref: np.ndarray, err: np.ndarray) -> float:
    p_sig = float(np.sum(ref.astype(np.float64) ** 2))
    p_err = float(np.sum(err.astype(np.float64) ** 2))
    if p_err == 0.0:
        return float("inf")
    if p_sig == 0.0:
        return float("-inf")
    return 10.0 * np.log10(p_sig / p_err)


def _weights_bytes(graph: Graph) -> int:
    """Bytes of the constants the generated C embeds: every constant a kernel reads (alias nodes
    have no kernel) and every constant output, each once; what report.json's weights_bytes counts."""
    alias = {n.name for n in graph.nodes if get_op(n.op).alias}
    used = {i for n in graph.nodes if n.name not in alias for i in n.inputs if i}
    used |= {name for _, name in graph.public_outputs()}
    return sum(t.nbytes for name, t in graph.tensors.items() if name in used and t.is_constant)


def _memory(graph: Graph) -> tuple[int, int]:
    """(weights, arena) bytes of `graph` compiled for the host with its default schedules, read from
    the graph and the memory plan: the same numbers as report.json without rendering the C."""
    layout = plan_graph_memory(graph, default_schedules(graph, "host"), "host")
    return _weights_bytes(graph), int(layout.arena_bytes)


def compare_float_int8(
    q: QuantizationResult,
    feeds: Callable[[int], dict[str, np.ndarray]],
    n: int,
    labels: np.ndarray | None = None,
    progress: bool = True,
) -> Comparison:
    """Float vs int8 (golden integer model) over `n` samples; see the module docstring."""
    from tinyc.progress import track

    g8, gf = q.graph, q.float_graph
    producers = {o: node for node in g8.nodes for o in node.outputs}
    pairs = [
        (f, i8)
        for f, i8 in q.lowering.int8_of.items()
        if f in gf.tensors and i8 in g8.tensors and not gf.tensor(f).is_constant and i8 in producers
    ]
    sig = {f: 0.0 for f, _ in pairs}
    err = {f: 0.0 for f, _ in pairs}
    emax = {f: 0.0 for f, _ in pairs}
    fmax = {f: 0.0 for f, _ in pairs}
    outs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for k in track(range(n), "float vs int8", unit="sample", show=None if progress else False):
        x = feeds(k)
        ef = run_graph(gf, x, keep_all=True)
        e8 = run_graph(g8, x, keep_all=True)
        for f, i8 in pairs:
            s, zp = qparams_of(g8, i8)
            a = np.asarray(ef[f], np.float64)
            b = np.asarray(dequantize(e8[i8], np.float32(s), zp), np.float64)
            d = b - a
            sig[f] += float(np.sum(a * a))
            err[f] += float(np.sum(d * d))
            emax[f] = max(emax[f], float(np.max(np.abs(d))) if d.size else 0.0)
            fmax[f] = max(fmax[f], float(np.max(np.abs(a))) if a.size else 0.0)
        for pub, internal in gf.public_outputs():
            internal8 = dict(g8.public_outputs())[pub]
            outs.setdefault(pub, []).append((np.asarray(ef[internal]), np.asarray(e8[internal8])))
    cmp = Comparison(samples=n)
    for f, i8 in pairs:
        node = producers[i8]
        snr = float("inf") if err[f] == 0 else (10 * np.log10(sig[f] / err[f]) if sig[f] > 0 else float("-inf"))
        cmp.layers.append(LayerError(node.source or node.name, node.op, f, snr, emax[f], fmax[f]))
    for pub, pairs_out in outs.items():
        a = np.stack([p[0] for p in pairs_out]).astype(np.float64)
        b = np.stack([p[1] for p in pairs_out]).astype(np.float64)
        cmp.outputs[pub] = {"snr_db": _snr_db(a, b - a), "max_abs_error": float(np.max(np.abs(b - a)))}
    first = next(iter(outs.values()), [])
    if first and first[0][0].size > 1:
        a = np.stack([p[0].reshape(-1) for p in first])
        b = np.stack([p[1].reshape(-1) for p in first])
        cmp.top1_agreement = float(np.mean(a.argmax(1) == b.argmax(1)))
        if labels is not None:
            lab = np.asarray(labels).reshape(-1)[:n]
            cmp.top1_float = float(np.mean(a.argmax(1) == lab))
            cmp.top1_int8 = float(np.mean(b.argmax(1) == lab))
    wf, af = _memory(gf)
    w8, a8 = _memory(g8)
    cmp.weights_bytes, cmp.arena_bytes = (wf, w8), (af, a8)
    return cmp


def comparison_markdown(c: Comparison, summary: Mapping[str, Any], title: str) -> str:
    def pct(v):
        return "n/a" if v is None else f"{100 * v:.2f}%"

    lines = [
        f"# tinyc quantization report: {md_text(title)}",
        "",
        f"Float graph vs int8 graph (tinyc's golden integer model, bit-exact with the generated C), "
        f"over {c.samples} calibration samples.",
        "",
        "| | float | int8 |",
        "|---|---:|---:|",
        f"| weights (flash) | {c.weights_bytes[0]:,} B | {c.weights_bytes[1]:,} B |",
        f"| arena (RAM) | {c.arena_bytes[0]:,} B | {c.arena_bytes[1]:,} B |",
        f"| top-1 vs labels | {pct(c.top1_float)} | {pct(c.top1_int8)} |",
        "",
        f"Top-1 agreement int8 vs float: {pct(c.top1_agreement)}",
        "",
    ]
    lines += ["| output | SNR (dB) | max abs error |", "|---|---:|---:|"]
    lines += [f"| {md_text(k)} | {v['snr_db']:.1f} | {v['max_abs_error']:.4g} |" for k, v in c.outputs.items()]
    lines += [
        "",
        "## Per layer (int8 output vs the float tensor it replaces)",
        "",
        "| layer | op | SNR (dB) | max abs error | max abs float |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [
        f"| {md_text(e.node)} | {e.op} | {e.snr_db:.1f} | {e.max_abs_error:.4g} | {e.max_abs_float:.4g} |"
        for e in c.layers
    ]
    lines += ["", summary_markdown(summary)]
    return "\n".join(lines) + "\n"
