"""ONNX → tinyc IR.

Table-driven: each ONNX op type maps to the OpDef that imports it (tinyc.ops). Nodes are
imported in order; a node whose inputs are all constants is evaluated right away with the
numpy reference, so shape-only subgraphs (Shape → Gather → Concat → Reshape) vanish during
import and later handlers see their configuring inputs as constants.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import onnx
from onnx import helper

from tinyc.errors import ModelLoadError, ShapeError, TinycError, UnsupportedError
from tinyc.frontend import functions, sequence_io, validate
from tinyc.frontend.context import ImportContext
from tinyc.ir import Graph, Node, Tensor
from tinyc.ops.base import get_op, onnx_op

MIN_OPSET = validate.MIN_OPSET  # older forms that the handlers understand are accepted; see validate.py


def load_onnx(path: str | os.PathLike) -> onnx.ModelProto:
    """Read a model with its external data, turning every failure into one clear message."""
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelLoadError(f"{p} is a directory, not an ONNX model file")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # protobuf raises several unrelated types
        raise ModelLoadError(
            f"{p} is not an ONNX model (could not parse it as ONNX protobuf: {type(exc).__name__})"
        ) from None
    if not model.graph.node and not model.graph.output:
        raise ModelLoadError(f"{p} is not an ONNX model (no graph found in the file)")
    _load_external_data(model, p.parent)
    return model


def _load_external_data(model: onnx.ModelProto, base: Path) -> None:
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    missing = []
    for t in _get_all_tensors(model):
        if uses_external_data(t):
            info = {e.key: e.value for e in t.external_data}
            loc = base / info.get("location", "")
            if not loc.is_file():
                missing.append(f"'{t.name}' → {loc}")
    if missing:
        raise ModelLoadError(
            "external-data weights are missing: " + "; ".join(missing) + " (keep the data files next to the .onnx file)"
        )
    try:
        onnx.external_data_helper.load_external_data_for_model(model, str(base))
    except Exception as exc:
        raise ModelLoadError(f"could not read external-data weights: {exc}") from None


def _np_dtype_name(elem_type: int) -> str:
    from tinyc.ir import DTYPE_BYTES

    try:
        name = str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:
        name = ""
    if name not in DTYPE_BYTES:
        raise UnsupportedError(f"tensor element type {validate.dtype_name(elem_type)} is not supported")
    return name


def parse_input_shapes(specs: Sequence[str] | Mapping[str, Any] | None) -> dict[str, sequence_io.Structure]:
    """`["x=1,3,32,32"]` or `{"x": (1,3,32,32)}` → dict. A sequence/optional input's structure may be
    given too (`{"seq": [(2, 3), (2, 3)], "opt": None}`, `"seq=[2,3;2,3]"`, `"opt=none"`): see
    tinyc/frontend/sequence_io.py."""
    if not specs:
        return {}
    if isinstance(specs, Mapping):
        return {k: sequence_io.normalize(v) for k, v in specs.items()}
    out: dict[str, sequence_io.Structure] = {}
    for spec in specs:
        name, eq, rest = spec.partition("=")
        structured, value = sequence_io.parse_spec(rest) if eq else (False, None)
        if structured:
            out[name.strip()] = value
            continue
        m = re.fullmatch(r"\s*([^=]+?)\s*=\s*([0-9]+(?:\s*[,x]\s*[0-9]+)*)\s*", spec)
        if not m:
            from tinyc.errors import UsageError

            raise UsageError(
                f"--input-shape '{spec}': expected NAME=D0,D1,... e.g. input=1,3,32,32 "
                "(a sequence: NAME=[D0,D1;D0,D1]; an absent optional: NAME=none)"
            )
        out[m.group(1)] = tuple(int(d) for d in re.split(r"\s*[,x]\s*", m.group(2)))
    return out


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    """Opset version per domain ("" for the default ONNX domain)."""
    out = {"": 1}
    for o in model.opset_import:
        out["" if o.domain == "ai.onnx" else o.domain] = int(o.version)
    return out


def _check_ops(model: onnx.ModelProto) -> None:
    """One error listing every unsupported node, so users see the whole job at once. An op without a
    kernel but with an ONNX function body is supported through its body (checked when it is expanded)."""
    opsets = _opsets(model)
    bad = []
    for i, n in enumerate(model.graph.node):
        dom = "" if n.domain == "ai.onnx" else n.domain
        if onnx_op(n.op_type, n.domain) is None and not functions.has_function_body(n.op_type, dom, opsets.get(dom, 1)):
            dom = f"{n.domain}." if n.domain not in ("", "ai.onnx") else ""
            bad.append(f"'{n.name or f'#{i}'}' ({dom}{n.op_type})")
    if bad:
        ops = sorted({b.split("(")[1].rstrip(")") for b in bad})
        hints = "".join(_op_hint(op) for op in ops)
        raise UnsupportedError(
            f"{len(bad)} node(s) use operators tinyc does not support ({', '.join(ops)}): " + ", ".join(bad) + hints
        )


def _op_hint(shown: str) -> str:
    """'; Relux: did you mean 'Relu'?' for a near-miss of a supported ONNX op name (a typo, another
    casing, or a custom-domain op named like a standard one: `shown` is "[domain.]OpType"); '' else."""
    from tinyc.ops.base import supported_onnx_ops
    from tinyc.suggest import close_matches

    domain, _, op_type = shown.rpartition(".")
    close = [c for c in close_matches(op_type, supported_onnx_ops()) if domain or c != op_type]
    if not close:
        return ""
    where = " in the standard ONNX domain" if domain else ""
    return f"; {shown}: did you mean {' or '.join(repr(c) for c in close)}{where}?"


def _opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 1


def import_onnx(
    model: onnx.ModelProto | str | os.PathLike,
    input_shapes: Sequence[str] | Mapping[str, Any] | None = None,
    name: str | None = None,
    bind: Mapping[str, np.ndarray] | None = None,
) -> Graph:
    """Import an ONNX model (object or path) into a tinyc Graph with static shapes.

    `bind` freezes graph inputs to constant values (like TVM's bound params): an ahead-of-time
    compiler needs shape/axes/indices inputs known, and users often feed them as inputs."""
    if not isinstance(model, onnx.ModelProto):
        default_name = Path(model).stem
        model = load_onnx(model)
    else:
        default_name = model.graph.name or "model"
    shapes = parse_input_shapes(input_shapes)
    if model.functions:  # model-local functions (exporters' custom blocks): inline them first
        model = _inline_local_functions(model)
    # Validation up front (validate.py): what onnxruntime refuses is refused here, in one line.
    validate.validate_structure(model)
    opset = _opset(model)
    _check_ops(model)  # before the checker: it also rejects unknown ops, less helpfully
    validate.validate_semantics(model, opset)

    g = Graph(name=name or default_name)
    # A graph input that also has an initializer (IR >= 4): the initializer is its default value.
    # onnxruntime lists it as an overridable initializer, not as an input, and uses the default
    # unless fed; an ahead-of-time compiler freezes it to the default (a constant).
    initializers = {t.name: t for t in model.graph.initializer}
    for t in initializers.values():
        g.add_constant(t.name, validate.tensor_to_array(t))

    bind = dict(bind or {})
    graph_inputs = {vi.name for vi in model.graph.input}
    for k, _v in bind.items():
        if k not in graph_inputs:
            raise ShapeError(f"cannot bind '{k}': not a model input (inputs: {', '.join(sorted(graph_inputs))})")
    unknown = set(shapes)
    taken = sequence_io.value_names(model)
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        if sequence_io.is_structured(vi):
            # compiled with the structure given in input_shapes: tensor inputs x.0, x.1, ... (sequence_io.py)
            if vi.name in bind:
                sequence_io.bind_input(g, vi, bind[vi.name], _np_dtype_name, taken)
            else:
                sequence_io.add_input(g, vi, shapes, _np_dtype_name, taken)
            unknown.discard(vi.name)
            continue
        if vi.type.WhichOneof("value") not in (None, "tensor_type"):
            kind = str(vi.type.WhichOneof("value")).removesuffix("_type")
            raise UnsupportedError(f"input '{vi.name}' has {kind} type; tinyc compiles tensor inputs only")
        if vi.name in bind:
            dtype = _np_dtype_name(vi.type.tensor_type.elem_type)
            g.add_constant(vi.name, np.asarray(bind[vi.name]).astype(dtype))
            continue
        tt = vi.type.tensor_type
        dtype = _np_dtype_name(tt.elem_type)
        dims: list[int | None] = []
        for d in tt.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None)
        if vi.name in shapes:
            given = shapes[vi.name]
            unknown.discard(vi.name)
            if not isinstance(given, tuple):
                raise ShapeError(f"--input-shape {vi.name}: a tensor input takes a shape D0,D1,..., got {given}")
            if len(given) != len(dims) and tt.HasField("shape"):
                raise ShapeError(f"--input-shape {vi.name}: model input has rank {len(dims)}, got {len(given)} dims")
            for i, (a, b) in enumerate(zip(dims, given)):
                if a is not None and a != b:
                    raise ShapeError(f"--input-shape {vi.name}: dimension {i} is fixed to {a} in the model, got {b}")
            dims = list(given)
        if vi.name in shapes and not tt.HasField("shape"):
            dims = list(cast("tuple[int, ...]", shapes[vi.name]))
        elif not tt.HasField("shape") or any(d is None for d in dims):
            shown = [d if d is not None else "?" for d in dims] if tt.HasField("shape") else "unknown rank"
            sym = [d.dim_param for d in tt.shape.dim if d.dim_param]
            hint = ",".join(str(d) if d is not None else "N" for d in dims) if tt.HasField("shape") else "D0,D1,..."
            raise ShapeError(
                f"input '{vi.name}' has a dynamic shape {shown}"
                + (f" (symbolic: {', '.join(sym)})" if sym else "")
                + f"; fix it with --input-shape {vi.name}={hint} (input_shapes= in the Python API)"
            )
        known = cast("list[int]", dims)  # no dimension left unknown: refused above
        g.add_tensor(Tensor(vi.name, tuple(int(d) for d in known), dtype))
        g.inputs.append(vi.name)
    if unknown:
        raise ShapeError(
            f"--input-shape names unknown input(s): {', '.join(sorted(unknown))}; "
            f"model inputs are: {', '.join(g.inputs) or '(none)'}"
        )

    used_names: set[str] = set()
    opsets = _opsets(model)
    for idx, onode in enumerate(model.graph.node):
        node_name = onode.name or f"{onode.op_type}_{idx}"
        while node_name in used_names:
            node_name += "_"
        used_names.add(node_name)
        _import_or_expand(g, onode, opsets, node_name, used_names, 0)

    for vi in model.graph.output:
        if vi.name in g.sequences or vi.name in g.optionals or sequence_io.is_structured(vi):
            sequence_io.add_output(g, vi, add_node)  # one tensor output per element (sequence_io.py)
            continue
        if vi.name not in g.tensors:
            raise ModelLoadError(f"graph output '{vi.name}' is not produced by any node")
        declared = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if declared and _np_dtype_name(declared) != g.tensor(vi.name).dtype:
            raise ShapeError(
                f"graph output '{vi.name}' is declared {validate.dtype_name(declared)}, but tinyc "
                f"computes it as {g.tensor(vi.name).dtype}"
            )
        g.outputs.append(vi.name)
        g.output_names.append(vi.name)
    _cross_check_shapes(model, g, shapes)
    g.remove_unused_tensors()
    # QLinear* operators became integer kernels here: they keep ONNX's rounding (one rounding, half to even)
    from tinyc.ops.rounding import set_requant_rounding

    set_requant_rounding(g, "half_even")
    return g


def _inline_local_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        import onnx.inliner

        return onnx.inliner.inline_local_functions(model)
    except Exception as exc:
        raise ModelLoadError(f"could not inline the model's local functions: {exc}") from None


def _import_or_expand(
    g: Graph, onode: onnx.NodeProto, opsets: dict[str, int], node_name: str, used: set[str], depth: int
) -> None:
    """Import one node with its kernel; without a kernel, or when the kernel refuses this variant, import
    its ONNX function body instead (recursively). The kernel's refusal stands if there is no body."""
    dom = "" if onode.domain == "ai.onnx" else onode.domain
    opset = opsets.get(dom, 1)
    if onnx_op(onode.op_type, onode.domain) is not None:
        try:
            _import_node(g, onode, opsets.get("", 1), node_name)
            return
        except UnsupportedError as refusal:
            # The kernel refuses this variant: its function body may still compile. If the body fails
            # too, the kernel's reason is the one to show (it says e.g. which input must be constant).
            if not functions.has_function_body(onode.op_type, dom, opset):
                raise
            try:
                expanded = _expand(g, onode, opsets, node_name, used, depth)
            except TinycError:
                expanded = None
            if expanded is None:
                raise refusal from None
            return
    if _expand(g, onode, opsets, node_name, used, depth) is None:
        dshow = f"{dom}." if dom else ""
        raise UnsupportedError(
            f"node '{node_name}' ({dshow}{onode.op_type}): operator tinyc does not support"
            + _op_hint(f"{dshow}{onode.op_type}")
        )


def _expand(
    g: Graph, onode: onnx.NodeProto, opsets: dict[str, int], node_name: str, used: set[str], depth: int
) -> bool | None:
    """Import `onode`'s function body in its place; None when it has none (nothing imported then)."""
    dom = "" if onode.domain == "ai.onnx" else onode.domain
    if depth >= functions.MAX_DEPTH:
        raise functions.refuse_depth(node_name, onode.op_type)
    for i in onode.input:
        if i and i not in g.tensors:
            raise ModelLoadError(f"node '{node_name}' ({onode.op_type}) reads '{i}', which no earlier node produces")
    types = [functions.type_proto(g.tensor(i).dtype, g.tensor(i).shape) if i else None for i in onode.input]
    body = functions.function_body(onode, opsets.get(dom, 1), types)
    if body is None:
        return None

    def unique(base: str) -> str:
        name = base
        while name in g.tensors or name in used:
            name += "_"
        used.add(name)
        return name

    inner = functions.body_opsets(body, opsets)
    for bn in functions.inline(onode, body, unique, node_name, opsets.get(dom, 1)):
        name = bn.name
        while name in used:
            name += "_"
        used.add(name)
        _import_or_expand(g, bn, inner, name, used, depth + 1)
    return True


def _import_node(g: Graph, onode: onnx.NodeProto, opset: int, node_name: str) -> None:
    opdef = onnx_op(onode.op_type, onode.domain)
    assert opdef is not None
    for i in onode.input:
        if i and i not in g.tensors and i not in g.sequences and i not in g.optionals:
            raise ModelLoadError(
                f"node '{node_name}' ({onode.op_type}) reads '{i}', which no earlier node "
                f"produces (graph not topologically sorted?)"
            )
    validate.check_node_scales(onode, opset, f"node '{node_name}' ({onode.op_type})", g.constant)
    # narrow types (float16, int4...) the op's kernel lacks: import on widened inputs (widen.py)
    from tinyc.frontend import widen

    tensors_only = all(i in g.tensors for i in onode.input if i)  # sequence/optional values: no widening
    wide = widen.needs_widening(g, onode, opdef.dtypes, opdef.alias, node_name) if tensors_only else []
    n_before = len(g.nodes)
    widened = widen.widen_inputs(g, onode, wide, node_name, add_node) if wide else None
    ctx = ImportContext(widened.node if widened else onode, g, opset, node_name)
    try:
        result = opdef.import_onnx(ctx)
    except TinycError:
        del g.nodes[n_before:]  # the widening casts of a refused node (its function body may follow)
        raise
    except Exception as exc:  # a handler bug or a malformed node: still name the node
        raise UnsupportedError(
            f"node '{node_name}' ({onode.op_type}): could not import: {type(exc).__name__}: {exc}"
        ) from exc
    nodes = [result] if isinstance(result, Node) else list(result)
    for k, node in enumerate(nodes):
        if k and node.name == node_name:
            node.name = f"{node_name}_{k}"
        add_node(g, node)
    if widened:
        widen.narrow_outputs(g, widened, node_name, add_node)


def add_node(g: Graph, node: Node, fold: bool = True) -> None:
    """Infer the node's outputs; fold it to constants if all its inputs are constants."""
    opdef = get_op(node.op)
    try:
        types = opdef.infer(node, g)
    except TinycError:
        raise
    except Exception as exc:
        raise ShapeError(
            f"node '{node.source or node.name}' ({node.op}): shape inference failed: {type(exc).__name__}: {exc}"
        ) from exc
    for out, (shape, dtype) in zip(node.outputs, types):
        if out:
            # A QOperator importer may have declared the output's quantization parameters already.
            old = g.tensors.get(out)
            g.add_tensor(Tensor(out, tuple(int(d) for d in shape), dtype, None, old.quant if old else None))
    real_inputs = [i for i in node.inputs if i]
    if fold and all(g.tensor(i).is_constant for i in real_inputs):
        args = [g.tensor(i).data if i else None for i in node.inputs]  # None: an absent optional input
        values = opdef.reference(node, g, cast("list[np.ndarray]", args))
        # DequantizeLinear of a constant (QDQ weights) folds to float but remembers its int8 grid,
        # so the int8 lowering can keep the model's own weight scales.
        quant = opdef.folded_quant(node, g)
        for out, val, (shape, dtype) in zip(node.outputs, values, types):
            if out:
                g.folded_from[out] = node
                g.tensors[out] = Tensor(
                    out,
                    tuple(shape),
                    dtype,
                    np.ascontiguousarray(np.asarray(val, dtype=dtype)).reshape(tuple(shape)),
                    quant,
                )
        return
    for i, out in enumerate(node.outputs):
        if out and any(d < 0 for d in g.tensor(out).shape):
            raise ShapeError(
                f"node '{node.source or node.name}' ({node.op}): output {i} has unresolved shape {g.tensor(out).shape}"
            )
    g.nodes.append(node)


def _cross_check_shapes(model: onnx.ModelProto, g: Graph, shapes: dict[str, sequence_io.Structure]) -> None:
    """onnx's own shape inference must agree with ours on the graph outputs (catches handler bugs)."""
    try:
        m = onnx.ModelProto()
        m.CopyFrom(model)
        for vi in m.graph.input:
            if vi.name in g.tensors and vi.name in g.inputs:
                dims = vi.type.tensor_type.shape.dim
                for d, v in zip(dims, g.tensor(vi.name).shape):
                    d.Clear()
                    d.dim_value = v
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False)
    except Exception:
        return  # onnx cannot infer this model (e.g. very large); our rules stand alone
    for vi in inferred.graph.output:
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or vi.name not in g.tensors:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        ours = g.tensor(vi.name).shape
        if len(dims) == len(ours) and all(a is None or a == b for a, b in zip(dims, ours)):
            continue
        if len(dims) != len(ours) or any(a is not None and a != b for a, b in zip(dims, ours)):
            raise ShapeError(
                f"output '{vi.name}': tinyc inferred shape {ours}, onnx shape inference says "
                f"{tuple(d if d is not None else '?' for d in dims)}"
            )


