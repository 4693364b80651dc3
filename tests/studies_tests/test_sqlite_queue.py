"""Several processes draining one SQLite study's trial queue: every enqueued trial runs once.

SQLite ignores row locks; without `make_storage`'s immediate transactions two processes could
both pop the same WAITING trial (Optuna's queue of enqueued seeds and retried stale trials), run
it twice, and the slower one crashed with "Cannot tell a COMPLETE trial".
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
from optuna.trial import TrialState

from longrope_opt.studies import make_storage


ROOT = Path(__file__).resolve().parents[2]
DRAIN = textwrap.dedent(
    """
    import os, sys, time, optuna
    from longrope_opt.studies import make_storage
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.load_study(study_name="q", storage=make_storage(sys.argv[1]))
    while True:
        trial = study.ask()  # pops a WAITING trial when there is one
        if "fixed_params" not in study._storage.get_trial(trial._trial_id).system_attrs:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)  # the queue is empty: stop
            break
        x = trial.suggest_float("x", 0, 200)
        trial.set_user_attr("pid", os.getpid())
        time.sleep(0.002)
        study.tell(trial, x)
    """
)


def test_four_processes_drain_the_queue_each_trial_once(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    study = optuna.create_study(study_name="q", storage=make_storage(url))
    n = 120
    for i in range(n):
        study.enqueue_trial({"x": float(i)})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", DRAIN, url], env=env, stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=300)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    trials = optuna.load_study(study_name="q", storage=url).get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert sorted(t.params["x"] for t in complete) == [float(i) for i in range(n)]  # once each
    assert len(trials) - len(complete) == 4  # each process's final ask found the queue empty
    assert len({t.user_attrs["pid"] for t in complete}) > 1  # the processes really competed
