"""The evolution's starting points in a `SearchSpace`: PI/NTK/YaRN, the short-search shapes, or
the critical shape's corrected YaRN/NTK (what `SearchSpace.seed_scalings`/`seed_params` return).
"""

from __future__ import annotations

from typing import Any
from typing import Protocol

import numpy as np

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import ATTENTION_RULES
from longrope_opt.rope import METHODS
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.space._critical import seed_tails


class _Space(Protocol):
    """What the seeds read of a `longrope_opt.space.SearchSpace` (which calls them)."""

    @property
    def spec(self) -> RopeSpec: ...
    @property
    def target_length(self) -> int: ...
    @property
    def shape(self) -> str: ...
    @property
    def seeds(self) -> tuple[str, ...]: ...
    @property
    def base(self) -> RopeScaling | None: ...
    @property
    def lambda_low(self) -> float: ...
    @property
    def attention(self) -> str: ...
    @property
    def n_hat(self) -> tuple[int, ...]: ...
    @property
    def attention_bounds(self) -> tuple[float, float]: ...

    @property
    def is_short(self) -> bool: ...
    @property
    def relative_spec(self) -> RopeSpec: ...
    @property
    def high(self) -> float: ...
    @property
    def critical_bounds(self) -> tuple[int, int] | None: ...
    def snap_bounds(self, values: np.ndarray) -> np.ndarray: ...
    def to_params(self, scaling: RopeScaling) -> dict[str, Any]: ...
    def encode(
        self, factors: np.ndarray, n_hat: int, attention_scale: float | None = None, *,
        critical: int | None = None,
    ) -> dict[str, Any]: ...  # fmt: skip


def seed_scalings(space: _Space) -> list[tuple[str, RopeScaling]]:
    """PI, NTK and YaRN for the relative extension, clipped to the bounds; for a short search
    (no extension to seed from): λ = 1, NTK's shape and a linear ramp, each reaching the cap."""
    if space.shape == "critical":
        raise InvalidArgumentError(
            "the critical shape's seeds carry a critical dimension: use `seed_params`."
        )
    if not space.is_short:
        rel, target = space.relative_spec, space.target_length
        seeds = [(m, METHODS[m](rel, target).factors) for m in space.seeds if m in METHODS]
        corrected = [m for m in space.seeds if m not in METHODS]
        if corrected and space.base is None:  # LongRoPE2's critical-dimension correction
            s = rel.scale(target)
            tails = {name: f for name, f, _ in seed_tails(rel, s, space.high, 0)}
            seeds += [(m, tails[m]) for m in corrected]
        order = {m: i for i, m in enumerate(space.seeds)}
        seeds.sort(key=lambda ms: order[ms[0]])
        t = search_start(space)
        return [(m, RopeScaling(space.snap_bounds(f), 0, t, method=m)) for m, f in seeds]
    n, low, cap = space.spec.n_factors, space.lambda_low, space.high
    ramp = np.arange(n, dtype=np.float64) / max(n - 1, 1)
    t = search_start(space)
    return [
        ("none", RopeScaling(np.full(n, low), 0, t, method="none")),
        ("ntk", RopeScaling(cap ** (np.arange(n) * 2.0 / (2 * n - 2)), 0, t, method="ntk")),
        ("linear", RopeScaling(low + ramp * (cap - low), 0, t, method="linear")),
    ]


def search_start(space: _Space) -> float:
    """The seeds' t when t is searched: the t the space fixes when it is not (the default rule,
    LongRoPE's √(1 + ln s / ln L) of the whole extension), clipped to the bounds; 1 otherwise.

    Not the range's lower bound: every seed would then sit on the edge of t's range, the model's
    first fits see t only through far-off random probes and read "higher t is worse" from them,
    and the search keeps t = 1 where the optimum is inside (on the benchmark's surrogate of the
    real objective at 8×, t = 1 was most of the default's regret at 30 trials).
    """
    if space.attention != "search":
        return 1.0
    s, L = space.spec.scale(space.target_length), space.spec.original_length
    lo, hi = space.attention_bounds
    return min(max(ATTENTION_RULES["longrope"](s, L), lo), hi)


def seed_params(space: _Space) -> list[tuple[str, dict[str, Any]]]:
    """`seed_scalings` as trial parameters, or in the critical shape YaRN and NTK with the
    critical dimension corrected (`longrope_opt.space._critical.seed_tails`)."""
    bounds = space.critical_bounds
    if bounds is None:
        return [(m, space.to_params(sc)) for m, sc in seed_scalings(space)]
    s = space.spec.scale(space.target_length)
    t = search_start(space)  # encode keeps t only when it is searched
    return [
        (name, space.encode(f, space.n_hat[0], t, critical=c))
        for name, f, c in seed_tails(space.spec, s, space.high, bounds[0])
    ]
