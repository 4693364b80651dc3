# Generated from longrope_opt/samplers/_index.py by optunahub/build.py: do not edit.
"""`TrialIndex`: a study's trials for the sampler, reading only what changed since last time.

Each proposal needs every trial (to avoid duplicates) and the parents (by number). Reading and
decoding the whole study each time costs O(trials) per proposal — ≈ +120 ms per trial at 600
trials on SQLite. Finished trials (complete, pruned, failed) never change, so they are read and
decoded once; only the unfinished ones (running, waiting: a handful, one per worker) are read
again, with one storage query, plus one per trial that finished since the last call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial
from optuna.trial import TrialState


_LIVE = (TrialState.RUNNING, TrialState.WAITING)


class TrialIndex:
    """Finished trials of one study, cached with a derived value each (e.g. a genome key).

    Args:
        derive: ``derive(trial) -> value`` computed once per finished trial.
    """

    def __init__(self, derive: Callable[[FrozenTrial], Any]) -> None:
        self._derive = derive
        self._study: tuple[int, int] | None = None
        self._finished: dict[int, tuple[FrozenTrial, Any]] = {}

    def refresh(self, study: optuna.Study) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
        """``(finished, live)`` trials of `study` now, each sorted by number."""
        storage, study_id = study._storage, study._study_id
        if self._study != (id(storage), study_id):  # another study: start over
            self._study, self._finished = (id(storage), study_id), {}
        live = storage.get_all_trials(study_id, deepcopy=False, states=_LIVE)
        live_numbers = {t.number for t in live}
        for number in range(storage.get_n_trials(study_id)):
            if number in self._finished or number in live_numbers:
                continue
            trial = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id, number))
            if trial.state.is_finished():
                self._finished[number] = (trial, self._derive(trial))
            else:  # it went live between the two reads
                live.append(trial)
        finished = [self._finished[n][0] for n in sorted(self._finished)]
        return finished, sorted(live, key=lambda t: t.number)

    def derived(self, number: int) -> Any:
        """The derived value of finished trial `number` (after `refresh`)."""
        return self._finished[number][1]

    def trial(self, number: int) -> FrozenTrial | None:
        """Finished trial `number`, if it is known to be finished."""
        entry = self._finished.get(number)
        return None if entry is None else entry[0]
