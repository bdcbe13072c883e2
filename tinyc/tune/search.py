"""Proposing which candidates of one task to measure next.

Without a trained cost model the only fair choice is uniform random sampling. With one, the
search follows the model (simulated annealing over the legal space, as Ansor does, so large
spaces need not be predicted exhaustively) but keeps a small random share (epsilon-greedy):
a model trained on few samples is confidently wrong in places, and only measurements it did
not ask for can correct that. The random share goes to the kernel forms measured least, so
every form is measured early, however few candidates it has.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet  # a set or a frozenset

import numpy as np

from tinyc.tune.log import knobs_id

if TYPE_CHECKING:
    from tinyc.tune.cost_model import CostModel


def _unique(space: Sequence[Mapping], exclude: AbstractSet[str] = frozenset()) -> list[tuple[str, dict]]:
    """(knobs_id, knobs) of each distinct candidate of the space not in exclude, in space order."""
    seen: set[str] = set()
    out: list[tuple[str, dict]] = []
    for knobs in space:
        ident = knobs_id(knobs)
        if ident not in seen and ident not in exclude:
            seen.add(ident)
            out.append((ident, dict(knobs)))
    return out


def random_proposals(space: Sequence[Mapping], exclude: set[str], n: int, rng: np.random.Generator) -> list[dict]:
    """n distinct unmeasured candidates drawn uniformly (fewer when the space runs out)."""
    pool = _unique(space, exclude)
    if n <= 0 or not pool:
        return []
    return [pool[i][1] for i in rng.permutation(len(pool))[:n]]


#: spaces up to this many unmeasured candidates (or 4 * n) are ranked whole rather than walked.
#: 0: the walk's random starting points keep the picks diverse while the model knows little
#: (ranking whole is exact on the model, but a model fit on a few records is confidently wrong)
EXHAUSTIVE = 0


def _epsilon_count(n: int, epsilon: float) -> int:
    """How many of n proposals are random: ~epsilon*n, at least one once a batch has 4."""
    if epsilon <= 0 or n <= 0:
        return 0
    k = round(epsilon * n)
    if n >= 4:
        k = max(1, k)
    return min(k, n)


class _Scorer:
    """Predicted log cycles per candidate id, each predicted once (the walk revisits points)."""

    def __init__(self, model: CostModel, task: Mapping, board: Mapping, by_id: Mapping[str, dict]) -> None:
        self.model, self.task, self.board, self.by_id = model, task, board, by_id
        self.scores: dict[str, float] = {}

    def score(self, ids: Sequence[str]) -> list[float]:
        new = list(dict.fromkeys(i for i in ids if i not in self.scores))
        if new:
            predicted = self.model.predict([(self.task, self.by_id[i], self.board) for i in new])
            self.scores.update(zip(new, (float(p) for p in predicted)))
        return [self.scores[i] for i in ids]

    def rank(self, ids: Sequence[str]) -> list[str]:
        """ids best (lowest predicted cycles) first; ties by id so the order is reproducible."""
        scores = self.score(ids)
        return [i for _, i in sorted(zip(scores, ids))]


class _Neighbours:
    """Candidates of the space that differ from a given one in exactly one knob."""

    def __init__(self, candidates: Sequence[tuple[str, dict]]) -> None:
        self.ids = {ident for ident, _ in candidates}
        self.by_id = dict(candidates)
        values: dict[str, dict[str, Any]] = {}
        for _, knobs in candidates:
            for k, v in knobs.items():
                if not str(k).startswith("_"):  # derived numbers follow the knobs, they are not walked
                    values.setdefault(k, {}).setdefault(json.dumps(v, sort_keys=True, default=str), v)
        self.values = {k: list(vs.items()) for k, vs in values.items()}
        self._cache: dict[str, list[str]] = {}

    def __call__(self, ident: str) -> list[str]:
        if ident not in self._cache:
            knobs = self.by_id[ident]
            out: list[str] = []
            for k in sorted(knobs):
                if str(k).startswith("_"):
                    continue
                current = json.dumps(knobs[k], sort_keys=True, default=str)
                for text, v in self.values[k]:
                    if text != current:
                        other = knobs_id({**knobs, k: v})
                        if other in self.ids:
                            out.append(other)
            self._cache[ident] = out
        return self._cache[ident]


def _anneal(
    candidates: Sequence[tuple[str, dict]], scorer: _Scorer, rng: np.random.Generator, n_walkers: int, steps: int
) -> None:
    """Simulated annealing over the space; every point visited ends up scored in `scorer`.

    Walkers start at the best-predicted points of a random sample (exploit) and at random
    points (explore); each step moves every walker to a random one-knob neighbour, accepted
    when predicted faster or with Metropolis probability under a linearly cooling temperature.
    """
    ids = [i for i, _ in candidates]
    neighbours = _Neighbours(candidates)
    sample = [ids[j] for j in rng.choice(len(ids), size=min(len(ids), max(64, 4 * n_walkers)), replace=False)]
    ranked = scorer.rank(sample)
    n_best = (n_walkers + 1) // 2
    walkers = ranked[:n_best] + [ids[j] for j in rng.integers(0, len(ids), size=n_walkers - n_best)]
    current = scorer.score(walkers)
    spread = float(np.std(scorer.score(sample))) if len(sample) > 1 else 0.0
    t0 = max(0.5 * spread, 1e-3)
    for step in range(steps):
        if len(scorer.scores) >= len(ids):
            break  # the whole space is scored: ranking it is exact, walking adds nothing
        temperature = t0 * (1.0 - step / steps)
        moves = []
        for w in walkers:
            options = neighbours(w)
            moves.append(options[int(rng.integers(len(options)))] if options else ids[int(rng.integers(len(ids)))])
        proposed = scorer.score(moves)
        for j, (new, old) in enumerate(zip(proposed, current)):
            accept = new <= old or (temperature > 0 and rng.random() < math.exp(-(new - old) / temperature))
            if accept:
                walkers[j], current[j] = moves[j], new


def kernel_form(knobs: Mapping[str, Any]) -> str:
    """A candidate's kernel form: its string-valued knobs (variant, product form, loop order).
    Forms differ by integer factors (a Helium kernel against the portable C loops: 4-20x on the
    M55), tile sizes within a form by percents."""
    return json.dumps(sorted((k, v) for k, v in knobs.items() if isinstance(v, str) and not str(k).startswith("_")))


def _explore(
    rest: Sequence[str], by_id: Mapping[str, dict], seen: Sequence[str], n: int, rng: np.random.Generator
) -> list[str]:
    """n random picks of `rest`, each from the kernel form seen least so far (`seen`: measured,
    in flight, picked), ties at random. Uniform picks would go where the space is large — on the
    M55 mostly to the portable forms, which never win — and leave a form with few candidates
    (the Helium kernel's, the DSP's) unmeasured: the model then ranks it blind."""
    if n <= 0:
        return []
    counts: dict[str, int] = {}
    for ident in seen:
        if ident in by_id:
            form = kernel_form(by_id[ident])
            counts[form] = counts.get(form, 0) + 1
    groups: dict[str, list[str]] = {}
    for ident in rest:
        groups.setdefault(kernel_form(by_id[ident]), []).append(ident)
    picks: list[str] = []
    while groups and len(picks) < n:
        low = min(counts.get(f, 0) for f in groups)
        forms = [f for f in groups if counts.get(f, 0) == low]
        form = forms[int(rng.integers(len(forms)))]
        members = groups[form]
        picks.append(members.pop(int(rng.integers(len(members)))))
        counts[form] = low + 1
        if not members:
            del groups[form]
    return picks


def model_proposals(
    space: Sequence[Mapping],
    exclude: set[str],
    n: int,
    model: CostModel,
    task: Mapping,
    board: Mapping,
    rng: np.random.Generator,
    epsilon: float = 0.1,
    anneal_steps: int = 200,
    exhaustive: int = EXHAUSTIVE,
) -> list[dict]:
    """n distinct unmeasured candidates: the model's best-predicted first, then ~epsilon*n random
    ones (at least one when n >= 4 and epsilon > 0), each from the kernel form measured least
    (`_explore`). Random while the model is untrained.

    A space of at most max(4*n, `exhaustive`) unmeasured candidates is ranked exhaustively (one
    prediction call for all of them); a larger one is walked by simulated annealing and the
    best-predicted unmeasured points seen are taken.
    """
    if n <= 0:
        return []
    if not model.trained:
        return random_proposals(space, exclude, n, rng)
    candidates = _unique(space)
    unmeasured = [i for i, _ in candidates if i not in exclude]
    if not unmeasured:
        return []
    n = min(n, len(unmeasured))
    n_random = _epsilon_count(n, epsilon)
    by_id = dict(candidates)
    scorer = _Scorer(model, task, board, by_id)
    if len(unmeasured) <= max(4 * n, exhaustive):
        ranked = scorer.rank(unmeasured)
    else:
        _anneal(candidates, scorer, rng, n_walkers=max(8, min(n, 32)), steps=anneal_steps)
        excluded = set(exclude)
        ranked = scorer.rank([i for i in scorer.scores if i not in excluded])
        need = n - n_random
        if len(ranked) < need:  # the walk saw too few unmeasured points: score some more
            seen = set(ranked)
            rest = [i for i in unmeasured if i not in seen]
            extra = [rest[j] for j in rng.permutation(len(rest))[: 4 * (need - len(ranked))]]
            ranked = scorer.rank(ranked + extra)
    picks = ranked[: n - n_random]
    chosen = set(picks)
    rest = [i for i in unmeasured if i not in chosen]
    explore = _explore(rest, by_id, [*exclude, *picks], n_random, rng)
    picks += explore
    if len(picks) < n:  # nothing left to explore with: fill up with the model's next best
        chosen.update(explore)
        picks += [i for i in ranked if i not in chosen][: n - len(picks)]
    return [dict(by_id[i]) for i in picks]
