"""Gemm and MatMul (fully connected layers and general batched matrix products).

A constant right-hand side is stored pre-transposed as [K, N] with alpha folded in, so the
inner loop of the kernel walks output columns contiguously and vectorises.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, Int8Lowering, OpDef, OutputType, broadcast_strides, register
from tinyc.ir.isa import Isa
from tinyc.ops.conv import (
    GRID_ORDERS,
    apply_activation,
    grid_canonical,
    grid_chunk,
    grid_default_tiles,
    grid_knob_target,
    grid_knobs,
)

from tinyc.ops.impl import Implementation, applicable, by_name
from tinyc.ops.matmul_int4 import int4_weight_node

MM_TYPES = ("float32",)


def check_gemm_shapes(ctx: Any, ta: int, tb: int) -> None:
    """Gemm's shape rule (onnxruntime's): A and B are matrices whose inner dimensions (after
    transA/transB) agree, and C broadcasts one way to the [M, N] result."""
    a, b = ctx.shape(0), ctx.shape(1)
    if len(a) != 2 or len(b) != 2:
        ctx.invalid(f"A {list(a)} and B {list(b)} must both be 2-D")
    M, K = (a[1], a[0]) if ta else (a[0], a[1])
    K2, N = (b[1], b[0]) if tb else (b[0], b[1])
    if K != K2:
        ctx.invalid(
            f"inner dimensions differ: A {list(a)}{' (transposed)' if ta else ''} has K={K}, "
            f"B {list(b)}{' (transposed)' if tb else ''} has K={K2}"
        )
    if ctx.has_input(2):
        c = ctx.shape(2)
        if len(c) > 2 or any(d not in (1, want) for d, want in zip(reversed(c), (N, M))):
            ctx.invalid(f"bias C of shape {list(c)} does not broadcast to the result [{M}, {N}]")


def _fc_shapes(w: Any, b: Any) -> str | None:
    """Why a Gemm's constant B and C do not make a fully connected int8 layer, or None."""
    if len(w.shape) != 2:
        return "weights not a constant matrix"
    if b is not None and b.size != w.shape[1]:
        return "bias not a per-column vector"
    return None


