"""Optuna's own shipped sampler contract cases, run against `LongRoPESampler` where they apply.

`RelativeSamplerTestCase` is left out on purpose: it feeds arbitrary relative search spaces
(``x``, ``y``), while this sampler's relative space is the LongRoPE space by construction;
parameters outside it go through `sample_independent`, which `BasicSamplerTestCase` covers.
"""

from __future__ import annotations

import pytest
from optuna.testing.pytest_samplers import BasicSamplerTestCase
from optuna.testing.pytest_samplers import SingleOnlySamplerTestCase

from longrope_opt import RopeSpec
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.space import SearchSpace


def _make() -> LongRoPESampler:
    space = SearchSpace(RopeSpec(head_dim=16, base=10000.0, original_length=64), 128)
    return LongRoPESampler(
        space=space, population_size=4, num_mutations=2, num_crossovers=2, num_parents=2, seed=0
    )


class TestBasic(BasicSamplerTestCase):
    @pytest.fixture
    def sampler(self):
        return _make


class TestSingleOnly(SingleOnlySamplerTestCase):
    @pytest.fixture
    def sampler(self):
        return _make
