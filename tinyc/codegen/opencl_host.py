"""The plain-C host program of an OpenCL output folder: a C99 library over the OpenCL C API
(`<prefix>_cl.h/.c`), a command-line runner (`<prefix>_cl_main.c`) and a CMakeLists.txt, so a
compiled model can ship and run without Python.

Everything is rendered from the manifest (tinyc.json's I/O specs and its "opencl" entry) rather
than from the .cl source: the kernel table, buffer sizes and I/O offsets are the ones the Python
runner reads, so both launch the same kernels the same way. Taking the manifest (not the graph)
also lets a test render the host code for an edited manifest (e.g. a buffer no device allocates)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any
from collections.abc import Mapping

import jinja2

from tinyc.version import __version__
from tinyc.codegen.emitter import register_filters
from tinyc.numerics.text import c_identifier, c_prefix
from tinyc.ir import Graph
from tinyc.resources import templates_dir

#: Template (under templates/project/opencl_host/) of each generated file; {prefix} is the model's.
TEMPLATES = {
    "{prefix}_cl.h": "model_cl.h.j2",
    "{prefix}_cl.c": "model_cl.c.j2",
    "{prefix}_cl_main.c": "model_cl_main.c.j2",
    "CMakeLists.txt": "CMakeLists.txt.j2",
}


def host_file_names(prefix: str) -> dict[str, str]:
    """Role -> file name, as the manifest's "opencl" -> "host_program" entry lists them."""
    return {
        "header": f"{prefix}_cl.h",
        "library": f"{prefix}_cl.c",
        "main": f"{prefix}_cl_main.c",
        "cmake": "CMakeLists.txt",
        "executable": f"{prefix}_cl",
    }


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    """One environment per process: the ONNX suite compiles hundreds of OpenCL folders."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    return register_filters(env)  # c_string, c_comment: model-given names are escaped


def _tensors(specs: list[Mapping[str, Any]], places: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The I/O specs (name, dtype, shape) joined with where the opencl entry puts them."""
    if len(specs) != len(places):
        raise ValueError(f"manifest lists {len(specs)} tensors but its opencl entry places {len(places)}")
    return [
        {
            "name": s["name"],
            "ident": c_identifier(s["name"], "tensor"),
            "dtype": s["dtype"],
            "shape": "[" + ", ".join(str(int(d)) for d in s["shape"]) + "]",
            "bytes": int(p["bytes"]),
            "offset": int(p["offset"]),
            "in_weights": p.get("buffer", "arena") == "weights",
        }
        for s, p in zip(specs, places)
    ]


def host_program_files(manifest: Mapping[str, Any]) -> dict[str, str]:
    """File name -> text of the host program for an OpenCL manifest (prefix, model, inputs,
    outputs and the "opencl" entry with program, weights, arena/weights bytes, kernels and the
    I/O placements). A kernel's "local_bytes" (its __local scratch) defaults to 0."""
    prefix = c_prefix(str(manifest["prefix"]))  # tinyc's own already; an edited manifest's made one
    spec = manifest["opencl"]
    kernels = [
        {
            "index": int(k["index"]),
            "fn": k["fn"],
            "name": k["name"],
            "op": k["op"],
            "global_size": max(1, int(k["global_size"])),
            "local_size": max(0, int(k.get("local_size") or 0)),
            "local_bytes": max(0, int(k.get("local_bytes") or 0)),
        }
        for k in spec["kernels"]
    ]
    context = {
        "prefix": prefix,
        "P": prefix.upper(),
        "model": manifest.get("model", prefix),
        "version": __version__,
        "program": spec["program"],
        "weights": spec["weights"],
        "arena_bytes": int(spec["arena_bytes"]),
        "weights_bytes": int(spec["weights_bytes"]),
        "kernels": kernels,
        "inputs": _tensors(manifest["inputs"], spec["inputs"]),
        "outputs": _tensors(manifest["outputs"], spec["outputs"]),
    }
    env = _env()
    return {
        name.format(prefix=prefix): env.get_template(f"project/opencl_host/{template}").render(**context)
        for name, template in TEMPLATES.items()
    }


def graph_host_program_files(graph: Graph, prefix: str, opencl: Mapping[str, Any]) -> dict[str, str]:
    """`host_program_files` while the manifest is still being built (tinyc.codegen.opencl_project):
    the I/O specs come from the graph, in the manifest's order (inputs, then public outputs)."""

    def spec(public: str, internal: str) -> dict[str, Any]:
        t = graph.tensor(internal)
        return {"name": public, "dtype": t.dtype, "shape": list(t.shape)}

    return host_program_files(
        {
            "prefix": prefix,
            "model": graph.name,
            "opencl": opencl,
            "inputs": [spec(n, n) for n in graph.inputs],
            "outputs": [spec(pub, n) for pub, n in graph.public_outputs()],
        }
    )
