# Generated from longrope_opt/samplers/_state.py by optunahub/build.py: do not edit.
"""Where the LongRoPE sampler keeps its state: the study storage, under namespaced keys.

Modeled on Optuna's ``BaseGASampler`` bookkeeping, with three deliberate differences (each a
pitfall of that class for this algorithm):

* generations have different sizes (P in generation 0, N1 + N2 after), so membership is counted
  over *assigned* trials (running, waiting, complete, pruned) rather than complete ones — which
  also stops parallel workers from overfilling a generation;
* parents are cached as trial *numbers* (study-local), not storage-global trial ids, so a copied
  study keeps working;
* keys are fixed strings, not derived from the class name, so a subclass or rename does not orphan
  existing studies.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial

from ._screen import STEP_KEY


GENERATION_KEY = "LongRoPESampler:generation"
#: Read where a trial was placed in a generation by hand (else the slot follows from its number).
SLOT_KEY = "LongRoPESampler:slot"
PARENTS_KEY_PREFIX = "LongRoPESampler:parents:"
CLAIM_KEY = "LongRoPESampler:claim"


#: Where Optuna keeps an enqueued trial's parameters (`Study.enqueue_trial`).
FIXED_PARAMS_KEY = "fixed_params"


def is_enqueued(trial: FrozenTrial) -> bool:
    """Whether `trial` was enqueued (its parameters are fixed, the sampler proposes nothing)."""
    return FIXED_PARAMS_KEY in trial.system_attrs


def trial_generation(trial: FrozenTrial) -> int | None:
    """The generation stored on `trial`, if any."""
    value = trial.system_attrs.get(GENERATION_KEY)
    return None if value is None else int(value)


def trial_step(trial: FrozenTrial) -> str | None:
    """How the LongRoPE sampler's surrogate operators proposed `trial`, where it says:
    ``"model"`` for a trust-region step of the model's minimum (None otherwise)."""
    tag = trial.system_attrs.get(STEP_KEY)
    kind = tag[0] if isinstance(tag, list) and tag else tag  # a list since the trust radius
    return str(kind) if kind == "model" else None


def first_number(generation: int, capacity: Any) -> int:
    """The number of the first trial of `generation` (the inverse of `assign`'s numbering):
    every trial numbered below it belongs to an earlier generation."""
    return 0 if generation == 0 else capacity(0) + (generation - 1) * capacity(1)


def assign(study: optuna.Study, trial: FrozenTrial, capacity: Any) -> tuple[int, int]:
    """Give `trial` a (generation, slot) and store its generation; a trial that has one keeps it.

    Args:
        study: The study.
        trial: The trial being started.
        capacity: ``capacity(generation) -> int`` (P for 0, N1 + N2 after).

    Returns:
        ``(generation, slot)``; slot is the trial's index inside its generation.
    """
    # From the trial number alone: numbers are unique and handed out atomically by the storage,
    # so concurrent workers can never overfill a generation (counting assigned trials could: two
    # workers read the same count). A failed trial keeps its slot; its retry takes a new one.
    first, per_gen = capacity(0), capacity(1)
    if trial.number < first:
        gen, slot = 0, trial.number
    else:
        gen, slot = 1 + (trial.number - first) // per_gen, (trial.number - first) % per_gen
    stored = trial_generation(trial)
    if stored is not None:
        # The slot follows from the number; it is stored only where a trial was placed by hand
        # (one write a trial fewer: each costs ≈ 1.5 ms on SQLite).
        return stored, int(trial.system_attrs.get(SLOT_KEY, slot))
    study._storage.set_trial_system_attr(trial._trial_id, GENERATION_KEY, gen)
    # The FrozenTrial handed to the sampler hooks is cached for this trial: keep it in step.
    trial.system_attrs[GENERATION_KEY] = gen
    return gen, slot


def cached_parents(study: optuna.Study, generation: int) -> list[int] | None:
    """Trial numbers of the parents of `generation`, if some worker already chose them."""
    attrs = study._storage.get_study_system_attrs(study._study_id)
    value = attrs.get(f"{PARENTS_KEY_PREFIX}{generation}")
    return None if value is None else [int(n) for n in value]


def store_parents(study: optuna.Study, generation: int, numbers: list[int]) -> None:
    """Store the parents of `generation` (once the generation before has finished; read back
    ever after, by every worker)."""
    study._storage.set_study_system_attr(
        study._study_id, f"{PARENTS_KEY_PREFIX}{generation}", numbers
    )


def claim_key(key: tuple) -> list:
    """A genome key as JSON-storable data (trial system attrs must be JSON)."""
    factors, n_hat, t, *critical = key  # critical: [c] in the critical shape, else []
    return [list(factors), n_hat, t, *critical]


def key_of_claim(claim: list) -> tuple:
    """The inverse of `claim_key`."""
    factors, n_hat, t, *critical = claim
    return (tuple(factors), int(n_hat), t, *(int(c) for c in critical))