# -- subgraphs (If / Loop / Scan bodies) ------------------------------------------------------
def subgraph_free_names(gp: onnx.GraphProto) -> list[str]:
    """Names a subgraph (and the subgraphs nested in it) reads but does not define: ONNX lets a
    body see every name of the scopes around it, so these come from the outer graph."""
    defined = {vi.name for vi in gp.input} | {t.name for t in gp.initializer}
    free: list[str] = []

    def use(name: str) -> None:
        if name and name not in defined and name not in free:
            free.append(name)

    for n in gp.node:
        for i in n.input:
            use(i)
        for a in n.attribute:
            nested = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for sub in nested:
                for name in subgraph_free_names(sub):
                    use(name)
        defined.update(o for o in n.output if o)
    for vi in gp.output:
        use(vi.name)
    return free


def _check_subgraph_ops(gp: onnx.GraphProto, where: str) -> None:
    """The top-level check (_check_ops) does not see inside bodies: refuse their unknown ops here."""
    bad = sorted({n.op_type for n in gp.node if onnx_op(n.op_type, n.domain) is None})
    if bad:
        raise UnsupportedError(f"{where}: its subgraph uses operators tinyc does not support: {', '.join(bad)}")


def _import_subgraph_nodes(g: Graph, gp: onnx.GraphProto, opset: int, prefix: str) -> None:
    """Import a subgraph's initializers and nodes into `g`, node names prefixed with the owner's."""
    _check_subgraph_ops(gp, f"node '{prefix}'")
    for t in gp.initializer:
        g.add_constant(t.name, validate.tensor_to_array(t))
    used: set[str] = {n.name for n in g.nodes}
    for idx, onode in enumerate(gp.node):
        node_name = f"{prefix}/{onode.name or f'{onode.op_type}_{idx}'}"
        while node_name in used:
            node_name += "_"
        used.add(node_name)
        _import_node(g, onode, opset, node_name)


