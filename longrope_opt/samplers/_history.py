"""`History`: what the LongRoPE sampler keeps of one study's finished trials between proposals.

Finished trials never change, so each is decoded and ranked once, as it is first seen finished,
and kept in rank order; a surrogate proposal then reads the best few and the model steps in
O(the model's trials), not O(the study). A sampler handed to another study starts a new one.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from longrope_opt.samplers._operators import Genome
from longrope_opt.samplers._population import rank_key
from longrope_opt.samplers._screen import STEP_KEY
from longrope_opt.samplers._screen import TrustRadius


class History:
    """One study's finished trials, decoded and ranked once each.

    Args:
        decode: Trial params → `Genome` (None when incomplete).
    """

    def __init__(self, decode: Callable[[dict[str, Any]], Genome | None]) -> None:
        self._decode = decode
        self._genomes: dict[int, Genome | None] = {}
        self._pending: list[FrozenTrial] = []  # finished, not ranked yet
        self._ranked: list[tuple[Any, int]] = []  # (rank key, number), best first
        self._trials: list[FrozenTrial] = []  # the same trials, in that order
        self.steps: list[FrozenTrial] = []  # finished model steps
        self.trust_radius = TrustRadius()  # replayed from `steps`, each step once

    def add_finished(self, trial: FrozenTrial) -> tuple | None:
        """Queue a newly finished trial for ranking; its genome's key (None if incomplete)."""
        self._pending.append(trial)
        genome = self.genome(trial)  # decoded here, once, for the key and for `genome` later
        return None if genome is None else genome.key()

    def best(self, sign: float, constrained: bool, size: int) -> list[FrozenTrial]:
        """The `size` best complete trials, best first (feasible first when `constrained`)."""
        for trial in self._pending:
            if trial.state == TrialState.COMPLETE and trial.values:
                entry = (rank_key(trial, sign, constrained), trial.number)
                at = bisect.bisect(self._ranked, entry)
                self._ranked.insert(at, entry)
                self._trials.insert(at, trial)
                if isinstance(trial.system_attrs.get(STEP_KEY), list):
                    self.steps.append(trial)
        self._pending.clear()
        return self._trials[:size]

    def genome(self, trial: FrozenTrial) -> Genome | None:
        """A finished trial's genome, decoded once."""
        if trial.number not in self._genomes:
            self._genomes[trial.number] = self._decode(trial.params)
        return self._genomes[trial.number]
