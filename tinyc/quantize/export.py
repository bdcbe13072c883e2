"""Export a float ONNX model plus calibrated activation ranges as a QDQ ONNX model.

``export_qdq(model, ranges)`` writes the int8 scheme of ``docs/quantization.md`` (TFLite / CMSIS-NN)
in the QDQ format of ``onnxruntime.quantization.quantize_static(quant_format=QuantFormat.QDQ,
activation_type=QInt8, weight_type=QInt8, per_channel=True)``, with the same tensor, node and
initializer names, so the result runs on onnxruntime, compares with onnxruntime's own quantizer and
feeds tinyc's QDQ importer.

What the exported graph looks like::

    x ─► Q ─► DQ ─► Conv ─► Relu ─► Q ─► DQ ─► Add ─► Q ─► DQ ─► ... ─► Gemm ─► Q ─► DQ ─► y
                     ▲  ▲                        ▲                       ▲  ▲
         w_int8 ─► DQ   b_int32 ─► DQ     c_int8 ─► DQ        w_int8 ─► DQ  b_int32 ─► DQ

* **Activations** (graph inputs and node outputs named in ``ranges``, float32, not in ``keep_float``):
  ``t -> QuantizeLinear -> DequantizeLinear -> (every former consumer)``; int8 per tensor, asymmetric,
  ``(scale, zp) = arith.choose_qparams(lo, hi)`` (the range widened to include 0). Scale and zero
  point are the initializers ``t_scale`` (float32) and ``t_zero_point`` (int8); the nodes are
  ``t_QuantizeLinear`` / ``t_DequantizeLinear`` with outputs ``t_QuantizeLinear_Output`` /
  ``t_DequantizeLinear_Output``. A graph output keeps its name and stays float: its producer's output
  is renamed ``t_QuantizeLinear_Input`` and the DequantizeLinear writes ``t``.
* **Weights** (``OpDef.onnx_weight_axis``): Conv (input 1, per output channel, axis 0),
  ConvTranspose (axis 1), Gemm (input 1, per output column: axis 0 when transB=1 else 1) and
  MatMul with a constant 2-D B (axis 1): int8 symmetric in [-127, 127] with zero point 0
  (``arith.quantize_weights_per_channel``), stored
  as ``w_quantized`` + ``w_scale`` [C] + ``w_zero_point`` [C] -> ``DequantizeLinear(axis)`` ->
  ``w_DequantizeLinear_Output``. ``per_channel=False`` gives one scale per tensor (no axis).
* **Bias** of Conv/ConvTranspose/Gemm (constant, and only when input 0 is quantized): int32 with scale
  ``s_x * s_w[c]`` and zero point 0 (``arith.quantize_bias``), stored as ``b_quantized`` +
  ``b_quantized_scale`` + ``b_quantized_zero_point`` -> DequantizeLinear -> ``b`` (the bias keeps its
  name). Gemm's ``beta`` is folded into the bias (the node gets beta=1); a scalar or (1, N) Gemm bias
  becomes a [N] vector so that it can carry one scale per output column. Where ``b / (s_x * s_w)``
  would overflow int32 (a dead channel: weights ~0, bias not, as BatchNorm folding leaves them), the
  weight scale of that channel is enlarged first so that the bias fits (onnxruntime's and TFLite's
  rule, same float steps as onnxruntime): otherwise the bias would saturate and the channel lose it.
* **Other float constants** consumed by Add, Mul or Concat (``OpDef.quantizes_constant_operands``):
  int8 per tensor, asymmetric, from the constant's own min/max (``c_quantized`` ->
  DequantizeLinear -> ``c_DequantizeLinear_Output``).
  Constants of any other op (Clip bounds, Pad values, Reshape shapes...) stay as they are.
* **Relu / Clip right after a producer that tinyc fuses activations into** (Conv, ConvTranspose,
  Gemm, MatMul, Add, Sub, Mul: ``OpDef.fuses_onnx_activation``): the activation node is kept, and
  when the producer's output has no other consumer (and is not a graph output) no Q/DQ pair is put between
  them; the pair after the activation carries the range. onnxruntime quantizes only after the
  activation too (it deletes the activation node, relying on the output's clamp).
* Like onnxruntime: a Softmax output's range is [0, 1]; a Relu/Clip input with no other consumer
  takes the activation output's range; the outputs of data-movement ops
  (``OpDef.qdq_shares_qparams``: Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Slice, Split,
  Gather, MaxPool, AveragePool, Resize, TopK, Pad with
  edge/reflect/wrap or zero constant) share their data input's scale and zero point (the same
  initializers) when that input is quantized.

Differences from onnxruntime's quantizer (``quantize_static``, QDQ, QInt8/QInt8, per_channel=True):

* The set of quantized activations is exactly the float tensors named in ``ranges`` (minus
  ``keep_float``), whatever op produces or consumes them; onnxruntime quantizes only inputs and
  outputs of the op types it knows, and a data-movement op (e.g. a leading Reshape of a graph input)
  quantizes its input only when something before it already did. So tinyc may quantize a graph
  input feeding a Reshape (the MLPerf KWS model's ``input_1``) that onnxruntime leaves float, and
  tensors between ops onnxruntime does not know (Sub, Div, Exp...). Pass fewer names to get fewer.
* Relu/Clip are kept in the graph (onnxruntime removes them). After a producer outside
  those (e.g. MaxPool -> Relu) the pair on the producer's output is kept too.
* A Relu/Clip input that is also a graph output keeps its own range (onnxruntime gives it the
  activation's range, which clamps the graph output).
* Bias: the division is float32 (``arith.quantize_bias``); onnxruntime divides in float64, so a
  bias value can differ by 1 (by up to half a float32 ulp, i.e. <= 128, for values near 2^31).
* Activation scales are computed in float32 (``arith.choose_qparams``); onnxruntime computes in
  float64 and rounds to float32: a scale can differ by 1 ulp (a zero point by 1 in that case).
* Constant operands of ops other than Add/Mul/Concat, MatMul constant A, and non-2-D MatMul B stay
  float (onnxruntime quantizes float initializers of every op it quantizes). A Conv/Gemm whose
  input is not quantized keeps a float bias (onnxruntime fails on it); a Gemm bias of shape (M, N)
  stays float. ConvTranspose with group > 1 gets a correct bias scale (tiled weight scales).
* Models below opset 13 are converted with ``onnx.version_converter`` (per-axis DequantizeLinear
  needs 13); onnxruntime converts only below opset 10 (to 11) and writes per-axis DequantizeLinear
  into opset-11/12 models anyway.
* Gemm with beta != 1: the int32 bias holds beta * C and beta becomes 1; onnxruntime's bias scale
  includes beta but the stored bias is C, so with beta set to 1 its model computes A*B + C.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tinyc.errors import UnsupportedError, UsageError
from tinyc.numerics.fixed_point import (
    INT8_MAX,
    INT8_MIN,
    INT32_MAX,
    INT32_MIN,
    WEIGHT_QMAX,
    WEIGHT_QMIN,
    choose_qparams,
    quantize,
    quantize_bias,
    quantize_weights_per_channel,
)
from tinyc.ops import onnx_op

MIN_OPSET = 13  # per-axis DequantizeLinear


def _fuses_activation(op_type: str) -> bool:
    """tinyc fuses a Relu/Clip that follows this ONNX op (``OpDef.fuses_onnx_activation``)."""
    opdef = onnx_op(op_type)
    return opdef is not None and opdef.fuses_onnx_activation()


def _is_clamp(op_type: str) -> bool:
    """A Relu/Clip: an activation an int8 kernel folds into its clamp (``OpDef.activation_clamp``)."""
    opdef = onnx_op(op_type)
    return opdef is not None and opdef.activation_clamp({}) is not None


def _shares_qparams(op_type: str) -> bool:
    """The output takes its data input's (scale, zero point) (``OpDef.qdq_shares_qparams``)."""
    opdef = onnx_op(op_type)
    return opdef is not None and op_type in opdef.qdq_shares_qparams


