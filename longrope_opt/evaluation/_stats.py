"""The statistics of a validation table: paired bootstrap over documents, Wilson interval, exact
sign test. Pure NumPy and the standard library: checked against hand-computed values in tests."""

from __future__ import annotations

import math

import numpy as np

from longrope_opt.errors import InvalidArgumentError


def paired_bootstrap(
    diffs: np.ndarray | list[float], *, seed: int = 0, resamples: int = 4000, level: float = 0.95
) -> tuple[float, float]:
    """Percentile interval of the mean of paired differences, resampling documents.

    Each resample draws ``len(diffs)`` documents with replacement (one generator seeded by
    `seed`, so a table is reproducible and a row's interval does not depend on other rows).

    Args:
        diffs: One difference per document (e.g. Δ log perplexity against the reference row).
        seed: The resampling generator's seed.
        resamples: Bootstrap resamples.
        level: Coverage of the interval.

    Returns:
        ``(low, high)``; both equal the one difference when there is a single document.
    """
    values = np.asarray(diffs, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise InvalidArgumentError(f"`diffs` must be a non-empty 1-D sequence, got {values.shape}.")
    if not 0.0 < level < 1.0:
        raise InvalidArgumentError(f"`level` must be in (0, 1), got {level!r}.")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, values.size, size=(resamples, values.size))  # (R, n)
    means = values[picks].mean(axis=1)  # (R,)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(low), float(high)


def wilson(k: int, n: int, *, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval of the proportion k/n (95 % with the default `z`).

    Raises:
        InvalidArgumentError: n < 1 or k outside [0, n].
    """
    if n < 1 or not 0 <= k <= n:
        raise InvalidArgumentError(f"`k` must be in [0, n] with n >= 1, got k={k}, n={n}.")
    centre = (k + z * z / 2.0) / (n + z * z)
    half = z * math.sqrt(k * (n - k) / n + z * z / 4.0) / (n + z * z)
    return max(0.0, centre - half), min(1.0, centre + half)


def sign_test(b: int, c: int) -> float:
    """Exact two-sided sign test (McNemar's exact test) on b vs c discordant pairs.

    b: pairs only the first row got right; c: pairs only the second got right. Under the null
    each discordant pair goes either way with probability 1/2.
    """
    if b < 0 or c < 0:
        raise InvalidArgumentError(f"`b` and `c` must be >= 0, got b={b}, c={c}.")
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    return min(1.0, 2.0 * sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n)
