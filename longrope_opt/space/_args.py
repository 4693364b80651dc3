"""The arguments of a `longrope_opt.space.SearchSpace`: checked, with their defaults filled in.

One function, so the space's module keeps to what a space does (names, distributions, encode and
decode) and every rule about what a caller may pass is read in one place.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import ATTENTION_RULES
from longrope_opt.rope import RopeScaling
from longrope_opt.space._critical import SHAPES
from longrope_opt.space._critical import critical_range


#: The paper's n̂ candidates (LongRoPE Table 3).
PAPER_N_HAT = (0, 1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 64, 128, 256)
#: The paper's seeds (LongRoPE Algorithm 1).
PAPER_SEEDS = ("pi", "ntk", "yarn")
#: Every seed a full-shape first search can start from, in the order they are added.
SEED_NAMES = ("pi", "ntk", "yarn", "yarn-cd", "ntk-cd")


def space_fields(space: Any) -> dict[str, Any]:
    """The fields a new `SearchSpace` sets on itself: `lambda_high`'s default, `n_hat` and
    `seeds` as tuples (n̂ sorted), and the critical shape's bounds.

    `space` is typed Any because the space's module imports this one.

    Raises:
        InvalidArgumentError: An argument out of range, named with the values allowed and the
            value received.
    """
    s = relative_scale(space)
    if space.shape not in SHAPES:
        raise InvalidArgumentError(f"`shape` must be one of {list(SHAPES)}, got {space.shape!r}.")
    bounds = None
    if space.shape == "critical":
        if space.base is not None or space.is_short:
            raise InvalidArgumentError(
                "`shape` 'critical' is for a first search past the trained length "
                f"{space.spec.original_length} (no `base`, no `recovery`); got `target_length` "
                f"{space.target_length}{' and a base' if space.base is not None else ''}."
            )
        bounds = critical_range(space.spec, space.critical_radius, space.critical_above)
    high = space.lambda_high
    if high is None:
        high = round((2.0 if space.shape == "critical" else 1.25) * s, 10)
    if not (math.isfinite(space.lambda_low) and space.lambda_low > 0):
        raise InvalidArgumentError(
            f"`lambda_low` must be a finite number > 0, got {space.lambda_low}."
        )
    low = float(space.spec.scale(space.target_length)) if bounds else float(space.lambda_low)
    if not high > low:
        raise InvalidArgumentError(
            f"`lambda_high` must be > {low} (the lowest searched λ), got {space.lambda_high}."
        )
    if space.step < 0 or (space.step and space.step > high - low):
        raise InvalidArgumentError(f"`step` must be 0 or in (0, {high - low}], got {space.step}.")
    return {
        "_critical_bounds": bounds,
        "lambda_high": high,
        "n_hat": _n_hat(space.n_hat, space.target_length),
        "seeds": _checked_rest(space),
    }


def relative_scale(space: Any) -> float:
    """s of the searched λ: L'/L, or L'/`base_length` on an extended base, 1 for a short target.

    Raises:
        InvalidArgumentError: A bad `target_length`, `attention_value`, `base` or `base_length`.
    """
    L, target = space.spec.original_length, space.target_length
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or target < 1:
        raise InvalidArgumentError(f"`target_length` must be an integer >= 1, got {target!r}.")
    value = space.attention_value
    if value is not None and not (math.isfinite(value) and value > 0):
        raise InvalidArgumentError(f"`attention_value` must be a finite number > 0, got {value}.")
    if space.base is None:
        if space.base_length is not None:
            raise InvalidArgumentError("`base_length` is only meaningful with `base`.")
        return 1.0 if target <= L else space.spec.scale(target)
    if not isinstance(space.base, RopeScaling):
        raise InvalidArgumentError(
            f"`base` must be a RopeScaling, got {type(space.base).__name__}."
        )
    space.base.check(space.spec)
    bl = space.base_length
    if isinstance(bl, bool) or not isinstance(bl, (int, np.integer)) or not L < bl < target:
        raise InvalidArgumentError(
            f"`base_length` must be an integer in ({L}, target_length = {target}), got {bl!r}."
        )
    return target / bl


def _n_hat(given: Any, target_length: int) -> tuple[int, ...]:
    n_hat = (given,) if isinstance(given, int) else tuple(given)
    if n_hat == PAPER_N_HAT:  # the default set: keep what fits a short target
        n_hat = tuple(v for v in n_hat if v < target_length)
    if not n_hat or any((not isinstance(v, int)) or v < 0 for v in n_hat):
        raise InvalidArgumentError(f"`n_hat` must be integers >= 0, got {given!r}.")
    if max(n_hat) >= target_length:
        raise InvalidArgumentError(
            f"`n_hat` must be in [0, target_length = {target_length}), got {max(n_hat)}."
        )
    return tuple(sorted(set(n_hat)))


def _checked_rest(space: Any) -> tuple[str, ...]:
    """Checks `attention`, `repair`, `attention_bounds`; returns `seeds` as a tuple."""
    if space.attention != "search" and space.attention not in ATTENTION_RULES:
        raise InvalidArgumentError(
            f"`attention` must be 'search' or one of {sorted(ATTENTION_RULES)}, "
            f"got {space.attention!r}."
        )
    if space.repair not in ("sort", "none"):
        raise InvalidArgumentError(f"`repair` must be 'sort' or 'none', got {space.repair!r}.")
    seeds = tuple(space.seeds)
    unknown = [n for n in seeds if n not in SEED_NAMES]
    if not seeds or unknown or len(set(seeds)) != len(seeds):
        raise InvalidArgumentError(
            f"`seeds` must be distinct names among {list(SEED_NAMES)}, got {list(seeds)}."
        )
    lo, hi = space.attention_bounds
    if not (0 < lo < hi):
        raise InvalidArgumentError(
            f"`attention_bounds` must satisfy 0 < low < high, got {space.attention_bounds}."
        )
    return seeds


def n_hat_setting(value: Any) -> int | str:
    """A search's n̂ setting: ``"search"`` (the paper's set) or a fixed integer >= 0."""
    if value == "search":
        return "search"
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = -1
    if isinstance(value, bool) or n < 0 or (isinstance(value, float) and n != value):
        raise InvalidArgumentError(
            f"`n_hat` must be 'search' or an integer >= 0, got {value!r}."
        )
    return n


def attention_setting(value: Any) -> str:
    """A search's attention setting as text: ``"search"``, a rule in
    `longrope_opt.rope.ATTENTION_RULES`, or a fixed t > 0."""
    text = str(value)
    if text == "search" or text in ATTENTION_RULES:
        return text
    try:
        t = float(text)
    except ValueError:
        t = math.nan
    if not (math.isfinite(t) and t > 0):
        raise InvalidArgumentError(
            f"`attention` must be 'search', one of {sorted(ATTENTION_RULES)}, or a number > 0, "
            f"got {value!r}."
        )
    return text