@register
class Gemm(OpDef):
    """y[M,N] = alpha * A' @ B' + beta * C (A' = A or A^T, B' likewise; C broadcast to [M, N])."""

    op = "Gemm"
    onnx_ops = ("Gemm",)
    absorbs_activation = True
    int8_kernel = True
    template = "gemm.c.j2"

    def import_onnx(self, ctx):
        if ctx.dtype(0) not in MM_TYPES:
            ctx.unsupported(f"element type {ctx.dtype(0)} (float32 only)")
        alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
        ta, tb = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
        check_gemm_shapes(ctx, ta, tb)
        ins = list(ctx.inputs[:2])
        c4 = ctx.const(2)
        if not ta and (c4 is not None or not ctx.has_input(2)):  # a 4-bit weight stays packed
            n4 = int4_weight_node(ctx, ins[0], ctx.outputs[0], bool(tb), alpha, None if c4 is None else c4 * beta)
            if n4 is not None:
                return n4
        b = ctx.const(1)
        if b is not None and np.isfinite(alpha):  # inf * a zero weight would be NaN where alpha * (A @ B) is not
            b2 = b.T if tb else b
            ins[1] = ctx.add_constant("weight_kn", np.ascontiguousarray(b2 * np.float32(alpha)).astype(np.float32))
            tb, alpha = 0, 1.0
        if ctx.has_input(2):
            c = ctx.const(2)
            if c is not None:
                ins.append(ctx.add_constant("bias", (c * np.float32(beta)).astype(np.float32)))
                beta = 1.0
            else:
                ins.append(ctx.inputs[2])
        return ctx.make_node("Gemm", inputs=ins, transA=ta, transB=tb, alpha=alpha, beta=beta)

    def dims(self, node: Node, graph: Graph) -> tuple[int, int, int]:
        a = graph.tensor(node.inputs[0]).shape
        b = graph.tensor(node.inputs[1]).shape
        M, K = (a[1], a[0]) if node.attrs["transA"] else (a[0], a[1])
        N = b[0] if node.attrs["transB"] else b[1]
        return int(M), int(K), int(N)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        M, K, N = self.dims(node, graph)
        return [((M, N), "float32")]

    def macs(self, node: Node, graph: Graph) -> int:
        M, K, N = self.dims(node, graph)
        return M * K * N

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = inputs[0].astype(np.float64)
        b = inputs[1].astype(np.float64)
        if node.attrs["transA"]:
            a = a.T
        if node.attrs["transB"]:
            b = b.T
        y = node.attrs["alpha"] * (a @ b)
        if len(inputs) > 2 and inputs[2] is not None:
            y = y + node.attrs["beta"] * inputs[2].astype(np.float64)
        return [apply_activation(node, y.astype(np.float32))]

    def lower_int8(self, node: Node, low: Int8Lowering) -> str | None:
        """A fully connected layer (QMatMul with a constant int8 B)."""
        from tinyc.ops.qmatmul import build_qfc

        a = node.attrs
        if a.get("transA") or a.get("transB") or float(a.get("alpha", 1.0)) != 1.0 or float(a.get("beta", 1.0)) != 1.0:
            return "Gemm with transposes or alpha/beta"
        return low.lower_weighted(node, build_qfc, _fc_shapes)

    def onnx_weight_axis(self, op_type: str, attr: Any) -> int | None:
        return 0 if attr("transB", 0) else 1  # the output-column axis of B

    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        M, K, N = self.dims(node, graph)
        if not _plain(node, graph):
            return {"variant": ["strided"]}  # the only variant that applies alpha (dynamic B)
        n_tiles = [t for t in (32, 16, 8, 4, 2, 1) if t <= N]
        if N < 32 and N not in n_tiles:
            n_tiles.insert(0, N)
        m_tiles = [t for t in (4, 2, 1) if t <= M]
        return {
            "variant": [i.name for i in applicable(self.implementations, node, graph)],
            "n_tile": n_tiles,
            "m_tile": m_tiles,
            **grid_knobs(),
            "loop_order": list(GRID_ORDERS["matmul"]),
        }

    def knob_isa(self, knob: str, value: Any) -> str | None:
        return super().knob_isa(knob, value) or grid_knob_target(knob, value, (("loop_order", "columns_outer"),))

    def canonical_schedule(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> dict[str, Any]:
        """ "grid" reads n_tile, m_tile, vec, local_mem, loop_order (``grid_canonical``); the C
        variants none of the last three."""
        if schedule.get("variant") == "grid":
            return grid_canonical(
                schedule,
                ("n_tile", "m_tile"),
                self.dims(node, graph)[2],
                self.knobs(node, graph)["m_tile"],
                family="matmul",
            )
        return {k: v for k, v in schedule.items() if k not in ("vec", "local_mem", "loop_order")}

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        """Tiles need not divide M or N (tail tiles); up to 4 rows share each weight load.
        OpenCL: the "grid" variant (``grid_matmul_default``)."""
        ks = self.knobs(node, graph)
        if Isa.parse(target).work_items and "grid" in ks["variant"]:
            M, _, N = self.dims(node, graph)
            return grid_matmul_default(M, N, ks)
        s = {k: v[0] for k, v in ks.items() if k not in ("vec", "local_mem", "loop_order")}
        if "m_tile" in ks:
            fits = [r for r in ks["m_tile"] if r * s["n_tile"] <= 128]
            s["m_tile"] = max(fits) if fits else 1
        return s

    def implementation(
        self, node: Node, graph: Graph, schedule: dict[str, Any] | None, target: str
    ) -> tuple[Implementation, dict[str, Any]]:
        """The registered implementation a schedule runs and the schedule itself (the target's
        default when it is empty)."""
        sched = schedule or self.default_schedule(node, graph, target)
        return by_name(self.implementations, sched["variant"], f"node '{node.source or node.name}' (Gemm)"), sched

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        M, K, N = self.dims(node, graph)
        impl, sched = self.implementation(node, graph, schedule, target)
        ta, tb = node.attrs["transA"], node.attrs["transB"]
        ctx: dict[str, Any] = dict(
            M=M,
            K=K,
            N=N,
            variant=sched["variant"],
            n_tile=sched.get("n_tile", 1),
            m_tile=sched.get("m_tile", 1),
            sa=(1, M) if ta else (K, 1),
            sb=(1, K) if tb else (N, 1),
            alpha=node.attrs["alpha"],
            beta=node.attrs["beta"],
            has_c=len(node.inputs) > 2,
            impl_template=impl.template,
        )
        if ctx["has_c"]:
            cs = broadcast_strides(graph.tensor(node.inputs[2]).shape, (M, N))
            ctx["sc"] = cs
        if sched["variant"] == "grid":
            ctx.update(grid_matmul_context(M, K, N, sched, 4))
        return ctx


def grid_matmul_default(M: int, N: int, ks: dict[str, list[Any]], batches: int = 1) -> dict[str, Any]:
    """The OpenCL default of a matrix product (Gemm, MatMul, QMatMul): "grid" with
    ``grid_default_tiles`` over the columns x rows (x batches), no local memory, 64 work-items
    per group (see ``grid_conv_default``)."""
    t, j, vec = grid_default_tiles(N, M, batches, ks["n_tile"], ks["m_tile"])
    return {
        "variant": "grid",
        "n_tile": t,
        "m_tile": j,
        "vec": vec,
        "local_mem": 0,
        "loop_order": "rows_outer",
        "local_size": 64,
    }


def grid_matmul_context(M: int, K: int, N: int, sched: dict[str, Any], wbytes: int) -> dict[str, Any]:
    """Template variables of a matrix product's "grid" kernel: the tile (T columns, J rows, V
    lanes), the rows of B staged per chunk with local memory (KC) and their bytes."""
    canon = grid_canonical(sched, ("n_tile", "m_tile"), N, [t for t in (4, 2, 1) if t <= M], family="matmul")
    T = max(1, min(canon["n_tile"], N))
    J = max(1, min(canon["m_tile"], M))
    local = bool(canon["local_mem"])
    kc = grid_chunk(1, K, T * wbytes)[0] if local else K
    return dict(
        T=T,
        J=J,
        V=canon["vec"],
        local=local,
        KC=kc,
        local_bytes=kc * T * wbytes if local else 0,
        local_size=int(sched.get("local_size", 0)),
        pixels_fast=canon.get("loop_order") == GRID_ORDERS["matmul"][1],
    )


def grid_batches(batch: list[int], strides: list[int]) -> str:
    """The C offset `+ ...` of batch `g` (the flat index over the broadcast batch dims `batch`)
    into an operand whose batch dims have element strides `strides` (0: broadcast)."""
    terms = []
    for k, (n, s) in enumerate(zip(batch, strides)):
        inner = int(np.prod(batch[k + 1 :], dtype=np.int64))
        if s and n > 1:
            idx = (
                "g"
                if inner == 1 and k == 0
                else (f"(g / {inner})" if k == 0 else (f"(g % {n})" if inner == 1 else f"(g / {inner} % {n})"))
            )
            terms.append(f" + {idx} * {s}")
    return "".join(terms)


@register
class MatMul(OpDef):
    """numpy.matmul: batched, broadcasting over leading dims. With a constant 2D right-hand side
    it imports as Gemm over the flattened rows (reshapes are free)."""

    op = "MatMul"
    onnx_ops = ("MatMul",)
    absorbs_activation = True
    template = "matmul.c.j2"
    dtypes = MM_TYPES + ("float64",)  # float64: the "serial" loop nest in double

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        a_shape = ctx.shape(0)
        bs = ctx.shape(1)
        if not a_shape or not bs:
            ctx.invalid(f"inputs of shapes {list(a_shape)} and {list(bs)}: MatMul needs rank >= 1")
        k_b = bs[0] if len(bs) == 1 else bs[-2]
        if a_shape[-1] != k_b:
            ctx.invalid(f"inner dimensions differ: A {list(a_shape)} has K={a_shape[-1]}, B {list(bs)} has K={k_b}")
        try:
            np.broadcast_shapes(tuple(a_shape[:-2]), tuple(bs[:-2]))
        except ValueError:
            ctx.invalid(f"batch dimensions of A {list(a_shape)} and B {list(bs)} do not broadcast")
        b = ctx.const(1)
        if b is not None and b.ndim == 2 and len(a_shape) >= 2 and ctx.dtype(0) == "float32":
            rows = int(np.prod(a_shape[:-1]))
            g = ctx.graph
            nodes = []
            a_in = ctx.inputs[0]
            if len(a_shape) != 2:
                a_in = g.unique_name(f"{ctx.name}_rows")
                nodes.append(
                    Node(
                        f"{ctx.name}_flatten",
                        "Reshape",
                        [ctx.inputs[0]],
                        [a_in],
                        {"shape": [rows, a_shape[-1]]},
                        source=ctx.name,
                    )
                )
            out = ctx.outputs[0] if len(a_shape) == 2 else g.unique_name(f"{ctx.name}_gemm")
            w4 = int4_weight_node(ctx, a_in, out, False)  # a 4-bit weight stays packed
            w = w4.inputs[1] if w4 else ctx.add_constant("weight_kn", np.ascontiguousarray(b.astype(np.float32)))
            nodes.append(
                w4
                or Node(
                    ctx.name,
                    "Gemm",
                    [a_in, w],
                    [out],
                    {"transA": 0, "transB": 0, "alpha": 1.0, "beta": 1.0},
                    source=ctx.name,
                )
            )
            if len(a_shape) != 2:
                nodes.append(
                    Node(
                        f"{ctx.name}_unflatten",
                        "Reshape",
                        [out],
                        [ctx.outputs[0]],
                        {"shape": [*a_shape[:-1], b.shape[1]]},
                        source=ctx.name,
                    )
                )
            return nodes
        return ctx.make_node("MatMul")

    @staticmethod
    def _shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[list[int], int, int, int, tuple[int, ...]]:
        a2 = (1, *a) if len(a) == 1 else a
        b2 = (*b, 1) if len(b) == 1 else b
        batch = list(np.broadcast_shapes(a2[:-2], b2[:-2]))
        M, K, N = a2[-2], a2[-1], b2[-1]
        out = [*batch, M, N]
        if len(a) == 1:
            out.pop(-2)
        if len(b) == 1:
            out.pop(-1)
        return batch, int(M), int(K), int(N), tuple(int(d) for d in out)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        return [(self._shapes(a, b)[4], graph.tensor(node.inputs[0]).dtype)]

    def macs(self, node: Node, graph: Graph) -> int:
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        batch, M, K, N, _ = self._shapes(a, b)
        return int(np.prod(batch, dtype=np.int64)) * M * K * N

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        y = np.matmul(inputs[0].astype(np.float64), inputs[1].astype(np.float64)).astype(inputs[0].dtype)
        return [apply_activation(node, y)]

    def onnx_weight_axis(self, op_type: str, attr: Any) -> int | None:
        return 1  # B [K, N]

    def knobs(self, node: Node, graph: Graph) -> dict[str, list[Any]]:
        """Only the OpenCL target has a choice: "serial" (the C loop nest) or "grid" (work-items
        over batches x row tiles x column tiles); the C targets have no knobs here."""
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        _, M, _, N, _ = self._shapes(a, b)
        n_tiles = [t for t in (32, 16, 8, 4, 2, 1) if t <= N]
        if N < 32 and N not in n_tiles:
            n_tiles.insert(0, N)
        return {
            "variant": [i.name for i in applicable(self.implementations, node, graph)],
            "n_tile": n_tiles,
            "m_tile": [t for t in (4, 2, 1) if t <= M],
            **grid_knobs(),
            "loop_order": list(GRID_ORDERS["matmul"]),
        }

    def knob_isa(self, knob: str, value: Any) -> str | None:
        return super().knob_isa(knob, value) or grid_knob_target(knob, value, (("loop_order", "columns_outer"),))

    def canonical_schedule(self, node: Node, graph: Graph, schedule: dict[str, Any]) -> dict[str, Any]:
        """ "serial" reads no knob (the empty schedule, as before the knobs existed)."""
        if schedule.get("variant") == "grid":
            a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
            return grid_canonical(
                schedule,
                ("n_tile", "m_tile"),
                self._shapes(a, b)[3],
                self.knobs(node, graph)["m_tile"],
                family="matmul",
            )
        return {}

    def default_schedule(self, node: Node, graph: Graph, target: str) -> dict[str, Any]:
        if not Isa.parse(target).work_items or not _is_f32(node, graph):
            return {}
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        batch, M, _, N, _ = self._shapes(a, b)
        return grid_matmul_default(M, N, self.knobs(node, graph), int(np.prod(batch, dtype=np.int64)))

    def implementation(
        self, node: Node, graph: Graph, schedule: dict[str, Any] | None, target: str
    ) -> tuple[Implementation, dict[str, Any]]:
        """The registered implementation a schedule runs ("serial" unless it says "grid"; no knob
        of "serial" has a default to fill) and the schedule."""
        sched = dict(schedule or {})
        name = sched.get("variant", "serial")
        return by_name(self.implementations, name, f"node '{node.source or node.name}' (MatMul)"), sched

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        a, b = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        batch, M, K, N, _ = self._shapes(a, b)
        impl, schedule = self.implementation(node, graph, schedule, target)
        a2 = (1, *a) if len(a) == 1 else a
        b2 = (*b, 1) if len(b) == 1 else b
        sa = broadcast_strides(tuple(a2[:-2]), tuple(batch)) if batch else []
        sb = broadcast_strides(tuple(b2[:-2]), tuple(batch)) if batch else []
        ctx: dict[str, Any] = dict(
            batch=batch or [1],
            bsa=[s * M * K for s in sa] or [0],
            bsb=[s * K * N for s in sb] or [0],
            M=M,
            K=K,
            N=N,
            variant=impl.name,
            impl_template=impl.template,
            T=CTYPES[graph.tensor(node.inputs[0]).dtype],
        )
        if ctx["variant"] == "grid":
            ctx.update(
                grid_matmul_context(M, K, N, schedule, 4),
                nbat=int(np.prod(batch, dtype=np.int64)),
                aoff=grid_batches(batch, ctx["bsa"]),
                boff=grid_batches(batch, ctx["bsb"]),
            )
        return ctx


# -- the registered implementations -------------------------------------------------------
def _plain(node: Node, graph: Graph) -> bool:
    """A constant [K, N] right-hand side with alpha folded in (import): no transposes, alpha 1."""
    a = node.attrs
    return not (a["transB"] or a["transA"] or a["alpha"] != 1.0)


def _is_f32(node: Node, graph: Graph) -> bool:
    """The "grid" matrix product computes float32 (float64 runs the serial loop nest)."""
    return graph.tensor(node.inputs[0]).dtype == "float32"


def _strided(node: Node, graph: Graph) -> bool:
    return not _plain(node, graph)


#: The knobs a matrix product's "grid" variant reads (``grid_canonical``).
GRID_MATMUL_KNOBS = ("variant", "n_tile", "m_tile", "vec", "local_mem", "loop_order")

Gemm.implementations = (
    Implementation("tiled", "gemm/tiled.c.j2", _plain, knobs=("variant", "n_tile", "m_tile"), priority=20),
    Implementation("rowacc", "gemm/rowacc.c.j2", _plain, knobs=("variant",), priority=10),
    Implementation("grid", "gemm/grid.c.j2", _plain, needs="opencl", knobs=GRID_MATMUL_KNOBS, priority=-10),
    # the only variant that applies alpha and reads transposed or dynamic operands
    Implementation("strided", "gemm/strided.c.j2", _strided, knobs=("variant",)),
)
MatMul.implementations = (
    Implementation("serial", "matmul/serial.c.j2", knobs=()),
    Implementation("grid", "matmul/grid.c.j2", _is_f32, needs="opencl", knobs=GRID_MATMUL_KNOBS, priority=-10),
)
