"""The LongRoPE search space, shared by the objective and the sampler (one place for the names).

Trial parameters: ``lambda_00 … lambda_{n-1}`` (zero-padded, one per rotary frequency), ``n_hat``
(categorical over the paper's set, or fixed), and ``attention_scale`` when it is searched.
Paper Table 3: λ_i ∈ [1.0, 1.25·s] step 0.01, n̂ ∈ {0, 1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 64, 128,
256}, λ non-decreasing. No torch here: samplers import this.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.distributions import CategoricalDistribution
from optuna.distributions import FloatDistribution
from optuna.distributions import IntDistribution

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import ATTENTION_RULES
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import compose
from longrope_opt.space._args import PAPER_N_HAT
from longrope_opt.space._args import PAPER_SEEDS
from longrope_opt.space._args import space_fields
from longrope_opt.space._critical import CRITICAL
from longrope_opt.space._critical import DEFAULT_CRITICAL_RADIUS
from longrope_opt.space._critical import factors_to_tail
from longrope_opt.space._critical import sorted_tail
from longrope_opt.space._critical import tail_to_factors
from longrope_opt.space._critical import with_ramp
from longrope_opt.space._seeds import seed_params
from longrope_opt.space._seeds import seed_scalings


N_HAT = "n_hat"
ATTENTION_SCALE = "attention_scale"


def lambda_names(n: int) -> list[str]:
    """``lambda_00 …`` zero-padded to the width of ``n − 1`` (at least two digits)."""
    width = max(2, len(str(n - 1)))
    return [f"lambda_{i:0{width}d}" for i in range(n)]


@dataclass(frozen=True)
class SearchSpace:
    """Where the search looks, for one model and one target length.

    Three kinds of search share this class (LongRoPE §3.3):

    - a first search: `target_length` > the trained length L, λ relative to the pretrained RoPE;
    - a secondary search on an extended (e.g. fine-tuned) model: `base` holds the factors it runs
      and `base_length` the length they reached; λ are relative to `base` and `to_scaling` returns
      the composed factors λ_base ⊙ λ (see `longrope_opt.rope.compose`);
    - a short-context recovery search: `target_length` <= L, λ in [lambda_low, lambda_high] with a
      lower cap (default 1.25, the paper's 1.25·s at s = 1), the short factors of a longrope pair.

    Attributes:
        spec: The model's RoPE.
        target_length: L'.
        lambda_low: Lowest factor (paper: 1.0).
        lambda_high: Highest factor; defaults to 1.25·s.
        step: Factor grid step (paper: 0.01); 0 for continuous.
        n_hat: Candidate n̂ values (searched when more than one), or a single fixed value.
        attention: A rule name from `longrope_opt.rope.ATTENTION_RULES` (fixed t), or ``"search"``.
        attention_bounds: (low, high) for t when ``attention == "search"``.
        repair: How a non-monotone proposal is evaluated: ``"sort"`` (the default, the same for
            every sampler: baselines propose freely, the objective evaluates sorted λ; the
            LongRoPE sampler only proposes monotone vectors, for which it is a no-op) or
            ``"none"`` (evaluate as proposed).
        base: Factors of the stage this search builds on (secondary search), or None.
        base_length: The length `base` extends to (the fine-tuning length); needed with `base`.
        attention_value: A fixed t that overrides the `attention` rule (e.g. the long factors'
            t for a short search, since transformers' longrope has one attention factor).
        shape: ``"full"`` (every λ searched, the paper's space) or ``"critical"`` (LongRoPE2,
            first searches only; see `longrope_opt.space._critical`: c searched in c₀ ±
            `critical_radius`, λ from c on in [s, lambda_high = 2s], a ramp below).
        critical_radius: How far c may move below the theoretical c₀ (critical shape only),
            and above it unless `critical_above` is set.
        critical_above: How far c may move above c₀ (None: `critical_radius`); 0 keeps every
            λ at or above YaRN-cd's (see `longrope_opt.space._critical.critical_range`).
        seeds: The evolution's starting points in the full shape of a first search, by name
            (`SEED_NAMES`): the paper's PI, NTK and YaRN by default; ``yarn-cd`` and ``ntk-cd``
            add LongRoPE2's critical-dimension correction (the best classic rows at 4x on
            SmolLM2). A short or secondary search has seeds of its own; the critical shape's
            are its corrected YaRN/NTK.
    """

    spec: RopeSpec
    target_length: int
    lambda_low: float = 1.0
    lambda_high: float | None = None
    step: float = 0.01
    n_hat: tuple[int, ...] = PAPER_N_HAT
    attention: str = "longrope"
    attention_bounds: tuple[float, float] = (1.0, 1.5)
    repair: str = "sort"
    base: RopeScaling | None = None
    base_length: int | None = None
    attention_value: float | None = None
    shape: str = "full"
    critical_radius: int = DEFAULT_CRITICAL_RADIUS
    critical_above: int | None = None
    seeds: tuple[str, ...] = PAPER_SEEDS
    # Computed once: every decode/encode of a critical-shape trial asks for it.
    _critical_bounds: tuple[int, int] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for name, value in space_fields(self).items():  # checked, defaults filled in
            object.__setattr__(self, name, value)

    @property
    def high(self) -> float:
        """The highest factor (`lambda_high`, its default filled in)."""
        assert self.lambda_high is not None  # __post_init__ fills the default
        return float(self.lambda_high)

    @property
    def low(self) -> float:
        """The lowest searched factor (`lambda_low`, or s in the critical shape)."""
        if self.shape == "critical":
            return float(self.spec.scale(self.target_length))
        return float(self.lambda_low)

    @property
    def critical_bounds(self) -> tuple[int, int] | None:
        """``(lowest, highest)`` searched critical dimension; None in the full shape."""
        return self._critical_bounds

    @property
    def param_names(self) -> list[str]:
        """The λ parameters a trial holds (every λ, or those from the lowest c on)."""
        bounds = self.critical_bounds
        return self.names if bounds is None else self.names[bounds[0] :]

    def complete(self, factors: np.ndarray, critical: int | None) -> np.ndarray:
        """Every λ from a candidate's searched ones: the ramp below c (critical shape)."""
        if critical is None:
            return np.asarray(factors, dtype=np.float64)
        return with_ramp(factors, critical)

    def snap_candidate(self, factors: np.ndarray, critical: int | None) -> np.ndarray:
        """`snap` on the searched λ (from c on), the ramp recomputed below."""
        if critical is None:
            return self.snap(factors)
        f = np.array(factors, dtype=np.float64)
        f[critical:] = self.snap(f[critical:])
        return with_ramp(f, critical)

    def critical_of(self, params: Mapping[str, Any]) -> int | None:
        """A trial's critical dimension (clipped to the searched range); None in the full shape
        or when the trial holds none."""
        bounds = self.critical_bounds
        if bounds is None or CRITICAL not in params:
            return None
        return min(max(int(params[CRITICAL]), bounds[0]), bounds[1])

    @property
    def is_short(self) -> bool:
        """A short-context recovery search (target within the trained window)."""
        return self.target_length <= self.spec.original_length

    @property
    def relative_spec(self) -> RopeSpec:
        """The RoPE the searched λ rescale (the model's, with the base stage's length if any)."""
        if self.base is None:
            return self.spec
        assert self.base_length is not None  # checked with `base` in __post_init__
        return dataclasses.replace(self.spec, original_length=int(self.base_length))

    def seed_scalings(self) -> list[tuple[str, RopeScaling]]:
        """The evolution's seeds, as λ in this space's terms (relative to `base` if any): PI,
        NTK and YaRN, or for a short search λ = 1, NTK's shape and a linear ramp."""
        return seed_scalings(self)

    def seed_params(self) -> list[tuple[str, dict[str, Any]]]:
        """``[(name, params)]`` of the seeds, ready for `study.enqueue_trial` (the critical
        shape's carry c: YaRN and NTK with the critical dimension corrected)."""
        return seed_params(self)

    def snap_bounds(self, values: np.ndarray) -> np.ndarray:
        """Clip to [lambda_low, lambda_high] without rounding (seeds stay exact inside)."""
        return np.clip(np.asarray(values, dtype=np.float64), self.lambda_low, self.high)

    @property
    def names(self) -> list[str]:
        """The λ parameter names, in frequency order."""
        return lambda_names(self.spec.n_factors)

    @property
    def n_hat_choices(self) -> tuple[int, ...]:
        """The n̂ a candidate may take (a single value when n̂ is fixed); `EvolutionSpace`."""
        return self.n_hat

    @property
    def attention_range(self) -> tuple[float, float] | None:
        """Bounds of t when it is searched, else None; `EvolutionSpace`."""
        return self.attention_bounds if self.attention == "search" else None

    @property
    def fixed_attention_scale(self) -> float | None:
        """t when it is fixed by a rule; None when searched."""
        if self.attention_value is not None:
            return float(self.attention_value)
        if self.attention == "search":
            return None
        # The rule sees the total extension over the pretrained length (s <= 1 gives t = 1).
        L = self.spec.original_length
        return ATTENTION_RULES[self.attention](self.target_length / L, L)

    def distributions(self) -> dict[str, BaseDistribution]:
        """Optuna distributions of every searched parameter.

        λ distributions are continuous on purpose: the PI/NTK/YaRN seeds are off the 0.01 grid
        and must stay exact, and Optuna warns on every off-grid value of a stepped distribution.
        The LongRoPE sampler keeps its own proposals on the `step` grid (see `snap`).
        """
        dists: dict[str, BaseDistribution] = {
            name: FloatDistribution(self.low, self.high) for name in self.param_names
        }
        bounds = self.critical_bounds
        if bounds is not None:
            dists[CRITICAL] = IntDistribution(*bounds)
        if len(self.n_hat) > 1:
            dists[N_HAT] = CategoricalDistribution(self.n_hat)
        if self.attention == "search":
            dists[ATTENTION_SCALE] = FloatDistribution(*self.attention_bounds)
        return dists

    def snap(self, values: np.ndarray) -> np.ndarray:
        """Round factors to the `step` grid from `low`, clipped to the bounds."""
        v = np.clip(np.asarray(values, dtype=np.float64), self.low, self.high)
        if not self.step:
            return v
        k = np.round((v - self.low) / self.step)
        return np.clip(np.round(self.low + k * self.step, 10), self.low, self.high)

    def decode(self, params: Mapping[str, Any]) -> tuple[np.ndarray, int, float | None] | None:
        """Trial parameters → ``(λ as proposed, n̂, t)``: no repair, no base; t is None unless
        searched (and given). None when a λ is missing (e.g. a trial that was never sampled).

        The one reading of trial parameters: `to_scaling`, the samplers and export build on it.
        In the critical shape the λ below the trial's c are its ramp (see `critical_of`).
        """
        if not all(name in params for name in self.param_names):
            return None
        bounds = self.critical_bounds
        if bounds is None:
            factors = np.array([float(params[name]) for name in self.names])
        else:
            critical = self.critical_of(params)
            if critical is None:
                return None
            tail = np.array([float(params[name]) for name in self.param_names])
            factors = tail_to_factors(tail, self.spec.n_factors, bounds[0], critical)
        # A fixed n̂ / t is a property of the space: it wins over whatever the params carry.
        n_hat = int(params[N_HAT]) if len(self.n_hat) > 1 and N_HAT in params else self.n_hat[0]
        t = params.get(ATTENTION_SCALE) if self.attention == "search" else None
        return factors, n_hat, None if t is None else float(t)

    def encode(
        self,
        factors: Any,
        n_hat: int,
        attention_scale: float | None = None,
        *,
        critical: int | None = None,
    ) -> dict[str, Any]:
        """``(λ, n̂, t)`` → trial parameters, values kept exactly (the inverse of `decode`).

        n̂ outside the searched set becomes the set's first value; t (searched only) is clamped
        to `attention_bounds`, None meaning the lower bound. In the critical shape `critical`
        is required; λ below it (the ramp, unused) are stored clipped to the bounds.
        """
        bounds = self.critical_bounds
        if bounds is None:
            params: dict[str, Any] = {n: float(v) for n, v in zip(self.names, factors)}
        else:
            if critical is None:
                raise InvalidArgumentError("the critical shape needs `critical` to encode λ.")
            c = min(max(int(critical), bounds[0]), bounds[1])
            values = factors_to_tail(factors, bounds[0], c, self.low, self.high)
            params = {n: float(v) for n, v in zip(self.param_names, values)}
            params[CRITICAL] = c
        if len(self.n_hat) > 1:
            params[N_HAT] = int(n_hat) if n_hat in self.n_hat else self.n_hat[0]
        if self.attention == "search":
            lo, hi = self.attention_bounds
            t = lo if attention_scale is None else float(attention_scale)
            params[ATTENTION_SCALE] = min(max(t, lo), hi)
        return params

    def to_scaling(self, params: Mapping[str, Any]) -> RopeScaling:
        """Trial parameters → the `RopeScaling` to evaluate (λ repaired by `repair`; fixed n̂ / t
        filled in; composed with `base` for a secondary search, so the result is absolute)."""
        decoded = self.decode(params)
        if decoded is None:
            missing = next(name for name in [*self.param_names, CRITICAL] if name not in params)
            raise InvalidArgumentError(f"parameter {missing!r} is missing from the trial.")
        factors, n_hat, t = decoded
        critical = self.critical_of(params)
        if self.repair == "sort":
            # the one constraint policy every sampler shares
            factors = np.sort(factors) if critical is None else sorted_tail(factors, critical)
        fixed = self.fixed_attention_scale
        t = fixed if fixed is not None else (self.attention_bounds[0] if t is None else t)
        scaling = RopeScaling(factors, n_hat, float(t), method="searched")
        return scaling if self.base is None else compose(self.base, scaling)

    def to_params(self, scaling: RopeScaling) -> dict[str, Any]:
        """`RopeScaling` in this space's terms (relative to `base`) → trial parameters (for
        enqueuing seeds). Values are kept exactly. (Full shape only: a scaling has no c.)"""
        scaling.check(self.spec)
        if self.shape == "critical":
            raise InvalidArgumentError("the critical shape encodes λ with a c: use `encode`.")
        return self.encode(scaling.factors, scaling.n_hat, scaling.attention_scale)

    def is_repaired(self, params: Mapping[str, Any]) -> bool:
        """Whether `to_scaling` evaluates other λ than `params` hold (a non-monotone proposal)."""
        decoded = self.decode(params)
        return (
            self.repair == "sort" and decoded is not None and bool(np.any(np.diff(decoded[0]) < 0))
        )

    def suggest(self, trial: Any) -> RopeScaling:
        """Ask `trial` for every parameter (in a fixed order) and build the `RopeScaling`."""
        params: dict[str, Any] = {}
        for name, dist in self.distributions().items():
            if isinstance(dist, CategoricalDistribution):
                params[name] = trial.suggest_categorical(name, dist.choices)
            elif isinstance(dist, IntDistribution):
                params[name] = trial.suggest_int(name, dist.low, dist.high)
            else:
                assert isinstance(dist, FloatDistribution)
                params[name] = trial.suggest_float(name, dist.low, dist.high, step=dist.step)
        return self.to_scaling(params)
