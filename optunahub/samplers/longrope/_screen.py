# Generated from longrope_opt/samplers/_screen.py by optunahub/build.py: do not edit.
"""The ``"surrogate"`` operators of `LongRoPESampler`: model-screened offspring and a trust-region
step of the model's own minimum (see `longrope_opt.samplers._surrogate` for the model).

Every proposal reads the study only: the model is fitted on the complete trials, the parents are
the best of them (feasible first), and the trust region's radius is replayed from the history of
the model steps (each tagged on its trial): a step that improved on the best trial doubles it,
one that did not halves it, and one that would take it below its floor restarts it at its first
size. So a new process, or another worker, proposes from the same state.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Container
from collections.abc import Sequence
from typing import Any

import numpy as np
from optuna.trial import FrozenTrial

from ._operators import Genome
from ._operators import blend
from ._operators import mutate_adaptive
from ._operators import parent_spread
from ._operators import sample_around
from ._protocol import EvolutionSpace
from ._surrogate import QuadraticModel


#: A model step's system attr: ``["model", the value of the trial it started from]`` (one write).
STEP_KEY = "LongRoPESampler:step"
#: Complete trials the model needs before it screens anything, at least.
MIN_FIT = 6
#: Trials past the seeds before the model starts. The formula seeds lie near one curve: the
#: slots between alternate a random monotone vector and a child of the seeds, so the model's
#: first fit sees the space around them (3 against 1 with the landscapes' 5 seeds: median regret
#: at 10-100 trials 0.85× in geometric mean, on 20 seeds the benchmark does not use;
#: `bench/results/small-budgets.txt`).
EXPLORE = 3
#: Offspring drawn per screened slot.
OFFSPRING = 32
#: Trust region in ln λ: first radius, bounds. A failed step that would halve the radius below
#: `RADIUS_MIN` restarts it at `RADIUS` instead (as TuRBO restarts a collapsed region): failures
#: in a row mean the model is wrong near the best trial, or the landscape's noise made a good step
#: look bad, and a region stuck at the floor proposes nothing new (median regret 0.91× at 30
#: trials, 0.79-0.85× at 100, in geometric mean over the twelve landscapes on two sets of 20
#: seeds the benchmark does not use; noisy 0.4-0.7× at 100, surrogate 8× 0.6× at 30;
#: `bench/results/small-budgets.txt`).
RADIUS, RADIUS_MIN, RADIUS_MAX = 0.3, 0.01, 1.5
#: Every `MODEL_EVERY`-th slot is a model step.
MODEL_EVERY = 2
#: The model is fitted on the best LOCAL·n + 10 complete trials (n factors).
LOCAL = 3


def _u(n_hat: int) -> float:
    return math.log2(1.0 + n_hat)


class Screen:
    """The model of one proposal: fitted on `history` (complete trials with their genomes, best
    first), with the constraint models when the study is constrained.

    Args:
        space: The search space.
        history: ``(genome, value, constraint values or None)`` of complete trials, ranked best
            first (feasible first).
        sign: 1 to minimize, -1 to maximize.
    """

    def __init__(
        self,
        space: EvolutionSpace,
        history: Sequence[tuple[Genome, float, Sequence[float] | None]],
        sign: float,
    ) -> None:
        self.space = space
        self.sign = sign
        self.n_hat = space.n_hat_choices is not None and len(space.n_hat_choices) > 1
        self.t = space.attention_range is not None
        genomes = [g for g, _, _ in history]
        x = np.log(np.stack([g.factors for g in genomes]))
        u = np.array([_u(g.n_hat) for g in genomes]) if self.n_hat else None
        t = np.array([g.attention_scale or 1.0 for g in genomes]) if self.t else None
        y = np.array([sign * v for _, v, _ in history], dtype=np.float64)
        self.model = QuadraticModel.fit(x, u, t, y)
        self.constraints: list[QuadraticModel] = []
        rows = [c for _, _, c in history]
        if rows and all(c is not None for c in rows):
            values = np.array(rows, dtype=np.float64)  # (m, k)
            for j in range(values.shape[1]):
                m = QuadraticModel.fit(x, u, t, values[:, j])
                if m is not None:
                    self.constraints.append(m)

    @property
    def ready(self) -> bool:
        """Whether the model can rank candidates."""
        return self.model is not None

    def score(self, genomes: Sequence[Genome]) -> np.ndarray:
        """Predicted value (to minimize) of each genome, plus a large penalty per unit of
        predicted constraint violation."""
        assert self.model is not None
        x = np.log(np.stack([g.factors for g in genomes]))
        u = np.array([_u(g.n_hat) for g in genomes]) if self.n_hat else None
        t = np.array([g.attention_scale or 1.0 for g in genomes]) if self.t else None
        value = self.model.predict(x, u, t)
        spread = self.model.spread
        for c in self.constraints:
            value = value + 1e3 * spread * np.maximum(c.predict(x, u, t), 0.0)
        return value

    def model_step(self, incumbent: Genome, radius: float) -> Genome | None:
        """The model's minimum within `radius` (in ln λ) of `incumbent`, monotone and in the
        space's bounds; None in the critical shape (its λ below c are a ramp)."""
        if self.model is None or incumbent.critical is not None:
            return None
        space = self.space
        x0 = np.log(incumbent.factors)
        lower = np.maximum(x0 - radius, math.log(space.low))
        upper = np.minimum(x0 + radius, math.log(space.high))
        choices = space.n_hat_choices or (incumbent.n_hat,)
        us = [_u(c) for c in choices]
        t_bounds = space.attention_range or (1.0, 1.0)
        t0 = incumbent.attention_scale or 1.0
        weight = 1e3 * self.model.spread
        x, u, t = self.model.minimize(
            x0, _u(incumbent.n_hat), t0, lower=lower, upper=upper,
            u_bounds=(min(us), max(us)), t_bounds=t_bounds,
            penalties=tuple((c, weight / max(c.spread, 1e-12) ** 2) for c in self.constraints),
        )  # fmt: skip
        n_hat = int(choices[int(np.argmin([abs(u - v) for v in us]))])
        attention = float(t) if space.attention_range is not None else None
        return Genome(np.exp(x), n_hat, attention, None)

    def offspring(
        self, parents: list[Genome], rng: np.random.Generator, count: int, prob: float
    ) -> list[Genome]:
        """`count` children of the parents by the adaptive operators (mutation with the parents'
        spread as step sizes, sampling around them, blend crossover)."""
        sigma = parent_spread(parents)
        elite = parents[: max(2, len(parents) // 2)]
        out = []
        for k in range(count):
            if k % 3 == 0 and len(elite) >= 2:
                i, j = rng.choice(len(elite), size=2, replace=False)
                out.append(blend(elite[int(i)], elite[int(j)], self.space, rng))
            elif k % 3 == 1:
                out.append(sample_around(elite, self.space, rng, prob))
            else:
                parent = elite[int(rng.integers(len(elite)))]
                out.append(mutate_adaptive(parent, self.space, rng, prob, sigma))
        return out


def local_size(space: EvolutionSpace, num_parents: int) -> int:
    """How many of the best trials the model is fitted on (and the parents drawn from)."""
    return max(MIN_FIT, LOCAL * len(space.names) + 10, num_parents)


def radius(history: Sequence[FrozenTrial], sign: float) -> float:
    """The trust region's radius now: replayed over the model-step trials in trial order (a
    step that beat the trial it started from doubles the radius, one that did not halves it, or
    restarts it at `RADIUS` below `RADIUS_MIN`). A step's start is the value recorded with it
    (`STEP_KEY`)."""
    return _replay(RADIUS, sorted(history, key=lambda t: t.number), sign)


class TrustRadius:
    """`radius`, folded incrementally: the sampler's model steps arrive in trial order (one
    worker), so each is replayed once instead of the whole history per proposal (O(steps) at
    thousands of trials); a step that arrives out of order (workers) replays the history again.
    The value is always `radius(steps, sign)`."""

    def __init__(self) -> None:
        self._sign: float | None = None
        self._done = 0  # steps[: _done] are folded into _r
        self._last = -1  # the highest trial number folded
        self._r = RADIUS

    def __call__(self, steps: Sequence[FrozenTrial], sign: float) -> float:
        new = sorted(steps[self._done :], key=lambda t: t.number)
        if sign != self._sign or len(steps) < self._done or (new and new[0].number <= self._last):
            self._sign, self._done, self._last, self._r = sign, 0, -1, RADIUS
            new = sorted(steps, key=lambda t: t.number)
        self._r = _replay(self._r, new, sign)
        self._done = len(steps)
        if new:
            self._last = max(self._last, new[-1].number)
        return self._r


def _replay(r: float, trials: Sequence[FrozenTrial], sign: float) -> float:
    for trial in trials:
        tag = trial.system_attrs.get(STEP_KEY)
        if not isinstance(tag, list) or tag[0] != "model" or not trial.values:
            continue
        start = tag[1]
        better = sign * float(trial.values[0]) < sign * float(start)
        if not better:  # halved, or restarted where half would fall below the floor
            r = 0.5 * r if 0.5 * r >= RADIUS_MIN else RADIUS
            continue
        r = min(2.0 * r, RADIUS_MAX)
    return r


def prescreen(screen: Screen, candidates: list[Genome], seen: Container) -> Genome | None:
    """The unseen candidate the model ranks best (None when all were seen)."""
    fresh = [g for g in candidates if g.key() not in seen]
    if not fresh:
        return None
    return fresh[int(np.argmin(screen.score(fresh)))]


def surrogate_proposal(
    ranked: Sequence[FrozenTrial],
    steps: Sequence[FrozenTrial],
    decode: Any,
    space: EvolutionSpace,
    rng: np.random.Generator,
    seen: Container,
    *,
    slot: int,
    sign: float,
    num_parents: int,
    prob: float,
    fallback: list[Genome],
    trust_radius: Callable[[Sequence[FrozenTrial], float], float] = radius,
) -> tuple[Genome | None, str, float | None]:
    """The next candidate by the ``"surrogate"`` operators, the operator's name (``"model"``
    for a trust-region step, ``"screened"`` for a pre-screened child) and, for a model step, the
    value of the trial it starts from; ``(None, "", None)`` while the study has too few complete
    trials for a model (the caller uses its own operators).

    Args:
        ranked: The study's best complete trials, best first (feasible first): at least the
            model's `LOCAL`·n + 10 and the parents, when the study has them.
        steps: The study's finished model-step trials (their successes set the trust region).
        decode: A finished trial → its `Genome` (None when its params are incomplete).
        space: The search space.
        rng: This proposal's generator.
        seen: Keys of candidates the study already holds or claims.
        slot: The trial's slot in its generation (every `MODEL_EVERY`-th is a model step).
        sign: 1 to minimize, -1 to maximize.
        num_parents: How many of the best trials the offspring come from.
        prob: Per-gene mutation probability.
        fallback: The seeds: parents when no complete trial decodes; the model starts
            `EXPLORE` complete trials past their number.
        trust_radius: ``(steps, sign) -> radius``: `radius`, or a `TrustRadius` kept across
            proposals (the same value, cheaper).
    """
    # a local model: the best trials only (which keeps a proposal cheap at thousands of trials)
    history = []
    for trial in ranked[: local_size(space, num_parents)]:
        genome = decode(trial)
        if genome is not None:
            constraints = trial.system_attrs.get("constraints")
            history.append((genome, float(trial.values[0]), constraints))
    if len(history) < max(MIN_FIT, len(fallback) + EXPLORE):
        return None, "", None
    screen = Screen(space, history, sign)
    if not screen.ready:
        return None, "", None
    if slot % MODEL_EVERY == 0:
        step = screen.model_step(history[0][0], trust_radius(steps, sign))
        if step is not None:
            step = step._replace(factors=space.snap_candidate(step.factors, None))
            if step.key() not in seen:
                return step, "model", history[0][1]
    parents = [g for g, _, _ in history[:num_parents]] or fallback
    for _ in range(3):
        children = [
            g._replace(factors=space.snap_candidate(g.factors, g.critical))
            for g in screen.offspring(parents, rng, OFFSPRING, prob)
        ]
        choice = prescreen(screen, children, seen)
        if choice is not None:
            return choice, "screened", None
    return None, "", None
