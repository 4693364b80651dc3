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
        return [(m, RopeScaling(space.snap_bounds(f), method=m)) for m, f in seeds]
    n, low, cap = space.spec.n_factors, space.lambda_low, space.high
    ramp = np.arange(n, dtype=np.float64) / max(n - 1, 1)
    return [
        ("none", RopeScaling(np.full(n, low), method="none")),
        ("ntk", RopeScaling(cap ** (np.arange(n) * 2.0 / (2 * n - 2)), method="ntk")),
        ("linear", RopeScaling(low + ramp * (cap - low), method="linear")),
    ]


def seed_params(space: _Space) -> list[tuple[str, dict[str, Any]]]:
    """`seed_scalings` as trial parameters, or in the critical shape YaRN and NTK with the
    critical dimension corrected (`longrope_opt.space._critical.seed_tails`)."""
    bounds = space.critical_bounds
    if bounds is None:
        return [(m, space.to_params(sc)) for m, sc in seed_scalings(space)]
    s, L = space.spec.scale(space.target_length), space.spec.original_length
    t = ATTENTION_RULES["yarn"](s, L) if space.attention == "search" else None
    return [
        (name, space.encode(f, space.n_hat[0], t, critical=c))
        for name, f, c in seed_tails(space.spec, s, space.high, bounds[0])
    ]
