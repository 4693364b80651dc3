"""Optuna samplers: the LongRoPE evolution. Never imports torch or transformers."""

from __future__ import annotations

from longrope_opt.samplers._longrope import SEED_METHODS
from longrope_opt.samplers._longrope import LongRoPESampler
from longrope_opt.samplers._longrope import enqueue_seeds


__all__ = ["SEED_METHODS", "LongRoPESampler", "enqueue_seeds"]
