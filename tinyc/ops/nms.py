"""NonMaxSuppression: greedy per-class selection of the highest-scoring boxes whose overlap (IoU)
with every box already chosen stays at or below a threshold.

ONNX's output, selected_indices [num_selected, 3] (batch, class, box), has a data-dependent
first dimension. tinyc compiles static shapes and does not change a model's outputs behind its
back, so the ONNX import:
  * folds the node when boxes and scores are constants (the exact [num_selected, 3] result);
  * otherwise refuses, naming the reason.
The kernel itself is the IR op `NonMaxSuppression` with a fixed maximum output: selected
[max_total, 3] (max_total = batches x classes x min(max_output_boxes_per_class, boxes)) with the
unused rows set to -1, and a second output `count` [1] holding num_selected. A graph that wants
that form (a detector post-processing step on a device, reading `count` rows) adds it with
`padded_nms`. Selection order and tie-breaking follow onnx's reference: per batch, per class,
by descending score, equal scores by ascending box index; no scratch (the next candidate is the
best one ranked below the last one taken).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyc.ir import Graph, Node, Tensor
from tinyc.numerics.literals import c_float
from tinyc.ops.base import OpDef, OutputType, register


def _corners(box: np.ndarray, center: bool) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """(x_min, x_max, y_min, y_max) in float32, as the reference derives them."""
    if center:
        hw, hh = box[2] / np.float32(2), box[3] / np.float32(2)
        return box[0] - hw, box[0] + hw, box[1] - hh, box[1] + hh
    return min(box[1], box[3]), max(box[1], box[3]), min(box[0], box[2]), max(box[0], box[2])


def suppresses(a: np.ndarray, b: np.ndarray, center: bool, iou: np.float32) -> bool:
    """Whether boxes a and b overlap with IoU > iou (degenerate boxes never suppress)."""
    ax0, ax1, ay0, ay1 = _corners(a, center)
    bx0, bx1, by0, by1 = _corners(b, center)
    ix0, ix1, iy0, iy1 = max(ax0, bx0), min(ax1, bx1), max(ay0, by0), min(ay1, by1)
    if ix1 <= ix0 or iy1 <= iy0:
        return False
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if inter <= 0 or area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return bool(inter / union > iou)


def nms_select(
    boxes: np.ndarray, scores: np.ndarray, max_per_class: int, iou: float, score_threshold: float | None, center: bool
) -> np.ndarray:
    """onnx NonMaxSuppression: [num_selected, 3] int64 rows (batch, class, box)."""
    boxes, scores = boxes.astype(np.float32), scores.astype(np.float32)
    thr = np.float32(iou)
    rows: list[tuple[int, int, int]] = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            cand = [i for i in range(len(s)) if score_threshold is None or s[i] > np.float32(score_threshold)]
            cand.sort(key=lambda i: (-float(s[i]), i))
            chosen: list[int] = []
            for i in cand:
                if len(chosen) >= max_per_class:
                    break
                if not any(suppresses(boxes[b, j], boxes[b, i], center, thr) for j in chosen):
                    chosen.append(i)
            rows += [(b, c, i) for i in chosen]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


def max_total(boxes_shape: tuple[int, ...], scores_shape: tuple[int, ...], max_per_class: int) -> int:
    return int(boxes_shape[0]) * int(scores_shape[1]) * min(max_per_class, int(boxes_shape[1]))


def padded_nms(
    graph: Graph,
    boxes: str,
    scores: str,
    selected: str,
    count: str,
    max_per_class: int,
    iou: float,
    score_threshold: float | None = None,
    center: bool = False,
    name: str = "nms",
) -> Node:
    """Add the fixed-maximum NonMaxSuppression to `graph`: `selected` [max_total, 3] int64 (rows
    past `count` are -1) and `count` [1] int64. Returns the node (already in graph.nodes)."""
    node = Node(
        name,
        "NonMaxSuppression",
        [boxes, scores],
        [selected, count],
        {"max_per_class": int(max_per_class), "iou": float(iou), "score_threshold": score_threshold, "center": center},
    )
    for out, (shape, dtype) in zip(node.outputs, NonMaxSuppression().infer(node, graph)):
        graph.add_tensor(Tensor(out, shape, dtype))
    graph.nodes.append(node)
    return node


def _scalar(ctx: Any, i: int, what: str, default: Any) -> Any:
    if not ctx.has_input(i):
        return default
    v = np.asarray(ctx.require_const(i, what)).reshape(-1)
    if v.size == 0:
        return default
    if v.size != 1:
        ctx.unsupported(f"input {i} ({what}) must hold one value, got {v.size}")
    return v[0].item()


@register
class NonMaxSuppression(OpDef):
    """IR: inputs boxes [B, n, 4], scores [B, C, n]; outputs selected [max_total, 3] (padded
    with -1), count [1]. attrs: max_per_class, iou, score_threshold (None: no filter), center."""

    op = "NonMaxSuppression"
    onnx_ops = ("NonMaxSuppression",)
    template = "nms.c.j2"
    dtypes = ("float32",)

    def import_onnx(self, ctx):
        self.require_dtype(ctx)
        bs, ss = ctx.shape(0), ctx.shape(1)
        if len(bs) != 3 or bs[2] != 4 or len(ss) != 3 or ss[0] != bs[0] or ss[2] != bs[1]:
            ctx.invalid(f"boxes {bs} and scores {ss} (want [B, n, 4] and [B, C, n])")
        max_per_class = max(int(_scalar(ctx, 2, "max_output_boxes_per_class", 0)), 0)
        iou = float(_scalar(ctx, 3, "iou_threshold", 0.0))
        thr = _scalar(ctx, 4, "score_threshold", None)
        center = bool(int(ctx.attr("center_point_box", 0)))
        boxes, scores = ctx.const(0), ctx.const(1)
        if boxes is None or scores is None:
            ctx.unsupported(
                "its output [num_selected, 3] depends on the run-time boxes and scores and tinyc compiles "
                f"static shapes only; the fixed-maximum form ([{max_total(bs, ss, max_per_class)}, 3] padded "
                "with -1 plus a count output, tinyc.ops.nms.padded_nms) changes the model's outputs, so it "
                "is not substituted silently"
            )
        sel = nms_select(boxes, scores, max_per_class, iou, None if thr is None else float(thr), center)
        return ctx.set_constant(0, sel)

    def infer(self, node: Node, graph: Graph) -> list[OutputType]:
        bs, ss = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        return [((max_total(bs, ss, node.attrs["max_per_class"]), 3), "int64"), ((1,), "int64")]

    def reference(self, node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = node.attrs
        sel = nms_select(inputs[0], inputs[1], a["max_per_class"], a["iou"], a["score_threshold"], a["center"])
        out = np.full((max_total(inputs[0].shape, inputs[1].shape, a["max_per_class"]), 3), -1, np.int64)
        out[: len(sel)] = sel
        return [out, np.array([len(sel)], np.int64)]

    def kernel_context(self, node: Node, graph: Graph, schedule: dict[str, Any], target: str) -> dict[str, Any]:
        b, n, _ = graph.tensor(node.inputs[0]).shape
        c = graph.tensor(node.inputs[1]).shape[1]
        a = node.attrs
        return {
            "B": int(b),
            "C": int(c),
            "NB": int(n),
            "K": min(a["max_per_class"], int(n)),
            "total": max_total((b, n), (b, c), a["max_per_class"]),
            "iou": c_float(a["iou"]),
            "score_thr": None if a["score_threshold"] is None else c_float(a["score_threshold"]),
            "center": a["center"],
        }
