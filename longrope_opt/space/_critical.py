"""The critical-dimension shape of the search space (LongRoPE2, Shang et al. 2025, §3.2).

Frequencies below the critical dimension c completed full turns within the trained length, so
they need little rescaling; LongRoPE2 searches only λ_c … λ_{n−1}, in [s, 2s] and non-decreasing,
and lets the dimensions below follow an NTK-style ramp up to λ_c:

    λ_i = λ_c^(i/c)   for i < c        (λ_0 = 1, continuous at c)

The paper searches c as well (the released code takes it as a flag); here c is a searched
integer in [c₀ − r, c₀ + r] around the theoretical c₀ = `critical_dimension(spec)`.

Trial parameters of this shape: ``critical_dim`` and the λ names from the lowest c on (a λ below
the trial's own c is carried but unused — neutral, so a later mutation of c can bring it back).
Pure numpy: samplers import this.
"""

from __future__ import annotations

import numpy as np

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import critical_dimension


CRITICAL = "critical_dim"
SHAPES = ("full", "critical")
#: c is searched in [c₀ − r, c₀ + r]; LongRoPE2 found real critical dimensions up to 5 below
#: theory (LLaMA3-8B: 30 vs 35), so r = 6 covers that with one to spare.
DEFAULT_CRITICAL_RADIUS = 6


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"`{name}` must be an integer >= 0, got {value!r}.")


def critical_range(spec: RopeSpec, radius: int, above: int | None = None) -> tuple[int, int]:
    """``(lowest, highest)`` critical dimension searched: c₀ − `radius` … c₀ + `above` (default
    `radius`), inside [1, n − 1].

    With ``above = 0`` every candidate's λ is at or above YaRN-cd's, elementwise: λ_c ≥ s and
    c ≤ c₀ give λ_c^(i/c) ≥ s^(i/c₀) below c, and λ ≥ s from c on. A c above c₀ interpolates
    the dims below it less than YaRN-cd does: where a perplexity search can lose retrieval.
    """
    _check_count("critical_radius", radius)
    if above is not None:
        _check_count("critical_above", above)
    n = spec.n_factors
    c0 = critical_dimension(spec)
    if c0 >= n:
        raise InvalidArgumentError(
            f"the critical shape needs a frequency whose period exceeds the trained length "
            f"{spec.original_length}; every period of this RoPE fits in it (use `space` 'full')."
        )
    return max(1, c0 - radius), min(n - 1, c0 + (radius if above is None else above))


def with_ramp(factors: np.ndarray, critical: int) -> np.ndarray:
    """`factors` with λ_i = λ_c^(i/c) below c (λ at and above c unchanged)."""
    f = np.array(factors, dtype=np.float64)
    c = int(critical)
    f[:c] = f[c] ** (np.arange(c, dtype=np.float64) / c)
    return f


def sorted_tail(factors: np.ndarray, critical: int) -> np.ndarray:
    """The sort repair of this shape: λ from c on sorted, the ramp recomputed from the new λ_c."""
    f = np.array(factors, dtype=np.float64)
    f[critical:] = np.sort(f[critical:])
    return with_ramp(f, critical)


def seed_tails(
    spec: RopeSpec, scale: float, high: float, low_c: int
) -> list[tuple[str, np.ndarray, int]]:
    """``[(name, full λ, c)]``: the seeds of the critical shape.

    - ``yarn-cd``: λ = s from the theoretical c₀ on (what YaRN and PI give the dimensions past
      the critical one), the ramp below — YaRN with its critical dimension corrected;
    - ``ntk-cd``: the NTK ramp λ_i = s^(i/c₀) continued past c₀ (capped at `high`) — NTK with
      its base chosen so that the critical dimension is scaled by exactly s;
    - ``yarn-cd-low``: as ``yarn-cd`` from the lowest searched c (the paper found real critical
      dimensions below theory).
    """
    n = spec.n_factors
    c0 = min(max(critical_dimension(spec), low_c), n - 1)
    i = np.arange(n, dtype=np.float64)
    flat = np.full(n, scale)
    ntk = np.minimum(scale ** (i / c0), high)
    return [
        ("yarn-cd", with_ramp(flat, c0), c0),
        ("ntk-cd", with_ramp(ntk, c0), c0),
        ("yarn-cd-low", with_ramp(flat, low_c), low_c),
    ]


def tail_to_factors(tail: np.ndarray, n: int, first: int, critical: int) -> np.ndarray:
    """Every λ from a trial's λ parameters (indices `first` … n − 1): the ramp below c."""
    f = np.ones(n)
    f[first:] = tail
    return with_ramp(f, critical)


def factors_to_tail(
    factors: np.ndarray, first: int, critical: int, low: float, high: float
) -> np.ndarray:
    """λ parameters (indices `first` … n − 1) of every λ; those below c are the ramp, unused by
    `tail_to_factors`, and stored clipped to [low, high] so they are valid parameters."""
    values = np.asarray(factors, dtype=np.float64)[first:]
    below = np.arange(first, first + values.size) < critical
    return np.where(below, np.clip(values, low, high), values)
