# Generated from longrope_opt/samplers/_operators.py by optunahub/build.py: do not edit.
"""LongRoPE's mutation and crossover under the monotone constraint (paper Algorithm 1), pure numpy.

A genome is ``(factors, n_hat, attention_scale, critical)``. Every operator returns a genome whose
factors are non-decreasing and inside the space's bounds, or ``None`` when it cannot within its
tries. In the critical shape (``critical`` set) only λ from c on are genes; the ones below are
the ramp the space's `complete` recomputes, and c itself moves by a step of one or two.
"""

from __future__ import annotations

from collections.abc import Container
from typing import NamedTuple

import numpy as np

from ._protocol import EvolutionSpace


class Genome(NamedTuple):
    """One candidate: λ (every one, non-decreasing), n̂, t (None when the space fixes it) and
    the critical dimension (None in the full shape)."""

    factors: np.ndarray
    n_hat: int
    attention_scale: float | None
    critical: int | None = None

    def key(self) -> tuple:
        """Hashable identity used for de-duplication (λ to 1e-6)."""
        t = None if self.attention_scale is None else round(float(self.attention_scale), 6)
        key = (tuple(np.round(self.factors, 6).tolist()), int(self.n_hat), t)
        return key if self.critical is None else (*key, int(self.critical))


def is_monotone(factors: np.ndarray) -> bool:
    """λ_i ≤ λ_{i+1} for every i."""
    return bool(np.all(np.diff(factors) >= 0))


def _grid_between(
    lo: float, hi: float, space: EvolutionSpace, rng: np.random.Generator, current: float
) -> float:
    # A uniform grid point in [lo, hi]; when no grid point lies there, keep the current value.
    step = space.step
    if not step:
        return float(rng.uniform(lo, hi))
    k_lo = int(np.ceil((lo - space.low) / step - 1e-9))
    k_hi = int(np.floor((hi - space.low) / step + 1e-9))
    if k_lo > k_hi:
        return current
    return round(space.low + step * int(rng.integers(k_lo, k_hi + 1)), 10)


def _redraw(f: np.ndarray, space: EvolutionSpace, rng: np.random.Generator, prob: float) -> None:
    # Left to right, each picked λ_i uniformly in [λ_{i−1}, λ_{i+1}] (bounds at the ends).
    n = f.size
    for i in np.flatnonzero(rng.random(n) < prob):
        lo = space.low if i == 0 else f[i - 1]
        hi = space.high if i == n - 1 else f[i + 1]
        f[i] = _grid_between(lo, hi, space, rng, f[i])


def _mutate_extras(
    parent: Genome, space: EvolutionSpace, rng: np.random.Generator, prob: float, *, local: bool
) -> tuple[int, float | None]:
    # n̂ re-drawn from its set and a searched t changed, each with probability `prob`: t
    # uniformly in its bounds (the paper), or by a small log-normal step (`local`).
    n_hat, t = parent.n_hat, parent.attention_scale
    choices, bounds = space.n_hat_choices, space.attention_range
    if choices is not None and len(choices) > 1 and rng.random() < prob:
        n_hat = int(rng.choice(choices))
    if bounds is not None and (not local or t is not None) and rng.random() < prob:
        lo, hi = bounds
        if local and t is not None:
            t = round(float(np.clip(t * np.exp(0.03 * rng.standard_normal()), lo, hi)), 4)
        else:
            t = round(float(rng.uniform(lo, hi)), 4)
    return n_hat, t


def _shift_critical(c: int, space: EvolutionSpace, rng: np.random.Generator) -> int:
    bounds = space.critical_bounds
    assert bounds is not None  # critical shape
    return int(np.clip(c + int(rng.choice((-2, -1, 1, 2))), *bounds))


