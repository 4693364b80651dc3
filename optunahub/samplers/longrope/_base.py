# Generated from longrope_opt/samplers/_base.py by optunahub/build.py: do not edit.
"""What every sampler over a `SearchSpace` shares: the relative space and the fallback."""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.samplers import RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial

from ._errors import InvalidArgumentError


if TYPE_CHECKING:  # the OptunaHub package is generated from this file: no project import at run time
    from ._space import MonotoneSpace as SearchSpace

#: What a space must offer the samplers (`SearchSpace` here, `MonotoneSpace` in the OptunaHub
#: package).
SPACE_METHODS = ("distributions", "decode", "encode", "seed_params", "snap_candidate", "complete")


class SpaceSampler(BaseSampler):
    """Base of the samplers here: the relative search space is the LongRoPE `SearchSpace`;
    parameters outside it (a user's extra knobs) are sampled at random; single objective only.
    Subclasses implement `sample_relative`.
    """

    def __init__(self, *, space: SearchSpace, seed: int | None) -> None:
        if not all(callable(getattr(space, name, None)) for name in SPACE_METHODS):
            raise InvalidArgumentError(
                f"`space` must be a SearchSpace, got {type(space).__name__}."
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
