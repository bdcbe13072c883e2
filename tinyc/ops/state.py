"""Which layers keep their state across inferences: a graph-wide switch over the ops that declare
``stateful`` (TFLite's LSTM and SVDF), set by ``tinyc compile --keep-state`` or the Python API."""

from __future__ import annotations

from tinyc.ir import Graph
from tinyc.ops.base import get_op


def set_keep_state(graph: Graph, keep: bool) -> int:
    """Make every recurrent node of `graph` keep (True) or reset (False, the default) its state.

    keep=False: each inference starts from the reset state (TFLite Micro after ``reset()``), so the
    same input always gives the same output. keep=True: the state carries over from one inference
    to the next, as when TFLite Micro's interpreter is invoked repeatedly without a reset (a stream
    of frames); the generated C keeps it in static arrays and the golden model keeps it per node.
    Call it on the imported graph before compiling (``tinyc.api.compile(..., keep_state=True)`` does).
    Returns the number of nodes changed."""
    n = 0
    for node in graph.nodes:
        if get_op(node.op).stateful:
            node.attrs["keep_state"] = bool(keep)
            n += 1
    return n