def mutate(parent: Genome, space: EvolutionSpace, rng: np.random.Generator, prob: float) -> Genome:
    """Re-draw each λ_i with probability `prob`, uniformly on the grid between its neighbours.

    Dimensions are visited left to right and λ_i is drawn in [λ_{i−1}, λ_{i+1}] (the bounds at
    the ends), so a monotone parent always gives a monotone child (official ``dim_mono.mutate``).
    n̂ and a searched t are re-drawn with the same probability; so is c (critical shape), moved
    by ±1 or ±2 first, so the λ re-drawn are those from the new c on.
    """
    c = parent.critical
    if c is None:
        f = np.maximum.accumulate(np.clip(parent.factors, space.low, space.high))
        _redraw(f, space, rng, prob)
    else:
        if rng.random() < prob:
            c = _shift_critical(c, space, rng)
        f = np.array(parent.factors, dtype=np.float64)
        # λ that were ramp and are now genes start at their ramp value, clipped up to s
        tail = np.maximum.accumulate(np.clip(f[c:], space.low, space.high))
        _redraw(tail, space, rng, prob)
        f[c:] = tail
        f = space.complete(f, c)
    n_hat, t = _mutate_extras(parent, space, rng, prob, local=False)
    return Genome(f, n_hat, t, c)


def crossover(
    a: Genome,
    b: Genome,
    rng: np.random.Generator,
    *,
    tries: int = 20,
    space: EvolutionSpace | None = None,
) -> Genome | None:
    """Child taking each λ_i from `a` or `b`; only a monotone child is returned.

    Up to `tries` uniform masks (each gene from `b` with probability 0.5, official code: 0.3
    then 0.5) are tried; then a one-point crossover at a random cut where the two parents join
    monotonically. ``None`` if the parents are identical or no valid child exists. In the
    critical shape (`space` needed) c comes from either parent and the genes from c on mix.
    """
    if (
        np.array_equal(a.factors, b.factors)
        and a.n_hat == b.n_hat
        and a.attention_scale == b.attention_scale
        and a.critical == b.critical
    ):
        return None
    if a.critical is not None and b.critical is not None and space is not None:
        return _crossover_critical(a, b, space, rng, tries=tries)
    n = a.factors.size

    def extras() -> tuple[int, float | None]:
        n_hat = a.n_hat if rng.random() < 0.5 else b.n_hat
        t = a.attention_scale if rng.random() < 0.5 else b.attention_scale
        return n_hat, t

    for _ in range(tries):
        mask = rng.random(n) < 0.5
        child = np.where(mask, b.factors, a.factors)
        if is_monotone(child) and not (
            np.array_equal(child, a.factors) and np.array_equal(child, b.factors)
        ):
            return Genome(child, *extras())
    cuts = [i for i in range(1, n) if a.factors[i - 1] <= b.factors[i]]
    if cuts:
        i = int(rng.choice(cuts))
        return Genome(np.concatenate([a.factors[:i], b.factors[i:]]), *extras())
    return None


def _crossover_critical(
    a: Genome, b: Genome, space: EvolutionSpace, rng: np.random.Generator, *, tries: int
) -> Genome | None:
    c = a.critical if rng.random() < 0.5 else b.critical
    assert c is not None  # both parents carry one
    n = a.factors.size

    def child_of(genes: np.ndarray) -> Genome | None:
        tail = np.clip(genes[c:], space.low, space.high)
        if not is_monotone(tail):
            return None
        f = space.complete(np.concatenate([genes[:c], tail]), c)
        n_hat = a.n_hat if rng.random() < 0.5 else b.n_hat
        t = a.attention_scale if rng.random() < 0.5 else b.attention_scale
        return Genome(f, n_hat, t, c)

    for _ in range(tries):
        child = child_of(np.where(rng.random(n) < 0.5, b.factors, a.factors))
        if child is not None and not (
            np.array_equal(child.factors, a.factors) and np.array_equal(child.factors, b.factors)
        ):
            return child
    cuts = [i for i in range(c + 1, n) if a.factors[i - 1] <= b.factors[i]]
    if cuts:
        i = int(rng.choice(cuts))
        return child_of(np.concatenate([a.factors[:i], b.factors[i:]]))
    return None