def inline_subgraph(gp: onnx.GraphProto, g: Graph, opset: int, prefix: str) -> list[str]:
    """Import a subgraph's nodes straight into `g` (a folded If's taken branch: outer names are
    visible as they are); returns the names of the subgraph's outputs."""
    _import_subgraph_nodes(g, gp, opset, prefix)
    for vi in gp.output:
        if vi.name not in g.tensors and vi.name not in g.sequences and vi.name not in g.optionals:
            raise ModelLoadError(f"node '{prefix}': subgraph output '{vi.name}' is not produced by any node")
    return [vi.name for vi in gp.output]


def import_subgraph(
    gp: onnx.GraphProto,
    outer: Graph,
    input_types: Sequence[tuple[tuple[int, ...], str]],
    opset: int,
    prefix: str,
    constants: Mapping[int, np.ndarray] | None = None,
) -> tuple[Graph, list[str]]:
    """A Loop/Scan body as its own Graph, its inputs typed by `input_types` (static shapes from the
    outer node). Outer constants it reads are copied in as constants; the other outer tensors it
    reads are returned (in order) and stay in the body as plain tensors, not inputs: the caller
    passes them in. `constants` binds body inputs (by index) to values: they become constants,
    not inputs (a Loop imports its body once per iteration number this way)."""
    where = f"node '{prefix}'"
    if len(input_types) != len(gp.input):
        raise ShapeError(f"{where}: the body takes {len(gp.input)} inputs, the node provides {len(input_types)}")
    g = Graph(name=prefix)
    outer_refs: list[str] = []

    def bring(name: str) -> None:
        """Make outer value `name` visible in the body: a tensor, or a (compile-time) sequence or
        optional with the tensors it holds."""
        if name in g.tensors or name in g.sequences or name in g.optionals:
            return
        if name in outer.sequences:
            g.sequences[name] = list(outer.sequences[name])
            for item in outer.sequences[name]:
                bring(item)
            return
        if name in outer.optionals:
            held = outer.optionals[name]
            g.optionals[name] = held
            if held is not None:
                bring(held)
            return
        if name not in outer.tensors:
            raise ModelLoadError(f"{where}: the body reads '{name}', which no outer node produces")
        t = outer.tensor(name)
        if t.is_constant:
            g.add_tensor(Tensor(name, t.shape, t.dtype, t.data, t.quant))
        else:
            g.add_tensor(Tensor(name, t.shape, t.dtype))
            outer_refs.append(name)

    for name in subgraph_free_names(gp):
        bring(name)
    for k, (vi, (shape, dtype)) in enumerate(zip(gp.input, input_types)):
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and tt.elem_type and _np_dtype_name(tt.elem_type) != dtype:
            raise ShapeError(
                f"{where}: body input '{vi.name}' is declared {validate.dtype_name(tt.elem_type)}, the node gives {dtype}"
            )
        if constants and k in constants:
            g.add_constant(vi.name, np.asarray(constants[k], dtype).reshape(shape))
            continue
        g.add_tensor(Tensor(vi.name, tuple(int(d) for d in shape), dtype))
        g.inputs.append(vi.name)
    _import_subgraph_nodes(g, gp, opset, prefix)
    for vi in gp.output:
        if vi.name in g.sequences or vi.name in g.optionals:
            raise UnsupportedError(
                f"{where}: body output '{vi.name}' is a sequence or optional (a Loop/Scan body compiles tensors only)"
            )
        if vi.name not in g.tensors:
            raise ModelLoadError(f"{where}: body output '{vi.name}' is not produced by any node")
        g.outputs.append(vi.name)
    return g, outer_refs
