# Generated from longrope_opt/samplers/_index.py by optunahub/build.py: do not edit.
"""`TrialIndex`: a study's trials for the sampler, reading only what changed since last time.

Each proposal needs every trial's key (to avoid duplicates) and the parents (by number). Reading
and decoding the whole study each time costs O(trials) per proposal — ≈ +120 ms per trial at 600
trials on SQLite. Finished trials (complete, pruned, failed) never change, so each is decoded
once and its key kept in one set; per call, only the trials from the first unfinished one on are
looked at (a handful: the running and waiting ones, one per worker, and those that finished since).

Optuna's caches (the RDB cache and the gRPC proxy's client and server) fetch, after the first
read, only the trials they know to be unfinished and those with an id above the last finished one
they saw. On PostgreSQL, concurrent transactions commit out of id order: a trial whose row became
visible after a later trial had finished is never fetched by a cache that saw the later one, and
neither its claim nor its result would reach the sampler: its candidate could be proposed and
evaluated again. Trial numbers are dense in a study, so such a trial leaves a gap in the
numbers; `read_trials` fills each gap with a direct read by number, which every cache passes
through to the database.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from collections.abc import Container
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial


def _number(trial: FrozenTrial) -> int:
    return trial.number


def read_trials(
    storage: BaseStorage, study_id: int, *, known: Container[int] = ()
) -> list[FrozenTrial]:
    """Every trial of a study, sorted by number, with those a storage cache skipped read directly.

    Args:
        storage: The study's storage.
        study_id: The study's id.
        known: Trial numbers the caller already holds finished (not read again).

    Returns:
        The trials, uncopied (do not modify them).
    """
    trials = storage.get_all_trials(study_id, deepcopy=False)
    if not trials or len(trials) == trials[-1].number + 1:
        return trials  # dense: nothing skipped
    have = {t.number for t in trials}
    extra = []
    for number in range(trials[-1].number):
        if number in have or number in known:
            continue
        try:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
            extra.append(storage.get_trial(trial_id))
        except KeyError:  # not visible to this storage yet either
            continue
    return sorted([*trials, *extra], key=lambda t: t.number)


class TrialIndex:
    """Finished trials of one study, cached with a derived value each (e.g. a genome key).

    Args:
        derive: ``derive(trial) -> value`` computed once per finished trial; the values other
            than None are collected in `values`.
        on_new_study: Called when `refresh` is handed another study than the last one (the
            index starts over; so must whatever the caller keeps per study).
    """

    def __init__(
        self,
        derive: Callable[[FrozenTrial], Any],
        *,
        on_new_study: Callable[[], None] | None = None,
    ) -> None:
        self._derive = derive
        self._on_new_study = on_new_study
        self._study: tuple[BaseStorage, int] | None = None  # `study_key` of the study indexed
        self._finished: dict[int, tuple[FrozenTrial, Any]] = {}
        self._values: set[Any] = set()
        self._low = 0  # every trial numbered below this one is finished and indexed

    def refresh(self, study: optuna.Study) -> list[FrozenTrial]:
        """Index the trials of `study` that finished since the last call.

        Returns:
            The live (running or waiting) trials, sorted by number.
        """
        storage, study_id = study._storage, study._study_id
        if not same_study(self._study, study):
            if self._study is not None and self._on_new_study is not None:
                self._on_new_study()  # another study: start over
            self._study, self._finished, self._values, self._low = (
                study_key(study), {}, set(), 0,
            )  # fmt: skip
        # One read. Optuna's cached storages fetch only new and unfinished trials and return
        # their cache, sorted by number, uncopied, so the finished prefix is skipped by a binary
        # search (a trial a cache skipped is read directly, see the module docstring).
        trials = read_trials(storage, study_id, known=self._finished)
        live = []
        for trial in trials[bisect.bisect_left(trials, self._low, key=_number) :]:
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

    def finished_below(self) -> int:
        """The lowest trial number not known to be finished: every trial below it is indexed."""
        return self._low

    def finished(self) -> list[FrozenTrial]:
        """The finished trials indexed so far, sorted by number (O(trials): once a generation, or
        once a proposal while the generation before still runs)."""
        return [self._finished[n][0] for n in sorted(self._finished)]

    def values(self) -> set[Any]:
        """The derived values (other than None) of the finished trials; do not modify it."""
        return self._values

    def trial(self, number: int) -> FrozenTrial | None:
        """Finished trial `number`, if it is known to be finished."""
        entry = self._finished.get(number)
        return None if entry is None else entry[0]


def study_key(study: optuna.Study) -> tuple[BaseStorage, int]:
    """Which study a sampler serves: its storage object itself, not its id() (a freed storage's
    id is reused by the next one, two in-memory studies in turn), and the study's id in it."""
    return study._storage, study._study_id


def same_study(key: tuple[BaseStorage, int] | None, study: optuna.Study) -> bool:
    """Whether `key` (`study_key` of an earlier study, or None) names `study`."""
    return key is not None and key[0] is study._storage and key[1] == study._study_id


class SeenKeys(Container):
    """Membership in either of two sets, without copying them (the finished trials' keys, held
    by a `TrialIndex` and updated by its next `refresh`, and the live trials' keys)."""

    def __init__(self, finished: Container, live: Container) -> None:
        self._finished = finished
        self._live = live

    def __contains__(self, key: object) -> bool:
        return key in self._live or key in self._finished
