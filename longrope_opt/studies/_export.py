"""Export a study's best factors: JSON for `eval --factors`, and a transformers `rope_parameters`."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import optuna

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.files import write_text_atomic
from longrope_opt.models import rope_parameters
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.space import SearchSpace


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


def space_of_study(study: optuna.Study, trial: Any = None) -> SearchSpace:
    """The `SearchSpace` a study's trials were evaluated in (its params → factors converter).

    From the study's search config when it has one (`run_search`, `longrope-opt search`, any
    release); for a study made by `open_study` without one, from its RoPE spec and target length,
    with n̂ and t as `trial` recorded them.

    Raises:
        InvalidArgumentError: A plain Optuna study (no ``rope_spec`` user attr).
    """
    from longrope_opt.studies._config import SearchConfig
    from longrope_opt.studies._stages import BASE_ATTR
    from longrope_opt.studies._stages import base_from_record

    attrs = study.user_attrs
    if "rope_spec" not in attrs:
        raise InvalidArgumentError(
            f"study {study.study_name!r} records no `rope_spec`: it was not made by "
            "`run_search` or `open_study`; use `SearchSpace.to_scaling(trial.params)`."
        )
    spec = RopeSpec(**attrs["rope_spec"])
    try:
        config = SearchConfig.from_study(study)
    except InvalidArgumentError:
        config = None
    if config is not None:
        resolved = base_from_record(config.base) if isinstance(config.base, dict) else None
        return config.build_space(spec, resolved)
    base_attr = attrs.get(BASE_ATTR)
    base: RopeScaling | None = None
    length: int | None = None
    if base_attr:
        base, length = base_from_record(base_attr)
    user = trial.user_attrs if trial is not None else {}
    return SearchSpace(
        spec,
        int(attrs.get("provenance", {})["target_length"]),
        n_hat=(int(user.get("n_hat", 0)),),
        attention="none",
        attention_value=float(user.get("attention_scale", 1.0)),
        base=base,
        base_length=length,
    )


def best_scaling(study: optuna.Study) -> tuple[RopeScaling, optuna.trial.FrozenTrial]:
    """The best trial's `RopeScaling`, exactly as the objective evaluated it.

    The best trial is the re-ranked winner when the study was re-ranked (`rerank_study`: the
    search's top trials evaluated at full fidelity), else `study.best_trial`. The study's own
    `SearchSpace` converts the trial's params (`SearchSpace.to_scaling`): a baseline's
    non-monotone proposal is repaired as it was evaluated, and for a secondary search the
    factors are composed with the base stage, i.e. absolute.
    """
    from longrope_opt.studies._rerank import reranked_best

    reranked = reranked_best(study)
    if reranked is not None:
        return dataclasses.replace(reranked[0], method="searched"), reranked[1]
    try:
        best = study.best_trial
    except ValueError:
        raise InvalidArgumentError(
            f"study {study.study_name!r} has no completed trial yet."
        ) from None
    scaling = space_of_study(study, best).to_scaling(best.params)
    return dataclasses.replace(scaling, method="searched"), best


def export_best(study: optuna.Study, path: str | Path) -> dict[str, Any]:
    """Write the best trial as JSON (factors, n̂, t, value, rope_parameters); return the record."""
    scaling, best = best_scaling(study)
    prov = study.user_attrs.get("provenance", {})
    spec_d = study.user_attrs.get("rope_spec")
    record: dict[str, Any] = {
        **scaling.to_dict(),
        "value": best.value,
        "trial": best.number,
        **_rerank_value(study, best.number),
        "study": study.study_name,
        "target_length": prov.get("target_length"),
        "provenance": prov,
    }
    if spec_d and prov.get("target_length"):
        params = rope_parameters(scaling, RopeSpec(**spec_d), prov["target_length"])
        if scaling.n_hat:
            params["longrope_opt"] = {
                "n_hat": scaling.n_hat,
                "note": "n_hat > 0 is not expressible in transformers; load with longrope_opt.",
            }
        record["rope_parameters"] = params
    if best.value is not None and not math.isfinite(best.value):
        raise InvalidArgumentError(f"best value of study {study.study_name!r} is not finite.")
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")  # an old file is kept whole or replaced
    return record


def _rerank_value(study: optuna.Study, number: int) -> dict[str, float]:
    from longrope_opt.studies._rerank import RERANK_KEY

    value = (study.user_attrs.get(RERANK_KEY) or {}).get(str(number))
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
    if float(scaling.factors.max()) > MAX_FACTOR:
        i = int(scaling.factors.argmax())
        raise InvalidArgumentError(
            f"`--factors` values must be <= {MAX_FACTOR:g} (λ slows a frequency by that factor; "
            f"2048k from 4k is 512), got {scaling.factors[i]:g} at index {i} in {str(path)!r}."
        )
    f = scaling.factors
    bad = [i for i in range(1, f.size) if f[i] < f[i - 1]]
    if bad:
        i = bad[0]
        raise InvalidArgumentError(
            f"`--factors` must be non-decreasing; first violation at index {i}: "
            f"{f[i - 1]} > {f[i]} in {str(path)!r}."
        )
    return scaling
