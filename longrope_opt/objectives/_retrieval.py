"""The retrieval constraint: a candidate may not retrieve fewer passkeys than the study's best seed.

A perplexity search can trade retrieval for perplexity (its best trials at 2x and 4x on SmolLM2
read long text better and miss passkeys their own seeds find; the docs' results page). The
retrieval guard checks the winner after the fact; this constraint keeps the search itself from
breeding on such candidates. It is an Optuna constraint (`LongRoPESampler(constraints_func=...)`,
values ≤ 0 feasible, stored where Optuna's samplers store theirs): passkey misses at the target
length on `keys` prompts, minus the misses of the study's best seed on the same prompts.

Passkeys cost forwards, so only a candidate whose perplexity would place it in the population
(`LongRoPESampler.would_enter`) is measured; every other trial pays nothing, and its constraint
reads 0 — it cannot become a parent anyway, since the population's entry bar only rises. The bar
(the best complete seed's misses) is measured once, when a candidate first needs it. The prompts
have their own seed (`RETRIEVAL_SEED`): never the guard's prompts nor `validate`'s.

Every outcome is stored in the study record as it is measured (`record.read_retrieval`), and on
the trial (user attrs ``retrieval_misses``, ``retrieval_bar``, ``retrieval_seconds``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import optuna
import torch
from optuna.trial import FrozenTrial

from longrope_opt import record
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.objectives import check_form_runs
from longrope_opt.objectives import passkey_kind
from longrope_opt.objectives import passkey_prompts
from longrope_opt.objectives import passkey_results
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import RopeScaling
from longrope_opt.space import SearchSpace


logger = logging.getLogger(__name__)

#: Seed of the constraint's prompts (`validate` uses 0, the guard 1).
RETRIEVAL_SEED = 2
#: What a record made before the passkey forms was measured with.
_BEFORE = {"form": "single", "kind": "passkey"}
MISSES, BAR, SECONDS = "retrieval_misses", "retrieval_bar", "retrieval_seconds"


class RetrievalConstraint:
    """Passkey misses against the study's best seed, measured only where it can matter.

    Use it twice: as the sampler's ``constraints_func`` (it reads what the trial recorded) and
    around the objective (`wrap`: it measures after the perplexity, when the candidate would
    enter the population of the study's sampler, `LongRoPESampler.would_enter`).

    Args:
        model: The study's model, loaded (patched per candidate, restored after).
        tokenizer: Its tokenizer (the prompts).
        space: The study's search space (a trial's parameters → its scaling).
        keys: Passkey prompts per candidate (>= 1).
        length: Prompt length (the study's target length).
        seed: The prompts' seed (default `RETRIEVAL_SEED`).
        form: How the prompts are measured (`longrope_opt.objectives.passkey_results`).
    """

    def __init__(
        self, model: Any, tokenizer: Any, *, space: SearchSpace, keys: int, length: int,
        seed: int = RETRIEVAL_SEED, form: str = "single",
    ) -> None:  # fmt: skip
        for name, value, low in (("keys", keys, 1), ("length", length, 2), ("seed", seed, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidArgumentError(f"`{name}` must be an integer >= {low}, got {value!r}.")
        self.model = model
        self.space = space
        self.keys, self.length, self.seed = keys, length, seed
        self.form = check_form_runs(model, form)  # before the search's first forward
        self.prompts = passkey_prompts(tokenizer, length, n_trials=keys, seed=seed)
        #: Passkey forwards this process ran (tests count them).
        self.forwards = 0

    # ----- constraints_func ---------------------------------------------------------------

    def __call__(self, trial: FrozenTrial) -> tuple[float]:
        """The trial's violation: misses minus the best seed's (0 when it was not measured)."""
        misses, bar = trial.user_attrs.get(MISSES), trial.user_attrs.get(BAR)
        if misses is None or bar is None:
            return (0.0,)
        return (float(misses) - float(bar),)

    # ----- measuring ----------------------------------------------------------------------

    def misses(self, scaling: RopeScaling) -> list[bool]:
        """Which of the prompts the model misses with `scaling`."""
        out = [False] * self.keys
        with torch.inference_mode(), apply_rope_scaling(self.model, scaling):
            for j, correct, _ in passkey_results(self.model, self.prompts, form=self.form):
                out[j] = not correct
                self.forwards += 1
        return out

    def _stored(self, study: optuna.Study) -> dict[str, Any]:
        stored = record.read_retrieval(study)
        setup = {"keys": self.keys, "seed": self.seed, "length": self.length, "form": self.form,
                 "kind": passkey_kind(self.form)}  # fmt: skip
        # a record made before the forms existed was made in the single form
        if {k: stored.get(k, _BEFORE.get(k)) for k in setup} != setup:
            stored = {**setup, "misses": {}}
        return stored

    def _measure(self, study: optuna.Study, trial: FrozenTrial) -> int:
        # One trial's misses, from the record when some process measured them already.
        stored = self._stored(study)
        found = stored["misses"].get(str(trial.number))
        if found is None:
            found = self.misses(self.space.to_scaling(trial.params))
            stored = self._stored(study)  # another worker may have written meanwhile
            stored["misses"][str(trial.number)] = found
            record.write_retrieval(study, stored)
        return int(sum(found))

    def bar(self, study: optuna.Study) -> tuple[int, int]:
        """``(trial number, misses)`` of the study's best complete seed (measured once).

        Raises:
            InvalidArgumentError: The study has no complete seed (the constraint needs one).
        """
        sign = 1.0 if study.direction == optuna.study.StudyDirection.MINIMIZE else -1.0
        seeds = [
            t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.user_attrs.get("seed") and t.value is not None and math.isfinite(t.value)
        ]  # fmt: skip
        if not seeds:
            raise InvalidArgumentError(
                f"study {study.study_name!r} has no completed seed: the retrieval constraint "
                "measures candidates against the best one."
            )
        seed = min(seeds, key=lambda t: (sign * float(t.value), t.number))  # type: ignore[arg-type]
        return seed.number, self._measure(study, seed)

    def wrap(self, objective: Callable[[optuna.Trial], float]) -> Callable[[optuna.Trial], float]:
        """`objective`, then the passkeys for a candidate that would enter its study's
        population (the study's sampler says, `LongRoPESampler.would_enter`).

        Seeds are not measured as candidates: they are the bar's side of the comparison.
        """

        def run(trial: optuna.Trial) -> float:
            value = objective(trial)
            if value is None or not math.isfinite(value) or trial.user_attrs.get("seed"):
                return value
            study = trial.study
            frozen = study._storage.get_trial(trial._trial_id)  # its generation, as stored
            would_enter = getattr(study.sampler, "would_enter", None)  # a population's sampler
            if would_enter is not None and not would_enter(study, frozen, value):
                return value
            start = time.perf_counter()
            reference, bar = self.bar(study)
            frozen = study._storage.get_trial(trial._trial_id)  # params complete now
            misses = self._measure(study, frozen)
            trial.set_user_attr(MISSES, misses)
            trial.set_user_attr(BAR, bar)
            trial.set_user_attr(SECONDS, round(time.perf_counter() - start, 3))
            logger.info("retrieval %s trial %d: %d/%d missed, best seed (trial %d) %d",
                        study.study_name, trial.number, misses, self.keys, reference, bar)  # fmt: skip
            return value

        return run
