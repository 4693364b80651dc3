"""The evolution's starting points in a `SearchSpace`: PI/NTK/YaRN, the short-search shapes, or
the critical shape's corrected YaRN/NTK (what `SearchSpace.seed_scalings`/`seed_params` return).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

import numpy as np

from longrope_opt._critical import seed_tails
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import ATTENTION_RULES
from longrope_opt.rope import METHODS
from longrope_opt.rope import RopeScaling


if TYPE_CHECKING:
    from longrope_opt.space import SearchSpace


def seed_scalings(space: SearchSpace) -> list[tuple[str, RopeScaling]]:
    """PI, NTK and YaRN for the relative extension, clipped to the bounds; for a short search
    (no extension to seed from): λ = 1, NTK's shape and a linear ramp, each reaching the cap."""
    if space.shape == "critical":
        raise InvalidArgumentError(
            "the critical shape's seeds carry a critical dimension: use `seed_params`."
        )
    if not space.is_short:
        rel, target = space.relative_spec, space.target_length
        seeds = [(m, METHODS[m](rel, target)) for m in ("pi", "ntk", "yarn")]
        return [(m, RopeScaling(space.snap_bounds(sc.factors), method=m)) for m, sc in seeds]
    n, low, cap = space.spec.n_factors, space.lambda_low, space.high
    ramp = np.arange(n, dtype=np.float64) / max(n - 1, 1)
    return [
        ("none", RopeScaling(np.full(n, low), method="none")),
        ("ntk", RopeScaling(cap ** (np.arange(n) * 2.0 / (2 * n - 2)), method="ntk")),
        ("linear", RopeScaling(low + ramp * (cap - low), method="linear")),
    ]


def seed_params(space: SearchSpace) -> list[tuple[str, dict[str, Any]]]:
    """`seed_scalings` as trial parameters, or in the critical shape YaRN and NTK with the
    critical dimension corrected (`longrope_opt._critical.seed_tails`)."""
    bounds = space.critical_bounds
    if bounds is None:
        return [(m, space.to_params(sc)) for m, sc in seed_scalings(space)]
    s, L = space.spec.scale(space.target_length), space.spec.original_length
    t = ATTENTION_RULES["yarn"](s, L) if space.attention == "search" else None
    return [
        (name, space.encode(f, space.n_hat[0], t, critical=c))
        for name, f, c in seed_tails(space.spec, s, space.high, bounds[0])
    ]
