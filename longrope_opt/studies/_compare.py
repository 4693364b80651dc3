"""A comparison: one study per (sampler, seed) of the same search, at equal budget.

Every study is a `run_search` of one `SearchConfig` with only the sampler and its seed changed,
so the space, objective, documents and constraint policy are the same by construction; a rerun
finds (and resumes, or only reads) the same studies by `comparison_study_name`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import optuna

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import load_model
from longrope_opt.objectives import OBJECTIVES
from longrope_opt.objectives import check_options
from longrope_opt.samplers import EVOLUTION_SAMPLERS
from longrope_opt.samplers import check_sampler_dependencies
from longrope_opt.samplers import check_sampler_names
from longrope_opt.samplers import make_pruner
from longrope_opt.studies._pipeline import run_search
from longrope_opt.studies._run import finished_trials


logger = logging.getLogger(__name__)


def comparison_study_name(prefix: str, sampler: str, seed: int) -> str:
    """``<prefix>/<sampler>/seed<seed>``."""
    return f"{prefix}/{sampler}/seed{seed}"


def pending_studies(
    storage: Any, prefix: str, samplers: Sequence[str], seeds: Sequence[int], budget: int
) -> list[tuple[str, int, str]]:
    """``(sampler, seed, study name)`` of the studies that do not hold `budget` trials yet,
    seed-major (an interrupted comparison still holds complete seeds for every sampler)."""

    existing = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    pending = []
    for seed in seeds:
        for sampler in samplers:
            name = comparison_study_name(prefix, sampler, seed)
            if name in existing:
                study = optuna.load_study(study_name=name, storage=storage)
                if finished_trials(study) >= budget:
                    continue
            pending.append((sampler, seed, name))
    return pending


def run_comparison(
    config: Any,
    *,
    storage: Any,
    prefix: str,
    samplers: Sequence[str],
    seeds: Sequence[int],
    budget: int,
    dtype: str = "auto",
    device: str = "auto",
    attn: str | None = None,
    fuse: bool = True,
    on_study: Callable[[int, int, str], None] | None = None,
) -> int:
    """Run every (sampler, seed) study of `config` that lacks its budget; return how many ran.

    Args:
        config: The `SearchConfig` every study shares (its sampler and seed are replaced).
        storage: One Optuna storage for all studies.
        prefix: Study names are ``<prefix>/<sampler>/seed<seed>``.
        samplers: Names in `longrope_opt.samplers.SAMPLERS`.
        seeds: Sampler seeds.
        budget: Finished trials per study.
        dtype: Compute path on this machine.
        device: Where the model runs.
        attn: Attention kernel (None: the best available).
        fuse: Compile the element-wise work.
        on_study: Called before each study with (index, count, study name).
    """

    check_sampler_names(samplers)
    check_sampler_dependencies(samplers)  # a missing extra: before the model loads
    for name, value in (("--budget", budget), ("--seeds", len(seeds))):
        if value < 1:
            raise InvalidArgumentError(f"`{name}` must be >= 1, got {value}.")

    check_options(OBJECTIVES[config.objective], config.target_length, config.objective_options)
    for sampler in samplers:  # a missing extra fails before the model loads
        make_pruner(config.pruner or "none", sampler)
    pending = pending_studies(storage, prefix, samplers, seeds, budget)
    if not pending:
        return 0
    model, tokenizer = load_model(config.model, dtype=dtype, device=device, attn=attn, fuse=fuse)
    for i, (sampler, seed, study_name) in enumerate(pending):
        if on_study is not None:
            on_study(i, len(pending), study_name)
        options = config.sampler_options if sampler in EVOLUTION_SAMPLERS else {}
        run_search(
            dataclasses.replace(
                config, sampler=sampler, sampler_seed=seed, sampler_options=options
            ),
            storage=storage,
            study_name=study_name,
            n_trials=budget,
            graceful_interrupt=True,
            device=device,
            attn=attn,
            model=model,
            tokenizer=tokenizer,
        )
    return len(pending)
