# Generated from longrope_opt/samplers/_base.py by optunahub/build.py: do not edit.
"""What every sampler over an `EvolutionSpace` shares: the relative space and the fallback."""

from __future__ import annotations

from typing import Any

from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.samplers import RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial

from ._errors import InvalidArgumentError
from ._protocol import EvolutionSpace
from ._protocol import missing_members


class SpaceSampler(BaseSampler):
    """Base of the samplers here: the relative search space is an `EvolutionSpace` (the
    project's `SearchSpace`, or the OptunaHub package's `MonotoneSpace`);
    parameters outside it (a user's extra knobs) are sampled at random; single objective only.
    Subclasses implement `sample_relative`.
    """

    def __init__(self, *, space: EvolutionSpace, seed: int | None) -> None:
        missing = missing_members(space)
        if missing:
            raise InvalidArgumentError(
                f"`space` must be an EvolutionSpace; {type(space).__name__} lacks {missing}."
            )
        self._space = space
        self._random = RandomSampler(seed=seed)

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self._space.distributions()

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        self._single_objective_only(study)
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def reseed_rng(self) -> None:
        self._random.reseed_rng()

    def _single_objective_only(self, study: Study) -> None:
        if len(study.directions) > 1:
            raise ValueError(f"{type(self).__name__} supports single-objective studies only.")
