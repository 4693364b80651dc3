"""Samplers (and the pruners that work with them) by name: the one factory `search`, `worker`,
`compare` and scripts build them with.

Every entry is a factory ``(space, seed, budget, **options) -> optuna.samplers.BaseSampler``
over the shared `SearchSpace` (and its constraint policy, `SearchSpace.repair`).
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import optuna

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.registry import Registry
from longrope_opt.samplers._longrope import LongRoPESampler
from longrope_opt.samplers._nevergrad import NevergradSampler
from longrope_opt.samplers._population import PopulationPruner
from longrope_opt.samplers._protocol import EvolutionSpace


SamplerFactory = Callable[..., optuna.samplers.BaseSampler]

#: Every sampler, by the name the CLI's sampler flags take.
SAMPLERS: Registry[SamplerFactory] = Registry("sampler", param="sampler")

#: The reference the others are measured against: the paper's evolution without its seeds,
#: without dedup and without pruning.
PLAIN_EVOLUTION = "evolution"
#: Nevergrad optimizers available by their CLI names.
NEVERGRAD_OPTIMIZERS = {
    "ngopt": "NGOpt",
    "cma": "CMA",
    "twopointsde": "TwoPointsDE",
    "pso": "PSO",
    "oneplusone": "OnePlusOne",
}


def _longrope(space: EvolutionSpace, seed: int, budget: int, **options: Any) -> Any:

    return LongRoPESampler(space=space, seed=seed, **options)


def _evolution(space: EvolutionSpace, seed: int, budget: int, **options: Any) -> Any:

    # The paper's plain GA is the reference point: always Algorithm 1's operators.
    options = {**options, "operators": "paper"}
    return LongRoPESampler(space=space, seed=seed, seeded=False, dedup=False, **options)


def _paper(space: EvolutionSpace, seed: int, budget: int, **options: Any) -> Any:

    # the default before the surrogate operators: seeded, dedup, Algorithm 1's operators
    options = {**options, "operators": "paper"}
    return LongRoPESampler(space=space, seed=seed, **options)


def _adaptive(space: EvolutionSpace, seed: int, budget: int, **options: Any) -> Any:

    options = {**options, "operators": "adaptive"}
    return LongRoPESampler(space=space, seed=seed, **options)


def _nevergrad(optimizer: str) -> SamplerFactory:
    def factory(space: EvolutionSpace, seed: int, budget: int, **options: Any) -> Any:

        return NevergradSampler(space=space, optimizer=optimizer, budget=budget, seed=seed)

    return factory


def _tpe(space: EvolutionSpace, seed: int, budget: int, **options: Any) -> Any:
    with warnings.catch_warnings():  # `multivariate` is experimental; chosen on purpose
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(multivariate=True, seed=seed)


def _cmaes(space: EvolutionSpace, seed: int, budget: int, **options: Any) -> Any:
    # n_hat is categorical: CMA-ES samples it independently (on purpose, no warning).
    return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)


def _gp(space: EvolutionSpace, seed: int, budget: int, **options: Any) -> Any:
    # Optuna's GP (Matérn 5/2, log-EI; experimental in Optuna 4, chosen on purpose): the peer
    # that leads at 10-100 trials on the landscapes where any does, at ≈ 1-2.5 s a trial.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False)


def _random(space: EvolutionSpace, seed: int, budget: int, **options: Any) -> Any:
    return optuna.samplers.RandomSampler(seed=seed)


SAMPLERS.add("longrope", _longrope, "the LongRoPE evolution: seeded, dedup, model-screened "
             "with trust-region steps; the default")  # fmt: skip
SAMPLERS.add("longrope-paper", _paper, "the LongRoPE evolution with Algorithm 1's operators "
             "(seeded, dedup): the default before the surrogate")  # fmt: skip
SAMPLERS.add(PLAIN_EVOLUTION, _evolution, "the paper's plain GA: random start, no dedup")
SAMPLERS.add(
    "longrope-adaptive", _adaptive, "the LongRoPE evolution with adaptive steps (--operators)"
)
for _name, _optimizer in NEVERGRAD_OPTIMIZERS.items():
    SAMPLERS.add(_name, _nevergrad(_optimizer), f"nevergrad {_optimizer}")
SAMPLERS.add("tpe", _tpe, "Optuna TPE, multivariate")
SAMPLERS.add("cmaes", _cmaes, "Optuna CMA-ES")
SAMPLERS.add("gp", _gp, "Optuna GP (Bayesian optimisation; needs scipy)")
SAMPLERS.add("random", _random, "Optuna random")

#: What `compare` runs unless told otherwise (all but oneplusone, the newer operators and GP,
#: so the stored comparisons stay complete).
DEFAULT_SAMPLERS = tuple(n for n in SAMPLERS
                        if n not in ("oneplusone", "longrope-adaptive", "longrope-paper", "gp"))
#: The samplers that take the evolution's options (population size, ...).
EVOLUTION_SAMPLERS = ("longrope", PLAIN_EVOLUTION, "longrope-adaptive", "longrope-paper")
#: Samplers that need an optional extra: (the module it must import, the extra that installs it).
NEEDS = {**{n: ("nevergrad", "nevergrad") for n in NEVERGRAD_OPTIMIZERS}, "cmaes": ("cmaes", "compare"),
         "gp": ("scipy", "compare")}  # fmt: skip


def check_sampler_dependencies(names: Sequence[str]) -> None:
    """One clear error for a sampler whose optional extra is not installed, before anything
    loads (else the first trial would fail on the import, after the model has loaded).

    Raises:
        ImportError: A sampler of `names` needs a package that is not installed.
    """
    for name in names:
        module, extra = NEEDS.get(name, (None, None))
        if module is not None and importlib.util.find_spec(module) is None:
            raise ImportError(
                f"the {name} sampler needs {module}: pip install 'longrope-opt[{extra}]'."
            )


def check_sampler_names(names: Sequence[str]) -> None:
    """One clear error for an unknown or repeated sampler name."""
    for name in names:
        SAMPLERS.check(name, param="samplers")
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"`samplers` must not repeat a name, got {list(names)}.")


def make_sampler(
    name: str,
    *,
    space: EvolutionSpace,
    seed: int,
    budget: int,
    options: dict[str, Any] | None = None,
    constraints_func: Callable[[optuna.trial.FrozenTrial], Sequence[float]] | None = None,
) -> optuna.samplers.BaseSampler:
    """The sampler called `name` over `space`.

    Args:
        name: A name in `SAMPLERS`.
        space: The search space every sampler shares.
        seed: Sampler seed.
        budget: Trials per study (nevergrad optimizers are told it).
        options: Keyword arguments for the evolution samplers (population size, ...); ignored
            by the others.
        constraints_func: Optuna's constraints (values ≤ 0 feasible) for the samplers with a
            population (`LongRoPESampler`).

    Returns:
        A fresh sampler.
    """
    factory = SAMPLERS.get_or_raise(name)
    if constraints_func is None:
        return factory(space, seed, budget, **(options or {}))
    sampler = factory(space, seed, budget, **(options or {}), constraints_func=constraints_func)
    if not isinstance(sampler, LongRoPESampler):
        raise InvalidArgumentError(f"`constraints_func` needs a LongRoPE sampler, got {name!r}.")
    return sampler


#: Pruners by name (`longrope_opt.studies.SearchConfig.pruner`).
PRUNERS = ("none", "wilcoxon", "population")


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
    if name not in PRUNERS:
        raise InvalidArgumentError(f"`pruner` must be one of {list(PRUNERS)}, got {name!r}.")
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
