"""The study record: every study-level key this package writes, in one namespace, read and
written here only (`longrope_opt.record`, also `longrope_opt.studies.record`).

A search's study carries, besides its trials: where it came from (provenance), the model's RoPE,
its total budget, its base stage (a secondary search), the search it runs (`SearchConfig`), the
re-rank, the re-rank's documents, the retrieval guard, the retrieval constraint's passkeys, and
what its objective wants recorded.
Each has a typed reader and writer below; nothing else in the package touches these keys.
Sampler state (generations, parents, claims) is the sampler's own, in system attrs, as Optuna's
samplers keep theirs.

Studies written by earlier releases used bare keys (``provenance``, ``rope_spec``, ``n_trials``,
``base_scaling``, and ``search_config`` holding argparse keys). They are read here, under their
old names, and never written again: a study from any release opens, resumes and exports.
"""

from __future__ import annotations

import dataclasses
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import optuna

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec


NAMESPACE = "longrope_opt:"
#: Where a search came from (model, lengths, corpus, documents, seed, objective, compute path,
#: library versions; `build_provenance`).
PROVENANCE = NAMESPACE + "provenance"
#: The model's `RopeSpec` (its fields).
ROPE_SPEC = NAMESPACE + "rope_spec"
#: The study's total budget of finished trials (what its workers run to).
TOTAL = NAMESPACE + "n_trials"
#: A secondary search's base stage (`base_record`).
BASE = NAMESPACE + "base"
#: The search, `SearchConfig.to_dict()`.
CONFIG = NAMESPACE + "search_config"
#: The re-rank, each re-ranked trial's number mapped to its full-fidelity value.
RERANK = NAMESPACE + "rerank"
#: The re-rank's documents, by id (``doc_ids``) and by text hash (``doc_hashes``).
RERANK_DOCS = NAMESPACE + "rerank_docs"
#: The retrieval guard (``keys``, ``seed``, ``length``, ``results`` per trial and prompt,
#: ``reference`` and ``winner`` trials).
GUARD = NAMESPACE + "guard"
#: The retrieval constraint (``keys``, ``seed``, ``length``, ``misses`` per trial and prompt).
RETRIEVAL = NAMESPACE + "retrieval"
#: The plan `longrope_opt.extend` sized to its budget (`longrope_opt.pipeline.Plan.to_dict`).
PLAN = NAMESPACE + "plan"
#: What the objective records about itself once (e.g. the needle prompts it built).
OBJECTIVE = NAMESPACE + "objective"
#: What `longrope_opt.extend` exported last: the folder, the files (size and mtime), the verdict,
#: and what it was made from (finished trials, held-out text, margin), so a rerun with nothing
#: left to do says so instead of measuring and writing it again.
SHIPPED = NAMESPACE + "shipped"

#: Keys of earlier releases, never written again (current key → legacy key).
LEGACY = {
    PROVENANCE: "provenance",
    ROPE_SPEC: "rope_spec",
    TOTAL: "n_trials",
    BASE: "base_scaling",
    CONFIG: "search_config",
    OBJECTIVE: "longrope_opt:needle_prompts",
}

#: Provenance fields that define the search (a study is only continued with the same ones).
IDENTITY = ("model", "target_length", "objective", "original_length")


def _read(study: optuna.Study, key: str) -> Any:
    attrs = study.user_attrs
    if key in attrs:
        return attrs[key]
    return attrs.get(LEGACY.get(key, ""))


# ----- provenance, RoPE, total, base --------------------------------------------------------


def read_provenance(study: optuna.Study) -> dict[str, Any]:
    """The study's provenance (empty for a study made without one)."""
    return dict(_read(study, PROVENANCE) or {})


def write_provenance(study: optuna.Study, provenance: dict[str, Any]) -> None:
    """Record where the search came from (once, when the study is created)."""
    study.set_user_attr(PROVENANCE, provenance)


def target_length(study: optuna.Study) -> int | None:
    """The length the study searched for (None when it does not say)."""
    value = read_provenance(study).get("target_length")
    return int(value) if value is not None else None


def read_spec(study: optuna.Study) -> RopeSpec | None:
    """The model's RoPE as recorded (None for a plain Optuna study)."""
    fields = _read(study, ROPE_SPEC)
    return None if fields is None else RopeSpec(**fields)


def write_spec(study: optuna.Study, spec: RopeSpec) -> None:
    """Record the model's RoPE."""
    study.set_user_attr(ROPE_SPEC, dataclasses.asdict(spec))


def read_total(study: optuna.Study) -> int | None:
    """The study's total budget (None when no run set one)."""
    value = _read(study, TOTAL)
    return None if value is None else int(value)


def write_total(study: optuna.Study, n_trials: int) -> None:
    """Record the study's total budget (workers run to it)."""
    study.set_user_attr(TOTAL, int(n_trials))


def base_record(scaling: RopeScaling, length: int) -> dict[str, Any]:
    """JSON form of a base stage (what the record and a worker's config hold)."""
    return {**scaling.to_dict(), "length": int(length)}


def base_from_record(record: dict[str, Any]) -> tuple[RopeScaling, int]:
    """Inverse of `base_record`: the base's factors and the length they extend to."""
    return RopeScaling.from_dict(record), int(record["length"])


def read_base(study: optuna.Study) -> tuple[RopeScaling, int] | None:
    """A secondary search's base stage as recorded by a study without a config (None: none)."""
    record = _read(study, BASE)
    return None if not record else base_from_record(record)


