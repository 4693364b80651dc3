"""What `extend` checks and reads before its stages run: a target past the trained window, a
study already shipped (nothing left to do), the passkey form a study keeps, and undoing a
refused call's new study and file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from longrope_opt import record
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import read_config
from longrope_opt.patching import check_supported
from longrope_opt.pipeline._plan import Plan
from longrope_opt.pipeline._stages import file_stamps
from longrope_opt.pipeline._stages import finished_count
from longrope_opt.studies import open_existing
from longrope_opt.studies import resolve_storage_url
from longrope_opt.studies import storage_file


def new_file(storage: Any) -> Path | None:
    """The SQLite or journal file `storage` names when it does not exist yet (this call would
    create it), else None."""
    if storage is not None and not isinstance(storage, str):
        return None
    path = storage_file(resolve_storage_url(storage))
    return path if path is not None and not path.exists() else None


def forget(study: optuna.Study, new_file: Path | None) -> None:
    """Undo what a refused `extend` wrote: its new study, and the file it created for it."""
    optuna.delete_study(study_name=study.study_name, storage=study._storage)
    if new_file is not None:
        engine = getattr(study._storage, "engine", None)
        if engine is not None:
            engine.dispose()
        for path in (new_file, new_file.with_name(new_file.name + "-journal")):
            path.unlink(missing_ok=True)


def check_past_window(model: str, target_length: int, trained_length: int | None) -> None:
    """`extend` only reaches past the trained window: a shorter target is one line that says
    what to give instead, before a database or a weight is touched (a config that cannot be
    read without loading is checked by the search after the load)."""
    model_config = read_config(model, trained_length=trained_length)
    if model_config is None:
        return
    trained = check_supported(model_config).original_length
    if target_length <= trained:
        raise InvalidArgumentError(
            f"`target_length` must be > the trained length {trained}, got {target_length}: "
            f"`extend` reaches past the trained window (2x is {2 * trained}); for a checkpoint "
            "trained on shorter text than its config says, give `trained_length`."
        )


def _existing_study(storage: Any, name: str) -> optuna.Study | None:
    """Study `name` if `storage` (a URL or an open storage) holds it; a look-up never creates
    a database."""
    if isinstance(storage, optuna.storages.BaseStorage):
        held: Any = storage
    else:
        held = open_existing(resolve_storage_url(storage))
    try:
        return None if held is None else optuna.load_study(study_name=name, storage=held)
    except KeyError:
        return None


def stored_passkey_form(storage: Any, name: str, *, exists: bool = False) -> str | None:
    """The passkey form of study `name`'s search (None: no such study, or no search stored).
    With `exists`: ``""`` for a study that exists without a search stored."""
    study = _existing_study(storage, name)
    if study is None:
        return None
    stored = record.read_config(study)
    if stored is None:
        return "" if exists else None
    return str(stored[0].get("passkey_form", "single"))


def already_shipped(
    storage: Any, name: str, out: Path, context: dict[str, Any]
) -> tuple[optuna.Study, dict[str, Any], Plan] | None:
    """``(study, what it shipped, its plan)`` of a finished `extend` when nothing is left to
    do: the study holds the trials it exported from, the export was made for this folder,
    held-out text, seed, margin and fine-tuning, the fine-tuning asked for is done, and every
    file it wrote is still there unchanged. None otherwise (then the stages run, and each skips
    what its record says is done). Reads the study only: no model loads."""
    study = _existing_study(storage, name)
    if study is None:
        return None
    shipped, stored = record.read_shipped(study), record.read_plan(study)
    if not shipped or not stored or shipped.get("out") != str(out.resolve()):
        return None
    if shipped.get("context") != context or shipped.get("trials") != finished_count(study):
        return None
    if context.get("finetune") and not shipped.get("finetuned"):  # killed while fine-tuning
        return None
    if any(file_stamps(Path(where)) != stamps for _, where, stamps in shipped["files"]):
        return None
    return study, shipped, Plan.from_dict(stored)
