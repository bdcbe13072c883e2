"""int8 model inputs and outputs: drop the boundary QuantizeLinear / DequantizeLinear.

By default a quantized model keeps its float interface (the first kernel quantizes, the last
dequantizes), as a QDQ model run by onnxruntime does. On a microcontroller that costs RAM: the
float input sits in the arena beside its int8 copy (VWW: 110,592 B of float next to 27,648 B of
int8). TFLite Micro's converted models take and give int8 (``inference_input_type=tf.int8``);
``io_dtype="int8"`` does the same here. The tensors keep their public names and carry their grid
(scale, zero point) in the manifest, so the host side quantizes float inputs and dequantizes
outputs with the golden arithmetic.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

import numpy as np

from tinyc.errors import UsageError
from tinyc.ir import Graph, Tensor
from tinyc.quantize.feeds import to_model_input  # noqa: F401  (re-exported: its home is feeds)
from tinyc.numerics.qparams import qparams_of

IO_DTYPES = ("float", "int8")


def make_io_int8(graph: Graph) -> None:
    """Rewrite a lowered graph in place so that each input is the int8 tensor its QuantizeLinear
    produced and each output the int8 tensor its DequantizeLinear read. Refuses (naming the tensor
    and node) where a boundary value is also used in float, so the result is never silently different."""
    graph.output_names = [pub for pub, _ in graph.public_outputs()]
    consumers = graph.consumers()
    for name in list(graph.inputs):
        users = consumers.get(name, [])
        float_users = [n for n in users if n.op != "QuantizeLinear"]
        if not users or float_users:
            who = (
                f"node '{float_users[0].name}' ({float_users[0].op}) reads it in float"
                if float_users
                else "it is unused"
            )
            raise UsageError(f"--io-dtype int8: input '{name}' cannot become int8: {who}")
        grids = {qparams_of(graph, n.outputs[0]) for n in users}
        if len(grids) > 1 or any(n.attrs.get("axis") is not None for n in users):
            raise UsageError(f"--io-dtype int8: input '{name}' is quantized to {len(grids)} different grids")
        qnames = [n.outputs[0] for n in users]
        quant = graph.tensor(qnames[0]).quant
        old = graph.tensor(name)
        graph.nodes = [n for n in graph.nodes if n not in users]
        for q in qnames:
            graph.replace_uses(q, name)
        graph.tensors[name] = Tensor(name, old.shape, "int8", None, quant)
    producers = graph.producers()
    consumers = graph.consumers()
    for i, out in enumerate(list(graph.outputs)):
        node = producers.get(out)
        if node is None or node.op != "DequantizeLinear":
            what = f"node '{node.name}' ({node.op})" if node is not None else "no node"
            raise UsageError(
                f"--io-dtype int8: output '{graph.output_names[i]}' is computed in float by {what}; "
                "only outputs of int8 layers can be int8"
            )
        graph.outputs[i] = node.inputs[0]
        if not consumers.get(out) and out not in graph.outputs:
            graph.nodes.remove(node)
    graph.remove_unused_tensors()


def io_quant(tensor: Tensor) -> dict[str, Any] | None:
    """The manifest's record of an int8 boundary tensor's grid (None for float tensors)."""
    q = tensor.quant
    if tensor.dtype not in ("int8", "uint8") or q is None or q.axis is not None:
        return None
    return {
        "scale": float(np.asarray(q.scale).reshape(-1)[0]),
        "zero_point": int(np.asarray(q.zero_point).reshape(-1)[0]),
    }


def to_float_output(spec: Mapping[str, Any], value: np.ndarray) -> np.ndarray:
    """An int8 output back on its real grid (for comparisons with a float reference)."""
    grid = spec.get("quant")
    if grid is None:
        return np.asarray(value)
    return (np.float32(grid["scale"]) * (np.asarray(value, np.int32) - int(grid["zero_point"]))).astype(np.float32)
