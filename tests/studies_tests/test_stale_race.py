"""A worker that only looked dead: its trial failed under it by another worker's heartbeat check.

The other worker is played here by the objective itself, which fails its own running trial in the
storage (as `fail_stale_trials` does) and re-queues it (as the heartbeat's retry callback does).
"""

from __future__ import annotations

import threading

import optuna
import pytest
from optuna.trial import TrialState

from longrope_opt.studies import make_storage
from longrope_opt.studies import run_study


optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study(tmp_path) -> optuna.Study:
    storage = make_storage(f"sqlite:///{tmp_path / 's.db'}", heartbeat_interval=60)
    return optuna.create_study(storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))


def test_a_trial_failed_under_its_worker_does_not_stop_the_worker(tmp_path) -> None:
    study = _study(tmp_path)

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        if trial.number == 1:  # another worker decides this one is stale, mid-evaluation
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        return x

    assert run_study(study, objective, n_trials=4, show_progress_bar=False) == 4
    states = [t.state for t in study.trials]
    assert states[1] == TrialState.FAIL and states.count(TrialState.COMPLETE) == 4


def test_the_retry_of_a_trial_that_completed_after_all_is_not_evaluated(tmp_path) -> None:
    study = _study(tmp_path)
    seen: list[float] = []

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        seen.append(x)
        if trial.number == 0:  # failed as stale and re-queued, but our value lands last
            study.enqueue_trial({"x": x}, user_attrs={})
            retry = study.trials[-1]
            study._storage.set_trial_system_attr(retry._trial_id, "failed_trial", 0)
        return x

    run_study(study, objective, n_trials=3, show_progress_bar=False)
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 3
    assert len({t.params["x"] for t in complete}) == 3  # the candidate of trial 0 measured once
    assert len(seen) == len(set(seen))
    retry = study.trials[1]
    assert retry.state == TrialState.FAIL and "surplus" in retry.user_attrs


def test_two_retries_of_one_trial_measure_it_once(tmp_path) -> None:
    study = _study(tmp_path)

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        if trial.number == 0:  # two workers' heartbeat checks both fail it, each queues a retry
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            for _ in range(2):
                study.enqueue_trial({"x": x})
                retry = study.trials[-1]
                study._storage.set_trial_system_attr(retry._trial_id, "failed_trial", 0)
        return x

    run_study(study, objective, n_trials=3, show_progress_bar=False)
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 3 and len({t.params["x"] for t in complete}) == 3
    first, second = study.trials[1], study.trials[2]
    assert first.state == TrialState.COMPLETE
    assert second.state == TrialState.FAIL and "surplus" in second.user_attrs


class _RetryQueuedWhileSampling(optuna.samplers.RandomSampler):
    """Plays another worker whose heartbeat check fails a dead trial and queues its retry while
    this worker's sampler proposes a new candidate (Optuna fails first, then queues), `delay`
    seconds after this worker's trial started."""

    def __init__(self, study_ref: list, retry: dict, delay: float = 0.0) -> None:
        super().__init__(seed=0)
        self._study, self._retry, self._delay = study_ref, retry, delay

    def before_trial(self, study, trial) -> None:
        super().before_trial(study, trial)
        if self._retry:
            x = self._retry.pop("x")
            retry = optuna.create_trial(
                state=TrialState.WAITING, params={"x": x},
                distributions={"x": optuna.distributions.FloatDistribution(0.0, 1.0)},
                system_attrs={"failed_trial": 1, "retry_history": [1]},
            )  # fmt: skip
            if self._delay:  # queued after this worker's first look at the budget
                threading.Timer(self._delay, study.add_trial, args=(retry,)).start()
            else:
                study.add_trial(retry)


@pytest.mark.parametrize("delay", [0.0, 0.3], ids=["queued-while-sampling", "queued-after-count"])
def test_a_new_candidate_leaves_the_last_slot_to_a_retry_queued_meanwhile(tmp_path, delay) -> None:
    storage = make_storage(f"sqlite:///{tmp_path / 's.db'}", heartbeat_interval=60)
    retry: dict = {}
    sampler = _RetryQueuedWhileSampling([], retry, delay)
    study = optuna.create_study(storage=storage, sampler=sampler)
    study.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), n_trials=1)  # one slot of two used
    dead = optuna.create_trial(
        state=TrialState.FAIL, params={"x": 0.123},
        distributions={"x": optuna.distributions.FloatDistribution(0.0, 1.0)},
    )  # fmt: skip
    study.add_trial(dead)  # trial 1: its worker died, the heartbeat check has just failed it
    retry["x"] = 0.123  # and queues its retry while this worker samples a new candidate
    seen: list[float] = []

    def objective(trial: optuna.Trial) -> float:
        seen.append(trial.suggest_float("x", 0.0, 1.0))
        return seen[-1]

    run_study(study, objective, n_trials=2, show_progress_bar=False)
    assert seen == [0.123]  # the retry measured, the new candidate never evaluated
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 2
    new = [t for t in study.trials if t.state == TrialState.FAIL and t.number != 1]
    assert len(new) == 1 and "surplus" in new[0].user_attrs
