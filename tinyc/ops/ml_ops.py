"""ai.onnx.ml operators on numeric tensors: Binarizer, ArrayFeatureExtractor, LabelEncoder, TreeEnsemble.

Classical-ML exporters (sklearn-onnx) put these next to ordinary ONNX ops. Their configuration is
attributes, so the import turns it into constant tables the kernels read (LabelEncoder's keys and
values, TreeEnsemble's nodes and leaves); the numpy golden models follow onnx's reference
(onnx/reference/ops/aionnxml). String keys, values and tensors are refused: tinyc compiles numeric
tensors only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.numerics.literals import c_float
from tinyc.ops.base import CTYPES, OpDef, OutputType, register

if TYPE_CHECKING:
    from tinyc.frontend.context import ImportContext

NUMERIC = ("float32", "float64", "int32", "int64")


def _rows_cols(shape: tuple[int, ...]) -> tuple[int, int]:
    cols = shape[-1] if shape else 1
    return int(np.prod(shape, dtype=np.int64)) // max(cols, 1), cols


@register
class Binarizer(OpDef):
    """y = 1 where x > threshold else 0, in x's type (NaN gives 0). attrs: `threshold`."""

    op = "Binarizer"
    ml_ops = ("Binarizer",)
    template = "binarizer.c.j2"
    dtypes = NUMERIC

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        return ctx.make_node(
            self.op, inputs=ctx.inputs[:1], outputs=ctx.outputs[:1], threshold=float(ctx.attr("threshold", 0.0))
        )

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0])
        # float32 x compares with the threshold rounded to float32; double and integer x in double
        thr = np.float32(node.attrs["threshold"]) if x.dtype == np.float32 else np.float64(node.attrs["threshold"])
        return [(x > thr).astype(x.dtype)]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        t = graph.tensor(node.inputs[0])
        thr = node.attrs["threshold"]
        return {"n": t.size, "T": CTYPES[t.dtype], "threshold": c_float(thr) if t.dtype == "float32" else c_double(thr)}


def c_double(value: float) -> str:
    """A double literal that round-trips (repr), inf/nan through <math.h> macros."""
    v = float(value)
    if np.isnan(v):
        return "((double)NAN)"
    if np.isinf(v):
        return "((double)INFINITY)" if v > 0 else "(-(double)INFINITY)"
    return repr(v)


