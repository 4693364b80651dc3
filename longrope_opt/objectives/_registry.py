"""Objectives by name: the built-ins and any installed under the entry-point group.

A third-party package registers an objective factory in its ``pyproject.toml``::

    [project.entry-points."longrope_opt.objectives"]
    my-metric = "my_package.module:MyObjective"

A factory is called as ``factory(model, samples, space=space, **options)`` and returns an Optuna
objective (a callable on a trial returning a float to minimise); `PerplexityObjective` is one.
A factory may also define ``sample_length(target_length, **options)``: how many tokens each
sample needs (default: the target length).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from longrope_opt.registry import Registry


ENTRY_POINT_GROUP = "longrope_opt.objectives"

#: Every objective, by the name the CLI's objective flag takes.
OBJECTIVES: Registry[Callable[..., Any]] = Registry(
    "objective", param="objective", entry_point_group=ENTRY_POINT_GROUP
)
OBJECTIVES.add(
    "perplexity",
    "longrope_opt.objectives._perplexity_objective:PerplexityObjective",
    "perplexity of long samples, the paper's fitness",
)
OBJECTIVES.add(
    "needle-ppl",
    "longrope_opt.objectives._needle_objective:NeedlePerplexityObjective",
    "perplexity of a needle's answer in real documents (LongRoPE2)",
)
OBJECTIVES.add(
    "passkey",
    "longrope_opt.objectives._passkey_objective:PasskeyObjective",
    "NLL or error rate of a hidden passkey",
)


def available_objectives() -> dict[str, str]:
    """``{name: description}`` of every known objective (entry points cannot shadow built-ins)."""
    return {name: OBJECTIVES.describe(name) for name in OBJECTIVES}


def get_objective_factory(name: str) -> Callable[..., Any]:
    """Import the factory registered as `name`.

    Raises:
        InvalidArgumentError: Unknown name (the message suggests the closest and lists the
            known ones), or an entry point that does not import.
    """
    return OBJECTIVES.get_or_raise(name)


def check_options(
    factory: Callable[..., Any], target_length: int, options: dict[str, Any]
) -> None:
    """Run the factory's own ``validate(target_length, **options)`` when it has one, so bad
    options fail before any model loads."""
    hook = getattr(factory, "validate", None)
    if callable(hook):
        hook(target_length, **options)


def sample_length(factory: Callable[..., Any], target_length: int, options: dict[str, Any]) -> int:
    """Tokens each sample needs for `factory` with `options` (its `sample_length`, if any)."""
    hook = getattr(factory, "sample_length", None)
    return int(hook(target_length, **options)) if callable(hook) else int(target_length)
