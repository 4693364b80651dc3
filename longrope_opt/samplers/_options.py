"""Checking `LongRoPESampler`'s settings (a search checks them before any model loads)."""

from __future__ import annotations

from typing import Any

from longrope_opt.errors import InvalidArgumentError


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidArgumentError(f"`{name}` must be an integer >= {low}, got {value!r}.")


def check_settings(
    *,
    population_size: int,
    num_mutations: int,
    num_crossovers: int,
    num_parents: int,
    mutation_prob: float,
    max_tries: int,
    operators: str,
    operator_names: tuple[str, ...],
    min_population: int,
    unknown: dict[str, Any],
) -> None:
    """One-line errors for an unknown setting or a value outside its range.

    Raises:
        InvalidArgumentError: Naming the setting, its range and the value.
    """
    if unknown:
        raise InvalidArgumentError(
            f"unknown LongRoPESampler setting(s) {sorted(unknown)}; known: population_size, "
            "num_mutations, num_crossovers, num_parents, mutation_prob, max_tries, operators."
        )
    if operators not in operator_names:
        raise InvalidArgumentError(
            f"`operators` must be one of {list(operator_names)}, got {operators!r}."
        )
    _check_int("population_size", population_size, min_population)
    _check_int("num_mutations", num_mutations, 0)
    _check_int("num_crossovers", num_crossovers, 0)
    _check_int("num_parents", num_parents, 1)
    _check_int("max_tries", max_tries, 1)
    if num_mutations + num_crossovers < 1:
        raise InvalidArgumentError(
            "`num_mutations` + `num_crossovers` must be >= 1, got "
            f"{num_mutations} + {num_crossovers}."
        )
    if num_crossovers > 0 and num_parents < 2:
        raise InvalidArgumentError(
            f"`num_parents` must be >= 2 when crossovers are made, got {num_parents}."
        )
    if isinstance(mutation_prob, bool) or not (0.0 < mutation_prob <= 1.0):
        raise InvalidArgumentError(f"`mutation_prob` must be in (0, 1], got {mutation_prob!r}.")
