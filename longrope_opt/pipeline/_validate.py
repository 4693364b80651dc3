"""`validate_candidates`: what `longrope-opt validate` does, as one function."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from longrope_opt.data import check_source
from longrope_opt.data import load_samples
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.errors import StorageError
from longrope_opt.evaluation import CLASSIC
from longrope_opt.evaluation import DEFAULT_MARGIN
from longrope_opt.evaluation import MeasurementStore
from longrope_opt.evaluation import Row
from longrope_opt.evaluation import Summary
from longrope_opt.evaluation import Validation
from longrope_opt.evaluation import check_margin
from longrope_opt.evaluation import factor_rows
from longrope_opt.evaluation import format_summary
from longrope_opt.evaluation import join_tables
from longrope_opt.evaluation import measurement_path
from longrope_opt.evaluation import merge_validations
from longrope_opt.evaluation import study_rows
from longrope_opt.evaluation import summarize
from longrope_opt.evaluation import summary_csv
from longrope_opt.evaluation import summary_json
from longrope_opt.evaluation import validate
from longrope_opt.files import write_text_atomic
from longrope_opt.models import load_model
from longrope_opt.models import load_tokenizer
from longrope_opt.models import read_config
from longrope_opt.objectives import check_passkey_form
from longrope_opt.patching import check_supported
from longrope_opt.pipeline._finetune import finetuned_from_formula
from longrope_opt.studies import load_named_study
from longrope_opt.studies import make_storage
from longrope_opt.studies import open_existing
from longrope_opt.studies import record
from longrope_opt.studies import resolve_storage_url
from longrope_opt.studies import stored_trained_length
from longrope_opt.studies import study_documents
from longrope_opt.viz import validation_figure


@dataclass
class ValidationResult:
    """What `validate_candidates` measured and wrote.

    Attributes:
        summary: Statistics and verdicts (`longrope_opt.evaluation.Summary`).
        table: The table as printed.
        measured: Forwards run by this call (the rest came from the storage).
        files: Files written (``PREFIX.csv``, ``.json``, ``.html``, ``.txt``).
    """

    summary: Summary
    table: str
    measured: int
    files: list[str]


def validate_candidates(
    studies: Sequence[str] = (),
    factors: Sequence[str] = (),
    *,
    storage: Any = None,
    store: Any = None,
    top: int = 0,
    corpus: str = "builtin",
    docs: int = 5,
    windows: int = 1,
    seed: int = 0,
    lengths: Sequence[int] | None = None,
    classic: Sequence[str] = CLASSIC,
    keys: int = 20,
    model: str | None = None,
    dtype: str = "auto",
    device: str = "auto",
    attn: str | None = None,
    remeasure_other_paths: bool = False,
    output: str | Path | None = None,
    margin: float = DEFAULT_MARGIN,
    trained_length: int | None = None,
    progress: bool = True,
    passkey_form: str = "single",
    models: Sequence[str] = (),
) -> ValidationResult:
    """Judge studies' winners and factor files against the classic rows on held-out text.

    Args:
        studies: Study names (their winners: plain best, re-ranked, guarded).
        factors: Factor files (`export_best`'s JSON).
        storage: Where the studies are: a URL, or an open Optuna storage.
        store: Where measurements are kept (default `storage`).
        top: Also each study's `top` best trials.
        corpus: The held-out text; every document a study read is left out.
        docs: Documents (>= 2: intervals are over documents).
        windows: Up to this many disjoint windows per document.
        seed: Chooses the documents.
        lengths: Lengths (default: the studies' target lengths, else 16384).
        classic: The classic rows (the best of them is the reference).
        keys: Passkey prompts per length (0: none).
        model: Default: the first study's model, else ``"smollm2-135m"``.
        dtype: Compute path.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        attn: Attention kernel.
        remeasure_other_paths: Measure again what the store holds only from another path.
        output: Also write ``output.csv``, ``.json``, ``.html`` and ``.txt``.
        margin: The practical margin on the perplexity ratio (`summarize`): a ratio within
            [1 − margin, 1 + margin] is "equivalent", not a reason to ship searched factors.
        trained_length: The checkpoint's trained length when its config says otherwise
            (default: what the studies' searches were told, else the config's).
        progress: A progress bar with an ETA.
        passkey_form: How passkeys are measured (`longrope_opt.evaluation.validate`).
        models: Model directories measured as they load (a fine-tuned export runs the factors
            its config carries: the long ones past the trained length, the short ones inside
            it), each a row named by its folder, on the same documents and prompts. A model
            fine-tuned from a formula (`finetune_and_export` with `method`) counts as a formula
            row. Lengths inside the trained window are then allowed with `classic` ``none``
            alone: the short context the fine-tuning must keep, against the base model.

    Raises:
        InvalidArgumentError: Bad counts, names or lengths; nothing to measure; all before the
            model loads.
    """
    for name, value, low in (("docs", docs, 2), ("windows", windows, 1), ("keys", keys, 0),
                             ("top", top, 0), ("seed", seed, 0)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidArgumentError(f"`{name}` must be an integer >= {low}, got {value!r}.")
    check_margin(margin)
    check_passkey_form(passkey_form)
    unknown = [c for c in classic if c not in CLASSIC]
    if unknown:
        raise InvalidArgumentError(
            f"`classic` must name rows among {', '.join(CLASSIC)}, got {unknown[0]!r}."
        )
    if output is not None and not Path(f"{output}.csv").parent.is_dir():
        raise InvalidArgumentError(f"`output` {str(output)!r}: its folder does not exist.")
    check_source(corpus)
    if store:  # a store that cannot be opened: before the model loads (created only on use)
        _open_store(store, existing=True)
    # studies are read from a storage that must exist; the measurements of classic rows alone
    # go to one that is created once every argument has been checked
    held: optuna.storages.BaseStorage | None
    if isinstance(storage, optuna.storages.BaseStorage):  # a caller's open storage (`extend`)
        url, held = "", storage
    else:
        url = resolve_storage_url(storage)
        held = make_storage(url, must_exist=True) if studies else open_existing(url)
    loaded = [load_named_study(held, name) for name in studies]
    candidates = [row for s in loaded for row in study_rows(s, top=top)]
    candidates += factor_rows(factors)
    provenance = [record.read_provenance(s) for s in loaded]
    model = model or next((p["model"] for p in provenance if p.get("model")), "smollm2-135m")
    if trained_length is None:  # what the searches were told, so the rows match theirs
        trained_length = next((n for s in loaded if (n := stored_trained_length(s))), None)
    if not lengths:
        lengths = sorted({int(p["target_length"]) for p in provenance if p.get("target_length")})
        lengths = lengths or [16384]
    config = read_config(model, trained_length=trained_length)
    if config is not None:  # a length inside the trained window has no classic extension
        trained = check_supported(config).original_length  # a refused family: one line
        inside = [n for n in lengths if n <= trained]
        if inside and models and set(classic) <= {"none"}:
            inside = []  # the short context kept: the base model and the fine-tuned ones
        if inside:
            raise InvalidArgumentError(
                f"`lengths` must be above the model's trained length {trained}, got {inside[0]}."
            )
    if not candidates and not classic and not models:
        raise InvalidArgumentError(
            "nothing to measure: give `study_name`, `factors`, `classic` or `models`."
        )
    exclude = [doc for s in loaded for doc in study_documents(s)]
    tokenizer = load_tokenizer(model)  # seconds: the corpus is checked before the weights
    documents = load_samples(corpus, tokenizer, max(lengths), docs, seed, exclude=exclude,
                             windows=windows)  # fmt: skip
    if not store and held is None:
        held = make_storage(url)
    backend = _open_store(store) if store else held
    parts, formulas = [], []
    if candidates or classic:  # rows of the base model (fine-tuned models alone need none)
        lm, tokenizer = load_model(model, dtype=dtype, device=device, attn=attn,
                                   trained_length=trained_length)  # fmt: skip
        kept = MeasurementStore(backend,
                                path=measurement_path(lm, dtype),
                                reuse_other_paths=not remeasure_other_paths)  # fmt: skip
        parts.append(validate(lm, tokenizer, candidates, documents, lengths=lengths, store=kept,
                              keys=keys, doc_ids=documents.doc_ids, classic=list(classic),
                              progress=progress, passkey_form=passkey_form))  # fmt: skip
        del lm  # one model in memory at a time
    for path in models:
        name = Path(path).name
        lm, own = load_model(path, dtype=dtype, device=device, attn=attn)
        if own.get_vocab() != tokenizer.get_vocab():
            raise InvalidArgumentError(f"`models` {path!r} has another tokenizer than the "
                                       "base model: its rows would read other tokens.")  # fmt: skip
        if finetuned_from_formula(lm.config):
            formulas.append(name)
        at = MeasurementStore(backend, path=measurement_path(lm, dtype),
                              reuse_other_paths=not remeasure_other_paths)  # fmt: skip
        parts.append(validate(lm, own, [Row(name, None, source=f"model {path}")], documents,
                              lengths=lengths, store=at, keys=keys, doc_ids=documents.doc_ids,
                              classic=False, progress=progress, passkey_form=passkey_form))  # fmt: skip
        del lm
    validation = merge_validations(parts, classic=formulas) if len(parts) > 1 else parts[0]
    summary = summarize(validation, margin=margin)
    table = format_summary(summary)
    files: list[str] = []
    if output is not None:
        write_text_atomic(f"{output}.csv", summary_csv(summary))
        write_text_atomic(f"{output}.json", summary_json(summary))
        validation_figure(summary.to_dict()).write_html(f"{output}.html", include_plotlyjs="cdn")
        write_text_atomic(f"{output}.txt", table + "\n")
        files = [f"{output}{suffix}" for suffix in (".csv", ".json", ".html", ".txt")]
    return ValidationResult(summary, table, validation.measured, files)


def rerender_validation(
    path: str | Path | Sequence[str | Path],
    *,
    margin: float = DEFAULT_MARGIN,
    output: str | Path | None = None,
) -> ValidationResult:
    """Judge a validation again from the JSON it wrote (``PREFIX.json``), measuring nothing: the
    table and verdicts under this version's rules and `margin`.

    Several files (a comparison measured over several runs, sittings or machines, each on the
    same documents and prompts) are judged as one table: `longrope_opt.evaluation.join_tables`.

    Raises:
        InvalidArgumentError: A file cannot be read or holds no validation; the files measured
            other documents, lengths or prompts, or a row of the same name with other numbers.
    """
    check_margin(margin)
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    parts = []
    for one in paths:
        try:
            data = json.loads(Path(one).read_text())
            parts.append(Validation.from_dict(data["validation"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidArgumentError(
                f"`from_json` {str(one)!r} is not a validation written by `validate --output` "
                f"({type(exc).__name__}: {exc})."
            ) from None
    validation = join_tables(parts)
    summary = summarize(validation, margin=margin)
    table = format_summary(summary)
    files: list[str] = []
    if output is not None:
        write_text_atomic(f"{output}.json", summary_json(summary))
        write_text_atomic(f"{output}.txt", table + "\n")
        files = [f"{output}.json", f"{output}.txt"]
    return ValidationResult(summary, table, 0, files)


def _open_store(url: str, *, existing: bool = False) -> Any:
    try:
        if existing:  # checked without creating the file
            return open_existing(resolve_storage_url(url))
        return make_storage(resolve_storage_url(url))
    except StorageError as exc:  # the library names its own parameter: say which one
        raise StorageError(str(exc).replace("`storage`", "`store`", 1)) from None
