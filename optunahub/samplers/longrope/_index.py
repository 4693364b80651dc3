# Generated from longrope_opt/samplers/_index.py by optunahub/build.py: do not edit.
"""`TrialIndex`: a study's trials for the sampler, reading only what changed since last time.

Each proposal needs every trial's key (to avoid duplicates) and the parents (by number). Reading
and decoding the whole study each time costs O(trials) per proposal — ≈ +120 ms per trial at 600
trials on SQLite. Finished trials (complete, pruned, failed) never change, so each is decoded
once and its key kept in one set; per call, only the trials from the first unfinished one on are
looked at (a handful: the running and waiting ones, one per worker, and those that finished since).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial


class TrialIndex:
    """Finished trials of one study, cached with a derived value each (e.g. a genome key).

    Args:
        derive: ``derive(trial) -> value`` computed once per finished trial; the values other
            than None are collected in `values`.
    """

    def __init__(self, derive: Callable[[FrozenTrial], Any]) -> None:
        self._derive = derive
        self._study: tuple[int, int] | None = None
        self._finished: dict[int, tuple[FrozenTrial, Any]] = {}
        self._values: set[Any] = set()
        self._low = 0  # every trial numbered below this one is finished and indexed

    def refresh(self, study: optuna.Study) -> list[FrozenTrial]:
        """Index the trials of `study` that finished since the last call.

        Returns:
            The live (running or waiting) trials, sorted by number.
        """
        storage, study_id = study._storage, study._study_id
        if self._study != (id(storage), study_id):  # another study: start over
            self._study, self._finished, self._values, self._low = (
                (id(storage), study_id), {}, set(), 0,
            )  # fmt: skip
        # One read. Optuna's cached RDB storage fetches only new and unfinished trials from the
        # database and returns its cache, sorted by number, uncopied; trial numbers run 0..n-1,
        # so the list is indexed by number and the finished prefix is skipped without a look.
        trials = storage.get_all_trials(study_id, deepcopy=False)
        live = []
        for trial in trials[self._low :]:
            if trial.number in self._finished:
                continue
            if trial.state.is_finished():
                value = self._derive(trial)
                self._finished[trial.number] = (trial, value)
                if value is not None:
                    self._values.add(value)
            else:
                live.append(trial)
        while self._low in self._finished:
            self._low += 1
        return live

    def finished(self) -> list[FrozenTrial]:
        """The finished trials indexed so far, sorted by number (O(trials): once a generation)."""
        return [self._finished[n][0] for n in sorted(self._finished)]

    def values(self) -> set[Any]:
        """The derived values (other than None) of the finished trials; do not modify it."""
        return self._values

    def trial(self, number: int) -> FrozenTrial | None:
        """Finished trial `number`, if it is known to be finished."""
        entry = self._finished.get(number)
        return None if entry is None else entry[0]
