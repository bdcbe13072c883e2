"""The contract every operator fulfils, and the registry that finds them.

An operator lives in one module under ``tinyc/ops`` (plus its kernel template under
``templates/kernels``): how it is imported from ONNX, its shape rule, its numpy reference,
its MAC count, its int8 lowering, how it behaves under the layout, fusion and quantization
passes, the dimensions a tuning task is keyed on, its schedule knobs and scratch size. The other
stages read these declarations and keep no lists of op names, so adding an op touches nothing
else. ``tinyc/ops/_template.py`` is a commented op to copy, with every hook and its default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol
from collections.abc import Callable, Sequence

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import DTYPE_BYTES, Graph, Node, QuantParams

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext
    from tinyc.ops.impl import Implementation

OutputType = tuple[tuple[int, ...], str]  # (shape, dtype)

CTYPES = {
    "float32": "float",
    "float64": "double",
    "int8": "int8_t",
    "uint8": "uint8_t",
    "int16": "int16_t",
    "uint16": "uint16_t",
    "int32": "int32_t",
    "uint32": "uint32_t",
    "int64": "int64_t",
    "uint64": "uint64_t",
    "bool": "uint8_t",
}


Clamp = tuple[float | None, float | None]  # a real interval (lo, hi); None: unbounded on that side


class Int8Lowering(Protocol):
    """What an op's `lower_int8` may use: the int8 lowering in progress (tinyc.quantize.lower).

    Float tensor names stand for values; `as_int8` gives (creating it on first use) the int8 tensor
    holding one, `int8_output` a new int8 tensor for a float output, `emit` adds an int8 node."""

    g: Graph

    def quantizable(self, name: str) -> bool:
        """Whether the float tensor has (or, a constant, can get) an int8 grid."""

    def as_int8(self, name: str) -> str: ...

    def int8_output(self, name: str, params: tuple[float, int] | None = None) -> str: ...

    def emit(self, node: Node, float_out: str, int8_out: str) -> None: ...

    def needs_output(self, node: Node) -> str | None:
        """Why the node's output has no int8 grid to write, or None."""

    def fused_clamp(self, node: Node) -> tuple[bool, Clamp | None]:
        """(ok, clamp): the node's fused activation as an output clamp (ok False: not a clamp)."""

    def preserving(self, node: Node, x_q: str, build: Callable[[str], Node]) -> None:
        """Emit `build(y_q)`, whose output has x_q's grid; requantize when the model wants another."""

    def lower_weighted(
        self, node: Node, build: Callable[..., Node], shape_check: Callable[[Any, Any], str | None], *extra: Any
    ) -> str | None:
        """Conv / fully connected: constant float weights and bias, quantized by `build`."""

    def move_unchanged(
        self, node: Node, attrs_for: Callable[[tuple[float, int]], dict[str, Any]] | None = None
    ) -> str | None:
        """The same op on the int8 tensors, on its input's grid (`attrs_for(grid)`: attrs to change)."""

    def lookup_table(self, node: Node) -> str | None:
        """An int8 -> int8 table of the op's numpy reference (any elementwise unary op)."""


