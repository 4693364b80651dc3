"""λ landscapes with a known optimum: the benchmark the LongRoPE sampler is judged on.

Each landscape lives in the real search space of SmolLM2-135M (32 non-decreasing λ, n̂ from the
paper's set, a searched attention scale t in [1, 1.5]) at 4× (λ in [1, 5]) or 8× (λ in [1, 10]),
and scores a trial by ``g(λ) + h(n̂) + k(t)``: separable parts with a known minimiser, so the regret
of a run is its best true value minus the known optimum. Every sampler's proposal is evaluated the
way the real objective evaluates it (`SearchSpace.to_scaling`: λ sorted), so the landscapes judge
the search and not the repair policy.

The λ parts (the issue's list):

- ``quadratic``: Σ(λ_i − λ*_i)² with λ* a sorted uniform draw over the range (the old benchmark);
- ``illcond``: the same with per-dimension weights spread 100× (log-spaced, shuffled);
- ``coupled``: Σ Δ_i² + 25·Σ (Δ_{i+1} − Δ_i)², Δ = λ − λ*: neighbouring λ move together
  (Hessian I + 25·path-Laplacian, condition number ≈ 100, no axis-aligned valley);
- ``noisy``: the real surrogate (below) plus a fixed per-point error of the size measured between
  documents (the same λ always reads the same value, as the real objective on fixed documents);
- ``constrained``: ``quadratic`` around a λ* whose high-frequency block (i < k) retrieval forbids:
  the constraint mean(λ_0…λ_{k−1}) ≤ cap (Optuna's convention, ≤ 0 feasible) cuts the
  unconstrained optimum off, and the feasible optimum lies on the boundary: λ* with its first k
  lowered by δ = mean(λ*_{<k}) − cap (exact: the projection keeps λ monotone and in bounds);
- ``surrogate``: a model of the real objective fitted to this repository's stored trials (see
  `bench/surrogate.py`), its optimum computed exactly.

λ* of the seeded landscapes is a realistic optimum: the YaRN-cd curve of the space, perturbed
smoothly, sorted and put on the 0.01 grid (the sampler's grid), drawn per benchmark seed.

Nothing here imports torch: it runs in the benchmark's process beside any sampler.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from longrope_opt.rope import RopeSpec
from longrope_opt.space import SearchSpace


#: SmolLM2-135M's RoPE (head_dim 64, base 1e5, trained at 8192): the real space's shape.
SPEC = RopeSpec(head_dim=64, base=1e5, original_length=8192)
#: Ratios the landscapes are built at (λ ≤ 1.25·s).
SCALES = (4, 8)
#: The searched attention scale's range.
T_BOUNDS = (1.0, 1.5)
#: Weight of the n̂ part: a whole step of log2(1 + n̂) costs as much as 0.2 in one λ.
N_HAT_WEIGHT = 0.04
#: Weight of the t part: 0.1 off in t costs as much as 0.1 off in one λ.
T_WEIGHT = 1.0
#: The coupled landscape's neighbour coupling.
COUPLING = 25.0
#: The constrained landscape's high-frequency block and how far its cap lies below λ*.
CONSTRAINED_BLOCK = 12
CONSTRAINED_DELTA = 0.3


def make_space(scale: int) -> SearchSpace:
    """SmolLM2's space at `scale`×: 32 λ, n̂ searched over the paper's set, t searched."""
    return SearchSpace(
        SPEC,
        SPEC.original_length * scale,
        attention="search",
        attention_bounds=T_BOUNDS,
        seeds=("pi", "ntk", "yarn", "yarn-cd", "ntk-cd"),
    )


def _grid(values: np.ndarray, space: SearchSpace) -> np.ndarray:
    return np.asarray(space.snap(np.sort(values)), dtype=np.float64)


def uniform_target(space: SearchSpace, rng: np.random.Generator) -> np.ndarray:
    """A sorted uniform draw over the space's range, on its grid (the old synthetic target)."""
    return _grid(rng.uniform(space.low, space.high, space.spec.n_factors), space)


def realistic_target(space: SearchSpace, rng: np.random.Generator) -> np.ndarray:
    """YaRN-cd's curve of the space perturbed by a smooth log-normal field, sorted, on the grid.

    The real optimum lies near the best classic row but not on it: this puts λ* within ≈ 15 %
    of YaRN-cd in every dimension, with a smooth (not per-dimension independent) deviation.
    """
    seeds = dict(space.seed_scalings())
    base = np.asarray(seeds["yarn-cd"].factors)
    n = base.size
    knots = rng.normal(0.0, 0.15, 5)
    field = np.interp(np.arange(n), np.linspace(0, n - 1, knots.size), knots)
    return _grid(base * np.exp(field), space)


