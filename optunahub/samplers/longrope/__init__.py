"""The LongRoPE evolutionary sampler for any objective over a non-decreasing vector."""

from ._longrope import LongRoPESampler
from ._population import PopulationPruner
from ._seeding import enqueue_seeds
from ._space import MonotoneSpace


__all__ = ["LongRoPESampler", "MonotoneSpace", "PopulationPruner", "enqueue_seeds"]
