"""The package's one exception (the project's `longrope_opt.errors.InvalidArgumentError`)."""

from __future__ import annotations


class InvalidArgumentError(ValueError):
    """An argument is outside its allowed range. The message names it, the range, and the value."""
