"""What a search was run on: its provenance record (stored and checked by `_record`)."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any


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
    doc_hashes: list[str] | None = None,
    doc_kinds: list[str] | None = None,
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
        **({"doc_hashes": doc_hashes} if doc_hashes is not None else {}),
        **({"doc_kinds": doc_kinds} if doc_kinds is not None else {}),
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
        doc_hashes=getattr(samples, "doc_hashes", None),
        doc_kinds=getattr(samples, "doc_kinds", None),
        samples=len(samples),
        seed=seed,
        objective=objective,
        compute={
            **(getattr(model, "longrope_opt_compute", None) or {}),
            "device": str(model.get_output_embeddings().weight.device),
        },
    )

