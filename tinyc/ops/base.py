"""The contract every operator fulfils, and the registry that finds them.

An operator lives in one module under ``tinyc/ops`` (plus its kernel template under
``templates/kernels``): how it is imported from ONNX, its shape rule, its numpy reference,
its MAC count, its schedule knobs and scratch size. Adding an op touches nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Sequence

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import DTYPE_BYTES, Graph, Node

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext

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


class OpDef:
    """Base class: override what the op needs; defaults suit a simple shape-preserving op."""

    op: str = ""  # tinyc IR op name
    onnx_ops: tuple[str, ...] = ()  # ONNX op types this definition imports
    ms_ops: tuple[str, ...] = ()  # com.microsoft op types it imports (onnxruntime's QLinear* family)
    template: str | None = None  # kernel template file (templates/kernels/...), None: no code
    inplace: bool = False  # output may overwrite input 0 (same byte size, elementwise)
    alias: bool = False  # output *is* input 0 reinterpreted (reshape-like): no code
    dtypes: tuple[str, ...] = ("float32",)  # element types the kernel accepts on input 0

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

    # -- code generation -------------------------------------------------------------------
    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        """Schedule knobs and their legal values (what a tuner may vary)."""
        return {}

    def knob_isa(self, knob: str, value: Any) -> str | None:
        """The ISA extension ("dsp", "mve") a knob value's code needs, None when portable. The
        kernels stay exact everywhere (off-target the intrinsics are emulated in C), but defaults
        and search spaces only pick what the target's core has (tinyc.schedule.knob_allowed)."""
        return None

    def canonical_schedule(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> dict[str, Any]:
        """The schedule with knobs its variant ignores removed, so a tuner never measures the same
        code twice under two names. Default: every knob matters."""
        return dict(schedule)

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        """A simple rule picking knob values from shapes (the untuned schedule)."""
        return {k: v[0] for k, v in self.knobs(node, graph).items()}

    def scratch_bytes(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> int:
        """Extra arena bytes the kernel needs while it runs (planned like a tensor)."""
        return 0

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> dict[str, Any]:
        """Extra variables for the kernel template (derived sizes, strides, expressions)."""
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


def _map_onnx_names(inst: OpDef) -> None:
    for o in inst.onnx_ops:
        _ONNX_MAP[o] = inst
    for o in inst.ms_ops:
        _MS_MAP[o] = inst


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
def ctype(dtype: str) -> str:
    try:
        return CTYPES[dtype]
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
