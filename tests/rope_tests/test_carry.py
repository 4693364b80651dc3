"""`carry`: factors found at one scale taken to another by one rule."""

from __future__ import annotations

import numpy as np
import pytest

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.evaluation import classic_rows
from longrope_opt.rope import carry


SPEC = RopeSpec(head_dim=64, base=100000.0, original_length=8192)


@pytest.mark.parametrize("method", ["pi", "ntk", "yarn-cd"])
@pytest.mark.parametrize(("s_from", "s_to"), [(4, 8), (8, 4), (2, 16)])
def test_carry_takes_a_classic_method_at_one_scale_to_itself_at_another(
    method: str, s_from: int, s_to: int
) -> None:
    found = {r.name: r.scaling for r in classic_rows(SPEC, s_from * 8192)}[method]
    wanted = {r.name: r.scaling for r in classic_rows(SPEC, s_to * 8192)}[method]
    carried = carry(found, s_from, s_to)
    np.testing.assert_allclose(carried.factors, wanted.factors, rtol=1e-12)
    assert carried.n_hat == wanted.n_hat
    assert carried.attention_scale == pytest.approx(wanted.attention_scale, rel=1e-12)


def test_carry_keeps_unscaled_dims_n_hat_and_the_order_of_the_factors() -> None:
    found = RopeScaling(np.array([1.0, 1.3, 2.0, 4.0, 4.5, 7.9]), 4, 1.09)
    carried = carry(found, 4, 8)
    assert carried.factors[0] == 1.0 and carried.n_hat == 4
    assert np.all(np.diff(carried.factors) > 0)  # monotone stays monotone
    assert carried.factors[3] == pytest.approx(8.0)  # λ = s becomes s'
    assert carried.attention_scale == pytest.approx(np.sqrt(1 + (1.09**2 - 1) * 1.5))
    with pytest.raises(InvalidArgumentError, match="must be > 1"):
        carry(found, 1.0, 8)
    with pytest.raises(InvalidArgumentError, match="cannot be carried"):
        carry(RopeScaling(found.factors, 0, 0.3), 2, 64)
