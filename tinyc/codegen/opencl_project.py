"""What an OpenCL output folder holds: the program (`<prefix>.cl`), the packed weights
(`<prefix>_weights.bin`, uploaded once) and, for the manifest, the launch of every kernel and
where each model input/output sits in the arena.

The memory plan is the C target's: one device buffer for the arena at the same offsets, so the
same plan (and its checker) serves both; the weights blob packs every constant at the offsets the
emitter assigned (tinyc.codegen.emitter.WEIGHT_ALIGN)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.version import __version__
from tinyc.numerics.text import c_comment
from tinyc.codegen.opencl import program_source
from tinyc.codegen.opencl_host import graph_host_program_files, host_file_names
from tinyc.ir import Graph
from tinyc.memory import MemoryLayout

#: Schedule knob of every OpenCL kernel with a parallel loop: work-items per work-group
#: (0 lets the driver choose). tinyc.schedule adds it for the "opencl" target.
LOCAL_SIZE_KNOB = "local_size"


def weights_blob(graph: Graph, weights: list[dict[str, Any]]) -> bytes:
    """Every constant at its packed offset, in the element type its kernels read."""
    end = max((w["offset"] + max(1, w["bytes"]) for w in weights), default=0)
    blob = bytearray(max(end, 1))
    for w in weights:
        t = graph.tensor(w["tensor"])
        if t.data is None or not t.size:
            continue
        raw = np.ascontiguousarray(t.data).astype(np.uint8 if t.dtype == "bool" else t.data.dtype).tobytes()
        blob[w["offset"] : w["offset"] + len(raw)] = raw
    return bytes(blob)


def opencl_files(
    graph: Graph, gen: Any, layout: MemoryLayout, schedules: dict[str, dict[str, Any]], prefix: str
) -> tuple[dict[str, str], dict[str, bytes], dict[str, Any]]:
    """(text files, binary files, manifest entries) of an OpenCL build of `gen`."""
    # the model's name goes into the program's header comment: escaped (layer comments already are)
    source = program_source(
        prefix, c_comment(graph.name), __version__, [(layer.comment, layer.code) for layer in gen.layers]
    )
    kernels = []
    for layer in gen.layers:
        sched = schedules.get(layer.node.name, {})
        kernels.append(
            {
                "index": layer.index,
                "fn": layer.fn,
                "name": layer.node.source or layer.node.name,
                "op": layer.node.op,
                "global_size": layer.launch.global_size,
                "local_size": int(sched.get(LOCAL_SIZE_KNOB, 0)),
                # > 0: the kernel's third argument is __local memory of this many bytes
                "local_bytes": layer.launch.local_bytes,
            }
        )
    const_at = {w["tensor"]: w["offset"] for w in gen.weights}
    io = {
        "inputs": [{"offset": v["offset"], "bytes": v["bytes"]} for v in gen.inputs],
        "outputs": [
            {
                "offset": const_at[v["tensor"]] if v["const"] else v["offset"],
                "bytes": v["bytes"],
                "buffer": "weights" if v["const"] else "arena",
            }
            for v in gen.outputs
        ],
    }
    blob = weights_blob(graph, gen.weights)
    extra = {
        "opencl": {
            "program": f"{prefix}.cl",
            "weights": f"{prefix}_weights.bin",
            "cl_std": "CL1.2",
            "arena_bytes": layout.arena_bytes,
            "weights_bytes": len(blob),
            "kernels": kernels,
            **io,
        }
    }
    # the plain-C host program (tinyc.codegen.opencl_host), rendered from these same manifest entries
    texts = {f"{prefix}.cl": source, **graph_host_program_files(graph, prefix, extra["opencl"])}
    extra["opencl"]["host_program"] = host_file_names(prefix)
    return texts, {f"{prefix}_weights.bin": blob}, extra