class OpDef:
    """Base class: override what the op needs; defaults suit a simple shape-preserving op."""

    op: str = ""  # tinyc IR op name
    onnx_ops: tuple[str, ...] = ()  # ONNX op types this definition imports
    ms_ops: tuple[str, ...] = ()  # com.microsoft op types it imports (onnxruntime's QLinear* family)
    ml_ops: tuple[str, ...] = ()  # ai.onnx.ml op types it imports (classical ML: tinyc/ops/ml_ops.py)
    training_ops: tuple[str, ...] = ()  # ai.onnx.preview.training op types (optimizers: tinyc/ops/training.py)
    template: str | None = None  # kernel template file (templates/kernels/...), None: no code
    inplace: bool = False  # output may overwrite input 0 (same byte size, elementwise)
    alias: bool = False  # output *is* input 0 reinterpreted (reshape-like): no code
    dtypes: tuple[str, ...] = ("float32",)  # element types the kernel accepts on input 0
    #: the kernel variants a schedule selects among (tinyc.ops.impl), for ops with several
    implementations: tuple[Implementation, ...] = ()

    # -- import ---------------------------------------------------------------------------
    def import_onnx(self, ctx: ImportContext) -> Node | list[Node]:
        """Turn one ONNX node into IR node(s); constant inputs that configure the op become attrs."""
        return ctx.make_node(self.op)

    def require_dtype(self, ctx: ImportContext) -> None:
        """Refuse at import, naming the node, an input 0 element type the kernel lacks."""
        if ctx.dtype(0) not in self.dtypes:
            ctx.unsupported(f"element type {ctx.dtype(0)} (supported: {', '.join(self.dtypes)})")

    # -- semantics ------------------------------------------------------------------------
    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        """Output shapes and dtypes from the input tensors (after passes too, so layouts matter)."""
        t = graph.tensor(node.inputs[0])
        return [(t.shape, t.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The numpy oracle: the C kernel must agree with this."""
        raise NotImplementedError(f"{self.op}: no reference implementation")

    def macs(self, node: Node, graph: Graph) -> int:
        return 0

    def params(self, node: Node, graph: Graph) -> int:
        return sum(graph.tensor(i).size for i in node.inputs if i and graph.tensor(i).is_constant)

    #: Carries a state from one inference to the next when asked (attr ``keep_state``; reset at every
    #: inference otherwise): recurrent kernels such as TFLite's LSTM and SVDF.
    stateful: bool = False

    # -- layout and fusion (tinyc.passes) -----------------------------------------------------
    #: Elementwise (or per position): the layout pass (passes/layout.py) moves a transpose across
    #: the node by transposing its constant operands, leaving the node itself as it is.
    layout_agnostic: bool = False
    #: The kernel has a channels-last form: the layout pass calls `to_channels_last` on its NCHW nodes.
    channels_last_capable: bool = False
    #: Its kernel applies a fused elementwise activation (attr ``activation``) to its output: the
    #: fuse pass (passes/fuse.py) folds a following `fusable_activation` node into it.
    absorbs_activation: bool = False
    #: An elementwise activation a producer can apply to its own output (`apply`, `c_expr`): the
    #: fuse pass folds it into an `absorbs_activation` producer.
    fusable_activation: bool = False

    def to_channels_last(self, node: Node, graph: Graph) -> bool:
        """Switch an NCHW node to NHWC (attrs, constant operands); its input already arrives NHWC
        and the layout pass re-infers its output. Only called when `channels_last_capable`."""
        raise NotImplementedError(f"{self.op}: no channels-last form")

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Whether `permute` can take this node's input untransposed (asked before the layout pass
        moves anything; see passes/layout.py for the convention). Default: it cannot."""
        return False

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        """Make the node read T_perm's input directly (remap axes in its attrs); see passes/layout.py.
        Only called when `can_permute` said yes."""
        return False

    def apply(self, attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
        """numpy: this activation (with `attrs`) applied to x; the reference of a producer it is fused into."""
        raise NotImplementedError(f"{self.op}: not an activation")

    def c_expr(self, attrs: dict[str, Any], x: str, ct: str = "float") -> str:
        """C: this activation (with `attrs`) applied to the expression x, for a producer's kernel
        (tinyc.codegen.emitter.activation_expr)."""
        raise NotImplementedError(f"{self.op}: not an activation")

    def activation_clamp(self, attrs: dict[str, Any]) -> Clamp | None:
        """The interval this activation clamps to, when it is a clamp (Relu, Clip), else None.
        Read by the fuse pass (an int8 graph fuses only clamps: an int8 kernel folds them into its
        output clamp), the int8 lowering and the QDQ export (which keeps no Q/DQ before it)."""
        return None

    # -- quantization (tinyc.quantize, passes/qdq.py) -----------------------------------------
    #: Moves int8 values unchanged (reshape-like, selection, padding, nearest resize): the int8
    #: lowering runs the same op on the int8 tensors, on its input's grid (`lower_int8`'s default),
    #: and calibration gives its output its input's grid (`keeps_input_grid`).
    int8_passthrough: bool = False
    #: `lower_int8` replaces the node by an integer kernel of its own. Without it (and without
    #: `int8_passthrough`) the int8 lowering leaves the node float ("no int8 kernel").
    int8_kernel: bool = False
    #: An integer kernel that requantizes an int32 accumulator: it takes the attr ``rounding``
    #: (passes/qdq.py set_requant_rounding; tinyc.numerics.fixed_point.ROUNDINGS).
    requantizes: bool = False
    #: Output is the input rearranged one to one (Transpose, Reshape): the QDQ pass copies an int8
    #: annotation from either side to the other (passes/qdq.py propagate_through_moves), since the
    #: layout pass leaves fresh tensor names on either side.
    grid_crosses_both_ways: bool = False
    #: The QDQ export (quantize/export.py) quantizes the op's float constant operands (int8 per
    #: tensor, from their own min/max), as its int8 kernel takes them.
    quantizes_constant_operands: bool = False
    #: The ONNX op types (among `onnx_ops`) whose output the QDQ export puts on its data input's
    #: scale and zero point (the same initializers), as onnxruntime's quantizer does.
    qdq_shares_qparams: tuple[str, ...] = ()

    def keeps_input_grid(self, node: Node) -> bool:
        """Whether the output values are input values, so calibration (quantize/flow.py) gives the
        output its input's grid instead of one of its own. Default: `int8_passthrough`."""
        return self.int8_passthrough

    def fixed_int8_grid(self, node: Node) -> tuple[float, int] | None:
        """An output grid (scale, zero point) the op fixes whatever the calibrated range, as TFLite
        does (Softmax: 1/256, -128), or None."""
        return None

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """Replace `node` by int8 nodes through `low`; None when done, else why it stays float.
        Called by tinyc.quantize.lower for `int8_kernel` and `int8_passthrough` ops once every data
        input is float with an int8 grid. Default: the same op on the int8 tensors."""
        return low.move_unchanged(node)

    def folded_quant(self, node: Node, graph: Graph) -> QuantParams | None:
        """The int8 grid a constant-folded output keeps (the frontend asks when it folds the node):
        DequantizeLinear of a constant remembers its grid, a QOperator its declared output grid."""
        return None

    def fuses_onnx_activation(self) -> bool:
        """For the QDQ export: tinyc fuses a Relu/Clip that follows this ONNX op, so no Q/DQ pair
        goes between them. Default: `absorbs_activation`."""
        return self.absorbs_activation

    def onnx_weight_axis(self, op_type: str, attr: Callable[[str, Any], Any]) -> int | None:
        """For the QDQ export: the output-channel axis of ONNX input 1 when it is a weight quantized
        per channel (`attr(name, default)` reads the ONNX node's attributes); None: no weight."""
        return None

    # -- tuning (tinyc.tune) --------------------------------------------------------------------
    def task_dims(self, node: Node, graph: Graph) -> dict[str, int]:
        """The named problem dimensions of a tuning task (cost-model features, tinyc.tune.features).
        Default: the output shape as d0, d1, ..."""
        return {f"d{i}": int(d) for i, d in enumerate(graph.tensor(node.outputs[0]).shape)}

    # -- code generation -------------------------------------------------------------------
    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        """Schedule knobs and their legal values (what a tuner may vary)."""
        return {}

    def knob_isa(self, knob: str, value: Any) -> str | None:
        """The ISA extension ("dsp", "mve") a knob value's code needs, None when portable. The
        kernels stay exact everywhere (off-target the intrinsics are emulated in C), but defaults
        and search spaces only pick what the target's core has (tinyc.schedule.knob_allowed).
        Default: a value that selects a registered implementation needs what that declares."""
        from tinyc.ops.impl import selected_need

        return selected_need(self.implementations, knob, value)

    def searched(self, node: Node, graph: Graph, space: list[dict[str, Any]], target: str) -> list[dict[str, Any]]:
        """The part of the legal, canonical `space` the tuner searches on `target`: an op may leave
        out candidates that measurements show never win there (they stay legal: a log or a
        hand-written schedule may still name them). Default: all of it."""
        return space

    def canonical_schedule(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> dict[str, Any]:
        """The schedule with knobs its variant ignores removed, so a tuner never measures the same
        code twice under two names. Default: every knob matters."""
        return dict(schedule)

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        """A simple rule picking knob values from shapes (the untuned schedule)."""
        return {k: v[0] for k, v in self.knobs(node, graph).items()}

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> int:
        """Extra arena bytes the kernel needs while it runs (planned like a tensor). `target` is
        the schedule target: a knob the schedule leaves out takes *that* target's default, so the
        scratch is sized for the variant that target's code runs (ops with implementations
        choose both through one `implementation(node, graph, schedule, target)`)."""
        return 0

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        """Extra variables for the kernel template (derived sizes, strides, expressions), for the
        schedule target `target` (see scratch_bytes)."""
        return {}

    def check_supported(self, node: Node, graph: Graph) -> None:
        """Raise UnsupportedError for attribute values/dtypes the C kernel does not handle."""
        for name in node.inputs[:1]:
            if name and graph.tensor(name).dtype not in self.dtypes:
                raise UnsupportedError(
                    f"node '{node.source or node.name}' ({node.op}): element type "
                    f"{graph.tensor(name).dtype} is not supported (supported: {', '.join(self.dtypes)})"
                )


class AxisPermutable:
    """Mixin for ops with one `axis` attribute: the layout pass may move transposes across them
    by remapping the axis (see passes/layout.py for the convention)."""

    def can_permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        return len(perm) == len(graph.tensor(node.inputs[0]).shape)

    def permute(self, node: Node, graph: Graph, perm: list[int]) -> bool:
        if not self.can_permute(node, graph, perm):
            return False
        node.attrs["axis"] = perm[node.attrs["axis"]]
        return True


_REGISTRY: dict[str, OpDef] = {}
_ONNX_MAP: dict[str, OpDef] = {}
_MS_MAP: dict[str, OpDef] = {}
MS_DOMAIN = "com.microsoft"
_ML_MAP: dict[str, OpDef] = {}
ML_DOMAIN = "ai.onnx.ml"
_TRAINING_MAP: dict[str, OpDef] = {}
TRAINING_DOMAIN = "ai.onnx.preview.training"


def _map_onnx_names(inst: OpDef) -> None:
    for o in inst.onnx_ops:
        _ONNX_MAP[o] = inst
    for o in inst.ms_ops:
        _MS_MAP[o] = inst
    for o in inst.ml_ops:
        _ML_MAP[o] = inst
    for o in inst.training_ops:
        _TRAINING_MAP[o] = inst


def register(cls: type[OpDef] | None = None, **overrides: Any) -> Any:
    """Class decorator: instantiate and register an OpDef (overrides set class attributes)."""

    def wrap(c: type[OpDef]) -> type[OpDef]:
        inst = c()
        for k, v in overrides.items():
            setattr(inst, k, v)
        if inst.op in _REGISTRY:
            raise ValueError(f"op {inst.op} registered twice")
        _REGISTRY[inst.op] = inst
        _map_onnx_names(inst)
        return c

    return wrap(cls) if cls is not None else wrap


def register_instance(inst: OpDef) -> OpDef:
    """Register an already-built OpDef (families of similar ops share one class)."""
    if inst.op in _REGISTRY:
        raise ValueError(f"op {inst.op} registered twice")
    _REGISTRY[inst.op] = inst
    _map_onnx_names(inst)
    return inst


def get_op(op: str) -> OpDef:
    from tinyc.ops import load_all

    load_all()
    try:
        return _REGISTRY[op]
    except KeyError:
        raise UnsupportedError(f"no tinyc operator named '{op}'") from None


def onnx_op(op_type: str, domain: str = "") -> OpDef | None:
    """The OpDef importing `op_type` of `domain` (default ONNX, or com.microsoft), or None."""
    from tinyc.ops import load_all

    load_all()
    if domain in ("", "ai.onnx"):
        return _ONNX_MAP.get(op_type)
    if domain == MS_DOMAIN:
        return _MS_MAP.get(op_type)
    if domain == ML_DOMAIN:
        return _ML_MAP.get(op_type)
    if domain == TRAINING_DOMAIN:
        return _TRAINING_MAP.get(op_type)
    return None


def all_ops() -> dict[str, OpDef]:
    from tinyc.ops import load_all

    load_all()
    return dict(_REGISTRY)


def supported_onnx_ops() -> list[str]:
    from tinyc.ops import load_all

    load_all()
    return sorted(_ONNX_MAP)


# -- small helpers shared by op modules ----------------------------------------------------
class NodeEmitter:
    """IR nodes of one import-time lowering (Einsum, com.microsoft attention, ...), each output and
    node named `<node>_<what>` and unique in the graph and among the names this lowering took."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.nodes: list[Node] = []
        self.taken: set[str] = set()

    def name(self, what: str) -> str:
        base = self.ctx.graph.unique_name(f"{self.ctx.name}_{what}")
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name

    def node(self, op: str, inputs: list[str], what: str, out: str | None = None, **attrs: Any) -> str:
        """Append one node computing `op` and return its output (`out`, or a fresh name)."""
        y = out or self.name(what)
        self.nodes.append(Node(self.name(f"{what}_node"), op, inputs, [y], attrs, source=self.ctx.name))
        return y


def ctype(dtype: str) -> str:
    """The C element type of a tensor: CTYPES, or the storage of a narrow type (float16, bfloat16,
    float8, float4, int4, int2: its numpy bits, tinyc/numerics/dtypes.py)."""
    from tinyc.numerics.dtypes import STORAGE_CTYPES

    try:
        return CTYPES[dtype] if dtype in CTYPES else STORAGE_CTYPES[dtype]
    except KeyError:
        raise UnsupportedError(f"element type {dtype} has no C type in tinyc") from None


def nbytes(shape: Sequence[int], dtype: str) -> int:
    return int(np.prod(shape, dtype=np.int64)) * DTYPE_BYTES[dtype]


def normalize_axis(axis: int, rank: int, where: str) -> int:
    if not -rank <= axis < max(rank, 1):
        raise UnsupportedError(f"{where}: axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


def strides_of(shape: Sequence[int]) -> list[int]:
    out = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        out[i] = out[i + 1] * int(shape[i + 1])
    return out


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Element strides of `shape` viewed as `out_shape` (numpy broadcasting; 0 on broadcast dims)."""
    pad = len(out_shape) - len(shape)
    full = [1] * pad + list(shape)
    st = strides_of(full)
    return [0 if full[i] == 1 and out_shape[i] != 1 else st[i] for i in range(len(out_shape))]


NumpyFn = Callable[..., np.ndarray]
