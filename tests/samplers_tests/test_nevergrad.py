"""`NevergradSampler`: bounds, the shared repair policy, honest tells, resume by replay."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from longrope_opt import RopeSpec
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import NevergradSampler
from longrope_opt.samplers import enqueue_seeds
from longrope_opt.space import SearchSpace


pytest.importorskip("nevergrad")
optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = SearchSpace(RopeSpec(head_dim=16, base=10000.0, original_length=64), 256)
TARGET = np.linspace(1.2, 4.8, SPACE.spec.n_factors)


def objective(trial: optuna.Trial) -> float:
    scaling = SPACE.suggest(trial)  # sorted λ: the repair every baseline shares
    trial.set_user_attr("evaluated", scaling.factors.tolist())
    return float(np.mean((scaling.factors - TARGET) ** 2) + 1e-3 * scaling.n_hat)


def _seeded_study(storage=None, name=None, sampler=None) -> optuna.Study:
    study = optuna.create_study(
        storage=storage, study_name=name, sampler=sampler, load_if_exists=True
    )
    seeds = LongRoPESampler(space=SPACE, seed=0)  # only to compute the same PI/NTK/YaRN seeds
    enqueue_seeds(study, seeds)
    return study


@pytest.mark.parametrize("name", ["NGOpt", "CMA", "TwoPointsDE", "PSO", "OnePlusOne"])
def test_optimizers_honour_bounds_and_the_repair_policy(name: str) -> None:
    sampler = NevergradSampler(space=SPACE, optimizer=name, budget=20, seed=0)
    study = _seeded_study(sampler=sampler)
    study.optimize(objective, n_trials=20)
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 20
    for t in study.trials:
        raw = np.array([t.params[n] for n in SPACE.names])
        assert np.all(raw >= SPACE.lambda_low) and np.all(raw <= SPACE.lambda_high)
        assert t.params["n_hat"] in SPACE.n_hat
        np.testing.assert_array_equal(t.user_attrs["evaluated"], np.sort(raw))
    # the three seeds were told without being asked; every other trial was asked and told
    assert sampler.optimizer.num_tell == 20
    assert sampler.optimizer.num_tell_not_asked == 3


def test_pruned_told_with_last_value_failed_not_told() -> None:
    def obj(trial: optuna.Trial) -> float:
        value = objective(trial)
        trial.report(value * 2, step=0)
        if trial.number % 3 == 1:
            raise optuna.TrialPruned()
        if trial.number % 3 == 2:
            raise RuntimeError("boom")
        return value

    sampler = NevergradSampler(space=SPACE, optimizer="OnePlusOne", seed=1)
    study = optuna.create_study(sampler=sampler)
    study.optimize(obj, n_trials=9, catch=(RuntimeError,))
    states = [t.state for t in study.trials]
    assert states.count(TrialState.FAIL) == 3
    assert sampler.optimizer.num_tell == 6  # 3 complete + 3 pruned; failures have no value


def test_pruned_trial_told_its_partial_estimate_when_recorded() -> None:
    # The objective's reports may be per-sample NLLs (for WilcoxonPruner); the estimate a pruned
    # trial reached is its `partial_ppl` user attr, and that is what nevergrad is told.
    def obj(trial: optuna.Trial) -> float:
        value = objective(trial)
        trial.report(0.001, step=0)  # a per-sample number on another scale
        if trial.number % 2 == 1:
            trial.set_user_attr("partial_ppl", value + 100.0)
            raise optuna.TrialPruned()
        return value

    sampler = NevergradSampler(space=SPACE, optimizer="OnePlusOne", seed=1)
    told: dict[int, float | None] = {}
    tell = sampler._tell

    def spy(number, params, loss, candidate):
        told[number] = loss
        tell(number, params, loss, candidate)

    sampler._tell = spy
    study = optuna.create_study(sampler=sampler)
    study.optimize(obj, n_trials=6)
    for t in study.trials:
        expected = t.value if t.state == TrialState.COMPLETE else t.user_attrs["partial_ppl"]
        assert told[t.number] == pytest.approx(expected)


def test_resume_replays_finished_trials(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'ng.db'}"
    first = NevergradSampler(space=SPACE, optimizer="TwoPointsDE", seed=2)
    _seeded_study(url, "ng", first).optimize(objective, n_trials=12)
    second = NevergradSampler(space=SPACE, optimizer="TwoPointsDE", seed=2)  # a fresh process
    study = optuna.load_study(study_name="ng", storage=url, sampler=second)
    study.optimize(objective, n_trials=1)
    assert second.optimizer.num_tell_not_asked == 12  # everything before was replayed
    assert second.optimizer.num_tell == 13
    assert len(study.trials) == 13


def test_unknown_optimizer_name() -> None:
    with pytest.raises(
        InvalidArgumentError,
        match=r"`optimizer` must be a nevergrad registry name .*got 'ngopt' \(did you mean 'NGOpt'\?\)",
    ):
        NevergradSampler(space=SPACE, optimizer="ngopt")


def test_space_repair_policy() -> None:
    params = {n: v for n, v in zip(SPACE.names, [3.0, 1.0, 2.0, 1.5, 4.0, 4.0, 1.0, 5.0])}
    np.testing.assert_array_equal(
        SPACE.to_scaling(params).factors, [1.0, 1.0, 1.5, 2.0, 3.0, 4.0, 4.0, 5.0]
    )
    raw = SearchSpace(SPACE.spec, 256, repair="none").to_scaling(params).factors
    np.testing.assert_array_equal(raw, [3.0, 1.0, 2.0, 1.5, 4.0, 4.0, 1.0, 5.0])
    with pytest.raises(
        InvalidArgumentError, match="`repair` must be 'sort' or 'none', got 'clip'"
    ):
        SearchSpace(SPACE.spec, 256, repair="clip")


def test_one_sampler_on_two_studies_starts_a_new_optimizer() -> None:
    # trial numbers restart in every study: a reused optimizer would take the second study's
    # trial 5 for the first one's, told already, and never tell it
    sampler = NevergradSampler(space=SPACE, optimizer="TwoPointsDE", budget=20, seed=0)
    _seeded_study(sampler=sampler).optimize(objective, n_trials=10)
    second = _seeded_study(sampler=sampler)
    second.optimize(objective, n_trials=8)
    assert sampler.optimizer.num_tell == 8  # the second study's trials, every one of them
    assert sampler.optimizer.num_tell_not_asked == 3  # its own three seeds
