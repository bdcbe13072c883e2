"""Narrow-typed nodes computed in a wide type: float16 / bfloat16 (and the other narrow types of
tinyc/numerics/dtypes.py) are stored as such, but an op whose kernel lacks them is imported on
widened copies of its inputs and its outputs are narrowed back.

A float16 input of such a node becomes a Cast to float32 (exact), the node is imported on it, and
each float32 output gets a Cast back to float16 under the ONNX name: one rounding at the end, as
onnxruntime computes most float16 ops through float32 on CPUs. Narrow integers (int4, int2) widen to
int8/uint8 the same way (exact both ways). Constant inputs fold at once, so weights are converted at
import. Ops whose kernel declares the narrow type in its `dtypes` (Cast, data movement) and
reshape-like aliases keep it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import onnx

from tinyc.ir import Graph, Node
from tinyc.errors import UnsupportedError
from tinyc.numerics.dtypes import is_narrow, is_narrow_float

#: The wide type each narrow type is computed in.
WIDE = {"int4": "int8", "int2": "int8", "uint4": "uint8", "uint2": "uint8"}
#: ONNX op types that only read shapes (never the elements): nothing to widen.
_SHAPE_ONLY = ("Shape", "Size")
#: Ops that ONNX (its reference, and so the test data) computes step by step in the narrow float type,
#: rounding after each step (Softmax: x - max, exp, sum, divide). Widened as one op they round once,
#: which is more accurate but not what the model means; refused here, the importer imports their
#: function body instead, whose steps are widened one by one and round as ONNX does.
STEPWISE = ("Softmax", "LogSoftmax")
#: Reductions ONNX's reference accumulates in bfloat16 itself (ml_dtypes' add, one rounding per
#: element, in order); a float32 accumulator rounded once differs by more than the tests allow.
#: (ReduceSum has that bfloat16 kernel: tinyc/ops/reduce.py.)
BF16_ACCUMULATING = (
    "ReduceMean",
    "ReduceSumSquare",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "Attention",
)  # fmt: skip  (Attention: bfloat16 matmuls and a stepwise softmax)


def wide_type(dtype: str) -> str:
    return WIDE.get(dtype, "float32")


@dataclass
class Widened:
    """A node imported on widened inputs: `node` is the copy to import; `finish` narrows back."""

    node: onnx.NodeProto
    #: wide type -> the narrow type the node's outputs of that type go back to
    back: dict[str, str] = field(default_factory=dict)
    #: ONNX output name -> the temporary name the widened import writes
    renamed: dict[str, str] = field(default_factory=dict)


def needs_widening(
    g: Graph, onode: onnx.NodeProto, dtypes: tuple[str, ...], alias: bool, node_name: str = ""
) -> list[int]:
    """Indices of the node's inputs to widen (narrow types its kernel does not declare)."""
    if alias or onode.op_type in _SHAPE_ONLY:
        return []
    which = [
        k
        for k, name in enumerate(onode.input)
        if name and is_narrow(g.tensor(name).dtype) and g.tensor(name).dtype not in dtypes
    ]
    if which and onode.op_type in STEPWISE and is_narrow_float(g.tensor(onode.input[which[0]]).dtype):
        raise UnsupportedError(
            f"node '{node_name or onode.name}' ({onode.op_type}): {g.tensor(onode.input[which[0]]).dtype} "
            f"{onode.op_type}: ONNX rounds to {g.tensor(onode.input[which[0]]).dtype} after every step (its "
            "function body); one float32 kernel would round once"
        )
    if which and onode.op_type in BF16_ACCUMULATING and g.tensor(onode.input[0]).dtype == "bfloat16":
        raise UnsupportedError(
            f"node '{node_name or onode.name}' ({onode.op_type}): bfloat16 {onode.op_type} accumulates in "
            "bfloat16 in ONNX (a rounding per element); tinyc accumulates in float32"
        )
    return which


def widen_inputs(
    g: Graph, onode: onnx.NodeProto, which: list[int], node_name: str, add: Callable[[Graph, Node], None]
) -> Widened:
    """Cast the inputs `which` to their wide type (constants fold); rename the outputs."""
    new = onnx.NodeProto()
    new.CopyFrom(onode)
    w = Widened(new)
    done: dict[str, str] = {}
    for k in which:
        name = onode.input[k]
        if name not in done:
            narrow = g.tensor(name).dtype
            wide = wide_type(narrow)
            w.back.setdefault(wide, narrow)
            done[name] = g.unique_name(f"{name}__{wide}")
            add(g, Node(g.unique_name(f"{node_name}__widen{k}"), "Cast", [name], [done[name]], {"to": wide}, node_name))
        new.input[k] = done[name]
    for j, out in enumerate(onode.output):
        if out:
            w.renamed[out] = g.unique_name(f"{out}__wide")
            new.output[j] = w.renamed[out]
    return w


def narrow_outputs(g: Graph, w: Widened, node_name: str, add: Callable[[Graph, Node], None]) -> None:
    """Give each ONNX output its name back: a Cast to the narrow type for a widened output type,
    an Identity (an alias, no code) for any other."""
    for k, (out, tmp) in enumerate(w.renamed.items()):
        if tmp not in g.tensors:
            continue
        dtype = g.tensor(tmp).dtype
        if dtype in w.back:
            node = Node(
                g.unique_name(f"{node_name}__narrow{k}"), "Cast", [tmp], [out], {"to": w.back[dtype], "saturate": False}
            )
        else:
            node = Node(g.unique_name(f"{node_name}__out{k}"), "Identity", [tmp], [out])
        node.source = node_name
        add(g, node)
