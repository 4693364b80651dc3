"""TrialIndex: each finished trial is read and decoded once, however often the study is read."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from longrope_opt.samplers._index import TrialIndex


def _counting_index(calls: list[int]) -> TrialIndex:
    def derive(trial):
        calls.append(trial.number)
        return trial.params.get("x")  # None for a trial that failed before suggesting

    return TrialIndex(derive)


def test_finished_trials_are_decoded_once_and_live_ones_returned(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'index.db'}")
    trials = [study.ask() for _ in range(5)]
    for t in trials:
        t.suggest_float("x", 0.0, 1.0)
    study.tell(trials[2], 0.5)  # out of order: 0, 1, 3, 4 still running
    study.enqueue_trial({"x": 0.25})  # a waiting trial
    calls: list[int] = []
    index = _counting_index(calls)

    live = index.refresh(study)
    assert [t.number for t in live] == [0, 1, 3, 4, 5]
    assert [t.state for t in live][-1] == TrialState.WAITING
    assert calls == [2]
    assert index.values() == {trials[2].params["x"]}

    study.tell(trials[0], 0.1)
    study.tell(trials[4], state=TrialState.FAIL)
    extra = study.ask()  # no suggestion: fails with no params, derives None
    study.tell(extra, state=TrialState.FAIL)  # it took the waiting trial 5
    live = index.refresh(study)
    assert [t.number for t in live] == [1, 3]
    assert sorted(calls) == [0, 2, 4, 5]  # 2 was not decoded again
    assert [t.number for t in index.finished()] == [0, 2, 4, 5]

    calls.clear()
    for _ in range(3):
        index.refresh(study)
    assert calls == []  # nothing changed, nothing decoded

    for t in (trials[1], trials[3]):
        study.tell(t, 0.3)
    assert index.refresh(study) == []
    assert sorted(calls) == [1, 3]
    # The incremental index equals one built from scratch.
    fresh = _counting_index([])
    fresh.refresh(study)
    assert fresh.values() == index.values()
    assert [t.number for t in fresh.finished()] == [t.number for t in index.finished()]
    assert index.trial(3) is not None and index.trial(99) is None


def test_another_study_starts_over(tmp_path):
    storage = f"sqlite:///{tmp_path / 'two.db'}"
    a = optuna.create_study(storage=storage, study_name="a")
    b = optuna.create_study(storage=storage, study_name="b")
    a.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    b.optimize(lambda t: t.suggest_float("x", 2, 3), n_trials=2)
    calls: list[int] = []
    index = _counting_index(calls)
    index.refresh(a)
    assert len(index.values()) == 3
    index.refresh(b)
    assert len(index.finished()) == 2
    assert all(2 <= x <= 3 for x in index.values())
