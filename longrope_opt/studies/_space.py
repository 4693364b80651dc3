"""The `SearchSpace` a study's trials were evaluated in: how a trial's params become factors."""

from __future__ import annotations

from typing import Any

import optuna

from longrope_opt import record
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.space import SearchSpace
from longrope_opt.studies._config import SearchConfig


def space_of_study(study: optuna.Study, trial: Any = None) -> SearchSpace:
    """The `SearchSpace` a study's trials were evaluated in (its params → factors converter).

    From the study's search config when it has one (`run_search`, `longrope-opt search`, any
    release); for a study made by `open_study` without one, from its RoPE spec and target length,
    with n̂ and t as `trial` recorded them.

    Raises:
        InvalidArgumentError: A plain Optuna study (no recorded RoPE spec).
    """
    spec = record.read_spec(study)
    if spec is None:
        raise InvalidArgumentError(
            f"study {study.study_name!r} records no RoPE spec: it was not made by `run_search` "
            "or `open_study`; use `SearchSpace.to_scaling(trial.params)`."
        )
    if record.read_config(study) is not None:
        config = SearchConfig.from_study(study)
        resolved = record.base_from_record(config.base) if isinstance(config.base, dict) else None
        return config.build_space(spec, resolved)
    base = record.read_base(study)
    user = trial.user_attrs if trial is not None else {}
    length = record.target_length(study)
    if length is None:
        raise InvalidArgumentError(f"study {study.study_name!r} records no target length.")
    return SearchSpace(
        spec,
        length,
        n_hat=(int(user.get("n_hat", 0)),),
        attention="none",
        attention_value=float(user.get("attention_scale", 1.0)),
        base=None if base is None else base[0],
        base_length=None if base is None else base[1],
    )
