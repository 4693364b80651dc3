"""`LongRoPESampler(constraints_func=...)` and the population pruner, on synthetic objectives."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from longrope_opt import RopeSpec
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.samplers import CONSTRAINTS_KEY
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import PopulationPruner
from longrope_opt.samplers import enqueue_seeds
from longrope_opt.samplers import rank_key
from longrope_opt.samplers import violation
from longrope_opt.samplers._state import PARENTS_KEY_PREFIX
from longrope_opt.space import SearchSpace


optuna.logging.set_verbosity(optuna.logging.WARNING)
SPEC = RopeSpec(head_dim=16, base=10000.0, original_length=64)
SPACE = SearchSpace(SPEC, 256, n_hat=(0,))


def _sampler(**kw) -> LongRoPESampler:
    # the generation machinery (parents per generation, the population's entry bar), which the
    # paper's and the adaptive operators run on
    options = dict(population_size=6, num_mutations=3, num_crossovers=3, num_parents=3, seed=0,
                   operators="paper")  # fmt: skip
    return LongRoPESampler(space=SPACE, **{**options, **kw})


def _value(trial: optuna.Trial) -> float:
    return float(np.sum(SPACE.suggest(trial).factors))


def test_constraints_are_stored_where_optunas_samplers_store_them() -> None:
    def constraints(trial):
        return (trial.number % 3 - 1.0, -1.0)

    ours = optuna.create_study(sampler=_sampler(constraints_func=constraints))
    ours.optimize(_value, n_trials=6)
    theirs = optuna.create_study(sampler=optuna.samplers.NSGAIISampler(
        constraints_func=constraints, seed=0))  # fmt: skip
    theirs.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=6)
    for a, b in zip(ours.trials, theirs.trials):
        assert CONSTRAINTS_KEY in a.system_attrs and CONSTRAINTS_KEY in b.system_attrs
        assert tuple(a.system_attrs[CONSTRAINTS_KEY]) == tuple(b.system_attrs[CONSTRAINTS_KEY])
    # Optuna's own reader of a trial's feasibility agrees with ours
    assert [violation(t) == 0 for t in ours.trials] == [t.number % 3 != 2 for t in ours.trials]


def test_a_feasible_trial_beats_a_better_infeasible_one_and_infeasible_rank_by_violation() -> None:
    # Trials 1 and 2 have the best values but break the constraint; 2 breaks it less.
    values = {0: 10.0, 1: 1.0, 2: 2.0, 3: 5.0, 4: 7.0, 5: 8.0}
    broken = {1: 3.0, 2: 0.5}
    sampler = _sampler(constraints_func=lambda t: (broken.get(t.number, -1.0),))
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: (SPACE.suggest(t), values[t.number])[1], n_trials=6)
    # generation 1's parents: the 3 feasible trials by value, not the best values
    study.optimize(_value, n_trials=1)  # generation 1's first trial chooses its parents
    attrs = study._storage.get_study_system_attrs(study._study_id)
    assert attrs[f"{PARENTS_KEY_PREFIX}1"] == [3, 4, 5]
    order = sorted(study.trials[:6], key=lambda t: rank_key(t, 1.0, True))
    assert [t.number for t in order] == [3, 4, 5, 0, 2, 1]


def test_without_constraints_nothing_is_stored_and_values_rank() -> None:
    study = optuna.create_study(sampler=_sampler())
    study.optimize(_value, n_trials=6)
    assert all(CONSTRAINTS_KEY not in t.system_attrs for t in study.trials)


def test_constraints_func_must_be_callable() -> None:
    with pytest.raises(InvalidArgumentError, match="`constraints_func` must be callable"):
        _sampler(constraints_func=3)


def test_the_population_pruner_stops_a_candidate_once_it_cannot_enter() -> None:
    """Each candidate reads 3 "documents"; one that is already behind the population's last
    member on the documents read so far reads no more. Its loss is checked by hand."""
    sampler = _sampler()
    study = optuna.create_study(sampler=sampler, pruner=PopulationPruner(sampler))
    enqueue_seeds(study, sampler)
    read: dict[int, int] = {}

    def objective(trial: optuna.Trial) -> float:
        total = float(np.sum(SPACE.suggest(trial).factors))
        running = 0.0
        for step, weight in enumerate((0.5, 0.3, 0.2)):  # the same documents for every trial
            running += weight * total * (1.0 + 0.01 * step)
            read[trial.number] = step + 1
            trial.report(running, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return running

    study.optimize(objective, n_trials=24)
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert pruned, "a population of 3 and 24 trials prune some"
    for t in pruned:
        step = t.last_step
        assert read[t.number] == step + 1  # no document after the pruning step
        # it was behind the member it had to beat, on the same documents
        members = [
            o for o in study.trials
            if o.state == TrialState.COMPLETE and o.number < t.number
        ]  # fmt: skip
        assert sum(o.intermediate_values[step] < t.intermediate_values[step] for o in members) >= 3
    assert all(t.user_attrs.get("seed") is None for t in pruned)  # seeds are never pruned
    saved = sum(3 - read[t.number] for t in pruned)
    assert saved > 0
