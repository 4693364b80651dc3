"""`Registry`: one small type for everything chosen by name (samplers, objectives, RoPE methods).

A registry maps a name to an entry — an object, or a lazy ``"module:attr"`` import path — with a
one-line description. Lookups of an unknown name fail with one line that suggests the closest
name and lists the rest; `help_text` is what the CLI's help shows, so help and code never
disagree. A registry with an entry-point group also finds entries that other installed packages
declare (built-ins cannot be shadowed). Standard library only: the pure-math layer uses it too.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator
from collections.abc import Mapping
from importlib import metadata
from typing import Any
from typing import Generic
from typing import TypeVar

from longrope_opt.errors import InvalidArgumentError


T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """Named entries of one kind, looked up with precise errors.

    Args:
        kind: What the entries are, for messages (``"sampler"``, ``"objective"``...).
        param: The parameter that takes the name (``"sampler"``), for messages.
        entry_point_group: An importlib entry-point group whose entries are added, if any.

    Example:
        >>> METHODS = Registry("method", param="methods")
        >>> METHODS.add("pi", pi, "position interpolation")
        >>> METHODS.get_or_raise("yran")  # InvalidArgumentError: ... did you mean 'yarn'? ...
    """

    def __init__(self, kind: str, *, param: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self.param = param
        self.entry_point_group = entry_point_group
        self._entries: dict[str, Any] = {}
        self._help: dict[str, str] = {}

    def add(self, name: str, entry: T | str, help: str = "") -> None:
        """Register `entry` (an object, or ``"module:attr"`` imported on first use) as `name`."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice.")
        self._entries[name] = entry
        self._help[name] = help

    # ----- Mapping ---------------------------------------------------------------------------

    def _all(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if self.entry_point_group:
            found = {ep.name: ep for ep in metadata.entry_points(group=self.entry_point_group)}
        return {**found, **self._entries}  # built-ins win over entry points

    def __getitem__(self, name: str) -> T:
        entry = self._all()[name]
        return self._resolve(name, entry)

    def __contains__(self, name: object) -> bool:  # by name: never imports an entry
        return name in self._all()

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    # ----- lookups ---------------------------------------------------------------------------

    def check(self, name: str, *, param: str | None = None) -> None:
        """Raise the one-line error for an unknown `name` (without importing anything);
        `param` names the parameter that took it, when not the registry's own."""
        known = self._all()
        if name in known:
            return
        close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidArgumentError(
            f"unknown {self.kind} {name!r} for `{param or self.param}`{hint}; available: "
            f"{', '.join(sorted(known))}."
        )

    def get_or_raise(self, name: str) -> T:
        """The entry called `name`, or the one-line error that names the closest match."""
        self.check(name)
        return self[name]

    def describe(self, name: str) -> str:
        """The entry's one-line description ('' when none; an entry point shows its target)."""
        entry = self._all()[name]
        if isinstance(entry, metadata.EntryPoint):
            return f"installed: {entry.value}"
        return self._help.get(name, "")

    def help_text(self) -> str:
        """``name (description), ...`` for ``help``."""
        parts = []
        for name in self._all():
            text = self.describe(name)
            parts.append(f"{name} ({text})" if text else name)
        return ", ".join(parts)

    def _resolve(self, name: str, entry: Any) -> Any:
        target = entry.value if isinstance(entry, metadata.EntryPoint) else entry
        if not isinstance(target, str):
            return target
        module_name, _, attr = target.partition(":")
        try:
            return getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise InvalidArgumentError(
                f"{self.kind} {name!r} ({target}) cannot be imported: {exc}"
            ) from exc


__all__ = ["Registry"]
