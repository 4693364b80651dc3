"""Objectives by name: the built-ins and any installed under the entry-point group.

A third-party package registers an objective factory in its ``pyproject.toml``::

    [project.entry-points."longrope_opt.objectives"]
    my-metric = "my_package.module:MyObjective"

A factory is called as ``factory(model, samples, space=space, **options)`` and returns an Optuna
objective (a callable on a trial returning a float to minimise); `PerplexityObjective` is one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib import metadata
from typing import Any

from longrope_opt.errors import InvalidArgumentError


ENTRY_POINT_GROUP = "longrope_opt.objectives"

_BUILTIN: dict[str, str] = {
    "perplexity": "longrope_opt.objectives._objective:PerplexityObjective",
    "passkey": "longrope_opt.objectives._passkey:PasskeyObjective",
}


def available_objectives() -> dict[str, str]:
    """``{name: "module:attr"}`` of every known objective (entry points cannot shadow built-ins)."""
    found = {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return {**found, **_BUILTIN}


def get_objective_factory(name: str) -> Callable[..., Any]:
    """Import the factory registered as `name`.

    Raises:
        InvalidArgumentError: Unknown name (the message lists the known ones), or an entry
            point that does not import.
    """
    known = available_objectives()
    if name not in known:
        raise InvalidArgumentError(f"`objective` must be one of {sorted(known)}, got {name!r}.")
    module_name, _, attr = known[name].partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgumentError(
            f"objective {name!r} ({known[name]}) cannot be imported: {exc}"
        ) from exc
