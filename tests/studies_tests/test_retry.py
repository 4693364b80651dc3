"""A dead worker's trial is re-queued while its runs get somewhere, and dropped when they stall."""

from __future__ import annotations

import time

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from longrope_opt.studies import RetryStaleTrial
from longrope_opt.studies import make_storage


optuna.logging.set_verbosity(optuna.logging.WARNING)


def _failed_run(study: optuna.Study, steps: int, before: optuna.trial.FrozenTrial | None = None
                ) -> optuna.trial.FrozenTrial:  # fmt: skip
    """A failed run reporting `steps` steps; a retry of `before` (its attrs, as Optuna's)."""
    attrs = {}
    if before is not None:
        attrs = {"failed_trial": before.system_attrs.get("failed_trial", before.number),
                 "retry_history": [*before.system_attrs.get("retry_history", []), before.number]}  # fmt: skip
    study.add_trial(optuna.create_trial(
        state=TrialState.FAIL, params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
        intermediate_values={i: 1.0 for i in range(steps)}, system_attrs=attrs,
    ))  # fmt: skip
    return study.trials[-1]


def _chain(study: optuna.Study, steps: list[int]) -> optuna.trial.FrozenTrial:
    last = None
    for n in steps:
        last = _failed_run(study, n, last)
    assert last is not None
    return last


def _queued(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.WAITING,))


@pytest.mark.parametrize(("steps", "retried"), [
    ([1], True),  # stopped after its first document
    ([0], True),  # stopped in its first document: one stall
    ([1, 1], True),  # the retry stopped before a new one: still retried
    ([1, 2, 3, 4, 5], True),  # stopped at every loan's end, further each time
    ([0, 0, 0], False),  # three runs that got nowhere: a candidate that kills its worker
    ([1, 1, 1, 1], False),
    ([0, 0, 1], True),  # the last run got further: the count starts again
])  # fmt: skip
def test_a_stale_trial_is_retried_while_its_runs_get_further(steps, retried) -> None:
    study = optuna.create_study()
    last = _chain(study, steps)
    RetryStaleTrial()(study, last)
    queued = _queued(study)
    assert len(queued) == int(retried)
    if retried:  # Optuna's own retry: its parameters and its chain
        assert queued[0].params == {"x": 0.5}
        assert queued[0].system_attrs["failed_trial"] == 0
        assert queued[0].system_attrs["retry_history"] == list(range(len(steps)))


def test_max_stalls_is_checked() -> None:
    with pytest.raises(ValueError, match="`max_stalls` must be an integer >= 1, got 0"):
        RetryStaleTrial(max_stalls=0)
    study = optuna.create_study()
    RetryStaleTrial(max_stalls=1)(study, _failed_run(study, 0))  # Optuna's max_retry=0 for it
    assert _queued(study) == []


def test_a_candidate_stopped_three_times_after_new_documents_is_queued_each_time(tmp_path) -> None:
    # the heartbeat's own path: a silent running trial is failed and its retry queued
    storage = make_storage(f"sqlite:///{tmp_path / 'retry.db'}", heartbeat_interval=1)
    study = optuna.create_study(storage=storage)
    study.enqueue_trial({"x": 0.25})
    for run in range(3):
        trial = study.ask({"x": FloatDistribution(0, 1)})
        assert trial.params == {"x": 0.25}
        for step in range(run + 1):  # the carried documents again, then one more
            trial.report(float(step), step)
        storage.record_heartbeat(trial._trial_id)
        time.sleep(3.5)  # silent for more than two intervals (the database counts whole seconds)
        assert optuna.storages.fail_stale_trials(study) is None
        assert storage.get_trial(trial._trial_id).state == TrialState.FAIL
        assert len(_queued(study)) == 1
    assert _queued(study)[0].system_attrs["retry_history"] == [0, 1, 2]
