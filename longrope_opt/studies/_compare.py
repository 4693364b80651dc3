"""Samplers and studies of a comparison: one study per (sampler, seed) on one objective.

`longrope-opt compare` builds every sampler through `make_sampler` and names every study with
`comparison_study_name`, so a rerun finds (and resumes or only reads) the same studies.
"""

from __future__ import annotations

import warnings
from typing import Any

import optuna

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.space import SearchSpace


#: Nevergrad optimizers available by their CLI names.
NEVERGRAD_OPTIMIZERS = {
    "ngopt": "NGOpt",
    "cma": "CMA",
    "twopointsde": "TwoPointsDE",
    "pso": "PSO",
    "oneplusone": "OnePlusOne",
}
#: Every sampler name `make_sampler` accepts.
COMPARE_SAMPLERS = (
    "longrope",
    "evolution",
    *NEVERGRAD_OPTIMIZERS,
    "tpe",
    "cmaes",
    "random",
)
#: The reference the others are measured against: the paper's evolution without its seeds,
#: without dedup and without pruning.
PLAIN_EVOLUTION = "evolution"
DEFAULT_SAMPLERS = (
    "longrope",
    "evolution",
    "ngopt",
    "cma",
    "twopointsde",
    "pso",
    "tpe",
    "cmaes",
    "random",
)


def check_sampler_names(names: list[str]) -> None:
    """One clear error for an unknown or repeated sampler name."""
    for name in names:
        if name not in COMPARE_SAMPLERS:
            raise InvalidArgumentError(
                f"`samplers` must be names from {list(COMPARE_SAMPLERS)}, got {name!r}."
            )
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"`samplers` must not repeat a name, got {names}.")


def comparison_study_name(prefix: str, sampler: str, seed: int) -> str:
    """``<prefix>/<sampler>/seed<seed>``."""
    return f"{prefix}/{sampler}/seed{seed}"


def make_sampler(
    name: str,
    *,
    space: SearchSpace,
    seed: int,
    budget: int,
    evolution: dict[str, Any] | None = None,
) -> optuna.samplers.BaseSampler:
    """The sampler called `name` over `space`.

    Args:
        name: One of `COMPARE_SAMPLERS`: ``longrope`` (seeded, dedup), ``evolution`` (the same
            operators, random start, no dedup), a nevergrad optimizer (`NEVERGRAD_OPTIMIZERS`),
            ``tpe`` (multivariate), ``cmaes`` or ``random``.
        space: The search space every sampler shares (and its constraint policy, `repair`).
        seed: Sampler seed.
        budget: Trials per study (nevergrad optimizers are told it).
        evolution: Keyword arguments for the two LongRoPE samplers (population size, ...).

    Returns:
        A fresh sampler.
    """
    from longrope_opt.samplers import LongRoPESampler

    check_sampler_names([name])
    evolution = evolution or {}
    if name == "longrope":
        return LongRoPESampler(space=space, seed=seed, **evolution)
    if name == PLAIN_EVOLUTION:
        return LongRoPESampler(space=space, seed=seed, seeded=False, dedup=False, **evolution)
    if name in NEVERGRAD_OPTIMIZERS:
        from longrope_opt.samplers import NevergradSampler

        return NevergradSampler(
            space=space, optimizer=NEVERGRAD_OPTIMIZERS[name], budget=budget, seed=seed
        )
    if name == "tpe":
        with warnings.catch_warnings():  # `multivariate` is experimental; chosen on purpose
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(multivariate=True, seed=seed)
    if name == "cmaes":
        # n_hat is categorical: CMA-ES samples it independently (on purpose, no warning).
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    return optuna.samplers.RandomSampler(seed=seed)


def make_pruner(name: str, sampler: str) -> optuna.pruners.BasePruner:
    """`name` ∈ {wilcoxon, none}; the plain evolution reference is never pruned."""
    if name not in ("wilcoxon", "none"):
        raise InvalidArgumentError(f"`pruner` must be one of ['wilcoxon', 'none'], got {name!r}.")
    if name == "none" or sampler == PLAIN_EVOLUTION:
        return optuna.pruners.NopPruner()
    try:
        import scipy  # noqa: F401  (WilcoxonPruner needs it)
    except ImportError:
        raise ImportError(
            "the Wilcoxon pruner needs scipy: pip install 'longrope-opt[compare]'."
        ) from None
    # Needs ≥ 4 paired samples before a one-sided p < 0.1 is possible at all. Experimental in
    # Optuna; chosen on purpose, so its warning is not repeated for every study.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.pruners.WilcoxonPruner(p_threshold=0.1, n_startup_steps=4)