def _quantizes_constants(op_type: str) -> bool:
    """Float constant operands become int8 (``OpDef.quantizes_constant_operands``)."""
    opdef = onnx_op(op_type)
    return opdef is not None and opdef.quantizes_constant_operands


@dataclass(frozen=True)
class _QP:
    scale: np.float32
    zero_point: int
    scale_name: str
    zp_name: str


def export_qdq(
    model: onnx.ModelProto, ranges: Mapping[str, Any], per_channel: bool = True, keep_float: Collection[str] = ()
) -> onnx.ModelProto:
    """A QDQ copy of the float `model` (see the module docstring for the exact graph).

    ranges: calibrated real range per activation, keyed by ONNX value name (graph inputs and node
    outputs): ``(lo, hi)`` pairs or objects with ``.min``/``.max`` (``calibrate.TensorRange``).
    Names missing from `ranges` stay float. per_channel: one weight scale per output channel (else
    per tensor). keep_float: value names (activations, weights, biases, constants) left float.
    The input model is not modified.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    _ensure_opset(m)
    return _Exporter(m, ranges, per_channel, set(keep_float)).run()


# ----------------------------------------------------------------------------------------------


def _ensure_opset(m: onnx.ModelProto) -> None:
    ver = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    if ver is None:
        raise UnsupportedError("model imports no default-domain (ai.onnx) opset")
    if ver >= MIN_OPSET:
        return
    from onnx import version_converter

    try:
        conv = version_converter.convert_version(m, MIN_OPSET)
    except Exception as e:
        raise UnsupportedError(
            f"QDQ export needs opset >= {MIN_OPSET} (per-axis DequantizeLinear); converting "
            f"this opset-{ver} model failed: {e}"
        ) from e
    m.CopyFrom(conv)


def _as_range(name: str, r: Any) -> tuple[np.float32, np.float32]:
    if hasattr(r, "min") and hasattr(r, "max") and not isinstance(r, np.ndarray):
        lo, hi = r.min, r.max
    else:
        try:
            lo, hi = r
        except (TypeError, ValueError) as e:
            raise UsageError(f"range of '{name}' must be (lo, hi), got {r!r}") from e
    lo, hi = np.float32(lo), np.float32(hi)
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo > hi:
        raise UsageError(f"range of '{name}' must be finite with lo <= hi, got ({lo}, {hi})")
    return lo, hi


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _copy_node(n: onnx.NodeProto) -> onnx.NodeProto:
    c = onnx.NodeProto()
    c.CopyFrom(n)
    return c


def _adjust_for_bias(s_w: np.ndarray, b: np.ndarray, s_x: np.float32) -> np.ndarray:
    """Enlarge weight scales so that the int32 bias b / (s_x * s_w) cannot saturate (onnxruntime's
    ``_adjust_weight_scale_for_int32_bias``, after TFLite): a channel whose weights are ~0 but
    whose bias is not (a dead channel after BatchNorm folding) would otherwise lose its bias.
    s_w: [C] per channel (C = len(b), or len(b) / groups for a grouped ConvTranspose) or [1]."""
    qrange = float(INT32_MAX) - float(INT32_MIN + 1)
    sx = float(np.float32(s_x))
    s = s_w.astype(np.float32).copy()
    # the float32 / float64 steps are onnxruntime's, so that the adjusted scales are the same floats
    if s.size == 1:
        absmax = max(abs(min(float(b.min()), 0.0)), abs(max(float(b.max()), 0.0)))
        smallest = np.array([1.0001 * (2.0 * absmax) / qrange])
    else:
        need = np.abs(b.astype(np.float32)).reshape(-1, s.size).max(axis=0)  # groups fold onto weight channels
        smallest = (np.float32(1.0001) * (np.float32(2.0) * need)).astype(np.float64) / qrange
    for c in range(s.size):
        cand = sx * float(s[c])
        if 0.0 < cand < smallest[c]:
            s[c] = np.float32(float(s[c]) * (smallest[c] / cand))
    return s


def _inputs_with_subgraphs(n: onnx.NodeProto) -> list[str]:
    """The node's inputs and every name its subgraphs (If/Loop/Scan bodies) read."""
    names = list(n.input)
    for a in n.attribute:
        for sub in (
            [a.g]
            if a.type == onnx.AttributeProto.GRAPH
            else list(a.graphs)
            if a.type == onnx.AttributeProto.GRAPHS
            else []
        ):
            for sn in sub.node:
                names.extend(_inputs_with_subgraphs(sn))
            names.extend(o.name for o in sub.output)
    return names


