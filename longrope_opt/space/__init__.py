"""The LongRoPE search space, shared by the objective and the sampler: parameter names, bounds
and grid, the seeds (PI, NTK, YaRN and LongRoPE2's critical-dimension corrections), the
critical space's shape, and how a trial's parameters become a `RopeScaling`. No torch here:
samplers read it through `longrope_opt.samplers.EvolutionSpace`.
"""

from __future__ import annotations

from longrope_opt.space._args import PAPER_N_HAT
from longrope_opt.space._args import PAPER_SEEDS
from longrope_opt.space._args import SEED_NAMES
from longrope_opt.space._args import attention_setting
from longrope_opt.space._args import n_hat_setting
from longrope_opt.space._critical import SHAPES
from longrope_opt.space._space import ATTENTION_SCALE
from longrope_opt.space._space import N_HAT
from longrope_opt.space._space import SearchSpace
from longrope_opt.space._space import lambda_names


__all__ = [
    "ATTENTION_SCALE",
    "N_HAT",
    "PAPER_N_HAT",
    "PAPER_SEEDS",
    "SEED_NAMES",
    "SHAPES",
    "SearchSpace",
    "attention_setting",
    "lambda_names",
    "n_hat_setting",
]