@register
class ArrayFeatureExtractor(OpDef):
    """y[..., j] = x[..., indices[j]] (indices flattened; a 1-D x gives [1, n], as onnxruntime does).
    An index outside [0, last dimension) gives 0 (onnxruntime refuses it at run time)."""

    op = "ArrayFeatureExtractor"
    ml_ops = ("ArrayFeatureExtractor",)
    template = "array_feature_extractor.c.j2"
    dtypes = NUMERIC

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        if ctx.dtype(1) != "int64":
            ctx.invalid(f"indices must be int64, got {ctx.dtype(1)}")
        if not ctx.shape(0):
            ctx.invalid("x must have at least one dimension")
        return ctx.make_node(self.op, inputs=ctx.inputs[:2], outputs=ctx.outputs[:1])

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x, idx = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        lead = (1,) if len(x.shape) == 1 else x.shape[:-1]
        return [(tuple(lead) + (idx.size,), x.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, idx = np.asarray(inputs[0]), np.asarray(inputs[1]).reshape(-1)
        ok = (idx >= 0) & (idx < x.shape[-1])
        y = np.where(ok, x[..., np.where(ok, idx, 0)], np.zeros((), x.dtype))
        return [np.ascontiguousarray(y.reshape(self.infer(node, graph)[0][0]).astype(x.dtype))]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        x = graph.tensor(node.inputs[0])
        rows, cols = _rows_cols(x.shape)
        return {"rows": rows, "cols": cols, "n": graph.tensor(node.inputs[1]).size, "T": CTYPES[x.dtype]}


# -- LabelEncoder ---------------------------------------------------------------------------------
_KEY_ATTRS = {"keys_int64s": "int64", "keys_floats": "float32"}
_VALUE_ATTRS = {"values_int64s": ("int64", "default_int64", -1), "values_floats": ("float32", "default_float", -0.0)}


def _label_keys(ctx: ImportContext) -> np.ndarray:
    if ctx.attr("keys_strings"):
        ctx.unsupported("string keys (keys_strings) are not supported; tinyc compiles numeric tensors")
    for name, dtype in _KEY_ATTRS.items():
        if ctx.attr(name):
            return np.asarray(ctx.attr(name), dtype)
    keys = ctx.attr("keys_tensor")
    if keys is None:
        ctx.invalid("no keys (keys_int64s, keys_floats or keys_tensor)")
    return np.asarray(keys).reshape(-1)


def _label_values(ctx: ImportContext) -> tuple[np.ndarray, np.ndarray]:
    """(values, default) in the output type."""
    if ctx.attr("values_strings"):
        ctx.unsupported("string values (values_strings) are not supported; tinyc compiles numeric tensors")
    for name, (dtype, dname, dflt) in _VALUE_ATTRS.items():
        if ctx.attr(name):
            return np.asarray(ctx.attr(name), dtype), np.asarray(ctx.attr(dname, dflt), dtype)
    values = ctx.attr("values_tensor")
    if values is None:
        ctx.invalid("no values (values_int64s, values_floats or values_tensor)")
    values = np.asarray(values).reshape(-1)
    default = ctx.attr("default_tensor")
    if default is None:
        ctx.unsupported("values_tensor without default_tensor (the default depends on the type)")
    return values, np.asarray(default).reshape(-1)[:1].astype(values.dtype).reshape(())


@register
class LabelEncoder(OpDef):
    """y = values[k] where x == keys[k] (the last duplicate key wins, as in the reference's dict),
    else the default. inputs: x, keys, values, default (constants)."""

    op = "LabelEncoder"
    ml_ops = ("LabelEncoder",)
    template = "label_encoder.c.j2"
    dtypes = tuple(k for k in CTYPES if k != "bool")

    def import_onnx(self, ctx):
        if ctx.dtype(0) not in self.dtypes:
            ctx.unsupported(f"element type {ctx.dtype(0)} (string inputs are not supported)")
        keys, (values, default) = _label_keys(ctx), _label_values(ctx)
        if keys.size != values.size:
            ctx.invalid(f"{keys.size} keys but {values.size} values")
        if str(values.dtype) not in CTYPES:
            ctx.unsupported(f"values of type {values.dtype}")
        table = dict(zip(keys.tolist(), values.tolist()))
        k = np.asarray(list(table), keys.dtype).astype(ctx.dtype(0))
        v = np.asarray(list(table.values()), values.dtype)
        return ctx.make_node(
            self.op,
            inputs=[
                ctx.inputs[0],
                ctx.add_constant("keys", k),
                ctx.add_constant("values", v),
                ctx.add_constant("default", default.reshape(1)),
            ],
            outputs=ctx.outputs[:1],
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        return [(graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[2]).dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, keys, values, default = (np.asarray(v) for v in inputs)
        y = np.full(x.shape, default.reshape(-1)[0], values.dtype)
        for k, v in zip(keys, values):
            y[x == k] = v
        return [y]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        return {
            "n": graph.tensor(node.inputs[0]).size,
            "n_keys": graph.tensor(node.inputs[1]).size,
            "T": CTYPES[graph.tensor(node.inputs[0]).dtype],
            "VT": CTYPES[graph.tensor(node.inputs[2]).dtype],
        }


# -- TreeEnsemble (ai.onnx.ml opset 5) ------------------------------------------------------------
AGGREGATES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
MODE_MEMBER = 6


def _tree_tables(ctx: ImportContext, dtype: str) -> dict[str, np.ndarray]:
    """The node/leaf attributes as flat constant tables. A child is its node index, or -(leaf+1);
    a root that is a leaf (both children the same leaf) is -(root+1), as in the reference."""

    def ints(name: str) -> list[int]:
        return [int(v) for v in np.asarray(ctx.attr(name, []), np.int64).reshape(-1)]

    modes = ints("nodes_modes")
    n = len(modes)
    feats, true_ids, false_ids = ints("nodes_featureids"), ints("nodes_truenodeids"), ints("nodes_falsenodeids")
    true_leaf, false_leaf = ints("nodes_trueleafs"), ints("nodes_falseleafs")
    if any(len(a) != n for a in (feats, true_ids, false_ids, true_leaf, false_leaf)):
        ctx.invalid("the nodes_* attributes have different lengths")
    splits = np.asarray(ctx.attr("nodes_splits"), dtype).reshape(-1)
    missing = ints("nodes_missing_value_tracks_true") or [0] * n
    if any(m < 0 or m > MODE_MEMBER for m in modes):
        ctx.invalid(f"node modes {sorted(set(modes))} must lie in 0..6")
    members = np.asarray(ctx.attr("membership_values", []), dtype).reshape(-1)
    starts, counts = [0] * n, [0] * n
    flat: list[float] = []
    pos = 0
    for i, m in enumerate(modes):
        if m != MODE_MEMBER:
            continue
        starts[i] = len(flat)
        while pos < len(members) and not np.isnan(members[pos]):
            flat.append(members[pos])
            pos += 1
        if pos >= len(members):
            ctx.invalid("membership_values has fewer NaN-terminated sets than there are member nodes")
        counts[i] = len(flat) - starts[i]
        pos += 1
    roots = []
    for r in ints("tree_roots"):
        leaf_root = true_leaf[r] and false_leaf[r] and true_ids[r] == false_ids[r]
        roots.append(-(r + 1) if leaf_root else r)
    return {
        "roots": np.asarray(roots, np.int32),
        "feature": np.asarray(feats, np.int32),
        "mode": np.asarray(modes, np.int32),
        "split": splits,
        "true": np.asarray([-(c + 1) if lf else c for c, lf in zip(true_ids, true_leaf)], np.int32),
        "false": np.asarray([-(c + 1) if lf else c for c, lf in zip(false_ids, false_leaf)], np.int32),
        "missing": np.asarray(missing, np.int32),
        "mstart": np.asarray(starts, np.int32),
        "mcount": np.asarray(counts, np.int32),
        "members": np.asarray(flat if flat else [0.0], dtype),
        "leaf_target": np.asarray(ints("leaf_targetids"), np.int32),
        "leaf_weight": np.asarray(ctx.attr("leaf_weights"), dtype).reshape(-1),
    }


TREE_TABLES = (
    "roots",
    "feature",
    "mode",
    "split",
    "true",
    "false",
    "missing",
    "mstart",
    "mcount",
    "members",
    "leaf_target",
    "leaf_weight",
)


def _goes_true(x: float, mode: int, split: float, members: np.ndarray, missing: int) -> bool:
    if missing and np.isnan(x):
        return True
    if mode == MODE_MEMBER:
        return bool(np.any(members == x))
    return bool([x <= split, x < split, x >= split, x > split, x == split, x != split][mode])


@register
class TreeEnsemble(OpDef):
    """X [N, F] -> [N, n_targets]: each tree's leaf weight aggregated per target. inputs: X and the
    tables of `TREE_TABLES` (constants). attrs: `n_targets`, `aggregate`."""

    op = "TreeEnsemble"
    ml_ops = ("TreeEnsemble",)
    template = "tree_ensemble.c.j2"
    dtypes = ("float32", "float64")

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        if len(ctx.shape(0)) != 2:
            ctx.unsupported(f"X must be [N, features], got shape {ctx.shape(0)}")
        post = int(ctx.attr("post_transform", 0))
        if post != 0:
            ctx.unsupported(f"post_transform {post} (only 0, NONE, is supported; the onnx reference has no other)")
        agg = int(ctx.attr("aggregate_function", 1))
        if agg not in AGGREGATES:
            ctx.invalid(f"aggregate_function {agg} must be 0..3")
        n_targets = ctx.attr("n_targets")
        if n_targets is None or int(n_targets) < 1:
            ctx.invalid("n_targets must be a positive integer")
        tables = _tree_tables(ctx, ctx.dtype(0))
        lt = tables["leaf_target"]
        if lt.size != tables["leaf_weight"].size or (lt.size and (lt.min() < 0 or lt.max() >= int(n_targets))):
            ctx.invalid("leaf_targetids must match leaf_weights and lie in [0, n_targets)")
        if tables["feature"].size and tables["feature"].max() >= ctx.shape(0)[1]:
            ctx.invalid(f"a node reads feature {tables['feature'].max()} of {ctx.shape(0)[1]}")
        if not tables["roots"].size:
            ctx.invalid("tree_roots is empty")
        inputs = [ctx.inputs[0]] + [ctx.add_constant(k, tables[k]) for k in TREE_TABLES]
        return ctx.make_node(
            self.op, inputs=inputs, outputs=ctx.outputs[:1], n_targets=int(n_targets), aggregate=AGGREGATES[agg]
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        x = graph.tensor(node.inputs[0])
        return [((x.shape[0], node.attrs["n_targets"]), x.dtype)]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0])
        t = dict(zip(TREE_TABLES, (np.asarray(v) for v in inputs[1:])))
        agg, dt = node.attrs["aggregate"], x.dtype
        init = {"MIN": np.finfo(dt).max, "MAX": np.finfo(dt).min}.get(agg, 0)
        y = np.full((x.shape[0], node.attrs["n_targets"]), init, dt)
        n_trees = t["roots"].size
        for b in range(x.shape[0]):
            for root in t["roots"]:
                i = int(root)
                while i >= 0:
                    m = t["members"][t["mstart"][i] : t["mstart"][i] + t["mcount"][i]]
                    go = _goes_true(x[b, t["feature"][i]], int(t["mode"][i]), t["split"][i], m, int(t["missing"][i]))
                    i = int(t["true"][i] if go else t["false"][i])
                leaf = -i - 1
                tid, w = int(t["leaf_target"][leaf]), t["leaf_weight"][leaf]
                if agg == "SUM":
                    y[b, tid] += w
                elif agg == "AVERAGE":
                    y[b, tid] += w / dt.type(n_trees)
                elif agg == "MIN":
                    y[b, tid] = min(y[b, tid], w)
                else:
                    y[b, tid] = max(y[b, tid], w)
        return [y]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        x = graph.tensor(node.inputs[0])
        ct = CTYPES[x.dtype]
        big = np.finfo(x.dtype).max
        lim = c_float(big) if x.dtype == "float32" else c_double(float(big))
        return {
            "rows": x.shape[0],
            "features": x.shape[1],
            "n_targets": node.attrs["n_targets"],
            "n_trees": graph.tensor(node.inputs[1]).size,
            "T": ct,
            "aggregate": node.attrs["aggregate"],
            "init": {"MIN": lim, "MAX": f"(-{lim})"}.get(node.attrs["aggregate"], "0"),
        }
