"""The pass pipeline between import and scheduling."""
from __future__ import annotations

from tinyc.errors import UsageError
from tinyc.ir import Graph
from tinyc.passes.cleanup import eliminate_dead_code, fold_constants, remove_identities
from tinyc.passes.fold import fold_affine_into_producers
from tinyc.passes.fuse import fuse_activations
from tinyc.passes.layout import (channels_last_io, convert_to_channels_last, fold_transpose_into_gemm,
                                 optimize_transposes, transposes_to_reshapes)

IO_LAYOUTS = ("onnx", "nhwc")


def run_passes(graph: Graph, io_layout: str = "onnx") -> Graph:
    """Optimise `graph` in place (and return it). io_layout 'onnx' keeps the model's own I/O
    layout; 'nhwc' drops the boundary transposes so the caller passes channels-last data."""
    if io_layout not in IO_LAYOUTS:
        raise UsageError(f"--io-layout must be one of {', '.join(IO_LAYOUTS)}, got {io_layout!r}")
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
    fuse_activations(graph)
    eliminate_dead_code(graph)
    graph.topological_sort()
    return graph
