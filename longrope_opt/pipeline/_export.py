"""`export_winner` and `finetune_and_export`: what `longrope-opt export` and `finetune` do."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import as_pair
from longrope_opt.models import check_output_dir
from longrope_opt.models import export_model
from longrope_opt.models import load_model
from longrope_opt.models import needs_loader
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import ShortLongScaling
from longrope_opt.studies import SearchConfig
from longrope_opt.studies import best_scaling
from longrope_opt.studies import export_best
from longrope_opt.studies import load_named_study
from longrope_opt.studies import make_storage
from longrope_opt.studies import record
from longrope_opt.studies import resolve_storage_url
from longrope_opt.studies import stored_trained_length
from longrope_opt.studies import study_winner


#: Why the exported trial was chosen, by rule (`study_winner`).
RULES = {
    "guarded": "the retrieval guard's winner: the best re-ranked trial that retrieves as many "
    "passkeys as the study's best seed",
    "re-ranked": "the best trial at full fidelity (re-ranked)",
    "best": "the study's best trial",
}


@dataclass
class Exported:
    """What `export_winner` wrote.

    Attributes:
        factors: The JSON record (`export_best`).
        model_dir: The model directory, if one was written.
        vanilla: Whether vanilla transformers computes exactly these factors (n̂ = 0).
    """

    factors: dict[str, Any]
    model_dir: Path | None
    vanilla: bool


def export_winner(
    study_name: str,
    output: str | Path = "factors.json",
    *,
    storage: Any = None,
    model_dir: str | Path | None = None,
    model: str | None = None,
    short_study: str | None = None,
    save_dtype: str = "bfloat16",
    overwrite: bool = False,
    device: str = "cpu",
    attn: str | None = None,
) -> Exported:
    """Write a study's winner as factors JSON, and as a model directory when asked.

    Args:
        study_name: The study (its long factors).
        output: The JSON file.
        storage: Where the study is.
        model_dir: Also write a model directory transformers loads.
        model: Weights to save (default: the model the study searched).
        short_study: A recovery study whose winner are the short factors.
        save_dtype: Dtype of the saved weights.
        overwrite: Write into an existing non-empty directory.
        device: Where the weights load.
        attn: Attention kernel.

    Raises:
        InvalidArgumentError: An unknown study, a model directory that may not be written (before
            any weights load), or a study that records no model or length.
    """
    if model_dir is not None:  # before the study is read or any weights load
        check_output_dir(model_dir, overwrite=overwrite, source=model, param="model_dir")
    held = make_storage(resolve_storage_url(storage), must_exist=True)
    study = load_named_study(held, study_name)
    short = None
    if short_study:
        short, _ = best_scaling(load_named_study(held, short_study, param="short_study"))
    factors = export_best(study, output)
    if model_dir is None:
        return Exported(factors, None, factors["n_hat"] == 0)
    winner = study_winner(study)
    if not model:
        try:
            model = SearchConfig.from_study(study).model
        except InvalidArgumentError:
            raise InvalidArgumentError(
                f"study {study.study_name!r} records no model; give `model`."
            ) from None
    target = record.target_length(study)
    if target is None:
        raise InvalidArgumentError(f"study {study.study_name!r} records no target length.")
    lm, tokenizer = load_model(model, dtype="float32", device=device, attn=attn,
                               trained_length=stored_trained_length(study))  # fmt: skip
    spec = RopeSpec.from_config(lm.config)
    scaling: Any = winner.scaling
    if short is not None:
        scaling = ShortLongScaling(short, winner.scaling, spec.original_length)
    meta = {"study": study.study_name, "trial": winner.trial.number, "value": winner.trial.value,
            "rule": winner.rule}  # fmt: skip
    out = export_model(lm, tokenizer, model_dir, scaling, target_length=int(target),
                       dtype=save_dtype, metadata=meta, overwrite=overwrite)  # fmt: skip
    return Exported(factors, out, not needs_loader(as_pair(scaling, spec)))
