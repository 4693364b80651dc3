"""A warm start: factors found for one length, carried to a search's length and tried first.

LongRoPE extends in steps (§3.3): the search for a longer window starts from what the shorter
one found, not from the formulas alone. Here the earlier winner is carried by
`longrope_opt.rope.carry` (λ' = λ^k, k = ln s' / ln s; PI, NTK and YaRN-cd go to themselves),
put on the new space's grid and bounds, and enqueued once after the formula seeds. It is a
candidate, not a seed: the evolution can take it as a parent, but the retrieval guard's bar
stays the best formula seed. The study stores the resolved factors (not the path), so a
resumed search or a worker needs no file.
"""

from __future__ import annotations

from typing import Any

import optuna

from longrope_opt import record
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import carry


#: The user attr that marks a warm start's trial (its value: the length it was carried from).
WARM_KEY = "warm_start"


def check_warm_start(warm_start: Any, *, space: str, base: Any, recovery: bool) -> None:
    """Refuse a warm start the search cannot take (one line naming the argument).

    Raises:
        InvalidArgumentError: Not a source or record, or combined with a base stage, a short
            recovery search or the critical space (their λ are relative or a ramp).
    """
    if warm_start is None:
        return
    if not (isinstance(warm_start, dict) or (isinstance(warm_start, str) and warm_start)):
        raise InvalidArgumentError(
            "`warm_start` must be a factor JSON file or 'study:NAME', got "
            f"{warm_start!r}."
        )
    if base is not None or recovery or space != "full":
        raise InvalidArgumentError(
            "`warm_start` needs the full space without `base` or `recovery` (it carries "
            f"absolute λ), got space {space!r}, base {base!r}, recovery {recovery}."
        )


def warm_start_params(space: Any, warm: dict[str, Any]) -> dict[str, Any]:
    """The trial parameters of a warm start `warm` in `space`: its stored record, the factors
    and the length they reach in `record.base_record`'s form (not where they came from, so the
    same factors by another route are the same search).

    Raises:
        InvalidArgumentError: Another model's factors (their count differs), or a length not
            past the trained one (nothing to carry from).
    """
    scaling, length = record.base_from_record(warm)
    spec = space.spec
    if scaling.factors.size != spec.n_factors:
        raise InvalidArgumentError(
            f"`warm_start` must hold {spec.n_factors} factors (this model's RoPE), got "
            f"{scaling.factors.size}."
        )
    if length <= spec.original_length:
        raise InvalidArgumentError(
            f"`warm_start` must extend past the trained length {spec.original_length}, "
            f"got factors for {length} tokens."
        )
    carried = carry(scaling, spec.scale(length), spec.scale(space.target_length))
    factors = space.snap(carried.factors)  # a power and a clip keep λ non-decreasing
    return space.encode(factors, carried.n_hat, carried.attention_scale)


def enqueue_warm_start(study: optuna.Study, space: Any, warm: dict[str, Any] | None) -> bool:
    """Enqueue the warm start once (a study that holds it already is left alone).

    Returns:
        Whether it was enqueued now.
    """
    if warm is None:
        return False
    if any(WARM_KEY in t.user_attrs for t in study.get_trials(deepcopy=False)):
        return False
    study.enqueue_trial(warm_start_params(space, warm), user_attrs={WARM_KEY: warm["length"]})
    return True
