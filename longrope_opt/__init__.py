"""longrope-opt: LongRoPE rescale-factor search as an Optuna framework.

Importing the package is cheap: only the pure RoPE math (numpy) is imported here. torch and
transformers are imported by the subpackages that need them (`patching`, `models`, `objectives`).
"""

from __future__ import annotations

from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec


__version__ = "0.1.0"

__all__ = ["RopeScaling", "RopeSpec", "__version__"]
