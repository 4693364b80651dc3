"""Where a secondary search's base stage comes from: a study, a factor JSON, or a model config.

The base is stored in the secondary study (in its `SearchConfig`; studies written before it keep
it in the user attr ``base_scaling``, still read), so its trials, its export
and its workers all compose with the same factors without reading the source again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from longrope_opt import record
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import read_export
from longrope_opt.rope import RopeScaling
from longrope_opt.studies._export import factors_with_length


#: Study user attr of a secondary search: the base factors and the length they reach.
def resolve_base(
    source: str | dict[str, Any], *, model_config: Any = None, storage: Any = None
) -> tuple[RopeScaling, int]:
    """The base stage of a secondary search: its absolute factors and the length they extend to.

    Args:
        source: ``"config"`` (the model's own ``longrope`` rope parameters, e.g. a fine-tuned
            export: long factors and ``max_position_embeddings``), ``"study:NAME"`` (that
            study's best trial and target length, in `storage`), a JSON file written by
            ``longrope-opt export`` (needs ``target_length``), or a `base_record` dict.
        model_config: The loaded model's config (for ``"config"``).
        storage: Optuna storage (for ``"study:NAME"``).

    Raises:
        InvalidArgumentError: The source is missing, unreadable, or does not say its length.
    """
    if isinstance(source, dict):
        return record.base_from_record(source)
    if source == "config":
        return _from_config(model_config)
    if source.startswith("study:"):
        scaling, length = factors_with_length(
            factors=None, study_name=source[len("study:") :], storage=storage, param="base"
        )
        if not length:
            raise InvalidArgumentError(f"`base` {source!r} records no target length.")
        return scaling, int(length)
    if not Path(source).is_file():
        raise InvalidArgumentError(
            f"`base` must be 'config', 'study:NAME' or a factor JSON file, got {source!r}."
        )
    scaling, length = factors_with_length(factors=source, study_name=None, storage=None)
    if length is None:
        raise InvalidArgumentError(
            f"`base` file {source!r} has no integer `target_length` (the length its factors reach)."
        )
    return scaling, length


def _from_config(config: Any) -> tuple[RopeScaling, int]:
    exported = read_export(config)
    length = getattr(config, "max_position_embeddings", None)
    if not isinstance(length, int):
        raise InvalidArgumentError(
            "`base` 'config' needs a model config with an integer `max_position_embeddings` (the "
            f"length its factors reach), got {length!r}."
        )
    if exported is not None:
        return exported.long, int(length)
    params = getattr(config, "rope_parameters", None) or {}
    if params.get("rope_type") != "longrope" or "long_factor" not in params:
        raise InvalidArgumentError(
            "`base` 'config' needs a model whose config has `longrope` rope parameters "
            f"(e.g. an `export_model` directory), got rope type {params.get('rope_type')!r}."
        )
    t = params.get("attention_factor") or 1.0
    return RopeScaling(params["long_factor"], 0, float(t), method="config"), int(length)
