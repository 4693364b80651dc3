"""Exceptions raised by longrope-opt.

Every error inherits from :class:`LongRopeOptError` and from the matching builtin, so callers can catch
either (the nevergrad pattern): ``except ValueError`` keeps working for code that does not know us.
"""

from __future__ import annotations


class LongRopeOptError(Exception):
    """Root of every exception raised by longrope-opt."""


class InvalidArgumentError(LongRopeOptError, ValueError):
    """An argument is outside its allowed range. The message names it, the range, and the value."""


class UnsupportedModelError(LongRopeOptError, TypeError):
    """The model has no rotary position embedding we know how to patch."""


class UncheckedModelError(UnsupportedModelError):
    """The installed transformers has the model's family, and the family matrix of this version
    never checked it (a newer transformers release added it)."""


class DataError(LongRopeOptError, ValueError):
    """The text source cannot provide the samples asked for (too few or too short documents)."""


class StorageError(LongRopeOptError, ConnectionError):
    """The storage (a database, a journal file, a storage proxy) cannot be reached or opened."""


class ModelLoadError(LongRopeOptError, OSError):
    """A model could not be found or loaded (missing file, no network, broken package)."""
