"""Validation: every candidate against the classic methods on held-out text and passkeys.

`validate` measures (each number stored as it is made, keyed by what it measured:
`MeasurementStore`), `summarize` pairs each row with the best classic row and judges each
candidate, `format_summary` / `summary_csv` / `summary_json` write it out
(`longrope_opt.viz.validation_figure` draws it). `longrope-opt validate` is the command.

    >>> from longrope_opt.evaluation import MeasurementStore, study_rows, validate, summarize
    >>> store = MeasurementStore("sqlite:///longrope.db", path="float32")
    >>> docs = load_samples("/data/books", tokenizer, 32768, 5, exclude=study_documents(study))
    >>> summary = summarize(validate(model, tokenizer, study_rows(study), docs,
    ...                              lengths=[32768], store=store, keys=20))
"""

from __future__ import annotations

from longrope_opt.evaluation._merge import join_tables
from longrope_opt.evaluation._merge import merge_validations
from longrope_opt.evaluation._report import CONTENDERS
from longrope_opt.evaluation._report import DEFAULT_MARGIN
from longrope_opt.evaluation._report import RETRIEVAL_ALPHA
from longrope_opt.evaluation._report import VERDICTS
from longrope_opt.evaluation._report import RowStats
from longrope_opt.evaluation._report import Summary
from longrope_opt.evaluation._report import check_margin
from longrope_opt.evaluation._report import documents_needed
from longrope_opt.evaluation._report import format_summary
from longrope_opt.evaluation._report import summarize
from longrope_opt.evaluation._report import summary_csv
from longrope_opt.evaluation._report import summary_json
from longrope_opt.evaluation._rows import CLASSIC
from longrope_opt.evaluation._rows import Row
from longrope_opt.evaluation._rows import classic_rows
from longrope_opt.evaluation._rows import factor_rows
from longrope_opt.evaluation._rows import study_rows
from longrope_opt.evaluation._stats import paired_bootstrap
from longrope_opt.evaluation._stats import sign_test
from longrope_opt.evaluation._stats import wilson
from longrope_opt.evaluation._store import MEASUREMENT_VERSION
from longrope_opt.evaluation._store import STORE_STUDY
from longrope_opt.evaluation._store import MeasurementStore
from longrope_opt.evaluation._store import measurement_key
from longrope_opt.evaluation._store import measurement_path
from longrope_opt.evaluation._store import model_fingerprint
from longrope_opt.evaluation._store import scaling_identity
from longrope_opt.evaluation._store import tokens_hash
from longrope_opt.evaluation._validate import Validation
from longrope_opt.evaluation._validate import validate


__all__ = [
    "CLASSIC",
    "DEFAULT_MARGIN",
    "check_margin",
    "documents_needed",
    "CONTENDERS",
    "RETRIEVAL_ALPHA",
    "STORE_STUDY",
    "VERDICTS",
    "MEASUREMENT_VERSION",
    "MeasurementStore",
    "Row",
    "RowStats",
    "Summary",
    "Validation",
    "classic_rows",
    "factor_rows",
    "format_summary",
    "measurement_key",
    "measurement_path",
    "join_tables",
    "merge_validations",
    "model_fingerprint",
    "paired_bootstrap",
    "scaling_identity",
    "sign_test",
    "study_rows",
    "summarize",
    "summary_csv",
    "summary_json",
    "tokens_hash",
    "validate",
    "wilson",
]