def _set_float_attr(node: onnx.NodeProto, name: str, value: float) -> None:
    for a in node.attribute:
        if a.name == name:
            a.f = value
            return
    node.attribute.append(helper.make_attribute(name, float(value)))


class _Exporter:
    def __init__(self, m: onnx.ModelProto, ranges: Mapping[str, Any], per_channel: bool, keep: set[str]):
        self.m, self.g = m, m.graph
        self.per_channel, self.keep = per_channel, keep
        g = self.g
        self.nodes = [_copy_node(n) for n in g.node]
        self.inits = {i.name: i for i in g.initializer}
        self.const_nodes = {
            n.output[0]: n
            for n in self.nodes
            if n.op_type == "Constant" and len(n.output) == 1 and _attr(n, "value", None) is not None
        }
        self.graph_inputs = [i.name for i in g.input if i.name not in self.inits]
        self.graph_outputs = {o.name for o in g.output}
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = defaultdict(list)
        for k, n in enumerate(self.nodes):
            for o in n.output:
                if o:
                    self.producer[o] = k
            for i in n.input:
                if i:
                    self.consumers[i].append(k)
        self.types = self._elem_types()
        self.used_names = self._all_names()
        self.ranges = ranges
        self.new_inits: list[TensorProto] = []
        self.made_inits: set[str] = set()
        self.replaced_consts: set[str] = set()
        self.drop_value_info: set[str] = set()

    # -- names and types ------------------------------------------------------------------------

    def _all_names(self) -> set[str]:
        g = self.g
        names = {i.name for i in g.initializer} | {i.name for i in g.input} | {o.name for o in g.output}
        names |= {v.name for v in g.value_info}
        for n in self.nodes:
            names.update(n.input)
            names.update(n.output)
            if n.name:
                names.add(n.name)
        return names

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used_names:
            name = f"{base}_{k}"
            k += 1
        self.used_names.add(name)
        return name

    def _elem_types(self) -> dict[str, int]:
        try:
            inferred = onnx.shape_inference.infer_shapes(self.m)
        except Exception:  # noqa: BLE001  (fall back to the declared types)
            inferred = self.m
        types: dict[str, int] = {}
        g = inferred.graph
        for v in list(g.value_info) + list(g.input) + list(g.output):
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
                types[v.name] = v.type.tensor_type.elem_type
        for i in g.initializer:
            types[i.name] = i.data_type
        return types

    def _raw_const(self, name: str) -> np.ndarray | None:
        t = self.inits.get(name)
        if t is None and name in self.const_nodes:
            t = _attr(self.const_nodes[name], "value", None)
        return None if t is None else numpy_helper.to_array(t, base_dir="")

    def const_array(self, name: str) -> np.ndarray | None:
        """The float32 value of a constant (initializer or Constant node), None otherwise."""
        if not name or name in self.keep:
            return None
        if name in self.inits:
            t = self.inits[name]
        elif name in self.const_nodes and name not in self.graph_outputs:
            t = _attr(self.const_nodes[name], "value", None)
        else:
            return None
        if t.data_type != TensorProto.FLOAT:
            return None
        return numpy_helper.to_array(t, base_dir="").astype(np.float32)

    # -- initializers ---------------------------------------------------------------------------

    def add_init(self, name: str, arr: np.ndarray) -> None:
        if name not in self.made_inits:
            self.made_inits.add(name)
            self.new_inits.append(numpy_helper.from_array(np.asarray(arr), name))

    # -- plan -----------------------------------------------------------------------------------

    def activation_ranges(self) -> dict[str, tuple[np.float32, np.float32]]:
        act: dict[str, tuple[np.float32, np.float32]] = {}
        for name, r in self.ranges.items():
            if name in self.keep or name in self.inits or name in self.const_nodes:
                continue
            if name in self.graph_inputs:
                if name in self.graph_outputs:
                    continue
            elif name not in self.producer:
                continue
            if self.types.get(name, TensorProto.FLOAT) != TensorProto.FLOAT:
                continue
            act[name] = _as_range(name, r)
        for n in self.nodes:  # onnxruntime's adjust_tensor_ranges
            if n.op_type == "Softmax" and n.output[0] in act:
                act[n.output[0]] = (np.float32(0.0), np.float32(1.0))
            elif (
                _is_clamp(n.op_type)
                and n.input[0] in act
                and n.output[0] in act
                and len(self.consumers[n.input[0]]) == 1
                and n.input[0] not in self.graph_outputs
            ):
                act[n.input[0]] = act[n.output[0]]
        for n in self.nodes:  # producer -> Relu/Clip: quantize only after the activation
            t = n.input[0] if n.input else ""
            if not _is_clamp(n.op_type) or t not in act or n.output[0] not in act:
                continue
            p = self.producer.get(t)
            if (
                p is not None
                and _fuses_activation(self.nodes[p].op_type)
                and len(self.consumers[t]) == 1
                and t not in self.graph_outputs
            ):
                del act[t]
        return act

    def _shares(self, n: onnx.NodeProto) -> bool:
        if not _shares_qparams(n.op_type):
            return False
        if n.op_type != "Pad":
            return True
        mode = _attr(n, "mode", b"constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode in ("reflect", "edge", "wrap"):
            return True
        if len(n.input) < 3 or not n.input[2]:
            return True
        v = self._raw_const(n.input[2])
        return v is not None and v.size == 1 and float(v.reshape(-1)[0]) == 0.0

    def activation_qparams(self, act: dict[str, tuple[np.float32, np.float32]]) -> dict[str, _QP]:
        qp: dict[str, _QP] = {}

        def own(t: str) -> _QP:
            s, z = choose_qparams(*act[t])
            return _QP(np.float32(s), int(z), self.fresh(f"{t}_scale"), self.fresh(f"{t}_zero_point"))

        for t in self.graph_inputs:
            if t in act:
                qp[t] = own(t)
        for n in self.nodes:
            src = qp.get(n.input[0]) if n.input and self._shares(n) else None
            for o in n.output:
                if o in act:
                    qp[o] = src if src is not None else own(o)
        return qp

    # -- constants ------------------------------------------------------------------------------

    def weight_dq(
        self, node_idx: int, name: str, w: np.ndarray, axis: int | None, scale: np.ndarray, cache: dict, pending: dict
    ) -> str:
        """DequantizeLinear of a symmetric int8 weight with the given scales ([C] per `axis`, or [1]
        for one scale per tensor when `axis` is None)."""
        key = ("w", name, axis)
        if key in cache:
            return cache[key]
        attrs: dict[str, Any]  # DequantizeLinear's attributes
        if axis is None:
            s = np.float32(scale.reshape(-1)[0])
            q, scale_arr, zp, attrs = quantize(w, s, 0, WEIGHT_QMIN, WEIGHT_QMAX), s, np.int8(0), {}
        else:
            shape = [1] * w.ndim
            shape[axis] = -1
            q = quantize(w, scale.reshape(shape), 0, WEIGHT_QMIN, WEIGHT_QMAX)
            scale_arr, zp, attrs = scale.astype(np.float32), np.zeros(scale.shape, np.int8), {"axis": axis}
        qn, sn, zn = self.fresh(f"{name}_quantized"), self.fresh(f"{name}_scale"), self.fresh(f"{name}_zero_point")
        out = self.fresh(f"{name}_DequantizeLinear_Output")
        self.add_init(qn, q.astype(np.int8))
        self.add_init(sn, np.asarray(scale_arr, np.float32))
        self.add_init(zn, zp)
        pending[node_idx].append(
            helper.make_node("DequantizeLinear", [qn, sn, zn], [out], self.fresh(f"{name}_DequantizeLinear"), **attrs)
        )
        self.replaced_consts.add(name)
        cache[key] = out
        return out

    def const_dq(self, node_idx: int, name: str, c: np.ndarray, cache: dict, pending: dict) -> str | None:
        """DequantizeLinear of an asymmetric per-tensor int8 constant (own min/max)."""
        key = ("c", name)
        if key in cache:
            return cache[key]
        if c.size == 0 or not np.all(np.isfinite(c)):
            return None
        s, z = choose_qparams(c.min(), c.max())
        q = quantize(c, s, z, INT8_MIN, INT8_MAX)
        qn, sn, zn = self.fresh(f"{name}_quantized"), self.fresh(f"{name}_scale"), self.fresh(f"{name}_zero_point")
        out = self.fresh(f"{name}_DequantizeLinear_Output")
        self.add_init(qn, q)
        self.add_init(sn, np.float32(s))
        self.add_init(zn, np.int8(z))
        pending[node_idx].append(
            helper.make_node("DequantizeLinear", [qn, sn, zn], [out], self.fresh(f"{name}_DequantizeLinear"))
        )
        self.replaced_consts.add(name)
        cache[key] = out
        return out

    def bias_dq(self, node_idx: int, name: str, b: np.ndarray, s_x: np.float32, s_w: np.ndarray, pending: dict) -> str:
        """int32 bias with scale s_x * s_w[c] and zero point 0."""
        per_axis = s_w.size > 1
        s_w = s_w if per_axis else np.float32(s_w.reshape(-1)[0])
        q = quantize_bias(b, s_x, s_w)
        scale = np.asarray(np.float32(s_x) * np.asarray(s_w, np.float32), np.float32)
        qn = self.fresh(f"{name}_quantized")
        sn, zn = self.fresh(f"{qn}_scale"), self.fresh(f"{qn}_zero_point")
        # the bias keeps its name when this node is its only user (as onnxruntime does)
        only_user = self.consumers[name] == [node_idx] and name not in self.graph_outputs
        if only_user:
            out = name
            self.drop_value_info.add(name)
        else:
            out = self.fresh(f"{name}_DequantizeLinear_Output")
        self.add_init(qn, q.reshape(b.shape))
        self.add_init(sn, scale)
        self.add_init(zn, np.zeros(scale.shape, np.int32))
        attrs: dict[str, Any] = {"axis": 0} if per_axis else {}
        pending[node_idx].append(
            helper.make_node("DequantizeLinear", [qn, sn, zn], [out], self.fresh(f"{name}_DequantizeLinear"), **attrs)
        )
        self.replaced_consts.add(name)
        return out

    def _weight_plan(self, n: onnx.NodeProto) -> tuple[str, np.ndarray, int | None, int] | None:
        """(name, value, axis or None for per tensor, natural axis) of a weighted node's constant weight."""
        op = n.op_type
        opdef = onnx_op(op)
        axis = opdef.onnx_weight_axis(op, lambda name, default: _attr(n, name, default)) if opdef is not None else None
        if axis is None or len(n.input) < 2:
            return None
        w = self.const_array(n.input[1])
        if w is None or w.ndim < 2 or (op == "MatMul" and w.ndim != 2):
            return None
        return n.input[1], w, (axis if self.per_channel else None), axis

    def _bias_plan(self, n: onnx.NodeProto, w: np.ndarray, axis: int, qp: dict[str, _QP]) -> np.ndarray | None:
        """The float bias vector [C_out] that will be quantized to int32 (Gemm: times beta), or None."""
        if n.op_type == "MatMul" or len(n.input) < 3 or not n.input[2] or n.input[0] not in qp:
            return None
        b = self.const_array(n.input[2])
        if b is None:
            return None
        cout = w.shape[axis] * (int(_attr(n, "group", 1)) if n.op_type == "ConvTranspose" else 1)
        if n.op_type != "Gemm":
            return b if b.shape == (cout,) else None
        beta = float(_attr(n, "beta", 1.0))
        if beta == 0.0 or not (b.size == 1 or (b.ndim <= 2 and b.shape[-1] == cout and b.size == cout)):
            return None  # an unused bias, or an (M, N) one: stays float
        b = np.broadcast_to(b.reshape(-1), (cout,)).astype(np.float32)
        return b if beta == 1.0 else (b * np.float32(beta)).astype(np.float32)

    def quantize_constants(self, qp: dict[str, _QP]) -> tuple[dict, dict]:
        """Plan the DequantizeLinear nodes of weights, biases and constant operands.
        Returns (input replacements {(node, slot): name}, pending DQ nodes {node: [nodes]})."""
        repl: dict[tuple[int, int], str] = {}
        pending: dict[int, list[onnx.NodeProto]] = defaultdict(list)
        cache: dict = {}
        # pass 1: weight scales (max|w[c]| / 127), enlarged where a bias would overflow int32
        scales: dict[tuple[str, int | None], np.ndarray] = {}
        plans: dict[int, tuple] = {}
        for k, n in enumerate(self.nodes):
            plan = self._weight_plan(n)
            if plan is None:
                continue
            name, w, axis, nat_axis = plan
            key = (name, axis)
            if key not in scales:
                _, s = quantize_weights_per_channel(w if axis is not None else w.reshape(1, -1), axis=axis or 0)
                scales[key] = s.astype(np.float32)
            b = self._bias_plan(n, w, nat_axis, qp)
            plans[k] = (name, w, axis, key, b)
            if b is not None:
                scales[key] = _adjust_for_bias(scales[key], b, qp[n.input[0]].scale)
        # pass 2: the DequantizeLinear nodes
        for k, n in enumerate(self.nodes):
            if k in plans:
                name, w, axis, key, b = plans[k]
                s_w = scales[key]
                repl[(k, 1)] = self.weight_dq(k, name, w, axis, s_w, cache, pending)
                if b is None:
                    continue
                if s_w.size > 1 and s_w.size != b.size:  # grouped ConvTranspose: weight channel = c % (C/g)
                    s_w = np.tile(s_w, b.size // s_w.size)
                repl[(k, 2)] = self.bias_dq(k, n.input[2], b, qp[n.input[0]].scale, s_w, pending)
                if n.op_type == "Gemm":
                    _set_float_attr(n, "beta", 1.0)
            elif _quantizes_constants(n.op_type):
                for slot, name in enumerate(n.input):
                    c = self.const_array(name)
                    if c is not None:
                        out = self.const_dq(k, name, c, cache, pending)
                        if out is not None:
                            repl[(k, slot)] = out
        return repl, pending

    # -- rewrite ------------------------------------------------------------------------------

    def run(self) -> onnx.ModelProto:
        act = self.activation_ranges()
        qp = self.activation_qparams(act)
        repl, pending = self.quantize_constants(qp)
        g = self.g

        live = {t for t in qp if self.consumers.get(t) or t in self.graph_outputs}
        dq_out: dict[str, str] = {}
        out_nodes: list[onnx.NodeProto] = []

        def emit(t: str, q_in: str) -> None:
            p = qp[t]
            self.add_init(p.scale_name, np.float32(p.scale))
            self.add_init(p.zp_name, np.int8(p.zero_point))
            q_out = self.fresh(f"{t}_QuantizeLinear_Output")
            d_out = t if t in self.graph_outputs else self.fresh(f"{t}_DequantizeLinear_Output")
            dq_out[t] = d_out
            out_nodes.append(
                helper.make_node(
                    "QuantizeLinear", [q_in, p.scale_name, p.zp_name], [q_out], self.fresh(f"{t}_QuantizeLinear")
                )
            )
            out_nodes.append(
                helper.make_node(
                    "DequantizeLinear", [q_out, p.scale_name, p.zp_name], [d_out], self.fresh(f"{t}_DequantizeLinear")
                )
            )

        for t in self.graph_inputs:
            if t in live:
                emit(t, t)
        for k, n in enumerate(self.nodes):
            out_nodes.extend(pending.get(k, ()))
            for slot, name in enumerate(n.input):
                if (k, slot) in repl:
                    n.input[slot] = repl[(k, slot)]
                elif name in dq_out:
                    n.input[slot] = dq_out[name]
            renamed = {}
            for j, o in enumerate(n.output):
                if o in live and o in self.graph_outputs:
                    renamed[o] = n.output[j] = self.fresh(f"{o}_QuantizeLinear_Input")
            out_nodes.append(n)
            for o in list(renamed) + [o for o in n.output if o in live and o not in self.graph_outputs]:
                emit(o, renamed.get(o, o))

        # drop the float constants that were replaced and are no longer used
        used = {i for n in out_nodes for i in _inputs_with_subgraphs(n)} | self.graph_outputs
        dead = {c for c in self.replaced_consts if c not in used or c in self.drop_value_info}
        out_nodes = [
            n
            for n in out_nodes
            if not (n.op_type == "Constant" and n.output[0] in dead and n.output[0] in self.const_nodes)
        ]
        # a replaced bias keeps its name: the float constant must go even though the name is still used
        kept_inits = [i for i in g.initializer if i.name not in dead]
        kept_inputs = [i for i in g.input if not (i.name in dead and i.name in self.inits)]
        kept_vi = [v for v in g.value_info if v.name not in self.drop_value_info]

        del g.node[:]
        g.node.extend(out_nodes)
        del g.initializer[:]
        g.initializer.extend(kept_inits + self.new_inits)
        del g.input[:]
        g.input.extend(kept_inputs)
        del g.value_info[:]
        g.value_info.extend(kept_vi)
        return self.m


__all__ = ["MIN_OPSET", "export_qdq"]
