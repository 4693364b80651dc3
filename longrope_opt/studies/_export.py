"""Export a study's best factors: JSON for `eval --factors`, and a transformers `rope_parameters`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import compose


def rope_parameters(scaling: RopeScaling, spec: RopeSpec, target_length: int) -> dict[str, Any]:
    """A transformers ``rope_parameters`` dict of type ``longrope`` for `scaling`.

    ``long_factor`` is λ, ``short_factor`` is all ones (the model unchanged up to its trained
    length), and ``attention_factor`` is t. transformers has no n̂: when ``n_hat > 0`` the dict
    reproduces the scaling only with longrope-opt's loader, and says so under ``"longrope_opt"``.
    """
    params: dict[str, Any] = {
        "rope_type": "longrope",
        "rope_theta": spec.base,
        "long_factor": [float(x) for x in scaling.factors],
        "short_factor": [1.0] * spec.n_factors,
        "original_max_position_embeddings": spec.original_length,
        "factor": target_length / spec.original_length,
        "attention_factor": scaling.attention_scale,
    }
    if spec.rotary_dim != spec.head_dim:
        params["partial_rotary_factor"] = spec.rotary_dim / spec.head_dim
    if scaling.n_hat:
        params["longrope_opt"] = {
            "n_hat": scaling.n_hat,
            "note": "n_hat > 0 is not expressible in transformers; load with longrope_opt.",
        }
    return params


def load_named_study(storage: Any, name: str, *, flag: str = "--study-name") -> optuna.Study:
    """Load an existing study; an unknown name is a one-line error naming `flag` and the studies."""
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        raise InvalidArgumentError(f"`{flag}` {name!r} not found; studies: {names}.") from None


def factors_with_length(
    *, factors: str | None, study_name: str | None, storage: Any, flag: str = "--study-name"
) -> tuple[RopeScaling, int | None]:
    """Searched factors from a JSON file (`export_best`) or a study's best trial, with the target
    length they were searched for (None when the source does not say)."""
    if factors:
        scaling = load_factors(factors)  # one-line errors for a missing or bad file
        length = json.loads(Path(factors).read_text()).get("target_length")
        return scaling, length if isinstance(length, int) else None
    study = load_named_study(storage, str(study_name), flag=flag)
    scaling, _ = best_scaling(study)
    return scaling, study.user_attrs.get("provenance", {}).get("target_length")


def best_scaling(study: optuna.Study) -> tuple[RopeScaling, optuna.trial.FrozenTrial]:
    """The best trial's `RopeScaling` (λ in parameter order, n̂, t from its user attrs).

    For a secondary search (a study with a ``base_scaling`` user attr) the λ of a trial are
    relative to that base; the returned factors are composed, i.e. absolute, as evaluated.
    """
    try:
        best = study.best_trial
    except ValueError:
        raise InvalidArgumentError(
            f"study {study.study_name!r} has no completed trial yet."
        ) from None
    names = sorted(k for k in best.params if k.startswith("lambda_"))
    attrs = best.user_attrs
    factors = [best.params[n] for n in names]
    if attrs.get("repaired") == "sort":  # a baseline's proposal: the objective evaluated it sorted
        factors = sorted(factors)
    scaling = RopeScaling(
        factors,
        int(best.params.get("n_hat", attrs.get("n_hat", 0))),
        float(best.params.get("attention_scale", attrs.get("attention_scale", 1.0))),
        method="searched",
    )
    base = study.user_attrs.get("base_scaling")
    if base is not None:
        scaling = compose(RopeScaling.from_dict(base), scaling)
    return scaling, best


def export_best(study: optuna.Study, path: str | Path) -> dict[str, Any]:
    """Write the best trial as JSON (factors, n̂, t, value, rope_parameters); return the record."""
    scaling, best = best_scaling(study)
    prov = study.user_attrs.get("provenance", {})
    spec_d = study.user_attrs.get("rope_spec")
    record: dict[str, Any] = {
        **scaling.to_dict(),
        "value": best.value,
        "trial": best.number,
        "study": study.study_name,
        "target_length": prov.get("target_length"),
        "provenance": prov,
    }
    if spec_d and prov.get("target_length"):
        spec = RopeSpec(**spec_d)
        record["rope_parameters"] = rope_parameters(scaling, spec, prov["target_length"])
    if best.value is not None and not math.isfinite(best.value):
        raise InvalidArgumentError(f"best value of study {study.study_name!r} is not finite.")
    Path(path).write_text(json.dumps(record, indent=2) + "\n")
    return record


def load_factors(path: str | Path) -> RopeScaling:
    """Read factors written by `export_best` (or any JSON with ``factors``, ``n_hat``,
    ``attention_scale``); λ must be non-decreasing, as every LongRoPE result is.

    Raises:
        InvalidArgumentError: Missing/unreadable file, bad JSON, or invalid/non-monotone factors.
    """
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InvalidArgumentError(
            f"`--factors` file {str(path)!r} cannot be read: {exc.strerror}."
        ) from exc
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(
            f"`--factors` file {str(path)!r} is not JSON: {exc.msg} (line {exc.lineno})."
        ) from exc
    if not isinstance(data, dict):
        raise InvalidArgumentError(
            f"`--factors` file {str(path)!r} must hold a JSON object with `factors`."
        )
    scaling = RopeScaling.from_dict(data)
    f = scaling.factors
    bad = [i for i in range(1, f.size) if f[i] < f[i - 1]]
    if bad:
        i = bad[0]
        raise InvalidArgumentError(
            f"`--factors` must be non-decreasing; first violation at index {i}: "
            f"{f[i - 1]} > {f[i]} in {str(path)!r}."
        )
    return scaling
