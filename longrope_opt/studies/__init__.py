"""Studies: a search defined once (`SearchConfig`) and run by `run_search`; storage URLs,
create-or-resume with provenance, run to a total budget, comparisons, export, and the base stage
of a secondary (progressive) search."""

from __future__ import annotations

from longrope_opt.studies._compare import comparison_study_name
from longrope_opt.studies._compare import make_pruner
from longrope_opt.studies._compare import pending_studies
from longrope_opt.studies._compare import run_comparison
from longrope_opt.studies._compare_report import format_table
from longrope_opt.studies._compare_report import full_eval_tokens
from longrope_opt.studies._compare_report import read_comparison
from longrope_opt.studies._compare_report import write_html
from longrope_opt.studies._config import CONFIG_KEY
from longrope_opt.studies._config import SearchConfig
from longrope_opt.studies._export import best_scaling
from longrope_opt.studies._export import export_best
from longrope_opt.studies._export import factors_with_length
from longrope_opt.studies._export import load_factors
from longrope_opt.studies._export import load_named_study
from longrope_opt.studies._export import space_of_study
from longrope_opt.studies._provenance import build_provenance
from longrope_opt.studies._provenance import provenance_of
from longrope_opt.studies._rerank import RERANK_KEY
from longrope_opt.studies._rerank import rerank_study
from longrope_opt.studies._rerank import reranked_best
from longrope_opt.studies._run import finished_trials
from longrope_opt.studies._run import open_study
from longrope_opt.studies._run import run_study
from longrope_opt.studies._search import TOTAL_KEY
from longrope_opt.studies._search import SearchResult
from longrope_opt.studies._search import run_search
from longrope_opt.studies._stages import BASE_ATTR
from longrope_opt.studies._stages import base_from_record
from longrope_opt.studies._stages import base_record
from longrope_opt.studies._stages import resolve_base
from longrope_opt.studies._storage import DEFAULT_STORAGE
from longrope_opt.studies._storage import StorageError
from longrope_opt.studies._storage import make_storage
from longrope_opt.studies._storage import resolve_storage_url
from longrope_opt.studies._storage import sqlite_path


__all__ = [
    "BASE_ATTR",
    "CONFIG_KEY",
    "DEFAULT_STORAGE",
    "RERANK_KEY",
    "TOTAL_KEY",
    "SearchConfig",
    "SearchResult",
    "StorageError",
    "base_from_record",
    "base_record",
    "best_scaling",
    "build_provenance",
    "comparison_study_name",
    "export_best",
    "factors_with_length",
    "finished_trials",
    "format_table",
    "full_eval_tokens",
    "load_factors",
    "load_named_study",
    "make_pruner",
    "make_storage",
    "open_study",
    "pending_studies",
    "provenance_of",
    "rerank_study",
    "reranked_best",
    "read_comparison",
    "resolve_base",
    "resolve_storage_url",
    "run_comparison",
    "run_search",
    "run_study",
    "space_of_study",
    "sqlite_path",
    "write_html",
]
