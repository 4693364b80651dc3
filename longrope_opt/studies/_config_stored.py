"""Search configs as older releases stored them, read as this release's `SearchConfig` fields.

A study keeps the search it was created with; a field added since has the value those studies
ran with, so an old study resumes as the same search (`SearchConfig.from_dict`, `from_legacy`).
"""

from __future__ import annotations

from typing import Any

from longrope_opt.samplers import EVOLUTION_SAMPLERS
from longrope_opt.space import PAPER_SEEDS


def upgraded(data: dict[str, Any]) -> dict[str, Any]:
    """A stored `SearchConfig.to_dict` with the fields added since filled as they ran."""
    data = dict(data)
    if "seeds" in data:  # the name a version before this one gave `seed_methods`
        data["seed_methods"] = data.pop("seeds")
    # Stored before `seed_methods` existed: those studies were seeded by the paper's three.
    seeds = data.get("seed_methods", list(PAPER_SEEDS))
    data["seed_methods"] = None if seeds is None else tuple(seeds)
    # Stored before `draw` existed: documents in seed order.
    data.setdefault("draw", "order")
    # Stored before `passkey_form` existed: the single-key prompt was the only form (a config
    # written with the field keeps it, None included: `to_dict` round-trips).
    data.setdefault("passkey_form", "single")
    options = dict(data.get("sampler_options") or {})
    if data.get("sampler", "longrope") == "longrope" and "operators" not in options:
        # stored before the surrogate operators: the LongRoPE sampler ran the paper's
        options["operators"] = "paper"
    data["sampler_options"] = options
    return data


def legacy_fields(old: dict[str, Any]) -> dict[str, Any]:
    """`SearchConfig` fields of a study written before `SearchConfig` (argparse keys)."""
    sampler = old.get("sampler") or "longrope"
    evolution = {
        k: old[k]
        for k in (
            "population_size", "num_mutations", "num_crossovers", "num_parents", "mutation_prob",
        )
        if old.get(k) is not None
    }  # fmt: skip
    return dict(
        model=old["model"], corpus=old["corpus"], samples=old["samples"], seed=old["seed"],
        target_length=old["target_length"], n_hat=old.get("n_hat") or "search",
        attention=old.get("attention") or "longrope", lambda_max=old.get("lambda_max"),
        recovery=bool(old.get("recovery")), base=old.get("base"), sampler=sampler,
        sampler_options=evolution if sampler in EVOLUTION_SAMPLERS else {},
        objective=old.get("objective") or "perplexity", seed_methods=PAPER_SEEDS,
        draw="order", pruner="none", passkey_form="single",
    )  # fmt: skip
