"""Factors in and out of studies: a study's winner exported as JSON (for `eval --factors`, and
transformers `rope_parameters`), factor files read back, and a secondary search's base stage
resolved from a study, a factor file or a model config (it is then stored in the secondary
study's config, so its trials, export and workers compose the same factors)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from longrope_opt import record
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.files import write_text_atomic
from longrope_opt.models import rope_parameters
from longrope_opt.rope import RopeScaling
from longrope_opt.studies._winner import best_scaling
from longrope_opt.studies._winner import study_winner


def load_named_study(storage: Any, name: str, *, param: str = "study_name") -> optuna.Study:
    """Load an existing study; an unknown name is a one-line error naming `param` and the
    studies the storage holds (not the package's own record studies)."""
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)
                 if not s.study_name.startswith(record.NAMESPACE)]  # fmt: skip
        raise InvalidArgumentError(f"`{param}` {name!r} not found; studies: {names}.") from None


def factors_with_length(
    *, factors: str | None, study_name: str | None, storage: Any, param: str = "study_name"
) -> tuple[RopeScaling, int | None]:
    """Searched factors from a JSON file (`export_best`) or a study's best trial, with the target
    length they were searched for (None when the source does not say)."""
    if factors:
        scaling = load_factors(factors)  # one-line errors for a missing or bad file
        length = json.loads(Path(factors).read_text()).get("target_length")
        return scaling, length if isinstance(length, int) else None
    study = load_named_study(storage, str(study_name), param=param)
    scaling, _ = best_scaling(study)
    return scaling, record.target_length(study)


def export_best(study: optuna.Study, path: str | Path) -> dict[str, Any]:
    """Write the best trial as JSON (factors, n̂, t, value, rope_parameters); return the record."""
    winner = study_winner(study)
    scaling, best = winner.scaling, winner.trial
    prov = record.read_provenance(study)
    spec = record.read_spec(study)
    out: dict[str, Any] = {
        **scaling.to_dict(),
        "value": best.value,
        "trial": best.number,
        "rule": winner.rule,
        **_rerank_value(study, best.number),
        "study": study.study_name,
        "target_length": prov.get("target_length"),
        "provenance": prov,
    }
    if spec is not None and prov.get("target_length"):
        params = rope_parameters(scaling, spec, prov["target_length"])
        if scaling.n_hat:
            params["longrope_opt"] = {
                "n_hat": scaling.n_hat,
                "note": "n_hat > 0 is not expressible in transformers; load with longrope_opt.",
            }
        out["rope_parameters"] = params
    if best.value is not None and not math.isfinite(best.value):
        raise InvalidArgumentError(f"best value of study {study.study_name!r} is not finite.")
    write_text_atomic(path, json.dumps(out, indent=2) + "\n")  # an old file is kept whole or replaced
    return out


def _rerank_value(study: optuna.Study, number: int) -> dict[str, float]:
    value = record.read_rerank(study).get(number)
    return {} if value is None else {"rerank_value": float(value)}


#: Largest λ a factor file may hold: far past any real extension, so a larger value is a typo.
MAX_FACTOR = 1e4


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
            f"`factors` file {str(path)!r} cannot be read: {exc.strerror}."
        ) from exc
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(
            f"`factors` file {str(path)!r} is not JSON: {exc.msg} (line {exc.lineno})."
        ) from exc
    if not isinstance(data, dict):
        raise InvalidArgumentError(
            f"`factors` file {str(path)!r} must hold a JSON object with `factors`."
        )
    scaling = RopeScaling.from_dict(data)
    if float(scaling.factors.max()) > MAX_FACTOR:
        i = int(scaling.factors.argmax())
        raise InvalidArgumentError(
            f"`factors` values must be <= {MAX_FACTOR:g} (λ slows a frequency by that factor; "
            f"2048k from 4k is 512), got {scaling.factors[i]:g} at index {i} in {str(path)!r}."
        )
    f = scaling.factors
    bad = [i for i in range(1, f.size) if f[i] < f[i - 1]]
    if bad:
        i = bad[0]
        raise InvalidArgumentError(
            f"`factors` must be non-decreasing; first violation at index {i}: "
            f"{f[i - 1]} > {f[i]} in {str(path)!r}."
        )
    return scaling


# ----- a secondary search's base stage -------------------------------------------------------


def resolve_base(
    source: str | dict[str, Any], *, model_config: Any = None, storage: Any = None,
    param: str = "base",
) -> tuple[RopeScaling, int]:  # fmt: skip
    """The base stage of a secondary search (or a warm start): its absolute factors and the
    length they extend to.

    Args:
        source: ``"config"`` (the model's own RoPE: the identity on top of it, since every
            search acts on the checkpoint as loaded, e.g. a fine-tuned export's factors),
            ``"study:NAME"`` (that study's best trial and target length, in `storage`), a JSON
            file written by ``longrope-opt export`` (needs ``target_length``), or a
            `base_record` dict.
        model_config: The loaded model's config (for ``"config"``).
        storage: Optuna storage (for ``"study:NAME"``).
        param: The argument the errors name.

    Raises:
        InvalidArgumentError: The source is missing, unreadable, or does not say its length.
    """
    if isinstance(source, dict):  # a base record (`record.base_record`)
        return RopeScaling.from_dict(source), int(source["length"])
    if source == "config" and param == "base":
        return _from_config(model_config)
    if source.startswith("study:"):
        scaling, length = factors_with_length(
            factors=None, study_name=source[len("study:") :], storage=storage, param=param
        )
        if not length:
            raise InvalidArgumentError(f"`{param}` {source!r} records no target length.")
        return scaling, int(length)
    if not Path(source).is_file():
        first = "'config', " if param == "base" else ""
        raise InvalidArgumentError(
            f"`{param}` must be {first}'study:NAME' or a factor JSON file, got {source!r}."
        )
    scaling, length = factors_with_length(factors=source, study_name=None, storage=None)
    if length is None:
        raise InvalidArgumentError(
            f"`{param}` file {source!r} has no integer `target_length` (the length its factors "
            "reach)."
        )
    return scaling, length


def _from_config(config: Any) -> tuple[RopeScaling, int]:
    # The model's own RoPE (an export's factors included) is what every search acts on: the
    # base stage "config" is the identity on top of it, reaching the model's trained length.
    from longrope_opt.rope import RopeSpec

    spec = RopeSpec.from_config(config)
    return RopeScaling(np.ones(spec.n_factors), 0, 1.0, method="config"), spec.original_length
