# Generated from longrope_opt/samplers/_seeding.py by optunahub/build.py: do not edit.
"""Seeds as visible trials: enqueued once, whatever the sampler."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optuna.study import Study
from optuna.trial import TrialState

from ._longrope import LongRoPESampler
from ._protocol import EvolutionSpace
from ._state import FIXED_PARAMS_KEY


def enqueue_seeds(
    study: Study, sampler: LongRoPESampler, methods: Sequence[str] | None = None
) -> int:
    """Enqueue the sampler's seeds once (skipped when the study already has them, or when the
    sampler is not `seeded`); `methods` limits them by name (default: all).

    Returns:
        How many seeds were enqueued now.
    """
    if not sampler.seeded:
        return 0
    return _enqueue(study, sampler.seed_params(), methods)


def enqueue_space_seeds(
    study: Study, space: EvolutionSpace, methods: Sequence[str] | None = None
) -> int:
    """Enqueue the space's seeds (its `seed_params`) once, whatever the sampler: the
    same PI/NTK/YaRN (or critical-dimension) starting points for TPE, CMA-ES, nevergrad or the
    plain evolution, so a comparison measures the search and not the seeding.

    Returns:
        How many seeds were enqueued now.
    """
    return _enqueue(study, space.seed_params(), methods)


def _enqueue(
    study: Study, seeds: list[tuple[str, dict[str, Any]]], methods: Sequence[str] | None
) -> int:
    done = {t.user_attrs.get("seed") for t in study.get_trials(deepcopy=False)}
    added = 0
    for method, params in seeds:
        if (methods is None or method in methods) and method not in done:
            study.enqueue_trial(params, user_attrs={"seed": method})
            added += 1
    return added


def next_queued_params(study: Study) -> dict[str, Any] | None:
    """The parameters of the queued trial the study runs next (the lowest-numbered waiting
    trial: Optuna takes them in order), or None when nothing is queued."""
    queued = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    if not queued:
        return None
    params = min(queued, key=lambda t: t.number).system_attrs.get(FIXED_PARAMS_KEY)
    return dict(params) if params else None
