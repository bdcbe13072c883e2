"""Control flow with a static structure: If, Loop, Scan.

An ahead-of-time compiler with static shapes can run control flow whose shape is known at
compile time. `If` with a constant condition is folded at import: the taken branch's nodes are
imported in place of the node. `Loop` (constant trip count, no early exit) and `Scan` keep their
body as a Graph of its own (attr ``body``); the C code is one static function per body kernel and
a `for` loop calling them, with the body's tensors planned once in a block of the arena reserved
for the node (tinyc.memory.liveness), never unrolled per iteration. The emitter reads the node's
`body_wiring`: what is copied into the body before the loop and per iteration, and out of it.
A Loop body that slices constants with the iteration number is imported once per iteration
number; the constants that differ become per-iteration tables fed like scan inputs
(`_iteration_tables`), so one body still serves every iteration. C targets only: OpenCL
launches kernels from its host program and has no kernel-side loop over kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from tinyc.errors import UnsupportedError
from tinyc.ir import Graph, Node, Tensor
from tinyc.ops.base import OpDef, get_op, normalize_axis, register

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext


@dataclass(frozen=True)
class SliceMove:
    """Per iteration t, body tensor `body` <-> slice t of node port `port`, the node's tensor viewed
    as [outer][steps][inner] (slice t' = steps-1-t when `reverse`)."""

    port: int
    body: str
    outer: int
    steps: int
    inner: int
    reverse: bool


@dataclass
class BodyWiring:
    """How a Loop/Scan node's tensors meet its body's (ports are node input/output indices)."""

    trip: int
    init: list[tuple[int, str]] = field(default_factory=list)  # input port -> body input, before the loop
    counter: str | None = None  # body input that receives the iteration number (int64)
    flag: str | None = None  # body input set to true every iteration (Loop's cond)
    slices_in: list[SliceMove] = field(default_factory=list)  # input port slice t -> body input
    slices_out: list[SliceMove] = field(default_factory=list)  # body output -> output port slice t
    carry: list[tuple[str, str]] = field(default_factory=list)  # body output -> body input, per iteration
    final: list[tuple[str, int]] = field(default_factory=list)  # body input -> output port, after the loop
    outer: list[tuple[int, str]] = field(default_factory=list)  # input port read in place as a body tensor


@dataclass(repr=False, eq=False)
class Body(Graph):
    """A Loop/Scan body: a Graph that prints as one line (it rides in a node's attrs, which
    `tinyc inspect` and tuning keys print) and compares by identity."""

    def __repr__(self) -> str:
        return f"body '{self.name}' ({', '.join(n.op for n in self.nodes) or 'no nodes'})"

    @classmethod
    def of(cls, graph: Graph) -> Body:
        return cls(**{f.name: getattr(graph, f.name) for f in fields(Graph)})


def run_body(body: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """One execution of a body with each op's numpy reference (the executor's loop, kept here
    because tinyc.reference sits above the ops)."""
    env = dict(feeds)
    for name, t in body.tensors.items():
        if t.data is not None:
            env[name] = t.data
    for node in body.nodes:
        args = [env[i] if i else None for i in node.inputs]
        outs = get_op(node.op).reference(node, body, cast("list[np.ndarray]", args))
        for name, value in zip(node.outputs, outs):
            if name:
                t = body.tensor(name)
                env[name] = np.asarray(value).astype(t.dtype, copy=False).reshape(t.shape)
    return [env[o] for o in body.outputs]


def _static_cond(body: Graph, name: str, flag_input: str | None) -> bool | None:
    """The value body tensor `name` has in every iteration when it is static: a constant, or the
    condition input passed through Identity nodes (true: the loop runs exactly its trip count);
    None when it is computed at run time."""
    producers = body.producers()
    seen: set[str] = set()
    while name not in seen:
        seen.add(name)
        data = body.constant(name)
        if data is not None:
            return bool(np.all(np.asarray(data)))
        if flag_input is not None and name == flag_input:
            return True
        p = producers.get(name)
        if p is None or p.op != "Identity":
            return None
        name = p.inputs[0]
    return None


#: The most iterations a Loop's body is imported for one by one (see _iteration_tables).
MAX_TABLE_TRIP = 1024


def _iteration_tables(
    ctx: ImportContext, gp: Any, types: list[tuple[tuple[int, ...], str]], trip: int, exc: UnsupportedError
) -> tuple[Graph, list[str], list[str], int]:
    """A body that needs the iteration number as a constant (it slices a constant with it, say):
    import it once per iteration number. When every import leaves the same kernels, differing
    only in the values of some constants they read, those constants become per-iteration tables
    (outer constants [trip, ...], one row fed to the body per iteration like a scan input), and
    one body still serves every iteration. Returns the body (inputs: counter, cond, states,
    tables), its outer tensors, the tables' outer names and the trip count (a condition that
    turns false at a known iteration shortens it); refuses with `exc` or the reason otherwise."""
    graphs: list[Graph] = []
    outer: list[str] = []
    for i in range(trip):
        try:
            g, outer = ctx.import_subgraph(gp, types, {0: np.array(i, np.int64)})
        except UnsupportedError:
            raise exc from None
        again = _static_cond(g, g.outputs[0], g.inputs[0])
        if again is None:
            ctx.unsupported(f"the body's condition output '{g.outputs[0]}' is computed at run time")
        graphs.append(g)
        if not again:
            break

    def kernels(g: Graph) -> Any:
        names = [x for n in g.nodes for x in n.inputs + n.outputs if x] + g.outputs
        types = [(g.tensor(x).shape, g.tensor(x).dtype) for x in names]
        return [(n.op, n.inputs, n.outputs, repr(sorted(n.attrs.items()))) for n in g.nodes], g.outputs, types

    g0 = graphs[0]
    if any(kernels(g) != kernels(g0) for g in graphs[1:]):
        ctx.unsupported(
            f"{exc}; with the iteration number as a constant, the body's kernels still change from one "
            "iteration to the next (it indexes a run-time tensor with it)"
        )
    counter = gp.input[0].name
    used = {i for n in g0.nodes for i in n.inputs if i} | set(g0.outputs[1:])
    varying = []
    for name in sorted(used):
        if name == counter or not g0.tensor(name).is_constant:
            continue
        values = [g.tensor(name).data for g in graphs]
        if any(v is None for v in values):
            ctx.unsupported(f"{exc}; body tensor '{name}' is a constant only in some iterations")
        if any(not np.array_equal(cast(np.ndarray, v), cast(np.ndarray, values[0])) for v in values):
            varying.append(name)
    t = g0.tensor(counter)
    g0.tensors[counter] = Tensor(counter, t.shape, t.dtype)  # read at run time where a kernel uses it
    g0.inputs.insert(0, counter)
    tables = []
    for name in varying:
        rows = np.stack([cast(np.ndarray, g.tensor(name).data) for g in graphs])  # g0's row too: first
        t = g0.tensor(name)
        g0.tensors[name] = Tensor(name, t.shape, t.dtype)
        g0.inputs.append(name)
        tables.append(ctx.add_constant(f"{name}_per_iteration", rows))
    return g0, outer, tables, len(graphs)


class _BodyOp(OpDef):
    """Shared by Loop and Scan: the body rides in attrs, the node's extra inputs are the outer
    tensors the body reads (attr ``outer``: their names inside the body, in input order)."""

    template = "loop.c.j2"
    dtypes = ("float32", "float64", "int8", "uint8", "int16", "int32", "int64", "uint32", "uint64", "bool")

    def body_wiring(self, node: Node, graph: Graph) -> BodyWiring:
        raise NotImplementedError

    def check_supported(self, node: Node, graph: Graph) -> None:
        return None

    def macs(self, node: Node, graph: Graph) -> int:
        body: Graph = node.attrs["body"]
        per = sum(get_op(n.op).macs(n, body) for n in body.nodes)
        return per * self.trip(node)

    def params(self, node: Node, graph: Graph) -> int:
        body: Graph = node.attrs["body"]
        return super().params(node, graph) + sum(t.size for t in body.tensors.values() if t.is_constant)

    def trip(self, node: Node) -> int:
        return int(node.attrs["trip"])

    def _outer_feeds(self, node: Node, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
        names: list[str] = node.attrs["outer"]
        return dict(zip(names, inputs[len(inputs) - len(names) :]))


@register
class If(OpDef):
    """Folded at import when the condition is a constant (the taken branch replaces the node)."""

    op = "If"
    onnx_ops = ("If",)

    def import_onnx(self, ctx):
        cond = ctx.const(0)
        if cond is None:
            ctx.unsupported(
                "input 0 (cond) must be a constant known at compile time (tinyc folds If at import; "
                "a branch chosen at run time has no static structure)"
            )
        if np.asarray(cond).size != 1:
            ctx.invalid(f"cond must hold one value, got {np.asarray(cond).size}")
        branch = "then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"
        outs = ctx.inline_subgraph(ctx.graph_attr(branch))
        if len(outs) != len(ctx.outputs):
            ctx.invalid(f"the {branch} has {len(outs)} outputs, the node {len(ctx.outputs)}")
        nodes = []
        for k, (src, dst) in enumerate(zip(outs, ctx.outputs)):
            if not dst:
                continue
            data = ctx.graph.constant(src)
            if src in ctx.graph.sequences:  # compile-time sequences and optionals: the same value
                ctx.graph.sequences[dst] = list(ctx.graph.sequences[src])
            elif src in ctx.graph.optionals:
                ctx.graph.optionals[dst] = ctx.graph.optionals[src]
            elif data is not None:
                ctx.graph.add_constant(dst, data)
            else:
                nodes.append(Node(f"{ctx.name}_out{k}", "Identity", [src], [dst], {}, source=ctx.name))
        return nodes


@register
class Loop(_BodyOp):
    """attrs: `body` (Graph: inputs iter, cond, states; outputs cond, states, scan slices), `trip`,
    `n_state`, `outer`. Inputs: the initial states, then the outer tensors the body reads.
    Outputs: the final states, then the scan outputs (iterations stacked on a new axis 0)."""

    op = "Loop"
    onnx_ops = ("Loop",)

    def import_onnx(self, ctx):
        trip = None
        if ctx.has_input(0):
            trip = int(np.asarray(ctx.require_const(0, "M, the trip count")).reshape(-1)[0])
        run = True
        if ctx.has_input(1):
            run = bool(np.asarray(ctx.require_const(1, "cond, the initial condition")).reshape(-1)[0])
        states = ctx.inputs[2:]
        if any(not s for s in states):
            ctx.unsupported("an absent loop-carried input (optional values) is not supported")
        if any(s in ctx.graph.sequences or s in ctx.graph.optionals for s in states):
            from tinyc.ops.sequence_map import unroll_loop  # carried sequences: unrolled at import

            return unroll_loop(ctx, trip, run)
        types = [((), "int64"), ((), "bool")] + [(ctx.shape(i), ctx.dtype(i)) for i in range(2, len(ctx.inputs))]
        gp = ctx.graph_attr("body")
        tables: list[str] = []
        try:
            graph, outer = ctx.import_subgraph(gp, types)
        except UnsupportedError as exc:
            if trip is None or not run or not 0 < trip <= MAX_TABLE_TRIP or "must be a constant" not in str(exc):
                raise
            graph, outer, tables, trip = _iteration_tables(ctx, gp, types, trip, exc)
        body = Body.of(graph)
        n_state = len(states)
        if len(body.outputs) < 1 + n_state:
            ctx.invalid(f"the body has {len(body.outputs)} outputs, it needs at least {1 + n_state}")
        again = True if tables else _static_cond(body, body.outputs[0], body.inputs[1])
        if again is None:
            ctx.unsupported(
                f"the body's condition output '{body.outputs[0]}' is computed at run time: the loop may "
                "stop early, so its scan outputs have no static shape"
            )
        if not again:  # a constant false: the first iteration is the last
            trip = 1 if trip is None else min(trip, 1)
        if trip is None:
            ctx.unsupported("no trip count (input M) and a condition that stays true: the loop never ends")
        for k in range(n_state):
            a, b = body.tensor(body.inputs[2 + k]), body.tensor(body.outputs[1 + k])
            if (a.shape, a.dtype) != (b.shape, b.dtype):
                ctx.unsupported(
                    f"loop-carried value {k} changes from {a.dtype}{list(a.shape)} to {b.dtype}{list(b.shape)} "
                    "across iterations (tinyc compiles static shapes)"
                )
        return ctx.make_node(
            "Loop",
            inputs=states + tables + outer,
            outputs=_named_outputs(ctx),
            body=body,
            trip=max(0, trip) if run else 0,
            n_state=n_state,
            n_tables=len(tables),
            outer=outer,
        )

    def infer(self, node: Node, graph: Graph) -> list[tuple[tuple[int, ...], str]]:
        body: Graph = node.attrs["body"]
        n = node.attrs["n_state"]
        out = []
        for k, name in enumerate(body.outputs[1:]):
            t = body.tensor(name)
            out.append((t.shape, t.dtype) if k < n else ((self.trip(node), *t.shape), t.dtype))
        return out

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        body: Graph = node.attrs["body"]
        n = node.attrs["n_state"]
        states = list(inputs[:n])
        ext = self._outer_feeds(node, inputs)
        n_tab = node.attrs.get("n_tables", 0)
        tables = inputs[n : n + n_tab]
        scans: list[list[np.ndarray]] = [[] for _ in body.outputs[1 + n :]]
        for i in range(self.trip(node)):
            feeds = {body.inputs[0]: np.array(i, np.int64), body.inputs[1]: np.array(True), **ext}
            feeds.update(zip(body.inputs[2 : 2 + n], states))
            feeds.update(zip(body.inputs[2 + n :], (t[i] for t in tables)))
            outs = run_body(body, feeds)
            states = outs[1 : 1 + n]
            for lst, v in zip(scans, outs[1 + n :]):
                lst.append(v)
        result = list(states)
        for lst, name in zip(scans, body.outputs[1 + n :]):
            t = body.tensor(name)
            result.append(np.stack(lst) if lst else np.zeros((0, *t.shape), t.dtype))
        return result

    def body_wiring(self, node: Node, graph: Graph) -> BodyWiring:
        body: Graph = node.attrs["body"]
        n = node.attrs["n_state"]
        trip = self.trip(node)
        w = BodyWiring(trip, counter=body.inputs[0], flag=body.inputs[1])
        w.init = [(k, body.inputs[2 + k]) for k in range(n)]
        w.carry = [(body.outputs[1 + k], body.inputs[2 + k]) for k in range(n)]
        w.final = [(body.inputs[2 + k], k) for k in range(n)]
        for j, name in enumerate(body.outputs[1 + n :]):
            w.slices_out.append(SliceMove(n + j, name, 1, trip, body.tensor(name).size, False))
        n_tab = node.attrs.get("n_tables", 0)
        for k, name in enumerate(body.inputs[2 + n :]):
            w.slices_in.append(SliceMove(n + k, name, 1, trip, body.tensor(name).size, False))
        w.outer = [(n + n_tab + k, name) for k, name in enumerate(node.attrs["outer"])]
        return w


@register
class Scan(_BodyOp):
    """attrs: `body` (inputs: states, scan slices; outputs: states, scan slices), `trip`, `n_state`,
    `in_axes`, `in_reverse`, `out_axes`, `out_reverse`, `outer`, `batch1` (Scan-8: every input and
    output has a batch axis 0 of size 1, which the body does not see; in_axes count it, out_axes do
    not). Inputs: initial states, scan inputs, then the outer tensors the body reads. Outputs:
    final states, stacked scan outputs."""

    op = "Scan"
    onnx_ops = ("Scan",)

    def import_onnx(self, ctx):
        # Scan-8 has a batch axis 0 on every input and output (and optional sequence_lens first):
        # compiled for a batch of 1 as Scan-9 along axis 1, the body seeing the batch row.
        batch1 = ctx.opset < 9
        off = 1 if batch1 else 0
        names = ctx.inputs[off:]
        n_in = int(ctx.attr("num_scan_inputs"))
        n_state = len(names) - n_in
        if n_in < 1 or n_state < 0:
            ctx.invalid(f"num_scan_inputs={n_in} with {len(names)} inputs")
        if any(not i for i in names):
            ctx.unsupported("an absent input is not supported")
        if batch1 and any(ctx.shape(off + i)[:1] != (1,) for i in range(len(names))):
            ctx.unsupported("Scan-8 with a batch size other than 1 is not supported (Scan-9+ has no batch axis)")
        in_axes = [1] * n_in if batch1 else list(ctx.attr("scan_input_axes", [0] * n_in))
        in_dirs = list(ctx.attr("directions" if batch1 else "scan_input_directions", [0] * n_in))
        where = f"node '{ctx.name}' (Scan)"
        types = [(ctx.shape(off + i)[off:], ctx.dtype(off + i)) for i in range(n_state)]
        trip = None
        axes = []
        for k in range(n_in):
            shape = ctx.shape(off + n_state + k)
            ax = normalize_axis(int(in_axes[k]), len(shape), where)
            axes.append(ax)
            if trip is not None and shape[ax] != trip:
                ctx.invalid(f"scan inputs differ in length along their scan axes ({trip} vs {shape[ax]})")
            trip = shape[ax]
            types.append(((shape[:ax] + shape[ax + 1 :])[off:], ctx.dtype(off + n_state + k)))
        if batch1 and ctx.has_input(0):
            lens = np.asarray(ctx.require_const(0, "sequence_lens")).reshape(-1)
            if np.any(lens != trip):
                ctx.unsupported(f"sequence_lens {lens.tolist()} shorter than the scan length {trip}")
        graph, outer = ctx.import_subgraph(ctx.graph_attr("body"), types)
        body = Body.of(graph)
        n_out = len(body.outputs) - n_state
        if n_out < 0 or len(ctx.outputs) != len(body.outputs):
            ctx.invalid(f"the body has {len(body.outputs)} outputs, the node {len(ctx.outputs)}")
        for k in range(n_state):
            a, b = body.tensor(body.inputs[k]), body.tensor(body.outputs[k])
            if (a.shape, a.dtype) != (b.shape, b.dtype):
                ctx.unsupported(
                    f"state {k} changes from {a.dtype}{list(a.shape)} to {b.dtype}{list(b.shape)} across "
                    "iterations (tinyc compiles static shapes)"
                )
        out_axes = [0] * n_out if batch1 else list(ctx.attr("scan_output_axes", [0] * n_out))
        out_dirs = [0] * n_out if batch1 else list(ctx.attr("scan_output_directions", [0] * n_out))
        out_axes = [
            normalize_axis(int(a), len(body.tensor(body.outputs[n_state + j]).shape) + 1, where)
            for j, a in enumerate(out_axes)
        ]
        return ctx.make_node(
            "Scan",
            inputs=names + outer,
            outputs=_named_outputs(ctx),
            body=body,
            batch1=batch1,
            trip=int(trip or 0),
            n_state=n_state,
            in_axes=axes,
            in_reverse=[bool(int(d)) for d in in_dirs],
            out_axes=out_axes,
            out_reverse=[bool(int(d)) for d in out_dirs],
            outer=outer,
        )

    def infer(self, node: Node, graph: Graph) -> list[tuple[tuple[int, ...], str]]:
        body: Graph = node.attrs["body"]
        n = node.attrs["n_state"]
        out = []
        lead = (1,) if node.attrs.get("batch1") else ()  # Scan-8's batch axis
        for k, name in enumerate(body.outputs):
            t = body.tensor(name)
            if k < n:
                out.append(((*lead, *t.shape), t.dtype))
            else:
                ax = node.attrs["out_axes"][k - n]
                out.append(((*lead, *t.shape[:ax], self.trip(node), *t.shape[ax:]), t.dtype))
        return out

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        body: Graph = node.attrs["body"]
        n = node.attrs["n_state"]
        trip = self.trip(node)
        batch1 = bool(node.attrs.get("batch1"))  # Scan-8: drop the batch axis of 1, add it back
        scan_in = inputs[n : n + len(node.attrs["in_axes"])]
        states = [s[0] for s in inputs[:n]] if batch1 else list(inputs[:n])
        ext = self._outer_feeds(node, inputs)
        scans: list[list[np.ndarray]] = [[] for _ in body.outputs[n:]]
        for t in range(trip):
            feeds = dict(ext)
            feeds.update(zip(body.inputs[:n], states))
            for name, x, ax, rev in zip(body.inputs[n:], scan_in, node.attrs["in_axes"], node.attrs["in_reverse"]):
                feeds[name] = np.take(x, trip - 1 - t if rev else t, axis=ax)
                if batch1:
                    feeds[name] = feeds[name][0]
            outs = run_body(body, feeds)
            states = outs[:n]
            for lst, v in zip(scans, outs[n:]):
                lst.append(v)
        result = list(states)
        for j, (lst, name) in enumerate(zip(scans, body.outputs[n:])):
            tb = body.tensor(name)
            ax = node.attrs["out_axes"][j]
            if node.attrs["out_reverse"][j]:
                lst = lst[::-1]
            result.append(np.stack(lst, axis=ax) if lst else np.zeros((*tb.shape[:ax], 0, *tb.shape[ax:]), tb.dtype))
        return [r[None] for r in result] if batch1 else result

    def body_wiring(self, node: Node, graph: Graph) -> BodyWiring:
        body: Graph = node.attrs["body"]
        n = node.attrs["n_state"]
        trip = self.trip(node)
        w = BodyWiring(trip)
        w.init = [(k, body.inputs[k]) for k in range(n)]
        w.carry = [(body.outputs[k], body.inputs[k]) for k in range(n)]
        w.final = [(body.inputs[k], k) for k in range(n)]
        for k, (ax, rev) in enumerate(zip(node.attrs["in_axes"], node.attrs["in_reverse"])):
            shape = graph.tensor(node.inputs[n + k]).shape
            w.slices_in.append(SliceMove(n + k, body.inputs[n + k], *_split(shape, ax), rev))
        for j, (ax, rev) in enumerate(zip(node.attrs["out_axes"], node.attrs["out_reverse"])):
            shape = graph.tensor(node.outputs[n + j]).shape
            ax += 1 if node.attrs.get("batch1") else 0
            w.slices_out.append(SliceMove(n + j, body.outputs[n + j], *_split(shape, ax), rev))
        n_in = len(node.attrs["in_axes"])
        w.outer = [(n + n_in + k, name) for k, name in enumerate(node.attrs["outer"])]
        return w


def _named_outputs(ctx: ImportContext) -> list[str]:
    """The node's outputs, an omitted one ("") named: its values are computed anyway (stacked
    scans, final states), and later stages expect every output of a node to be a tensor."""
    return [o or ctx.graph.unique_name(f"{ctx.name}_unused{k}") for k, o in enumerate(ctx.outputs)]


def _split(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """(outer, steps, inner) of `shape` around `axis`."""
    return (
        int(np.prod(shape[:axis], dtype=np.int64)),
        int(shape[axis]),
        int(np.prod(shape[axis + 1 :], dtype=np.int64)),
    )


def body_of(node: Node) -> Graph | None:
    """The body Graph a control-flow node carries, or None."""
    body: Any = node.attrs.get("body")
    return body if isinstance(body, Graph) else None
