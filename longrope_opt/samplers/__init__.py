"""Optuna samplers: the LongRoPE evolution, a nevergrad bridge, and the registry every command
builds its sampler from. No torch or transformers here."""

from __future__ import annotations

from longrope_opt.samplers._base import SpaceSampler
from longrope_opt.samplers._index import read_trials
from longrope_opt.samplers._longrope import SEED_METHODS
from longrope_opt.samplers._longrope import LongRoPESampler
from longrope_opt.samplers._nevergrad import NevergradSampler
from longrope_opt.samplers._population import CONSTRAINTS_KEY
from longrope_opt.samplers._population import PopulationPruner
from longrope_opt.samplers._population import is_feasible
from longrope_opt.samplers._population import rank_key
from longrope_opt.samplers._population import violation
from longrope_opt.samplers._protocol import EvolutionSpace
from longrope_opt.samplers._registry import DEFAULT_SAMPLERS
from longrope_opt.samplers._registry import EVOLUTION_SAMPLERS
from longrope_opt.samplers._registry import NEVERGRAD_OPTIMIZERS
from longrope_opt.samplers._registry import PLAIN_EVOLUTION
from longrope_opt.samplers._registry import PRUNERS
from longrope_opt.samplers._registry import SAMPLERS
from longrope_opt.samplers._registry import check_sampler_dependencies
from longrope_opt.samplers._registry import check_sampler_names
from longrope_opt.samplers._registry import make_pruner
from longrope_opt.samplers._registry import make_sampler
from longrope_opt.samplers._seeding import enqueue_seeds
from longrope_opt.samplers._seeding import enqueue_space_seeds
from longrope_opt.samplers._seeding import next_queued_params
from longrope_opt.samplers._state import trial_generation
from longrope_opt.samplers._state import trial_step


__all__ = [
    "CONSTRAINTS_KEY",
    "PopulationPruner",
    "is_feasible",
    "rank_key",
    "violation",
    "EvolutionSpace",
    "SpaceSampler",
    "DEFAULT_SAMPLERS",
    "EVOLUTION_SAMPLERS",
    "NEVERGRAD_OPTIMIZERS",
    "PLAIN_EVOLUTION",
    "PRUNERS",
    "SAMPLERS",
    "SEED_METHODS",
    "LongRoPESampler",
    "NevergradSampler",
    "check_sampler_dependencies",
    "check_sampler_names",
    "enqueue_seeds",
    "enqueue_space_seeds",
    "make_pruner",
    "make_sampler",
    "next_queued_params",
    "read_trials",
    "trial_generation",
    "trial_step",
]
