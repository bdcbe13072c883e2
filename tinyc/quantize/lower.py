"""The int8 lowering: a float graph whose activations carry int8 grids -> integer kernels.

Input: the graph after the float passes (channels-last, folded, clamps fused), where float
activation tensors may carry ``Tensor.quant`` (per-tensor; from a QDQ model's Quantize/Dequantize
pairs, or from calibration). Output: the same graph in which every node that has an int8 kernel
and annotated inputs/outputs is replaced by that kernel (built by the op modules' ``build_*``
functions, which derive all integer constants), and every other node stays float.

Values flow lazily between the two worlds: a float node that reads a tensor only available as
int8 gets a DequantizeLinear in front; an int8 node that reads a float tensor gets a
QuantizeLinear. The model keeps its float inputs and outputs (the first and last kernels are a
Quantize and a Dequantize), like a QDQ model run by onnxruntime. Nodes left in float are listed
in ``LoweringReport.float_nodes`` with the reason, for the report.

Which ops have an int8 form, and how it is built, each op declares (``OpDef.int8_kernel``,
``OpDef.int8_passthrough`` and ``OpDef.lower_int8``, which build through the services of
``tinyc.ops.base.Int8Lowering`` that this module implements). Scale-preserving ops (Reshape,
Transpose, Pad, Slice, Resize nearest, MaxPool, ...) move int8 values unchanged; when the model
wants a different grid on their output a QRequantize follows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node, Tensor
from tinyc.ops import get_op
from tinyc.ops.base import Clamp
from tinyc.numerics.fixed_point import choose_qparams
from tinyc.numerics.qparams import add_qconstant, add_qtensor, qparams_of, quantize_constant


@dataclass
class LoweringReport:
    """What the lowering did: which nodes became integer kernels, which stayed float and why."""

    int8_nodes: list[tuple[str, str]] = field(default_factory=list)  # (node, op)
    float_nodes: list[tuple[str, str, str]] = field(default_factory=list)  # (node, op, reason)
    quantize_nodes: int = 0
    dequantize_nodes: int = 0
    int8_of: dict[str, str] = field(default_factory=dict)  # float tensor -> int8 tensor


def _annotated(graph: Graph, name: str) -> bool:
    t = graph.tensor(name)
    q = t.quant
    return t.dtype == "float32" and q is not None and q.axis is None and np.asarray(q.scale).size == 1


def clamp_of(node: Node) -> tuple[bool, Clamp | None]:
    """(ok, clamp): a fused activation as a real clamp (lo, hi) for the int8 output clamp.
    Activations that are not clamps (``OpDef.activation_clamp`` None) cannot be folded (ok False)."""
    act = node.attrs.get("activation")
    if not act:
        return True, None
    clamp = get_op(act["op"]).activation_clamp(act.get("attrs", {}))
    return (True, clamp) if clamp is not None else (False, None)


class _Lowering:
    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.nodes: list[Node] = []
        self.report = LoweringReport()
        self.int8_of = self.report.int8_of
        self.fake_quant: dict[str, str] = {}
        self.float_ready: set[str] = set(graph.inputs) | {n for n, t in graph.tensors.items() if t.is_constant}

    # -- the two worlds ---------------------------------------------------------------------
    def quantizable(self, name: str) -> bool:
        if name in self.int8_of:
            return True
        t = self.g.tensor(name)
        if t.is_constant:
            return t.dtype == "float32" and t.size > 0
        return _annotated(self.g, name)

    def as_int8(self, name: str) -> str:
        if name in self.int8_of:
            return self.int8_of[name]
        t = self.g.tensor(name)
        if t.data is not None:  # a constant
            if t.quant is not None and _annotated_const(t):
                s, zp = (
                    float(np.asarray(t.quant.scale).reshape(-1)[0]),
                    int(np.asarray(t.quant.zero_point).reshape(-1)[0]),
                )
            else:
                data = np.asarray(t.data, np.float32)
                s_arr, zp_arr = choose_qparams(np.float32(data.min()), np.float32(data.max()))
                s, zp = float(s_arr), int(zp_arr)
            qn = add_qconstant(self.g, f"{name}_q", quantize_constant(t.data, s, zp), s, zp)
            self.int8_of[name] = qn
            return qn
        s, zp = qparams_of(self.g, name)
        qn = self.g.unique_name(f"{name}_q")
        add_qtensor(self.g, qn, t.shape, s, zp)
        self.nodes.append(
            Node(
                self.g.unique_name(f"{name}_quantize"),
                "QuantizeLinear",
                [name],
                [qn],
                {"axis": None, "scale": float(np.float32(s)), "zp": int(zp), "qdtype": "int8"},
                source=name,
            )
        )
        self.report.quantize_nodes += 1
        self.int8_of[name] = qn
        return qn

    def as_float(self, name: str) -> str:
        """The float value a float consumer reads. A tensor on an int8 grid is read through that
        grid (Dequantize(Quantize(x)), as a QDQ model means it), even where x exists in float."""
        if not name or self.g.tensor(name).is_constant:
            return name
        if name in self.fake_quant:
            return self.fake_quant[name]
        if name not in self.float_ready:
            if name not in self.int8_of:
                return name
            self._dequantize(self.int8_of[name], name)
            self.float_ready.add(name)
            return name
        if not _annotated(self.g, name):
            return name
        qn = self.as_int8(name)
        fq = self.g.unique_name(f"{name}_dq")
        t = self.g.tensor(name)
        self.g.add_tensor(Tensor(fq, t.shape, "float32"))
        self._dequantize(qn, fq)
        self.fake_quant[name] = fq
        return fq

    def _dequantize(self, qn: str, out: str) -> None:
        s, zp = qparams_of(self.g, qn)
        self.nodes.append(
            Node(
                self.g.unique_name(f"{out}_dequantize"),
                "DequantizeLinear",
                [qn],
                [out],
                {"axis": None, "scale": float(np.float32(s)), "zp": int(zp)},
                source=out,
            )
        )
        self.report.dequantize_nodes += 1

    def int8_output(self, name: str, params: tuple[float, int] | None = None) -> str:
        """A new int8 tensor standing for float tensor `name` (its annotation, or `params`)."""
        s, zp = params if params is not None else qparams_of(self.g, name)
        qn = self.g.unique_name(f"{name}_q")
        add_qtensor(self.g, qn, self.g.tensor(name).shape, s, zp)
        return qn

    def emit(self, node: Node, float_out: str, int8_out: str) -> None:
        self.nodes.append(node)
        for out, (shape, dtype) in zip(node.outputs, get_op(node.op).infer(node, self.g)):
            t = self.g.tensor(out)
            if tuple(shape) != tuple(t.shape) or dtype != t.dtype:
                raise UnsupportedError(
                    f"int8 lowering of '{node.source or node.name}' ({node.op}) gave "
                    f"{dtype}{list(shape)}, expected {t.dtype}{list(t.shape)}"
                )
        self.int8_of[float_out] = int8_out

    def preserving(self, node: Node, x_q: str, build: Callable[[str], Node]) -> None:
        """An op whose int8 output has the input's grid; requantize if the model wants another."""
        out = node.outputs[0]
        same = qparams_of(self.g, x_q)
        first = self.int8_output(out, same)
        self.emit(build(first), out, first)
        if _annotated(self.g, out) and qparams_of(self.g, out) != same:
            from tinyc.ops.qelementwise import build_qrequantize

            final = self.int8_output(out)
            self.emit(
                build_qrequantize(self.g, self.g.unique_name(f"{node.name}_requant"), first, final, source=node.source),
                out,
                final,
            )

    # -- driver -----------------------------------------------------------------------------
    def run(self) -> LoweringReport:
        for node in list(self.g.nodes):
            reason = self.try_int8(node)
            if reason is None:
                self.report.int8_nodes.append((node.name, node.op))
                continue
            node.inputs = [self.as_float(i) for i in node.inputs]
            self.nodes.append(node)
            self.float_ready.update(o for o in node.outputs if o)
            if node.op not in ("QuantizeLinear", "DequantizeLinear") and any(
                self.g.tensor(o).dtype == "float32" for o in node.outputs if o
            ):
                self.report.float_nodes.append((node.name, node.op, reason))
        if not self.g.output_names:
            self.g.output_names = list(self.g.outputs)
        self.g.outputs = [self.as_float(out) for out in self.g.outputs]
        self.g.nodes = self.nodes
        from tinyc.passes.cleanup import eliminate_dead_code

        eliminate_dead_code(self.g)
        self.g.topological_sort()
        return self.report

    def try_int8(self, node: Node) -> str | None:
        """Replace `node` by int8 kernels (``OpDef.lower_int8``); None when done, else why it stays float."""
        opdef = get_op(node.op)
        if not (opdef.int8_kernel or opdef.int8_passthrough):
            return f"no int8 kernel for {node.op}"
        data = [i for i in node.inputs if i and not self.g.tensor(i).is_constant]
        if any(self.g.tensor(i).dtype != "float32" and i not in self.int8_of for i in data):
            return "not a float op"
        missing = [i for i in data if not self.quantizable(i)]
        if missing:
            return f"input '{missing[0]}' has no int8 grid"
        return opdef.lower_int8(node, self)

    # -- services for the ops' lower_int8 (tinyc.ops.base.Int8Lowering) ---------------------------
    def needs_output(self, node: Node) -> str | None:
        if not _annotated(self.g, node.outputs[0]):
            return f"output '{node.outputs[0]}' has no int8 grid"
        return None

    def fused_clamp(self, node: Node) -> tuple[bool, Clamp | None]:
        return clamp_of(node)

    def lower_weighted(
        self, node: Node, build: Callable[..., Node], shape_check: Callable[[Any, Any], str | None], *extra: Any
    ) -> str | None:
        """Conv and fully connected: constant float weights/bias quantized by the builder, clamp fused."""
        g = self.g
        ok, clamp = clamp_of(node)
        if not ok:
            return f"fused {node.attrs['activation']['op']} is not a clamp"
        w = g.tensor(node.inputs[1])
        b = g.tensor(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if not w.is_constant or (b is not None and not b.is_constant):
            return "weights or bias not constant"
        why = shape_check(w, b) or self.needs_output(node)
        if why:
            return why
        x_q = self.as_int8(node.inputs[0])
        out = node.outputs[0]
        y_q = self.int8_output(out)
        self.emit(
            build(g, node.name, x_q, w.name, b.name if b is not None else None, y_q, *extra, clamp, source=node.source),
            out,
            y_q,
        )
        return None

    def lookup_table(self, node: Node) -> str | None:
        """Any elementwise unary op: an int8 -> int8 table of its numpy reference (QLut)."""
        from tinyc.ops.qelementwise import build_qlut

        why = self.needs_output(node)
        if why:
            return why
        opdef = get_op(node.op)
        g = self.g

        def fn(v: np.ndarray) -> np.ndarray:
            with np.errstate(all="ignore"):
                return np.asarray(opdef.reference(node, g, [np.asarray(v, np.float32)])[0], np.float64)

        x_q = self.as_int8(node.inputs[0])
        out = node.outputs[0]
        y_q = self.int8_output(out)
        self.emit(build_qlut(g, node.name, x_q, y_q, fn, source=node.source), out, y_q)
        return None

    def move_unchanged(
        self, node: Node, attrs_for: Callable[[tuple[float, int]], dict[str, Any]] | None = None
    ) -> str | None:
        """Reshape-family and selection ops: the int8 values move unchanged (same grid);
        `attrs_for(grid)` gives attrs that change with the grid (a Pad value)."""
        g = self.g
        extra = [i for i in node.inputs[1:] if i]
        if any(not g.tensor(i).is_constant for i in extra):
            return "data-dependent second input"
        x_q = self.as_int8(node.inputs[0])
        same = qparams_of(g, x_q)
        if len([o for o in node.outputs if o]) > 1:  # Split: every output on the input grid
            outs = [self.int8_output(o, same) if o else "" for o in node.outputs]
            new = _clone_int8(node, [x_q] + node.inputs[1:], outs)
            self.nodes.append(new)
            for o, oq in zip(node.outputs, outs):
                if o:
                    self.int8_of[o] = oq
            return None
        attrs = attrs_for(same) if attrs_for is not None else {}
        self.preserving(node, x_q, lambda y: _clone_int8(node, [x_q] + node.inputs[1:], [y], **attrs))
        return None


def _annotated_const(t: Any) -> bool:
    q = t.quant
    return q is not None and q.axis is None and np.asarray(q.scale).size == 1


def _clone_int8(node: Node, inputs: list[str], outputs: list[str], **attrs: Any) -> Node:
    return Node(node.name, node.op, inputs, outputs, dict(node.attrs, **attrs), source=node.source)


def lower_to_int8(graph: Graph) -> LoweringReport:
    """Rewrite `graph` in place (see the module docstring); returns what was done."""
    return _Lowering(graph).run()
