"""longrope-opt: LongRoPE rescale-factor search as an Optuna framework.

Importing the package is cheap: only the pure RoPE math (numpy) is imported here. torch and
transformers are imported by the subpackages that need them (`patching`, `models`, `objectives`);
`extend` (the whole path in one call, `longrope_opt.pipeline.extend`) loads them on first use.
"""

from __future__ import annotations

from typing import Any

from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec


__version__ = "0.1.0"

__all__ = ["RopeScaling", "RopeSpec", "__version__", "extend"]


def __getattr__(name: str) -> Any:
    # `from longrope_opt import extend` without torch at `import longrope_opt`.
    if name == "extend":
        from longrope_opt.pipeline import extend  # torch and transformers load here

        return extend
    raise AttributeError(f"module 'longrope_opt' has no attribute {name!r}")
