"""The pruner a search runs with, by name (`SearchConfig.pruner`)."""

from __future__ import annotations

import warnings

import optuna

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.samplers import PLAIN_EVOLUTION
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import PopulationPruner


def make_pruner(
    name: str, sampler: str, instance: optuna.samplers.BaseSampler | None = None
) -> optuna.pruners.BasePruner:
    """`name` ∈ {none, wilcoxon, population}; the plain evolution reference is never pruned.

    Args:
        name: The pruner.
        sampler: The sampler's name.
        instance: The sampler itself (``population`` reads its population; without it, a
            ``population`` pruner is only checked and pruning is left off).
    """
    if name not in ("wilcoxon", "none", "population"):
        raise InvalidArgumentError(
            f"`pruner` must be one of ['wilcoxon', 'none', 'population'], got {name!r}."
        )
    if name == "none" or sampler == PLAIN_EVOLUTION:
        return optuna.pruners.NopPruner()
    if name == "population":
        if instance is None:
            return optuna.pruners.NopPruner()
        if not isinstance(instance, LongRoPESampler):
            raise InvalidArgumentError(
                f"`pruner` 'population' needs a LongRoPESampler, got {type(instance).__name__}."
            )
        return PopulationPruner(instance)
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
