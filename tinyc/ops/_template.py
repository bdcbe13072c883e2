"""TEMPLATE: an operator to copy. Every hook of ``OpDef`` is here with its default and what reads it.

Copy this file to ``tinyc/ops/<family>.py``, rename the class, set ``op`` / ``onnx_ops`` /
``template``, put ``@register`` above the class, and delete every hook you leave at its default
(the base class already has it). The loader (``tinyc.ops.load_all``) skips modules whose name
starts with "_", so this one is never registered. docs/adding-an-op.md walks through a float op,
an int8 op and a tunable op; tests/test_docs.py keeps this file listing every hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from collections.abc import Callable

import numpy as np

from tinyc.ir import Graph, Node, QuantParams
from tinyc.ops.base import Clamp, Int8Lowering, OpDef, OutputType

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext


class TemplateOp(OpDef):  # @register (from tinyc.ops.base) on a real op
    # -- identity (the registry, the frontend, the emitter) --------------------------------------
    op = "Template"  # the IR name (unique)
    onnx_ops: tuple[str, ...] = ()  # ONNX op types this definition imports
    ms_ops: tuple[str, ...] = ()  # com.microsoft op types it imports
    ml_ops: tuple[str, ...] = ()  # ai.onnx.ml op types it imports
    training_ops: tuple[str, ...] = ()  # ai.onnx.preview.training op types it imports
    template = None  # "template.c.j2": the kernel in templates/kernels/; None: no code
    inplace = False  # the output may overwrite input 0 (same byte size, elementwise)
    alias = False  # the output *is* input 0 reinterpreted (reshape-like): no code at all
    dtypes: tuple[str, ...] = ("float32",)  # element types input 0 may have
    implementations = ()  # the kernel variants a schedule selects among (tinyc.ops.impl)

    # -- import (tinyc.frontend) --------------------------------------------------------------------
    def import_onnx(self, ctx: ImportContext) -> Node | list[Node]:
        """One ONNX node -> IR node(s): normalise attributes, turn constant inputs into attrs,
        ``ctx.unsupported("why")`` for what the kernel cannot do."""
        return ctx.make_node(self.op)

    def require_dtype(self, ctx: ImportContext) -> None:
        """Refuse an input 0 element type outside `dtypes` (call it from import_onnx)."""
        super().require_dtype(ctx)

    # -- semantics (every stage) -----------------------------------------------------------------
    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        """Output (shape, dtype) per output; runs at import and again after layout changes."""
        t = graph.tensor(node.inputs[0])
        return [(t.shape, t.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The numpy oracle: tests compare the C kernel with it; the frontend folds constants with it."""
        raise NotImplementedError(f"{self.op}: no reference implementation")

    def macs(self, node: Node, graph: Graph) -> int:
        """Multiply-accumulates, for the report and the cost model."""
        return 0

    def params(self, node: Node, graph: Graph) -> int:
        """Parameter count, for the report: the constant inputs' elements."""
        return super().params(node, graph)

    def check_supported(self, node: Node, graph: Graph) -> None:
        """Raise UnsupportedError (naming the node) for what the C kernel cannot compute."""
        super().check_supported(node, graph)

    stateful = False  # keeps a state across inferences when its attr keep_state is set (LSTM, SVDF)

    # -- layout and fusion (tinyc.passes) ----------------------------------------------------------
    layout_agnostic = False  # elementwise: the layout pass moves transposes across it
    channels_last_capable = False  # has an NHWC form: the layout pass calls to_channels_last
    absorbs_activation = False  # its kernel applies attr "activation" (the fuse pass folds one in)
    fusable_activation = False  # an activation a producer may absorb (implement apply and c_expr)

    def to_channels_last(self, node: Node, graph: Graph) -> bool:
        """Switch an NCHW node to NHWC (only called when channels_last_capable)."""
        raise NotImplementedError(f"{self.op}: no channels-last form")

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Whether `permute` can take the input untransposed (AxisPermutable: ops with an `axis`)."""
        return False

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Remap the node's axes: axis a of the old input is axis perm[a] (passes/layout.py)."""
        return False

    def apply(self, attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
        """numpy: this activation applied to x (in the reference of a producer it is fused into)."""
        raise NotImplementedError(f"{self.op}: not an activation")

    def c_expr(self, attrs: dict[str, Any], x: str, ct: str = "float") -> str:
        """C: this activation applied to the expression x (in a producer's kernel)."""
        raise NotImplementedError(f"{self.op}: not an activation")

    def activation_clamp(self, attrs: dict[str, Any]) -> Clamp | None:
        """(lo, hi) when the activation is a clamp an int8 kernel folds into its output (Relu, Clip)."""
        return None

    # -- quantization (tinyc.quantize, passes/qdq.py, the QDQ export) -----------------------------
    int8_passthrough = False  # moves int8 values unchanged: the same kernel runs on int8 tensors
    int8_kernel = False  # lower_int8 builds an integer kernel of its own
    requantizes = False  # an integer kernel with an int32 accumulator: takes attr "rounding"
    grid_crosses_both_ways = False  # one-to-one rearrangement: an int8 grid holds on both sides
    quantizes_constant_operands = False  # the QDQ export quantizes its float constant operands
    qdq_shares_qparams: tuple[str, ...] = ()  # ONNX types whose QDQ output keeps the input's grid

    def keeps_input_grid(self, node: Node) -> bool:
        """Calibration gives the output its input's grid (output values are input values)."""
        return self.int8_passthrough

    def fixed_int8_grid(self, node: Node) -> tuple[float, int] | None:
        """An output (scale, zero point) the op fixes whatever the calibrated range (Softmax)."""
        return None

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """Replace the node by int8 nodes via `low` (as_int8, int8_output, emit, ...); None when
        done, else why it stays float. Default: the same op on the int8 tensors."""
        return low.move_unchanged(node)

    def folded_quant(self, node: Node, graph: Graph) -> QuantParams | None:
        """The int8 grid a constant-folded output keeps (DequantizeLinear, QOperators)."""
        return None

    def fuses_onnx_activation(self) -> bool:
        """The QDQ export puts no Q/DQ pair between this ONNX op and a following Relu/Clip."""
        return self.absorbs_activation

    def onnx_weight_axis(self, op_type: str, attr: Callable[[str, Any], Any]) -> int | None:
        """The output-channel axis of ONNX input 1 when the QDQ export quantizes it as a weight."""
        return None

    # -- tuning (tinyc.tune) -----------------------------------------------------------------------
    def task_dims(self, node: Node, graph: Graph) -> dict[str, int]:
        """Named problem dimensions of a tuning task (cost-model features)."""
        return super().task_dims(node, graph)

    # -- schedule and code generation (tinyc.schedule, tinyc.memory, tinyc.codegen) ---------------
    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        """Schedule knobs and their legal values; non-empty makes the node a tuning task."""
        return {}

    def knob_isa(self, knob: str, value: Any) -> str | None:
        """The ISA extension ("dsp", "mve", "opencl") a knob value's code needs; None: portable.
        The default reads it from the implementation the value selects (`implementations`)."""
        return super().knob_isa(knob, value)

    def canonical_schedule(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> dict[str, Any]:
        """The schedule without the knobs its variant ignores (a tuner never measures twice)."""
        return dict(schedule)

    def searched(self, node: Node, graph: Graph, space: list[dict[str, Any]], target: str) -> list[dict[str, Any]]:
        """What of the legal, canonical space the tuner searches on `target`: leave out what
        measurements show never wins there (it stays legal). Default: all of it."""
        return super().searched(node, graph, space, target)

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        """The untuned schedule: a rule over shapes. Default: each knob's first value."""
        return super().default_schedule(node, graph, target)

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        """Extra arena bytes the kernel needs while it runs (planned like a tensor)."""
        return 0

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        """Extra template variables: derived sizes, strides, the chosen knob values."""
        return {}
