"""ONNX function expansion: a node whose op tinyc has no kernel for is replaced by its function body.

Many ONNX ops are defined by a body of simpler ops (Attention, SoftmaxCrossEntropyLoss, GroupNormalization,
RotaryEmbedding, Swish, the window functions ...); some bodies depend on the node's attributes and input
types ("context-dependent" functions). Expanding such a node at import, recursively, gives tinyc every op
whose body it can compile without a hand-written kernel; a real kernel, where one is registered, is still
preferred (the importer only expands when there is none, or when the kernel refuses the variant).

The inlining is done here rather than by `onnx.inliner`: the body keeps its own opset version (a body
written for opset 13 inside an opset-23 model must be imported with opset-13 semantics, which onnx's
inliner would have to version-convert), call-site names are substituted for the formal parameters, every
internal value gets a name unique in the graph, and `ref_attr_name` attributes take the call site's value
or the function's default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import onnx
from onnx import defs, helper

from tinyc.errors import UnsupportedError

MAX_DEPTH = 16  # a body that expands into itself deeper than this is malformed


def _schema(op_type: str, domain: str, opset: int) -> Any:
    """The OpSchema (typed Any: onnx's stubs lack the function accessors used here), or None."""
    try:
        return defs.get_schema(op_type, opset, domain)
    except Exception:  # onnx raises SchemaError for unknown ops/domains
        return None


def _body_version(versions: list[int], opset: int) -> int | None:
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def has_function_body(op_type: str, domain: str, opset: int) -> bool:
    """Whether ONNX defines `op_type` (at this opset of its domain) by a function body tinyc can expand."""
    s = _schema(op_type, domain, opset)
    if s is None:
        return False
    return (
        _body_version(list(s.function_opset_versions), opset) is not None
        or _body_version(list(s.context_dependent_function_opset_versions), opset) is not None
    )


def function_body(
    node: onnx.NodeProto, opset: int, input_types: list[onnx.TypeProto | None]
) -> onnx.FunctionProto | None:
    """The FunctionProto defining `node` at `opset`, built for its attributes and input types when the
    body is context-dependent; None when the op has no body (or onnx cannot build it for this node)."""
    s = _schema(node.op_type, node.domain, opset)
    if s is None:
        return None
    raw: bytes | None = None
    v = _body_version(list(s.function_opset_versions), opset)
    try:
        if v is not None:
            raw = s.get_function_with_opset_version(v)
        else:
            v = _body_version(list(s.context_dependent_function_opset_versions), opset)
            if v is None:
                return None
            empty = onnx.TypeProto().SerializeToString()
            types = [t.SerializeToString() if t is not None else empty for t in input_types]
            raw = s.get_context_dependent_function_with_opset_version(v, node.SerializeToString(), types)
    except Exception:  # onnx's builder refuses inputs it cannot type (e.g. an unknown element type)
        return None
    if not raw:
        return None
    f = onnx.FunctionProto()
    if isinstance(raw, onnx.FunctionProto):
        f.CopyFrom(raw)
    else:
        f.ParseFromString(raw)
    return f if f.node else None


def schema_defaults(op_type: str, domain: str, opset: int) -> dict[str, onnx.AttributeProto]:
    """The op's attribute defaults from its schema (a body's `ref_attr_name` falls back to them)."""
    s = _schema(op_type, "" if domain == "ai.onnx" else domain, opset)
    out: dict[str, onnx.AttributeProto] = {}
    if s is None:
        return out
    for name, a in s.attributes.items():
        d = a.default_value
        if d is not None and d.type != onnx.AttributeProto.UNDEFINED:
            r = onnx.AttributeProto()
            r.CopyFrom(d)
            r.name = name
            out[name] = r
    return out


def body_opsets(f: onnx.FunctionProto, outer: Mapping[str, int]) -> dict[str, int]:
    """Opset versions the body's nodes are imported with: the function's own imports over the model's."""
    out = dict(outer)
    for o in f.opset_import:
        out["" if o.domain == "ai.onnx" else o.domain] = int(o.version)
    return out


def inline(
    node: onnx.NodeProto, f: onnx.FunctionProto, unique: Callable[[str], str], node_name: str, opset: int
) -> list[onnx.NodeProto]:
    """The body of `f` as nodes of the calling graph: formal inputs/outputs renamed to the call site's
    values, internal values renamed by `unique`, attribute references resolved."""
    rename: dict[str, str] = {"": ""}
    for k, formal in enumerate(f.input):
        rename[formal] = node.input[k] if k < len(node.input) else ""
    for k, formal in enumerate(f.output):
        actual = node.output[k] if k < len(node.output) else ""
        rename[formal] = actual if actual else unique(f"{node_name}/{formal}")
    call_attrs = {a.name: a for a in node.attribute}
    defaults = schema_defaults(node.op_type, node.domain, opset)
    defaults.update({a.name: a for a in f.attribute_proto})

    def name_of(v: str) -> str:
        if v not in rename:
            rename[v] = unique(f"{node_name}/{v}")
        return rename[v]

    out: list[onnx.NodeProto] = []
    for k, bn in enumerate(f.node):
        nn = onnx.NodeProto()
        nn.CopyFrom(bn)
        del nn.input[:]
        nn.input.extend(name_of(i) for i in bn.input)
        del nn.output[:]
        nn.output.extend(name_of(o) if o else "" for o in bn.output)
        nn.name = f"{node_name}/{bn.name or f'{bn.op_type}_{k}'}"
        del nn.attribute[:]
        for a in bn.attribute:
            resolved = _resolve_attr(a, call_attrs, defaults)
            if resolved is not None:
                if resolved.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    _rename_graph_refs(resolved, rename)
                nn.attribute.append(resolved)
        out.append(nn)
    return out


def _resolve_attr(
    a: onnx.AttributeProto, call_attrs: Mapping[str, onnx.AttributeProto], defaults: Mapping[str, onnx.AttributeProto]
) -> onnx.AttributeProto | None:
    if not a.ref_attr_name:
        r = onnx.AttributeProto()
        r.CopyFrom(a)
        return r
    src = call_attrs.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
    if src is None:
        return None  # not given and no default: the body node uses its own default
    r = onnx.AttributeProto()
    r.CopyFrom(src)
    r.name = a.name
    return r


def _rename_graph_refs(attr: onnx.AttributeProto, rename: Mapping[str, str]) -> None:
    """A subgraph (If/Loop/Scan body) inside a function body reads outer values by name: rename those."""
    graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
    for g in graphs:
        local = {i.name for i in g.input} | {t.name for t in g.initializer}
        for n in g.node:
            local.update(o for o in n.output if o)
        for n in g.node:
            for k, i in enumerate(n.input):
                if i and i not in local and i in rename:
                    n.input[k] = rename[i]
            for sub in n.attribute:
                if sub.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    _rename_graph_refs(sub, {k: v for k, v in rename.items() if k not in local})
        for o in g.output:
            if o.name not in local and o.name in rename:
                o.name = rename[o.name]


def type_proto(dtype: str, shape: tuple[int, ...]) -> onnx.TypeProto | None:
    """A tensor TypeProto for a tinyc tensor (what context-dependent bodies are built from)."""
    try:
        import numpy as np

        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except Exception:
        try:
            import ml_dtypes  # noqa: F401  (registers bfloat16, float8 ... with numpy)
            import numpy as np

            elem = helper.np_dtype_to_tensor_dtype(np.dtype(getattr(ml_dtypes, dtype)))
        except Exception:
            return None
    return helper.make_tensor_type_proto(elem, list(shape))


def refuse_depth(node_name: str, op_type: str) -> UnsupportedError:
    return UnsupportedError(
        f"node '{node_name}' ({op_type}): function body nests deeper than {MAX_DEPTH} levels (recursive definition?)"
    )
