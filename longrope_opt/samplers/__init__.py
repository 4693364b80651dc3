"""Optuna samplers: the LongRoPE evolution and a nevergrad bridge. No torch or transformers here."""

from __future__ import annotations

from longrope_opt.samplers._longrope import SEED_METHODS
from longrope_opt.samplers._longrope import LongRoPESampler
from longrope_opt.samplers._longrope import enqueue_seeds
from longrope_opt.samplers._nevergrad import NevergradSampler


__all__ = ["SEED_METHODS", "LongRoPESampler", "NevergradSampler", "enqueue_seeds"]
