"""`MonotoneSpace`: a non-decreasing vector of floats, the space the evolution searches.

It implements `EvolutionSpace` (`_protocol.py`), what the sampler reads of a space. The LongRoPE
project passes its RoPE-specific `SearchSpace`, which adds optional genes (n̂, the attention
scale, the critical dimension) and the PI/NTK/YaRN seeds; this space has no optional gene, for
any objective over a monotone vector. Only NumPy and Optuna are imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.distributions import FloatDistribution

from ._errors import InvalidArgumentError


class MonotoneSpace:
    """Parameters ``names[0] <= names[1] <= …``, each in [low, high], on a `step` grid.

    Args:
        names: Parameter names, in the order the vector must be non-decreasing.
        low: Lowest value.
        high: Highest value.
        step: Grid step of the evolution's proposals (0: continuous).
        seeds: ``{name: vector}`` starting points (the LongRoPE paper starts from PI, NTK and
            YaRN); enqueue them with `LongRoPESampler.seed_params`.
    """

    # The optional genes of an `EvolutionSpace`: a plain monotone vector has none.
    n_hat_choices: tuple[int, ...] | None = None
    attention_range: tuple[float, float] | None = None
    critical_bounds: tuple[int, int] | None = None

    def __init__(
        self,
        names: Sequence[str],
        low: float,
        high: float,
        *,
        step: float = 0.01,
        seeds: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        self.names = [str(n) for n in names]
        self.param_names = self.names  # every factor is a parameter (no c gene)
        if len(self.names) < 2 or len(set(self.names)) != len(self.names):
            raise InvalidArgumentError(
                f"`names` must hold at least 2 distinct names, got {list(names)!r}."
            )
        if not (np.isfinite(low) and np.isfinite(high) and low < high):
            raise InvalidArgumentError(f"`low` < `high` must hold, got {low} and {high}.")
        if step < 0 or step > high - low:
            raise InvalidArgumentError(f"`step` must be in [0, {high - low}], got {step}.")
        self.low, self.high, self.step = float(low), float(high), float(step)
        self._seeds = {}
        for name, vector in (seeds or {}).items():
            v = np.asarray(vector, dtype=np.float64)
            if v.shape != (len(self.names),) or np.any(np.diff(v) < 0):
                raise InvalidArgumentError(
                    f"seed {name!r} must be a non-decreasing vector of {len(self.names)} values."
                )
            self._seeds[str(name)] = np.clip(v, self.low, self.high)

    def distributions(self) -> dict[str, BaseDistribution]:
        """One `FloatDistribution(low, high)` per name."""
        return {n: FloatDistribution(self.low, self.high) for n in self.names}

    def seed_params(self) -> list[tuple[str, dict[str, Any]]]:
        """``[(name, params)]`` of the seeds, for `study.enqueue_trial`."""
        return [(name, self.encode(v, 0)) for name, v in self._seeds.items()]

    def decode(self, params: Mapping[str, Any]) -> tuple[np.ndarray, int, None] | None:
        """Trial parameters → ``(vector, 0, None)``; None when one is missing."""
        if not all(n in params for n in self.names):
            return None
        return np.array([float(params[n]) for n in self.names]), 0, None

    def encode(
        self, factors: Any, n_hat: int = 0, attention_scale: float | None = None, *,
        critical: int | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Vector → trial parameters (the inverse of `decode`)."""
        return {n: float(v) for n, v in zip(self.names, factors)}

    def critical_of(self, params: Mapping[str, Any]) -> None:
        """No critical dimension in this space."""
        return None

    def snap(self, values: np.ndarray) -> np.ndarray:
        """Round to the `step` grid from `low`, clipped to the bounds."""
        v = np.clip(np.asarray(values, dtype=np.float64), self.low, self.high)
        if not self.step:
            return v
        k = np.round((v - self.low) / self.step)
        return np.clip(np.round(self.low + k * self.step, 10), self.low, self.high)

    def snap_candidate(self, factors: np.ndarray, critical: int | None) -> np.ndarray:
        """`snap` (the project's space also recomputes a ramp here)."""
        return self.snap(factors)

    def complete(self, factors: np.ndarray, critical: int | None) -> np.ndarray:
        """The vector as it is (the project's space fills a ramp below c)."""
        return np.asarray(factors, dtype=np.float64)
