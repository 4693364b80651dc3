"""Composition of two stages and the short/long switch (pure math)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.rope import ShortLongScaling
from longrope_opt.rope import compose
from longrope_opt.rope import ntk
from longrope_opt.rope import yarn


SPEC = RopeSpec(head_dim=64, base=100000.0, original_length=8192)

monotone = st.lists(st.floats(1.0, 8.0), min_size=32, max_size=32).map(lambda v: np.sort(v))


@settings(max_examples=50, deadline=None)
@given(base=monotone, rel=monotone, n_hat=st.integers(0, 64), t=st.floats(1.0, 1.5))
def test_compose_rescales_the_base_frequencies(base, rel, n_hat, t) -> None:
    b = RopeScaling(base, 4, 1.2)
    r = RopeScaling(rel, n_hat, t)
    c = compose(b, r)
    # The second stage divides the base stage's frequencies again.
    np.testing.assert_allclose(c.inv_freq(SPEC), b.inv_freq(SPEC) / rel, rtol=1e-12)
    assert np.all(np.diff(c.factors) >= 0)  # monotone × monotone stays monotone
    assert (c.n_hat, c.attention_scale) == (n_hat, t)  # the later stage's n̂ and t win


def test_compose_identity_and_length_check() -> None:
    base = yarn(SPEC, 16384)
    assert compose(base, RopeScaling(np.ones(32), base.n_hat, base.attention_scale)) == base
    with pytest.raises(ValueError, match="`relative` must have 32 factors"):
        compose(base, RopeScaling(np.ones(16)))


def test_short_long_select_switches_past_the_trained_length() -> None:
    short, long = RopeScaling(np.ones(32)), ntk(SPEC, 32768)
    pair = ShortLongScaling(short, long, 8192)
    assert pair.select(1) is short
    assert pair.select(8192) is short
    assert pair.select(8193) is long
    assert pair.n_hat == 0
    assert ShortLongScaling(short, RopeScaling(long.factors, 12), 8192).n_hat == 12


def test_short_long_validates() -> None:
    with pytest.raises(ValueError, match="`short` must have 32 factors"):
        ShortLongScaling(RopeScaling(np.ones(16)), RopeScaling(np.ones(32)), 8192)
    with pytest.raises(ValueError, match="`original_length` must be an integer >= 1"):
        ShortLongScaling(RopeScaling(np.ones(32)), RopeScaling(np.ones(32)), 0)
