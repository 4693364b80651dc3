"""Re-queue a dead worker's trial while its runs get somewhere: `RetryStaleTrial`.

Optuna's `RetryHeartbeatStaleTrialCallback` re-queues a stale trial (its process died) up to
`max_retry` times. A fixed count fits trials that are quick beside the life of a worker; here a
trial can outlast it: at 128k on a CPU one candidate reads three documents of 30-45 minutes
each, and a machine used a few hours at a time stops it every few hours. Each retry
takes the per-document values its killed run reported and measures only the rest, so a chain of
runs makes progress even when every run is stopped; one retry would drop the candidate at its
second stop. The limit that matters is on runs that got nowhere: a trial that kills its worker
every time (a candidate that runs the machine out of memory) must not loop for ever.
"""

from __future__ import annotations

import warnings

import optuna
from optuna.trial import FrozenTrial


#: Consecutive runs of one candidate that reported no new step before it is dropped: the
#: first run and up to two retries of a trial that reports no steps at all.
MAX_STALLS = 3


class RetryStaleTrial:
    """Heartbeat callback: re-queue a stale trial unless its last `max_stalls` runs each
    reported no step beyond the run before it (`FrozenTrial.intermediate_values`).

    The retry is Optuna's own (`RetryHeartbeatStaleTrialCallback`: the same parameters, user
    attrs and ``failed_trial`` / ``retry_history`` system attrs), so everything that reads those
    (`RetryHeartbeatStaleTrialCallback.retried_trial_number`, the dashboard) reads it as usual.

    Args:
        max_stalls: Consecutive runs without a new step after which the candidate is dropped
            (1: Optuna's ``max_retry=1`` for trials that report nothing).
    """

    def __init__(self, *, max_stalls: int = MAX_STALLS) -> None:
        if isinstance(max_stalls, bool) or not isinstance(max_stalls, int) or max_stalls < 1:
            raise ValueError(f"`max_stalls` must be an integer >= 1, got {max_stalls!r}.")
        self.max_stalls = max_stalls
        with warnings.catch_warnings():  # experimental since Optuna 2.8, as Optuna's own use
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=None)

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if stalled_runs(study, trial) < self.max_stalls:
            self._retry(study, trial)


def stalled_runs(study: optuna.Study, trial: FrozenTrial) -> int:
    """How many runs of `trial`'s candidate, ending with `trial`, in a row reported no step
    beyond their predecessor's (the first run: no step at all)."""
    history = list(trial.system_attrs.get("retry_history", []))
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)} if history else {}
    steps = [len(by_number[n].intermediate_values) if n in by_number else 0 for n in history]
    steps.append(len(trial.intermediate_values))
    stalls = 0
    for i in range(len(steps) - 1, -1, -1):
        before = steps[i - 1] if i > 0 else 0
        if steps[i] > before:
            break
        stalls += 1
    return stalls
