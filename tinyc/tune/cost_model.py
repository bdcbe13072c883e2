"""A learned cost model: predicts a candidate's log cycles from its features (as in Ansor/AutoTVM).

Measurements on a board are slow, predictions are cheap, so the search asks the model which
candidates look fastest and measures only those. Gradient-boosted trees cope with the mixed
features (one-hot knobs, counts, flags) and few samples. Internally the trees learn log(cycles
per MAC): that quantity is shared between layers of different size, so records of other layers,
models and boards transfer; predictions add log(MACs) back and are log cycles.
"""

from __future__ import annotations

import math
import warnings
from typing import Any
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tinyc.tune.features import candidate_features

#: Fewer ok samples than this leave the model untrained (predictions would be noise).
MIN_SAMPLES = 4


def _log_macs(task: Mapping[str, Any]) -> float:
    """The per-task offset between log cycles and the learned log cycles-per-MAC."""
    macs = task.get("macs", 0)
    return math.log(float(macs)) if isinstance(macs, (int, float)) and macs >= 1 else 0.0


def _positive(cycles: Any) -> bool:
    """Whether a cycle count is usable for training (failures carry None)."""
    return (
        isinstance(cycles, (int, float, np.number))
        and not isinstance(cycles, bool)
        and math.isfinite(float(cycles))
        and float(cycles) > 0
    )


#: candidate features kept per model (a few spaces' worth); past it the cache starts over
FEATURE_CACHE = 50_000


class CostModel:
    """Gradient-boosted trees over candidate_features, trained on log cycles."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._pipeline: Any = None
        self._n_samples = 0
        # candidate_features per (task, board, knobs): a search predicts the same space after
        # every refit; the task and board objects are kept with their entry, so their ids stay theirs
        self._features: dict[tuple[int, int, str], tuple[Any, Any, dict[str, float]]] = {}

    def _new_pipeline(self) -> Any:
        # imported here: scikit-learn takes over a second to import, and commands that only
        # read or apply a tuning log should not pay for it
        from sklearn.ensemble import GradientBoostingRegressor
        from sklearn.feature_extraction import DictVectorizer
        from sklearn.pipeline import Pipeline

        return Pipeline(
            [
                ("features", DictVectorizer(sparse=False)),
                (
                    "trees",
                    GradientBoostingRegressor(
                        n_estimators=120,
                        max_depth=4,
                        learning_rate=0.1,
                        subsample=0.8,
                        min_samples_leaf=2,
                        random_state=self.seed,
                    ),
                ),
            ]
        )

    def fit(self, samples: Sequence[tuple[Mapping, Mapping, Mapping, float]]) -> CostModel:
        """Train on (task, knobs, board, cycles) samples; those without positive finite cycles
        (failures) are ignored. With fewer than MIN_SAMPLES usable ones the model is untrained."""
        usable = [(t, k, b, float(c)) for t, k, b, c in samples if _positive(c)]
        self._n_samples = len(usable)
        if len(usable) < MIN_SAMPLES:
            self._pipeline = None
            return self
        x = [candidate_features(t, k, b) for t, k, b, _ in usable]
        y = np.array([math.log(c) - _log_macs(t) for t, _, _, c in usable])
        pipeline = self._new_pipeline()
        pipeline.fit(x, y)
        self._pipeline = pipeline
        return self

    @property
    def trained(self) -> bool:
        return self._pipeline is not None

    @property
    def n_samples(self) -> int:
        """How many usable samples the last fit() saw (0 before any fit)."""
        return self._n_samples

    def predict(self, items: Sequence[tuple[Mapping, Mapping, Mapping]]) -> np.ndarray:
        """Predicted log cycles of (task, knobs, board) items; zeros while untrained."""
        if not items:
            return np.zeros(0)
        if self._pipeline is None:
            return np.zeros(len(items))
        x = self._matrix([self._features_of(t, k, b) for t, k, b in items])
        offset = np.array([_log_macs(t) for t, _, _ in items])
        return self._pipeline.named_steps["trees"].predict(x) + offset

    def _features_of(self, task: Mapping, knobs: Mapping, board: Mapping) -> dict[str, float]:
        from tinyc.tune.log import knobs_id

        key = (
            id(task),
            id(board),
            knobs_id(knobs) + repr(sorted((k, v) for k, v in knobs.items() if str(k)[:1] == "_")),
        )
        hit = self._features.get(key)
        if hit is not None and hit[0] is task and hit[1] is board:
            return hit[2]
        f = candidate_features(task, knobs, board)
        if len(self._features) >= FEATURE_CACHE:
            self._features.clear()
        self._features[key] = (task, board, f)
        return f

    def _matrix(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        """What the fitted DictVectorizer's transform gives (a dense float64 matrix; features it
        was not fit on are dropped), without its per-item overhead."""
        vec = self._pipeline.named_steps["features"]
        vocab = vec.vocabulary_
        x = np.zeros((len(rows), len(vec.feature_names_)), dtype=np.float64)
        ii: list[int] = []
        jj: list[int] = []
        vv: list[float] = []
        for i, row in enumerate(rows):
            for name, value in row.items():
                j = vocab.get(name)
                if j is not None:
                    ii.append(i)
                    jj.append(j)
                    vv.append(value)
        x[ii, jj] = vv
        return x


def records_to_samples(
    records: Iterable[Mapping], tasks: Mapping[str, Mapping], boards: Mapping[str, Mapping]
) -> list[tuple]:
    """(task, knobs, board, cycles) samples from log records with status "ok".

    Records are joined with their task dict by "key" and their board dict by "board"; records
    of unknown tasks or boards are skipped. Passing every known task and board lets measurements
    of other models and other boards prime the model for a new one.
    """
    samples: list[tuple] = []
    for r in records:
        if r.get("status") != "ok" or r.get("key") not in tasks or r.get("board") not in boards:
            continue
        if _positive(r.get("cycles")):
            samples.append((tasks[r["key"]], r["knobs"], boards[r["board"]], float(r["cycles"])))
    return samples


def spearman(model: CostModel, held_out: Sequence[tuple[Mapping, Mapping, Mapping, float]]) -> float:
    """Rank correlation of predicted vs measured cycles on held-out samples: what the search
    needs is the right order, not the right numbers. nan with fewer than 3 samples or when
    either side is constant (e.g. an untrained model)."""
    if len(held_out) < 3:
        return float("nan")
    from scipy.stats import spearmanr

    predicted = model.predict([(t, k, b) for t, k, b, _ in held_out])
    measured = np.array([c for _, _, _, c in held_out], dtype=float)
    if np.ptp(predicted) == 0 or np.ptp(measured) == 0:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(spearmanr(predicted, measured)[0])
