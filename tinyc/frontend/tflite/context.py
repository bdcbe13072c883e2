"""What a TFLite operator converter sees: its operator, its tensors, and the graph being built.

A converter (``tinyc/frontend/tflite/ops_*.py``, registered with ``converts``) reads the
operator's inputs, options and quantization through this object and adds tinyc IR nodes with
``add``; every error it raises through ``unsupported`` names the operator index, builtin name
and output tensor, as the user sees them in a model viewer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node, QuantParams, Tensor
from tinyc.numerics.fixed_point import round_half_away
from tinyc.frontend.tflite.reader import TflModel, TflOperator, TflTensor

#: ActivationFunctionType values of the schema
ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}
#: Padding values of the schema
PADDINGS = {0: "SAME", 1: "VALID"}
#: the integer types' ranges
QRANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}

Converter = Callable[["TflContext"], None]
CONVERTERS: dict[str, Converter] = {}


def converts(*builtins: str) -> Callable[[Converter], Converter]:
    """Register a converter for TFLite builtin operators (by schema name, e.g. "CONV_2D")."""

    def deco(fn: Converter) -> Converter:
        for b in builtins:
            CONVERTERS[b] = fn
        return fn

    return deco


#: TfLiteRound / std::round: half away from zero (float in, float out)
tflite_round = round_half_away


class TflContext:
    """One operator being converted (``op``) into ``graph``; ``names`` maps TFLite tensor
    indices to IR tensor names (filled as tensors are first used)."""

    def __init__(self, model: TflModel, graph: Graph, names: dict[int, str], op: TflOperator) -> None:
        self.model = model
        self.graph = graph
        self.names = names
        self.op = op
        self.name = f"{op.name.lower()}_{op.index}"

    # -- errors -------------------------------------------------------------------------------
    @property
    def where(self) -> str:
        outs = [self.model.tensors[i].name for i in self.op.outputs if i >= 0]
        shown = f" -> '{outs[0]}'" if outs else ""
        return f"operator {self.op.index} ({self.op.name}{shown})"

    def unsupported(self, message: str) -> None:
        raise UnsupportedError(f"{self.where}: {message}")

    # -- operator fields ---------------------------------------------------------------------
    def opt(self, key: str, default: Any = None) -> Any:
        return self.op.options.get(key, default)

    @property
    def n_inputs(self) -> int:
        return len(self.op.inputs)

    def has_input(self, i: int) -> bool:
        return i < len(self.op.inputs) and self.op.inputs[i] >= 0

    def tensor(self, i: int) -> TflTensor:
        """The TFLite tensor of operator input i."""
        if not self.has_input(i):
            self.unsupported(f"input {i} is missing")
        return self.model.tensors[self.op.inputs[i]]

    def out_tensor(self, j: int = 0) -> TflTensor:
        return self.model.tensors[self.op.outputs[j]]

    def const(self, i: int) -> np.ndarray | None:
        """Input i's constant value: from the file, or computed at import (a folded node)."""
        if not self.has_input(i):
            return None
        t = self.tensor(i)
        if t.data is not None:
            return t.data
        name = self.names.get(t.index)
        return None if name is None else self.graph.constant(name)

    def require_const(self, i: int, what: str) -> np.ndarray:
        v = self.const(i)
        if v is None:
            self.unsupported(f"{what} (input {i}) must be a constant")
        assert v is not None
        return v

    def activation(self) -> str:
        act = ACTIVATIONS.get(int(self.opt("fused_activation_function", 0)), "?")
        if act not in ("NONE", "RELU", "RELU_N1_TO_1", "RELU6"):
            self.unsupported(f"fused activation {act} is not supported")
        return act

    def padding(self) -> str:
        return PADDINGS.get(int(self.opt("padding", 0)), "SAME")

    # -- quantization --------------------------------------------------------------------------
    @staticmethod
    def qparams(t: TflTensor) -> tuple[float, int]:
        """(scale, zero_point) of a per-tensor quantized tensor."""
        assert t.scale is not None and t.zero_point is not None
        return float(t.scale[0]), int(t.zero_point[0])

    def require_per_tensor(self, t: TflTensor, what: str) -> tuple[float, int]:
        if not t.quantized:
            self.unsupported(f"{what} '{t.name}' ({t.dtype}) has no quantization parameters")
        if t.per_channel:
            self.unsupported(f"{what} '{t.name}' is quantized per channel (per-tensor needed here)")
        s, zp = self.qparams(t)
        if not np.isfinite(s) or s <= 0:
            self.unsupported(f"{what} '{t.name}' has scale {s:g}")
        return s, zp

    def act_range(self, t: TflTensor, act: str | None = None) -> tuple[int, int]:
        """TFLite's CalculateActivationRangeQuantized for the fused activation on output grid `t`."""
        act = self.activation() if act is None else act
        qmin, qmax = QRANGE.get(t.dtype, (-128, 127))
        s, zp = self.qparams(t)

        def q(v: float) -> int:
            return zp + int(tflite_round(np.float32(v) / np.float32(s)))

        if act == "RELU":
            return max(qmin, q(0.0)), qmax
        if act == "RELU6":
            return max(qmin, q(0.0)), min(qmax, q(6.0))
        if act == "RELU_N1_TO_1":
            return max(qmin, q(-1.0)), min(qmax, q(1.0))
        return qmin, qmax

    def float_act(self) -> tuple[float, float] | None:
        """The fused activation as a real clamp (lo, hi), None for none."""
        return {"NONE": None, "RELU": (0.0, float("inf")), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0)}[
            self.activation()
        ]

    # -- graph building -------------------------------------------------------------------------
    def _ir_quant(self, t: TflTensor) -> QuantParams | None:
        if not t.quantized:
            return None
        assert t.scale is not None and t.zero_point is not None
        if t.per_channel:
            return QuantParams(t.scale.astype(np.float32), t.zero_point.astype(np.int64), t.quantized_dimension)
        return QuantParams(np.asarray(t.scale[0], np.float32), np.asarray(t.zero_point[0], np.int64))

    def _fresh(self, t: TflTensor) -> str:
        base = t.name.split(";")[0].strip() or f"t{t.index}"
        return self.graph.unique_name(base)

    def input(self, i: int) -> str | None:
        """The IR tensor name of operator input i (a constant is added on first use)."""
        if not self.has_input(i):
            return None
        t = self.tensor(i)
        name = self.names.get(t.index)
        if name is not None:
            return name
        if t.data is None:
            self.unsupported(f"input {i} '{t.name}' is neither a constant nor computed by an earlier operator")
        assert t.data is not None
        name = self._fresh(t)
        self.graph.add_constant(name, t.data)
        self.graph.tensors[name].quant = self._ir_quant(t)
        self.names[t.index] = name
        return name

    def input_name(self, i: int) -> str:
        """`input` for an input the operator requires (a missing one is refused)."""
        name = self.input(i)
        if name is None:
            self.unsupported(f"input {i} is missing")
        assert name is not None
        return name

    def constant(self, base: str, data: np.ndarray) -> str:
        """A new constant tensor (weights rearranged for tinyc's kernels, tables)."""
        return self.graph.add_constant(self.graph.unique_name(f"{self.name}_{base}"), np.asarray(data))

    def output(self, j: int = 0) -> str:
        """Declare operator output j (shape, dtype and grid as the file says) and return its IR name."""
        t = self.out_tensor(j)
        if t.index in self.names:
            return self.names[t.index]
        if any(d < 0 for d in t.shape):
            self.unsupported(f"output '{t.name}' has a dynamic shape {list(t.shape)}")
        name = t.name if t.index in self.model.outputs else self._fresh(t)
        self.graph.add_tensor(Tensor(name, tuple(t.shape), t.dtype, None, self._ir_quant(t)))
        self.names[t.index] = name
        return name

    def intermediate(
        self, base: str, shape: tuple[int, ...], dtype: str, scale: float | None = None, zp: int = 0
    ) -> str:
        """A new non-constant tensor between the nodes one operator becomes."""
        name = self.graph.unique_name(f"{self.name}_{base}")
        quant = None if scale is None else QuantParams(np.asarray(scale, np.float32), np.asarray(zp, np.int64))
        self.graph.add_tensor(Tensor(name, tuple(shape), dtype, None, quant))
        return name

    def add(self, node: Node) -> None:
        """Infer and append `node`; its declared outputs must keep the shapes the file gives."""
        from tinyc.frontend.onnx_import import add_node

        declared = {
            o: (self.graph.tensor(o).shape, self.graph.tensor(o).dtype) for o in node.outputs if o in self.graph.tensors
        }
        if not node.source:
            node.source = self.name
        add_node(self.graph, node)
        for o, (shape, dtype) in declared.items():
            t = self.graph.tensor(o)
            if tuple(t.shape) != tuple(shape):
                self.unsupported(f"tinyc computes output '{o}' as {list(t.shape)}, the model declares {list(shape)}")
            if t.dtype != dtype:
                self.unsupported(f"tinyc computes output '{o}' as {t.dtype}, the model declares {dtype}")

    def node(self, op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Node:
        return Node(self.graph.unique_name(self.name), op, inputs, outputs, attrs, source=self.name)