@dataclass(frozen=True)
class Instance:
    """One landscape drawn for one benchmark seed.

    Attributes:
        name: The landscape's name.
        space: The search space its trials live in.
        g: λ (sorted, as evaluated) → the λ part of the true value.
        target: The λ minimising the (constrained) λ part.
        n_hat_star: The best n̂.
        t_star: The best t.
        noise: Standard deviation of the fixed per-point error (0: exact).
        constraint: λ → the constraint value (≤ 0 feasible), or None.
        optimum: The known minimum of the true value (feasible, for a constrained one).
        value: (λ, n̂, t) → the whole true value, in place of `g` and the n̂ and t terms
            (the fitted model of the real objective), or None.
    """

    name: str
    space: SearchSpace
    g: Callable[[np.ndarray], float]
    target: np.ndarray
    n_hat_star: int
    t_star: float
    noise: float = 0.0
    constraint: Callable[[np.ndarray], float] | None = None
    optimum: float = 0.0
    value: Callable[[np.ndarray, int, float], float] | None = None

    def decode(self, params: Mapping[str, Any]) -> tuple[np.ndarray, int, float]:
        """Trial parameters → (λ as evaluated, n̂, t)."""
        scaling = self.space.to_scaling(params)
        return np.asarray(scaling.factors), scaling.n_hat, scaling.attention_scale

    def true_value(self, params: Mapping[str, Any]) -> float:
        """The noise-free value of a trial."""
        lam, n_hat, t = self.decode(params)
        if self.value is not None:
            return self.value(lam, n_hat, t)
        h = N_HAT_WEIGHT * (math.log2(1 + n_hat) - math.log2(1 + self.n_hat_star)) ** 2
        return float(self.g(lam) + h + T_WEIGHT * (t - self.t_star) ** 2)

    def observed(self, params: Mapping[str, Any]) -> float:
        """What the sampler sees: the true value plus the fixed error of this point."""
        value = self.true_value(params)
        if self.noise:
            lam, n_hat, t = self.decode(params)
            key = np.round(np.concatenate([lam, [n_hat, t]]), 8).tobytes()
            draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
            value += self.noise * float(np.random.default_rng(draw).standard_normal())
        return value

    def violation(self, params: Mapping[str, Any]) -> float | None:
        """The constraint value of a trial (≤ 0 feasible), None when unconstrained."""
        if self.constraint is None:
            return None
        return float(self.constraint(self.decode(params)[0]))


def _quadratic(target: np.ndarray, weights: np.ndarray | None = None):
    w = np.ones_like(target) if weights is None else weights

    def g(lam: np.ndarray) -> float:
        return float(np.sum(w * (lam - target) ** 2))

    return g


def _coupled(target: np.ndarray):
    def g(lam: np.ndarray) -> float:
        d = lam - target
        return float(np.sum(d**2) + COUPLING * np.sum(np.diff(d) ** 2))

    return g


def _extras(space: SearchSpace, rng: np.random.Generator) -> tuple[int, float]:
    n_hat = int(rng.choice(space.n_hat))
    t = round(float(rng.uniform(*T_BOUNDS)), 2)
    return n_hat, t


def _constrained(space: SearchSpace, rng: np.random.Generator) -> Instance:
    k, delta = CONSTRAINED_BLOCK, CONSTRAINED_DELTA
    target = realistic_target(space, rng)
    # Room below the block so the projection (λ*_{<k} − δ) stays ≥ the lower bound.
    target = _grid(np.maximum(target, space.low + delta), space)
    cap = float(np.mean(target[:k])) - delta
    feasible = target.copy()
    feasible[:k] -= delta
    n_hat, t = _extras(space, rng)

    def constraint(lam: np.ndarray) -> float:
        return float(np.mean(lam[:k]) - cap)

    g = _quadratic(target)
    return Instance("constrained", space, g, feasible, n_hat, t, 0.0, constraint, g(feasible))


def build(name: str, scale: int, seed: int) -> Instance:
    """Landscape `name` at `scale`× for benchmark seed `seed` (λ*, n̂*, t* drawn from it).

    Raises:
        KeyError: An unknown landscape.
    """
    space = make_space(scale)
    rng = np.random.default_rng([seed, scale, sum(map(ord, name))])
    if name in ("surrogate", "noisy"):
        from bench.surrogate import NOISE  # the fitted model of the real objective
        from bench.surrogate import surrogate_optimum

        value, target, n_hat, t = surrogate_optimum(space)
        noise = NOISE if name == "noisy" else 0.0
        return Instance(name, space, lambda lam: 0.0, target, n_hat, t, noise, value=value)
    if name == "constrained":
        return _constrained(space, rng)
    if name == "quadratic":
        target = uniform_target(space, rng)
        n_hat, t = _extras(space, rng)
        return Instance(name, space, _quadratic(target), target, n_hat, t)
    target = realistic_target(space, rng)
    n_hat, t = _extras(space, rng)
    if name == "illcond":
        weights = 10.0 ** (2.0 * rng.permutation(np.linspace(0.0, 1.0, target.size)))
        weights /= weights.mean()
        return Instance(name, space, _quadratic(target, weights), target, n_hat, t)
    if name == "coupled":
        return Instance(name, space, _coupled(target), target, n_hat, t)
    raise KeyError(name)


#: Every landscape, in the table's order.
LANDSCAPES = ("quadratic", "illcond", "coupled", "noisy", "constrained", "surrogate")


def optimum_params(instance: Instance) -> dict[str, Any]:
    """The trial parameters of the known optimum (what a test evaluates to check it)."""
    return instance.space.encode(instance.target, instance.n_hat_star, instance.t_star)
