"""Pure RoPE math: specs, rescale vectors, and the classic methods as rescale vectors.

No torch, no transformers: everything here is numpy and can be used by samplers and tests alike.

Example:
    >>> from longrope_opt.rope import RopeSpec, yarn
    >>> spec = RopeSpec(head_dim=64, base=100000.0, original_length=8192)
    >>> scaling = yarn(spec, 16384)
    >>> scaling.factors.shape
    (32,)
"""

from __future__ import annotations

from collections.abc import Callable

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.registry import Registry
from longrope_opt.rope._config import TRAINED_LENGTH_ATTR
from longrope_opt.rope._config import extended_layer_types
from longrope_opt.rope._config import is_local
from longrope_opt.rope._methods import critical_dimension
from longrope_opt.rope._methods import dynamic_ntk
from longrope_opt.rope._methods import longrope_attention_scale
from longrope_opt.rope._methods import none
from longrope_opt.rope._methods import ntk
from longrope_opt.rope._methods import pi
from longrope_opt.rope._methods import yarn
from longrope_opt.rope._methods import yarn_attention_scale
from longrope_opt.rope._native import ROPE_TYPES
from longrope_opt.rope._native import NativeRope
from longrope_opt.rope._native import native_rope
from longrope_opt.rope._spec import RopeScaling
from longrope_opt.rope._spec import RopeSpec
from longrope_opt.rope._stages import ShortLongScaling
from longrope_opt.rope._stages import carry
from longrope_opt.rope._stages import compose


#: Every method maps ``(spec, target_length)`` to a `RopeScaling`. Add your own with the same
#: signature (``METHODS.add(name, fn, help)``) to make it available to `eval` tables.
METHODS: Registry[Callable[[RopeSpec, int], RopeScaling]] = Registry("method", param="methods")
METHODS.add("none", none, "the model as trained")
METHODS.add("pi", pi, "position interpolation")
METHODS.add("ntk", ntk, "NTK-aware")
METHODS.add("dynamic_ntk", dynamic_ntk, "NTK with s from the sequence length")
METHODS.add("yarn", yarn, "YaRN")

#: Named rules for a fixed attention scale t as a function of s = L'/L and L.
ATTENTION_RULES: dict[str, Callable[[float, int], float]] = {
    "none": lambda s, L: 1.0,
    "yarn": lambda s, L: yarn_attention_scale(s),
    "longrope": longrope_attention_scale,
}


def get_method(name: str) -> Callable[[RopeSpec, int], RopeScaling]:
    """Look up a method by name; an unknown name suggests the closest and lists the rest."""
    return METHODS.get_or_raise(name)


def attention_scale_for(rule: str, spec: RopeSpec, target_length: int) -> float:
    """The attention scale t that the named `rule` gives at `target_length`."""
    if rule not in ATTENTION_RULES:
        raise InvalidArgumentError(
            f"`attention_rule` must be one of {sorted(ATTENTION_RULES)}, got {rule!r}."
        )
    return ATTENTION_RULES[rule](spec.scale(target_length), spec.original_length)


__all__ = [
    "ATTENTION_RULES",
    "METHODS",
    "NativeRope",
    "TRAINED_LENGTH_ATTR",
    "ROPE_TYPES",
    "extended_layer_types",
    "is_local",
    "native_rope",
    "RopeScaling",
    "RopeSpec",
    "ShortLongScaling",
    "attention_scale_for",
    "carry",
    "compose",
    "critical_dimension",
    "dynamic_ntk",
    "get_method",
    "longrope_attention_scale",
    "none",
    "ntk",
    "pi",
    "yarn",
    "yarn_attention_scale",
]
