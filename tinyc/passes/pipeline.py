"""The pass pipeline between import and scheduling."""

from __future__ import annotations

from tinyc.errors import UsageError
from tinyc.ir import Graph
from tinyc.passes.cleanup import eliminate_dead_code, fold_constants, remove_identities
from tinyc.passes.fold import fold_affine_into_producers
from tinyc.passes.fuse import fuse_activations
from tinyc.passes.qdq import has_int8_annotations, propagate_through_moves, strip_qdq_pairs
from tinyc.passes.layout import (
    channels_last_io,
    convert_to_channels_last,
    fold_transpose_into_gemm,
    optimize_transposes,
    transposes_to_reshapes,
)

IO_LAYOUTS = ("onnx", "nhwc")


def run_passes(graph: Graph, io_layout: str = "onnx", int8: bool | None = False) -> Graph:
    """Optimise `graph` in place (and return it). io_layout 'onnx' keeps the model's own I/O
    layout; 'nhwc' drops the boundary transposes so the caller passes channels-last data.

    int8: None reads a QDQ model's Quantize/Dequantize pairs as int8 grids when it has any (and
    then prepares the graph for the int8 lowering); True prepares for int8 in any case (the caller
    will calibrate); False leaves Q/DQ nodes as float ops."""
    if io_layout not in IO_LAYOUTS:
        raise UsageError(f"--io-layout must be one of {', '.join(IO_LAYOUTS)}, got {io_layout!r}")
    if int8 is not False:
        strip_qdq_pairs(graph)
        int8 = bool(int8) or has_int8_annotations(graph)
        if int8:
            propagate_through_moves(graph)  # before the layout pass cancels boundary transposes
    remove_identities(graph)
    fold_constants(graph)
    eliminate_dead_code(graph)
    fold_affine_into_producers(graph)
    convert_to_channels_last(graph)
    optimize_transposes(graph)
    fold_transpose_into_gemm(graph)
    if io_layout == "nhwc":
        channels_last_io(graph)
    transposes_to_reshapes(graph)
    remove_identities(graph)
    fold_constants(graph)
    fold_affine_into_producers(graph)
    fuse_activations(graph, clamps_only=bool(int8))
    if int8:
        propagate_through_moves(graph)
    eliminate_dead_code(graph)
    graph.topological_sort()
    return graph
