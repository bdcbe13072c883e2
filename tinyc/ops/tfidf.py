"""TfIdfVectorizer over integer tokens: n-gram counts (TF), presence weights (IDF) or both (TFIDF).

The n-gram pool is an attribute, so the import flattens it into constant tables (the tokens of
every n-gram whose length lies in [min_gram_length, max_gram_length], its length, its output slot)
and the kernel scans each row: for every skip distance d (1 .. max_skip_count+1) and start
position s, an n-gram of length n matches when x[s + k*d] equals its k-th token for k < n.
Unigrams are counted at d = 1 only, as in onnxruntime and onnx's reference (a trie walk there; a
flat table here, which visits the same matches: every prefix of a pool n-gram is in the trie).
A later duplicate n-gram in the pool takes the slot, as the reference's trie does. String pools
and string inputs are refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node
from tinyc.ops.base import CTYPES, OpDef, OutputType, register

MODES = ("TF", "IDF", "TFIDF")


def ngram_table(
    pool: list[int], counts: list[int], indexes: list[int], min_n: int, max_n: int
) -> dict[tuple[int, ...], int]:
    """The pool's n-grams of the wanted lengths -> their output slot (ngram_indexes, in pool order)."""
    table: dict[tuple[int, ...], int] = {}
    ngram_id = 0
    for i, start in enumerate(counts):
        size = i + 1
        end = counts[i + 1] if i + 1 < len(counts) else len(pool)
        for k in range((end - start) // size):
            if min_n <= size <= max_n:
                table[tuple(pool[start + k * size : start + (k + 1) * size])] = indexes[ngram_id]
            ngram_id += 1
    return table


def count_row(x: np.ndarray, grams: list[tuple[int, ...]], slots: list[int], attrs: dict[str, Any]) -> np.ndarray:
    """Counts of one row, the kernel's loop order (the golden model)."""
    y = np.zeros(attrs["out_size"], dtype=np.float32)
    c = len(x)
    for d in range(1, attrs["max_skip"] + 2):
        start_n = attrs["min_gram"] if d == 1 else max(attrs["min_gram"], 2)
        for s in range(c):
            for g, slot in zip(grams, slots):
                n = len(g)
                if n >= start_n and s + (n - 1) * d < c and all(int(x[s + k * d]) == g[k] for k in range(n)):
                    y[slot] += 1.0
    return y


@register
class TfIdfVectorizer(OpDef):
    """inputs: X [C] or [B, C], tokens, offsets, lengths, slots (constants), weights (IDF/TFIDF with
    weights). attrs: `out_size`, `max_skip`, `min_gram`, `mode`, `weighted`."""

    op = "TfIdfVectorizer"
    onnx_ops = ("TfIdfVectorizer",)
    template = "tfidf.c.j2"
    dtypes = ("int32", "int64")

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        if ctx.attr("pool_strings"):
            ctx.unsupported("string n-gram pools (pool_strings) are not supported; tinyc compiles numeric tensors")
        shape = ctx.shape(0)
        if len(shape) > 2:
            ctx.invalid(f"input must be [C] or [B, C], got shape {shape}")
        mode = ctx.attr("mode")
        if mode not in MODES:
            ctx.invalid(f"mode {mode!r} must be one of {', '.join(MODES)}")
        min_n, max_n = int(ctx.attr("min_gram_length")), int(ctx.attr("max_gram_length"))
        max_skip = int(ctx.attr("max_skip_count"))
        if min_n < 1 or max_n < min_n or max_skip < 0:
            ctx.invalid(f"gram lengths [{min_n}, {max_n}] and max_skip_count {max_skip} are out of range")
        pool = [int(v) for v in ctx.attr("pool_int64s", [])]
        counts = [int(v) for v in ctx.attr("ngram_counts", [])]
        indexes = [int(v) for v in ctx.attr("ngram_indexes", [])]
        if not indexes:
            ctx.invalid("ngram_indexes is empty")
        out_size = max(indexes) + 1
        weights = ctx.attr("weights")
        weighted = mode != "TF" and weights is not None and len(weights) > 0
        try:
            table = ngram_table(pool, counts, indexes, min_n, max_n)
        except IndexError:
            ctx.invalid("ngram_indexes has fewer entries than the pool has n-grams")
        out_shape = (out_size,) if len(shape) < 2 else (shape[0], out_size)
        if not table or any(d == 0 for d in shape):
            return ctx.set_constant(0, np.zeros(out_shape, np.float32))
        grams = list(table)
        lengths = [len(g) for g in grams]
        offsets = np.cumsum([0] + lengths[:-1])
        inputs = [
            ctx.inputs[0],
            ctx.add_constant("tokens", np.asarray([t for g in grams for t in g], np.int64)),
            ctx.add_constant("offsets", np.asarray(offsets, np.int32)),
            ctx.add_constant("lengths", np.asarray(lengths, np.int32)),
            ctx.add_constant("slots", np.asarray([table[g] for g in grams], np.int32)),
        ]
        if weighted:
            if len(weights) < out_size:
                ctx.invalid(f"weights has {len(weights)} entries, the output {out_size}")
            inputs.append(ctx.add_constant("weights", np.asarray(weights[:out_size], np.float32)))
        return ctx.make_node(
            self.op,
            inputs=inputs,
            outputs=ctx.outputs[:1],
            out_size=out_size,
            max_skip=max_skip,
            min_gram=min_n,
            mode=mode,
            weighted=weighted,
        )

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        shape = graph.tensor(node.inputs[0]).shape
        n = node.attrs["out_size"]
        return [((n,) if len(shape) < 2 else (shape[0], n), "float32")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0])
        rows = x.reshape(1, -1) if x.ndim < 2 else x
        tokens, offsets, lengths, slots = (np.asarray(v).tolist() for v in inputs[1:5])
        grams = [tuple(tokens[o : o + n]) for o, n in zip(offsets, lengths)]
        y = np.stack([count_row(r, grams, slots, node.attrs) for r in rows])
        mode = node.attrs["mode"]
        if mode == "IDF":
            y = np.where(y > 0, np.asarray(inputs[5]) if node.attrs["weighted"] else 1.0, 0.0)
        elif mode == "TFIDF" and node.attrs["weighted"]:
            y = y * np.asarray(inputs[5])
        return [np.ascontiguousarray(y.astype(np.float32).reshape(self.infer(node, graph)[0][0]))]

    def macs(self, node: Node, graph: Graph) -> int:
        t = graph.tensor(node.inputs[0])
        return t.size * (node.attrs["max_skip"] + 1) * graph.tensor(node.inputs[2]).size

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        shape = graph.tensor(node.inputs[0]).shape
        return {
            "rows": shape[0] if len(shape) == 2 else 1,
            "cols": shape[-1] if shape else 1,
            "out_size": node.attrs["out_size"],
            "n_grams": graph.tensor(node.inputs[2]).size,
            "skips": node.attrs["max_skip"] + 1,
            "min_gram": node.attrs["min_gram"],
            "mode": node.attrs["mode"],
            "weighted": node.attrs["weighted"],
            "XT": CTYPES[graph.tensor(node.inputs[0]).dtype],
        }
