"""The validation statistics against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.evaluation import paired_bootstrap
from longrope_opt.evaluation import sign_test
from longrope_opt.evaluation import wilson


def test_wilson_matches_the_hand_computed_interval() -> None:
    # 16/20, z = 1.96: centre (16 + 1.9208) / 23.8416 = 0.75166; half 1.96·sqrt(3.2 + 0.9604)
    # / 23.8416 = 0.16768 → [0.5840, 0.9193]
    assert wilson(16, 20) == pytest.approx((0.58398, 0.91934), abs=1e-4)
    # k = 0 and k = n: the interval touches 0 or 1 and has width z²/(n + z²) = 0.1611
    assert wilson(0, 20) == pytest.approx((0.0, 0.16113), abs=1e-4)
    assert wilson(20, 20) == pytest.approx((0.83887, 1.0), abs=1e-4)
    with pytest.raises(InvalidArgumentError, match="`k` must be in"):
        wilson(3, 2)


def test_exact_sign_test_matches_the_binomial_sums() -> None:
    assert sign_test(1, 8) == pytest.approx(2 * (1 + 9) / 2**9)  # 0.0390625
    assert sign_test(7, 1) == pytest.approx(2 * (1 + 8) / 2**8)  # 0.0703125, either order
    assert sign_test(0, 5) == pytest.approx(2 / 2**5)
    assert sign_test(3, 3) == 1.0  # capped at 1
    assert sign_test(0, 0) == 1.0  # no discordant pair: no evidence either way
    with pytest.raises(InvalidArgumentError):
        sign_test(-1, 2)


def test_bootstrap_interval_of_a_known_distribution() -> None:
    # Mean of 4 draws from [0, 0, 0, 1]: P(0) = (3/4)^4 = 0.316 > 2.5 %, so the low end is 0;
    # P(>= 0.75) = 4·(1/4)^3·(3/4) + (1/4)^4 = 0.0508 > 2.5 % and P(1) = 0.0039 < 2.5 %, so the
    # high end is 0.75.
    assert paired_bootstrap([0.0, 0.0, 0.0, 1.0], seed=0) == (0.0, 0.75)
    # constant differences have no spread; one document gives a point
    assert paired_bootstrap([-0.02] * 5) == pytest.approx((-0.02, -0.02))
    assert paired_bootstrap([0.3]) == pytest.approx((0.3, 0.3))


def test_bootstrap_is_fixed_by_its_seed() -> None:
    diffs = [-0.031, -0.012, 0.004, -0.026, -0.018]
    a = paired_bootstrap(diffs, seed=7)
    assert paired_bootstrap(diffs, seed=7) == a
    assert paired_bootstrap(diffs, seed=8) != a
    low, high = a
    assert min(diffs) <= low < sum(diffs) / len(diffs) < high <= max(diffs)
    assert not math.isnan(low)
    with pytest.raises(InvalidArgumentError, match="non-empty"):
        paired_bootstrap([])
