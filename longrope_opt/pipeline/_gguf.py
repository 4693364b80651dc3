"""`export_winner_gguf`: a study's winner as a GGUF that llama.cpp runs at the study's length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import GGUF_FORMS
from longrope_opt.models import GgufExport
from longrope_opt.models import check_gguf_output
from longrope_opt.models import export_gguf
from longrope_opt.models import gguf_source
from longrope_opt.models import read_config
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import ShortLongScaling
from longrope_opt.studies import SearchConfig
from longrope_opt.studies import best_scaling
from longrope_opt.studies import load_named_study
from longrope_opt.studies import make_storage
from longrope_opt.studies import record
from longrope_opt.studies import resolve_storage_url
from longrope_opt.studies import stored_trained_length
from longrope_opt.studies import study_winner


def export_winner_gguf(
    study_name: str,
    gguf: str | Path,
    *,
    storage: Any = None,
    source: str | Path | None = None,
    short_study: str | None = None,
    form: str = "longrope",
    drop_n_hat: bool = False,
) -> GgufExport:
    """Write the winner of `study_name` (the trial `export` picks) into a copy of its model's GGUF.

    Args:
        study_name: The study (its long factors and target length).
        gguf: The ``.gguf`` to write (must not exist).
        storage: Where the study is.
        source: The GGUF to copy (default: the one the study's model came from: the
            ``smollm2-135m`` alias's, or the study's ``.gguf`` model).
        short_study: A recovery study whose winner are the short factors.
        form: ``"longrope"`` or ``"freqs"`` (`longrope_opt.models.export_gguf`).
        drop_n_hat: Export a winner with n̂ > 0 without its n̂.

    Raises:
        InvalidArgumentError: One line: an existing output, an unknown form, a study without a
            model or length, a model with no GGUF, an architecture llama.cpp does not rescale
            this way, or n̂ > 0 without `drop_n_hat` — all before anything is written.
    """
    if form not in GGUF_FORMS:
        raise InvalidArgumentError(f"`form` must be one of {list(GGUF_FORMS)}, got {form!r}.")
    check_gguf_output(gguf, param="gguf")
    held = make_storage(resolve_storage_url(storage), must_exist=True)
    study = load_named_study(held, study_name)
    try:
        model = SearchConfig.from_study(study).model
    except InvalidArgumentError:
        model = None
    if source is None and model is None:
        raise InvalidArgumentError(f"study {study.study_name!r} records no model; give `source`.")
    target = record.target_length(study)
    if target is None:
        raise InvalidArgumentError(f"study {study.study_name!r} records no target length.")
    winner = study_winner(study).scaling
    if winner.n_hat > 0 and not drop_n_hat:  # before the source: the refusal needs none
        raise InvalidArgumentError(
            f"study {study.study_name!r}'s winner keeps n_hat={winner.n_hat} start tokens "
            "unscaled, which GGUF cannot hold; pass `drop_n_hat` to export it without, or search "
            "with n_hat 0."
        )
    path = Path(source).expanduser() if source is not None else gguf_source(str(model))
    if not path.is_file():
        raise InvalidArgumentError(f"`source` {str(path)!r} is not a file.")
    # the factors act on the RoPE the study searched: its model's, as transformers reads it
    config = read_config(str(model if model is not None else path),
                         trained_length=stored_trained_length(study))  # fmt: skip
    if config is None:
        raise InvalidArgumentError(f"cannot read the config of model {str(model)!r}.")
    spec = RopeSpec.from_config(config)
    scaling: Any = winner
    if short_study:
        short, _ = best_scaling(load_named_study(held, short_study, param="short_study"))
        scaling = ShortLongScaling(short, scaling, spec.original_length)
    return export_gguf(path, gguf, scaling, spec=spec, target_length=int(target), form=form,
                       drop_n_hat=drop_n_hat)  # fmt: skip