def random_monotone(space: EvolutionSpace, rng: np.random.Generator, n: int) -> Genome:
    """A fresh non-decreasing vector: sorted uniform grid points (the last-resort fallback)."""
    bounds = space.critical_bounds
    if bounds is not None:
        c = int(rng.integers(bounds[0], bounds[1] + 1))
        f = np.ones(n)
        f[c:] = np.sort(space.snap(rng.uniform(space.low, space.high, n - c)))
        n_hat, t = _random_extras(space, rng)
        return Genome(space.complete(f, c), n_hat, t, c)
    f = np.sort(space.snap(rng.uniform(space.low, space.high, n)))
    return Genome(f, *_random_extras(space, rng))


def _random_extras(space: EvolutionSpace, rng: np.random.Generator) -> tuple[int, float | None]:
    # n̂ from its choices (0 when the space has no n̂ gene), t in its range when searched.
    choices, bounds = space.n_hat_choices, space.attention_range
    n_hat = int(rng.choice(choices)) if choices else 0
    t = round(float(rng.uniform(*bounds)), 4) if bounds is not None else None
    return n_hat, t


def parent_spread(parents: list[Genome], *, floor: float = 0.01, cap: float = 0.3) -> np.ndarray:
    """Per-dimension step size of `mutate_adaptive`: the spread (std) of log λ over the parents,
    clipped to [floor, cap]. Wide while the parents disagree, fine once they agree — the step
    sizes adapt the way a diagonal evolution strategy's do, without state outside the study."""
    logs = np.log(np.stack([p.factors for p in parents]))  # (k, n)
    return np.clip(logs.std(axis=0), floor, cap)


def mutate_adaptive(
    parent: Genome,
    space: EvolutionSpace,
    rng: np.random.Generator,
    prob: float,
    sigma: np.ndarray,
) -> Genome:
    """Multiply each picked λ_i by exp(σ_i·N(0, 1)), then sort (at least one gene moves).

    Unlike `mutate`, a gene is not confined between its neighbours, so a run of equal λ (a
    plateau, e.g. YaRN's λ = 1 block) can move as a whole; sorting keeps the child monotone.
    In the critical shape only λ from c on move, and c shifts by ±1 or ±2 with probability p.
    """
    c = parent.critical
    if c is not None and rng.random() < prob:
        c = _shift_critical(c, space, rng)
    start = 0 if c is None else c
    f = np.array(parent.factors, dtype=np.float64)
    genes = np.clip(f[start:], space.low, space.high)
    picked = rng.random(genes.size) < prob
    if not picked.any():
        picked[rng.integers(genes.size)] = True
    steps = np.exp(sigma[start:] * rng.standard_normal(genes.size))
    genes = np.sort(np.clip(np.where(picked, genes * steps, genes), space.low, space.high))
    f[start:] = genes
    f = space.complete(f, c)
    n_hat, t = _mutate_extras(parent, space, rng, prob, local=True)
    return Genome(f, n_hat, t, c)


def blend(a: Genome, b: Genome, space: EvolutionSpace, rng: np.random.Generator) -> Genome:
    """λ = a + u·(b − a) with one u ~ U(−0.25, 1.25) for every gene (BLX-α), sorted: for u in
    [0, 1] a mix of two monotone vectors is already monotone; outside it the child extrapolates
    along the line joining two good parents. n̂, t and c come from either parent."""
    c = a.critical if rng.random() < 0.5 else b.critical
    u = float(rng.uniform(-0.25, 1.25))
    start = 0 if c is None else c
    f = np.array(a.factors, dtype=np.float64)
    mix = a.factors[start:] + u * (b.factors[start:] - a.factors[start:])
    f[start:] = np.sort(np.clip(mix, space.low, space.high))
    f = space.complete(f, c)
    n_hat = a.n_hat if rng.random() < 0.5 else b.n_hat
    t = a.attention_scale if rng.random() < 0.5 else b.attention_scale
    return Genome(f, n_hat, t, c)


