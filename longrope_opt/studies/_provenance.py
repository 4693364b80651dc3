"""What a search was run on, stored in the study's user attrs and checked on resume."""

from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from longrope_opt.errors import InvalidArgumentError


#: Keys that must match for a study to be resumed by a command (the rest is informational).
IDENTITY_KEYS = ("model", "target_length", "original_length", "objective")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def build_provenance(
    *,
    model: str,
    model_type: str,
    original_length: int,
    target_length: int,
    corpus: str,
    corpus_hash: str,
    doc_ids: list[str],
    samples: int,
    seed: int,
    objective: str,
    compute: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The provenance record of a search (JSON-ready); `compute` is the `PathChoice` of the
    process that created the study (dtype, attention, and the timings behind an auto choice)."""
    return {
        "model": model,
        "model_type": model_type,
        "original_length": original_length,
        "target_length": target_length,
        "corpus": corpus,
        "corpus_hash": corpus_hash,
        "doc_ids": doc_ids,
        "samples": samples,
        "seed": seed,
        "objective": objective,
        "compute": compute,
        "versions": {
            "longrope_opt": _version("longrope-opt"),
            "torch": _version("torch"),
            "transformers": _version("transformers"),
            "optuna": _version("optuna"),
            "python": platform.python_version(),
        },
    }


def check_compatible(study_name: str, stored: dict[str, Any], wanted: dict[str, Any]) -> None:
    """Refuse to continue a study that was started with a different model/length/objective."""
    for key in IDENTITY_KEYS:
        if key in stored and not _same(key, stored[key], wanted.get(key)):
            raise InvalidArgumentError(
                f"study {study_name!r} was created with {key}={stored[key]!r}; this run has "
                f"{key}={wanted.get(key)!r}. Use another `--study-name` or the same settings."
            )


def _same(key: str, stored: Any, wanted: Any) -> bool:
    # Earlier releases stored a model path as typed (relative): it names the same model as the
    # absolute path stored now when both lead to the same directory.
    if stored == wanted:
        return True
    if key != "model" or not (isinstance(stored, str) and isinstance(wanted, str)):
        return False
    a, b = Path(stored).expanduser(), Path(wanted).expanduser()
    return a.exists() and b.exists() and a.resolve() == b.resolve()


def provenance_of(
    *, model_name: str, model: Any, spec: Any, target_length: int, samples: Any, seed: int,
    objective: str,
) -> dict[str, Any]:  # fmt: skip
    """`build_provenance` from a loaded model, its `RopeSpec` and `load_samples` output."""
    return build_provenance(
        model=model_name,
        model_type=model.config.model_type,
        original_length=spec.original_length,
        target_length=target_length,
        corpus=samples.source,
        corpus_hash=samples.corpus_hash,
        doc_ids=samples.doc_ids,
        samples=len(samples),
        seed=seed,
        objective=objective,
        compute={
            **(getattr(model, "longrope_opt_compute", None) or {}),
            "device": str(model.get_output_embeddings().weight.device),
        },
    )
