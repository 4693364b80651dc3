"""The population: who is in it, in which order, and what a newcomer must beat.

Constraints follow Optuna's convention (`NSGAIISampler`, `TPESampler`): a ``constraints_func``
maps a finished trial to a sequence of floats, each ≤ 0 when satisfied; the values are stored in
the trial's system attrs under Optuna's own key (`CONSTRAINTS_KEY`), so Optuna's tools and
other samplers read them. Trials rank feasible first (by value), then infeasible by total
violation (the sum of the positive values), then those with no stored values (as Optuna's
samplers do, the lowest priority).

`PopulationPruner` stops a candidate as soon as it cannot enter the population: after each
document it is compared, on the same documents, with the population member it would have to
beat (`LongRoPESampler.entry_bar`). A fitness on several documents then costs little more than
one: most candidates lose on the first document and read no other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any
from typing import Protocol

import optuna
from optuna.study import Study
from optuna.trial import FrozenTrial
from optuna.trial import TrialState


#: Where Optuna's samplers keep a trial's constraint values (``trial.system_attrs``).
CONSTRAINTS_KEY = "constraints"
ConstraintsFunc = Callable[[FrozenTrial], Sequence[float]]


class Population(Protocol):
    """What the pruner asks of a sampler that keeps a population (`LongRoPESampler`)."""

    def entry_bar(self, study: Study, trial: FrozenTrial) -> FrozenTrial | None:
        """The member `trial` must beat to enter its population (None: a place is free)."""


def violation(trial: FrozenTrial) -> float | None:
    """The trial's total constraint violation (0: feasible), or None when it has no stored values."""
    values = trial.system_attrs.get(CONSTRAINTS_KEY)
    if values is None:
        return None
    return float(sum(max(0.0, float(v)) for v in values))


def is_feasible(trial: FrozenTrial) -> bool:
    """Whether the trial's stored constraints are all satisfied (no stored values: no)."""
    return violation(trial) == 0.0


def rank_key(trial: FrozenTrial, sign: float, constrained: bool) -> tuple[int, float, float, int]:
    """Sort key, best first: feasible by value, infeasible by violation then value, unevaluated
    last (`constrained` False: by value alone). `sign` is 1 to minimize, -1 to maximize."""
    value = sign * float(trial.values[0]) if trial.values else math.inf
    if not constrained:
        return (0, 0.0, value, trial.number)
    total = violation(trial)
    if total is None:
        return (2, 0.0, value, trial.number)
    return (0 if total == 0.0 else 1, total, value, trial.number)


def direction_sign(study: Study) -> float:
    """1 for a study that minimizes, -1 for one that maximizes."""
    return 1.0 if study.direction == optuna.study.StudyDirection.MINIMIZE else -1.0


def store_constraints(
    constraints_func: ConstraintsFunc, study: Study, trial: FrozenTrial, state: TrialState
) -> None:
    """Evaluate and store a finished trial's constraints where Optuna's samplers do.

    Raises:
        ValueError: A NaN constraint value (Optuna refuses them too).
    """
    if state not in (TrialState.COMPLETE, TrialState.PRUNED):
        return
    values = tuple(float(v) for v in constraints_func(trial))
    if any(math.isnan(v) for v in values):
        raise ValueError(f"Constraint values cannot be NaN (trial {trial.number}: {values}).")
    study._storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_KEY, values)
    trial.system_attrs[CONSTRAINTS_KEY] = values  # the hooks' cached copy, kept in step


class PopulationPruner(optuna.pruners.BasePruner):
    """Prune a candidate as soon as it cannot enter its generation's population.

    After each reported step (one document), the trial's intermediate value is compared with the
    intermediate value, at the same step, of the member it would have to beat
    (`LongRoPESampler.entry_bar`: the last of the population's feasible members once the
    population is full). Steps index the same documents in every trial, so the comparison is
    paired. Seeds are never pruned: they are the reference every candidate and table is measured
    against. Before the population is full nothing is pruned.

    Args:
        sampler: The study's `LongRoPESampler` (it owns the population: any object with
            `Population`'s ``entry_bar``).
        margin: Relative slack: prune only when the trial is worse than the bar by at least
            this fraction of the bar's value (0: any loss or tie prunes).
    """

    def __init__(self, sampler: Any, *, margin: float = 0.0) -> None:
        if not (isinstance(margin, (int, float)) and 0.0 <= margin < 1.0):
            raise ValueError(f"`margin` must be in [0, 1), got {margin!r}.")
        self._sampler = sampler
        self._margin = float(margin)

    def prune(self, study: Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or trial.user_attrs.get("seed"):
            return False
        bar = self._sampler.entry_bar(study, trial)
        if bar is None or step not in bar.intermediate_values:
            return False
        mine, theirs = trial.intermediate_values[step], bar.intermediate_values[step]
        if not (math.isfinite(mine) and math.isfinite(theirs)):
            return not math.isfinite(mine)
        # A tie loses: the population ranks an earlier trial first (`rank_key`).
        return direction_sign(study) * (mine - theirs) >= self._margin * abs(theirs)


def entering(
    members: Sequence[FrozenTrial], size: int, sign: float, constrained: bool
) -> FrozenTrial | None:
    """The member a feasible newcomer must beat to enter a population of `size` drawn from
    `members` (None: a place is free, or held by an infeasible member)."""
    feasible = [t for t in members if not constrained or is_feasible(t)]
    if len(feasible) < size:
        return None
    return sorted(feasible, key=lambda t: rank_key(t, sign, constrained))[size - 1]


def enters(bar: FrozenTrial | None, value: float, sign: float) -> bool:
    """Whether a feasible candidate of `value` would take a place from `bar`."""
    return bar is None or sign * value < sign * float(bar.values[0])