def sample_around(
    parents: list[Genome],
    space: EvolutionSpace,
    rng: np.random.Generator,
    prob: float,
    *,
    floor: float = 0.005,
    cap: float = 0.5,
) -> Genome:
    """A child drawn from the parents' distribution: log λ ~ N(mean, std²) per dimension over
    the parents (std clipped to [floor, cap]), sorted — the estimation-of-distribution step of a
    cross-entropy method. Wide while the parents disagree, it narrows as they converge, so the
    search refines instead of stalling once the seeds are left behind. n̂, t and c come from a
    random parent (c shifted by ±1 or ±2 with probability `prob`)."""
    logs = np.log(np.stack([p.factors for p in parents]))  # (k, n)
    mean, std = logs.mean(axis=0), np.clip(logs.std(axis=0), floor, cap)
    donor = parents[int(rng.integers(len(parents)))]
    c = donor.critical
    if c is not None and rng.random() < prob:
        c = _shift_critical(c, space, rng)
    start = 0 if c is None else c
    f = np.array(donor.factors, dtype=np.float64)
    draw = np.exp(mean[start:] + std[start:] * rng.standard_normal(f.size - start))
    f[start:] = np.sort(np.clip(draw, space.low, space.high))
    f = space.complete(f, c)
    n_hat, t = _mutate_extras(donor, space, rng, prob, local=True)
    return Genome(f, n_hat, t, c)


def operator_child(
    parents: list[Genome],
    space: EvolutionSpace,
    rng: np.random.Generator,
    seen: Container,
    *,
    gen: int,
    slot: int,
    num_mutations: int,
    adaptive: bool,
    prob: float,
    max_tries: int,
) -> Genome:
    """A child of `parents` not in `seen`, on the space's grid, by the paper's operators (slots
    below `num_mutations` mutate, the rest cross over) or the adaptive ones (steps sized by the
    parents' spread, from the elite half); bounded fallbacks after `max_tries` collisions: a
    full re-draw of a parent, then a random monotone vector."""
    use_crossover = gen > 0 and slot >= num_mutations and len(parents) >= 2
    sigma = parent_spread(parents) if adaptive else None
    if sigma is not None and gen > 0:
        # the elite half: a cross-entropy step draws from the best parents only
        parents = parents[: max(2, len(parents) // 2)]
    for _ in range(max_tries):
        child: Genome | None
        if sigma is not None:
            if use_crossover:
                i, j = rng.choice(len(parents), size=2, replace=False)
                child = blend(parents[int(i)], parents[int(j)], space, rng)
            elif slot % 2:
                a = parents[int(rng.integers(len(parents)))]
                child = mutate_adaptive(a, space, rng, prob, sigma)
            else:
                child = sample_around(parents, space, rng, prob)
        elif use_crossover:
            i, j = rng.choice(len(parents), size=2, replace=False)
            child = crossover(parents[int(i)], parents[int(j)], rng, space=space)
            if child is None:  # identical parents or no valid child: mutate (official code)
                child = mutate(parents[int(i)], space, rng, prob)
        else:
            child = mutate(parents[int(rng.integers(len(parents)))], space, rng, prob)
        assert child is not None  # every branch above ends with a child
        child = _on_grid(space, child)
        if child.key() not in seen:
            return child
    # Fallbacks, each bounded: a full re-draw of a parent, then a random monotone vector.
    for _ in range(max_tries):
        parent = parents[int(rng.integers(len(parents)))]
        child = _on_grid(space, mutate(parent, space, rng, 1.0))
        if child.key() not in seen:
            return child
    while True:
        child = random_monotone(space, rng, len(space.names))
        if child.key() not in seen:
            return child


def _on_grid(space: EvolutionSpace, genome: Genome) -> Genome:
    # Rounding to the grid is non-decreasing, so a monotone child stays monotone.
    return genome._replace(factors=space.snap_candidate(genome.factors, genome.critical))
