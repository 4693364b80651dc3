"""A trial a storage cache never fetched (a gap in the numbers) is still seen by the sampler.

Optuna's caches fetch, after a first read, the unfinished trials they know and those above the
last finished id they saw; on PostgreSQL a trial committed out of id order is skipped for good.
The storage here hides chosen trials from `get_all_trials` the same way, while a read by number
(which every cache passes to the database) still finds them.
"""

from __future__ import annotations

import optuna
from optuna.storages import InMemoryStorage
from optuna.trial import TrialState

from longrope_opt.samplers import read_trials
from longrope_opt.samplers._index import TrialIndex


class _Skipping(InMemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.hidden: set[int] = set()

    def get_all_trials(self, study_id, deepcopy=True, states=None):
        trials = super().get_all_trials(study_id, deepcopy=deepcopy, states=states)
        return [t for t in trials if t.number not in self.hidden]


def _study(states: list[TrialState]) -> tuple[optuna.Study, _Skipping]:
    storage = _Skipping()
    study = optuna.create_study(storage=storage)
    for i, state in enumerate(states):
        trial = study.ask()
        trial.suggest_float("x", 0.0, 1.0)
        if state != TrialState.RUNNING:
            study.tell(trial, float(i) if state == TrialState.COMPLETE else None, state=state)
    return study, storage


def test_read_trials_fills_a_gap_by_number() -> None:
    study, storage = _study([TrialState.COMPLETE] * 4 + [TrialState.RUNNING])
    storage.hidden = {1, 2}
    assert [t.number for t in storage.get_all_trials(study._study_id)] == [0, 3, 4]
    assert [t.number for t in read_trials(storage, study._study_id)] == [0, 1, 2, 3, 4]
    assert [t.number for t in read_trials(storage, study._study_id, known={1})] == [0, 2, 3, 4]


def test_the_index_sees_skipped_trials_and_every_live_one_after_them() -> None:
    states = [TrialState.COMPLETE] * 3 + [TrialState.RUNNING, TrialState.COMPLETE, TrialState.RUNNING]
    study, storage = _study(states)
    storage.hidden = {1, 3}  # a finished and a running trial the cache skipped
    index = TrialIndex(lambda t: t.number)
    live = index.refresh(study)
    assert [t.number for t in live] == [3, 5]
    assert index.values() == {0, 1, 2, 4}
    # trial 3 finishes; the finished prefix now runs past the hidden numbers
    study.tell(3, 3.0)
    live = index.refresh(study)
    assert [t.number for t in live] == [5]  # not skipped by a position shifted by the gaps
    assert index.values() == {0, 1, 2, 3, 4}