# ----- the search config --------------------------------------------------------------------


def read_config(study: optuna.Study) -> tuple[dict[str, Any], bool] | None:
    """``(stored config, written by a release before SearchConfig)`` or None (no config).

    The legacy form holds argparse keys; `SearchConfig.from_study` converts it.
    """
    attrs = study.user_attrs
    if CONFIG in attrs:
        return dict(attrs[CONFIG]), False
    if LEGACY[CONFIG] in attrs:
        return dict(attrs[LEGACY[CONFIG]]), True
    return None


def write_config(study: optuna.Study, config: dict[str, Any]) -> None:
    """Record the search (`SearchConfig.to_dict()`), so any process can rebuild it."""
    study.set_user_attr(CONFIG, config)


# ----- provenance: where a search came from ------------------------------------------------


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


# ----- re-rank and guard --------------------------------------------------------------------


def read_rerank(study: optuna.Study) -> dict[int, float]:
    """{trial number: full-fidelity value} of the trials re-ranked so far."""
    return {int(k): float(v) for k, v in (study.user_attrs.get(RERANK) or {}).items()}


def add_rerank(study: optuna.Study, number: int, value: float) -> None:
    """Record one re-ranked trial. Read-modify-write of one attr: a worker re-ranking at the
    same time can only re-add what it measured itself, never drop another's entry."""
    values = {str(k): v for k, v in read_rerank(study).items()}
    values[str(number)] = float(value)
    study.set_user_attr(RERANK, values)


def write_rerank_documents(study: optuna.Study, doc_ids: list[str], doc_hashes: list[str]) -> None:
    """Record the re-rank's documents (an evaluation leaves them out)."""
    study.set_user_attr(RERANK_DOCS, {"doc_ids": list(doc_ids), "doc_hashes": list(doc_hashes)})


def read_guard(study: optuna.Study) -> dict[str, Any]:
    """The retrieval guard's record (empty when no guard ran)."""
    return dict(study.user_attrs.get(GUARD) or {})


def write_guard(study: optuna.Study, record: dict[str, Any]) -> None:
    """Record the retrieval guard (its per-prompt outcomes so far, its decision once made)."""
    study.set_user_attr(GUARD, record)


def read_retrieval(study: optuna.Study) -> dict[str, Any]:
    """The retrieval constraint's record (empty when none ran)."""
    return dict(study.user_attrs.get(RETRIEVAL) or {})


def write_retrieval(study: optuna.Study, record: dict[str, Any]) -> None:
    """Record the retrieval constraint's outcomes so far (per trial and prompt)."""
    study.set_user_attr(RETRIEVAL, record)


def read_plan(study: optuna.Study) -> dict[str, Any]:
    """The plan `extend` runs this study by (empty: none stored yet)."""
    return dict(study.user_attrs.get(PLAN) or {})


def write_plan(study: optuna.Study, plan: dict[str, Any]) -> None:
    """Record the plan `extend` sized (a rerun continues it instead of timing again)."""
    study.set_user_attr(PLAN, plan)


def read_shipped(study: optuna.Study) -> dict[str, Any]:
    """What `extend` exported last (empty: nothing yet)."""
    return dict(_read(study, SHIPPED) or {})


def write_shipped(study: optuna.Study, shipped: dict[str, Any]) -> None:
    """Record what `extend` exported (see `SHIPPED`)."""
    study.set_user_attr(SHIPPED, shipped)


def study_documents(study: optuna.Study) -> list[str]:
    """Every document a study searched or re-ranked on, by id and (where recorded) by text hash:
    what an evaluation must leave out (`load_samples(..., exclude=...)`)."""
    prov = read_provenance(study)
    rerank = study.user_attrs.get(RERANK_DOCS) or {}
    found: list[str] = []
    for values in (prov.get("doc_ids"), prov.get("doc_hashes"), rerank.get("doc_ids"),
                   rerank.get("doc_hashes")):  # fmt: skip
        found += [str(v) for v in values or [] if str(v) not in found]
    return found


# ----- the objective's own record -----------------------------------------------------------


def read_objective_record(study: optuna.Study) -> Any:
    """What the study's objective recorded about itself (None: nothing)."""
    return _read(study, OBJECTIVE)


def write_objective_record(study: optuna.Study, entry: Any) -> None:
    """Record what the objective says about itself (`Objective.study_record`), once."""
    study.set_user_attr(OBJECTIVE, entry)


# ----- is this the same search? -------------------------------------------------------------


def check_same_search(
    study_name: str,
    *,
    stored_provenance: dict[str, Any],
    provenance: dict[str, Any],
    difference: tuple[str, Any, Any] | None,
) -> None:
    """The one check before a study is continued: the same model, lengths and objective as
    recorded, and no field of the search config changed (`difference` is the first changed
    field, its stored and its wanted value, from `SearchConfig.first_difference`).

    Raises:
        InvalidArgumentError: Naming the first field that differs, its stored and wanted value.
    """
    for key in IDENTITY:
        if key in stored_provenance and not _same(key, stored_provenance[key], provenance.get(key)):
            raise InvalidArgumentError(
                f"study {study_name!r} was created with `{key}` {stored_provenance[key]!r}; this "
                f"run has {provenance.get(key)!r}. Use another `study_name` or the same settings."
            )
    if difference is not None:
        field, was, now = difference
        raise InvalidArgumentError(
            f"study {study_name!r} was created with `{field}` {was!r}; this run has {now!r}. Use "
            "another `study_name` or the same settings."
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
