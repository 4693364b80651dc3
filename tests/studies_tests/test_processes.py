"""Real processes on a real SQLite file: SIGKILL mid-trial and resume; two cooperating workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import TrialState

from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import enqueue_seeds
from longrope_opt.samplers._state import GENERATION_KEY
from longrope_opt.studies import make_storage
from tests.studies_tests._worker import SPACE


ROOT = Path(__file__).resolve().parents[2]
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _start(
    url: str, name: str, n_trials: int, seed: int, sleep: float, hang_from: int = 10**9,
    heartbeat: int = 1, log: Path | None = None,
) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "tests.studies_tests._worker",
        url,
        name,
        str(n_trials),
        str(seed),
        str(sleep),
        str(hang_from),
        str(heartbeat),
    ]
    err = None if log is None else log.open("a")  # a file, not a pipe: a full pipe blocks it
    return subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=err)


def _load(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=url)


def _complete(study: optuna.Study) -> list:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def _candidate(trial) -> tuple:
    return tuple(round(trial.params[n], 6) for n in SPACE.names) + (trial.params.get("n_hat"),)


def test_sigkill_mid_trial_then_resume_loses_nothing(tmp_path) -> None:
    url, name, total = f"sqlite:///{tmp_path / 'kill.db'}", "kill", 30
    make_storage(url)  # create the schema before two processes touch the file
    worker = _start(url, name, total, seed=1, sleep=0.05, hang_from=14)
    deadline = time.time() + 120
    while time.time() < deadline:
        time.sleep(0.2)
        try:
            study = _load(url, name)
        except KeyError:
            continue
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        # trial 14 hangs after suggesting its candidate: the kill lands mid-evaluation
        if running and running[0].number == 14 and "pid" in running[0].user_attrs:
            break
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    study = _load(url, name)
    before = {t.number: t.value for t in _complete(study)}
    gen_before = max(t.system_attrs[GENERATION_KEY] for t in _complete(study))
    killed = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    assert len(before) >= 12 and len(killed) == 1

    time.sleep(2.5)  # past the heartbeat grace period: the next worker fails and retries it
    assert _start(url, name, total, seed=1, sleep=0.01).wait(timeout=300) == 0

    study = _load(url, name)
    after = {t.number: t.value for t in _complete(study)}
    assert all(after[n] == v for n, v in before.items())  # nothing completed was lost or changed
    assert len(after) == total
    stale = study.trials[killed[0]]
    assert stale.state == TrialState.FAIL
    retried = [t for t in study.trials if t.system_attrs.get("failed_trial") == killed[0]]
    assert len(retried) == 1 and retried[0].state == TrialState.COMPLETE
    assert retried[0].params == stale.params  # the same candidate, evaluated once more
    gens = [
        t.system_attrs[GENERATION_KEY] for t in sorted(_complete(study), key=lambda t: t.number)
    ]
    assert max(gens) > gen_before  # the generation count continued


def test_two_processes_cooperate_without_duplicates(tmp_path) -> None:
    url, name, total = f"sqlite:///{tmp_path / 'two.db'}", "two", 40
    # One process creates the study and its seeds (as `longrope-opt search` does); workers join.
    sampler = LongRoPESampler(
        space=SPACE, population_size=8, num_mutations=3, num_crossovers=3, num_parents=4, seed=5
    )
    enqueue_seeds(optuna.create_study(study_name=name, storage=url, sampler=sampler), sampler)
    workers = [_start(url, name, total, seed=5, sleep=0.05) for _ in range(2)]
    assert [w.wait(timeout=300) for w in workers] == [0, 0]
    study = _load(url, name)
    complete = _complete(study)
    assert len(complete) == total  # the budget holds across workers (running trials reserve it)
    candidates = [_candidate(t) for t in complete]
    assert len(set(candidates)) == len(candidates)
    assert len({t.user_attrs["pid"] for t in complete}) == 2  # both really worked
    assert sum(t.user_attrs.get("seed") is not None for t in complete) == 3  # seeds ran once each
    for t in complete:
        assert np.all(np.diff([t.params[n] for n in SPACE.names]) >= 0)


def test_worker_on_sqlite_warns_when_another_worker_is_running(tmp_path, capsys) -> None:
    from longrope_opt.cli._worker import _warn_if_sqlite_is_shared

    url = f"sqlite:///{tmp_path / 'w.db'}"
    study = optuna.create_study(study_name="w", storage=url)
    _warn_if_sqlite_is_shared(url, study)
    assert capsys.readouterr().err == ""  # alone: nothing to say
    study.ask()  # another worker's trial, still running
    _warn_if_sqlite_is_shared(url, study)
    err = capsys.readouterr().err
    assert "another worker is running trials on this SQLite file" in err
    assert "postgresql://" in err


def test_a_trial_has_a_heartbeat_before_its_objective_starts(tmp_path, monkeypatch) -> None:
    # Optuna's heartbeat thread beats a moment after the objective starts; a worker killed in
    # between left a RUNNING trial with no beat, which no heartbeat check ever fails (a resumed
    # worker then waited on it for ever). The worker itself beats before the objective runs.
    import threading

    from longrope_opt.studies import run_study

    storage = make_storage(f"sqlite:///{tmp_path / 'beat.db'}", heartbeat_interval=60)
    study = optuna.create_study(storage=storage, study_name="beat")
    mine: list[int] = []
    record = study._storage.record_heartbeat

    def beat(trial_id: int) -> None:  # the heartbeat thread's beats are not counted
        if threading.current_thread() is threading.main_thread():
            mine.append(trial_id)
        record(trial_id)

    monkeypatch.setattr(study._storage, "record_heartbeat", beat)
    started: list[bool] = []

    def objective(trial: optuna.Trial) -> float:
        started.append(trial._trial_id in mine)
        return trial.suggest_float("x", 0.0, 1.0)

    run_study(study, objective, n_trials=3, show_progress_bar=False)
    assert started == [True, True, True]
