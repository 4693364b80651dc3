"""The surrogate operators' bookkeeping: the trust radius kept across proposals is always the
radius replayed from the whole history, however the model steps arrive."""

from __future__ import annotations

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from longrope_opt.samplers._index import SeenKeys
from longrope_opt.samplers._screen import STEP_KEY
from longrope_opt.samplers._screen import TrustRadius
from longrope_opt.samplers._screen import radius


def _step(number: int, value: float, start: float) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(
        state=TrialState.COMPLETE, value=value, params={"x": 0.0},
        distributions={"x": FloatDistribution(0.0, 1.0)},
        system_attrs={STEP_KEY: ["model", start]},
    )  # fmt: skip
    trial.number = number
    return trial


def test_the_kept_radius_equals_the_replayed_one_in_and_out_of_order() -> None:
    rng = np.random.default_rng(0)
    trials = [_step(n, float(rng.normal()), float(rng.normal())) for n in range(200)]
    for order in (np.arange(200), rng.permutation(200)):  # one worker; workers (out of order)
        kept, steps = TrustRadius(), []
        for i in order:
            steps.append(trials[int(i)])
            for sign in (1.0, 1.0, -1.0, 1.0)[: 1 + int(i) % 4]:  # the sign may change too
                assert kept(steps, sign) == radius(steps, sign)
        assert kept([], 1.0) == radius([], 1.0)  # another study: start over


def test_failed_steps_halve_the_radius_and_one_below_the_floor_restarts_it() -> None:
    from longrope_opt.samplers._screen import RADIUS
    from longrope_opt.samplers._screen import RADIUS_MIN

    failed = [_step(n, value=2.0, start=1.0) for n in range(12)]  # none beat its start
    seen = [radius(failed[:k], 1.0) for k in range(len(failed) + 1)]
    assert seen[0] == RADIUS and all(r >= RADIUS_MIN for r in seen)
    first_restart = next(k for k in range(1, len(seen)) if seen[k] > seen[k - 1])
    assert seen[first_restart] == RADIUS and 0.5 * seen[first_restart - 1] < RADIUS_MIN
    assert all(seen[k] == 0.5 * seen[k - 1] for k in range(1, first_restart))
    better = _step(12, value=0.5, start=1.0)
    assert radius([*failed[:2], better], 1.0) == 2 * seen[2]  # a step that beat its start doubles
    # maximizing, the same steps read the other way: two gains (4x), then a loss (half)
    assert radius([*failed[:2], better], -1.0) == 2 * RADIUS


def test_seen_keys_look_in_both_sets_without_copying() -> None:
    finished, live = {(1.0,), (2.0,)}, {(3.0,)}
    seen = SeenKeys(finished, live)
    assert (1.0,) in seen and (3.0,) in seen and (4.0,) not in seen
    finished.add((4.0,))  # a view: the index's later refresh is seen
    assert (4.0,) in seen


def test_the_model_starts_explore_trials_past_the_seeds_however_many_seeds() -> None:
    from longrope_opt.rope import RopeSpec
    from longrope_opt.samplers import LongRoPESampler
    from longrope_opt.samplers import enqueue_seeds
    from longrope_opt.samplers._screen import EXPLORE
    from longrope_opt.space import SearchSpace

    spec = RopeSpec(head_dim=16, base=10000.0, original_length=64)
    for seeds in (("yarn", "yarn-cd", "ntk-cd"), ("pi", "ntk", "yarn", "yarn-cd", "ntk-cd")):
        space = SearchSpace(spec, 256, n_hat=(0,), seeds=seeds)
        sampler = LongRoPESampler(space=space, seed=0, population_size=6, num_mutations=3,
                                  num_crossovers=3, num_parents=3)  # fmt: skip
        study = optuna.create_study(sampler=sampler)
        enqueue_seeds(study, sampler)
        target = np.linspace(1.0, 4.0, spec.n_factors)

        def objective(trial: optuna.Trial, space=space, target=target) -> float:
            factors = space.suggest(trial).factors
            return float(np.sum((np.log(factors) - np.log(target)) ** 2))

        study.optimize(objective, n_trials=len(seeds) + EXPLORE + 4)
        stepped = [t.number for t in study.trials if STEP_KEY in t.system_attrs]
        assert stepped and min(stepped) >= len(seeds) + EXPLORE  # no model before
        assert min(stepped) <= len(seeds) + EXPLORE + 1  # the first model slot after
