"""`EvolutionSpace`: what the samplers read of a search space, and nothing more.

A candidate is a non-decreasing vector of factors on a grid in [low, high], plus up to three
optional genes: n̂ (start tokens kept unscaled), t (the attention scale) and c (LongRoPE2's
critical dimension, below which the factors follow a ramp the space recomputes). A space that
does not search a gene says so with None. The project's `longrope_opt.space.SearchSpace`
implements this for RoPE; the OptunaHub package's `MonotoneSpace` implements it for any
monotone vector (no optional gene).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Protocol
from typing import runtime_checkable

import numpy as np
from optuna.distributions import BaseDistribution


@runtime_checkable
class EvolutionSpace(Protocol):
    """The search space the evolution and the baselines propose in."""

    @property
    def names(self) -> Sequence[str]:
        """Names of every factor, in order (a candidate's vector has this many)."""
        ...

    @property
    def param_names(self) -> Sequence[str]:
        """The factor parameters a trial holds (every name, or with a c gene those from the
        lowest c on, since the ramp below c is not a parameter)."""
        ...

    @property
    def low(self) -> float:
        """Lowest factor."""
        ...

    @property
    def high(self) -> float:
        """Highest factor."""
        ...

    @property
    def step(self) -> float:
        """Grid step of proposals (0 for continuous values)."""
        ...

    @property
    def n_hat_choices(self) -> tuple[int, ...] | None:
        """The n̂ a candidate may take (a single value when fixed), or None without an n̂ gene."""
        ...

    @property
    def attention_range(self) -> tuple[float, float] | None:
        """Bounds of t when t is searched, else None."""
        ...

    @property
    def critical_bounds(self) -> tuple[int, int] | None:
        """Bounds of c when c is searched, else None."""
        ...

    def distributions(self) -> dict[str, BaseDistribution]:
        """Optuna distributions of every parameter a candidate sets."""
        ...

    def decode(self, params: Mapping[str, Any]) -> tuple[np.ndarray, int, float | None] | None:
        """Trial params → (all factors, n̂, t); None when a parameter is missing."""
        ...

    def encode(
        self, factors: Any, n_hat: int, attention_scale: float | None = None, *,
        critical: int | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """A candidate → trial params (the inverse of `decode` with `critical_of`)."""
        ...

    def critical_of(self, params: Mapping[str, Any]) -> int | None:
        """c of trial params (None: no c gene)."""
        ...

    def seed_params(self) -> list[tuple[str, dict[str, Any]]]:
        """``[(name, params)]``: the starting points of generation 0."""
        ...

    def snap(self, values: np.ndarray) -> np.ndarray:
        """Values rounded to the grid and clipped to [low, high]."""
        ...

    def snap_candidate(self, factors: np.ndarray, critical: int | None) -> np.ndarray:
        """A whole candidate's factors on the grid (and its ramp below c recomputed)."""
        ...

    def complete(self, factors: np.ndarray, critical: int | None) -> np.ndarray:
        """The factors with the ramp below c filled in (as they are without a c gene)."""
        ...


#: The members a space must have (checked with a message naming the missing ones).
MEMBERS = (
    "names", "param_names", "low", "high", "step", "n_hat_choices", "attention_range", "critical_bounds",
    "distributions", "decode", "encode", "critical_of", "seed_params", "snap", "snap_candidate",
    "complete",
)  # fmt: skip


def missing_members(space: Any) -> list[str]:
    """The `EvolutionSpace` members `space` lacks."""
    return [name for name in MEMBERS if not hasattr(space, name)]
