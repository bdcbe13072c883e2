"""Post-training quantization end to end: calibrate -> annotate int8 grids -> lower to int8 kernels.

One path serves both inputs: a QDQ model arrives with its grids already on the tensors (read by
``passes.qdq``), a float model gets them from calibration here. The scheme is TFLite's / CMSIS-NN's
(docs/quantization.md): activations int8 asymmetric per tensor, weights int8 symmetric per output
channel (chosen by the kernel builders), int32 bias, fixed-point requantization.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Mapping

import numpy as np

from tinyc.ir import Graph
from tinyc.numerics.fixed_point import choose_qparams
from tinyc.quantize.calibrate import TensorRange, collect_ranges
from tinyc.ops.rounding import set_requant_rounding
from tinyc.ops import get_op
from tinyc.quantize.lower import LoweringReport, lower_to_int8
from tinyc.numerics.qparams import per_tensor

QUANTIZE_MODES = ("auto", "int8", "none")


@dataclass
class QuantizationResult:
    """The float graph (after passes, annotated), the int8 graph and how it was made."""

    float_graph: Graph
    graph: Graph
    lowering: LoweringReport
    ranges: dict[str, TensorRange] = field(default_factory=dict)
    method: str | None = None
    samples: int = 0


def annotate_from_ranges(graph: Graph, ranges: Mapping[str, TensorRange]) -> None:
    """Give every calibrated float activation without a grid the int8 grid of its range; ops
    that move values keep their input's grid (``OpDef.keeps_input_grid``: no requantization),
    ops that fix their output grid get it (``OpDef.fixed_int8_grid``: Softmax 1/256)."""
    for name, r in ranges.items():
        t = graph.tensors.get(name)
        if t is None or t.quant is not None:
            continue
        s, zp = choose_qparams(np.float32(r.min), np.float32(r.max))
        t.quant = per_tensor(float(s), int(zp))
    for node in graph.nodes:
        out = graph.tensor(node.outputs[0]) if node.outputs and node.outputs[0] else None
        if out is None or out.dtype != "float32" or node.outputs[0] not in ranges:
            continue
        opdef = get_op(node.op)
        fixed = opdef.fixed_int8_grid(node)
        if fixed is not None:
            out.quant = per_tensor(*fixed)
            continue
        src = graph.tensor(node.inputs[0])
        if opdef.keeps_input_grid(node) and src.quant is not None and not src.is_constant:
            for o in node.outputs:
                if o and o in ranges:
                    graph.tensor(o).quant = src.quant


def quantize_graph(
    graph: Graph, calib: Any = None, method: str = "minmax", progress: bool = True, **calib_options: Any
) -> QuantizationResult:
    """Lower a float graph (after the passes) to int8. With `calib`, every activation is
    calibrated first (tensors that already have a grid, from a QDQ model, keep it)."""
    ranges: dict[str, TensorRange] = {}
    samples = 0
    if calib is not None:
        ranges = collect_ranges(graph, calib, method=method, progress=progress, **calib_options)
        samples = int(next(iter(ranges.values())).extra.get("samples", 0)) if ranges else 0
        annotate_from_ranges(graph, ranges)
    float_graph = graph.copy()
    lowering = lower_to_int8(graph)
    # a model quantized by tinyc follows TFLite's arithmetic; one quantized elsewhere (its scales
    # used as given) follows ONNX's: see ops.rounding.set_requant_rounding
    set_requant_rounding(graph, "tflite" if calib is not None else "half_even")
    return QuantizationResult(float_graph, graph, lowering, ranges, method if calib is not None else None, samples)
