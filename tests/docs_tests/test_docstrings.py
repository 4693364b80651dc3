"""Every public name has a docstring: the API reference is generated from them, and a name
without one would be missing from it (autodoc skips undocumented members silently)."""

from __future__ import annotations

import importlib
import inspect

import pytest


PACKAGES = ["longrope_opt", "longrope_opt.errors", "longrope_opt.registry", "longrope_opt.record",
            "longrope_opt.rope", "longrope_opt.patching", "longrope_opt.models", "longrope_opt.data",
            "longrope_opt.space", "longrope_opt.objectives", "longrope_opt.samplers",
            "longrope_opt.studies", "longrope_opt.evaluation", "longrope_opt.training",
            "longrope_opt.viz"]  # fmt: skip


def _public(module_name: str) -> list[tuple[str, object]]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    found = []
    for name in names:
        obj = getattr(module, name)
        if inspect.ismodule(obj):
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            found.append((f"{module_name}.{name}", obj))
            if inspect.isclass(obj) and obj.__module__.startswith("longrope_opt"):
                for attr, member in vars(obj).items():
                    if attr.startswith("_"):
                        continue
                    fn = member.fget if isinstance(member, property) else member
                    if inspect.isfunction(fn) or isinstance(member, (staticmethod, classmethod)):
                        found.append((f"{module_name}.{name}.{attr}", fn))
    return found


@pytest.mark.parametrize("module_name", PACKAGES)
def test_public_names_have_docstrings(module_name: str) -> None:
    missing = [name for name, obj in _public(module_name) if not (inspect.getdoc(obj) or "").strip()]
    assert not missing, f"public names without a docstring: {missing}"
