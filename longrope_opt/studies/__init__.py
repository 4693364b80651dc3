"""Studies: a search defined once (`SearchConfig`) and run by `run_search`; storage URLs,
create-or-resume with provenance, run to a total budget, re-rank, retrieval guard, the winner a
study exports and by which rule, comparisons, export, and the base stage of a secondary search.
What a study records about itself is read and written in one place, `longrope_opt.record`
(also `longrope_opt.studies.record`).
"""

from __future__ import annotations

from longrope_opt import record
from longrope_opt.errors import StorageError
from longrope_opt.record import base_from_record
from longrope_opt.record import base_record
from longrope_opt.record import build_provenance
from longrope_opt.record import provenance_of
from longrope_opt.record import study_documents
from longrope_opt.samplers import make_pruner
from longrope_opt.studies._compare import comparison_study_name
from longrope_opt.studies._compare import pending_studies
from longrope_opt.studies._compare import run_comparison
from longrope_opt.studies._compare_report import SamplerSummary
from longrope_opt.studies._compare_report import SeedRun
from longrope_opt.studies._compare_report import format_table
from longrope_opt.studies._compare_report import full_eval_tokens
from longrope_opt.studies._compare_report import read_comparison
from longrope_opt.studies._compare_report import write_html
from longrope_opt.studies._config import POPULATION_SAMPLERS
from longrope_opt.studies._config import SearchConfig
from longrope_opt.studies._export import export_best
from longrope_opt.studies._export import factors_with_length
from longrope_opt.studies._export import load_factors
from longrope_opt.studies._export import load_named_study
from longrope_opt.studies._export import resolve_base
from longrope_opt.studies._guard import GUARD_SEED
from longrope_opt.studies._guard import GuardResult
from longrope_opt.studies._guard import guard_study
from longrope_opt.studies._pipeline import SearchResult
from longrope_opt.studies._pipeline import prepare
from longrope_opt.studies._pipeline import run_search
from longrope_opt.studies._rerank import rerank_study
from longrope_opt.studies._retry import RetryStaleTrial
from longrope_opt.studies._run import finished_trials
from longrope_opt.studies._run import open_study
from longrope_opt.studies._run import run_study
from longrope_opt.studies._stages import Guard
from longrope_opt.studies._stages import Rerank
from longrope_opt.studies._stages import Search
from longrope_opt.studies._stages import Stage
from longrope_opt.studies._stages import Trials
from longrope_opt.studies._stages import run_stages
from longrope_opt.studies._stages import search_stages
from longrope_opt.studies._storage import DEFAULT_STORAGE
from longrope_opt.studies._storage import make_storage
from longrope_opt.studies._storage import open_existing
from longrope_opt.studies._storage import resolve_storage_url
from longrope_opt.studies._storage import sqlite_path
from longrope_opt.studies._storage import storage_file
from longrope_opt.studies._warm import WARM_KEY
from longrope_opt.studies._warm import enqueue_warm_start
from longrope_opt.studies._warm import warm_start_params
from longrope_opt.studies._winner import Winner
from longrope_opt.studies._winner import best_scaling
from longrope_opt.studies._winner import best_seed
from longrope_opt.studies._winner import guarded_trial
from longrope_opt.studies._winner import ranked_trials
from longrope_opt.studies._winner import reranked_best
from longrope_opt.studies._winner import reranked_order
from longrope_opt.studies._winner import space_of_study
from longrope_opt.studies._winner import stored_trained_length
from longrope_opt.studies._winner import study_winner


__all__ = [
    "search_stages",
    "run_stages",
    "prepare",
    "Trials",
    "Stage",
    "Search",
    "Rerank",
    "RetryStaleTrial",
    "Guard",
    "DEFAULT_STORAGE",
    "GUARD_SEED",
    "GuardResult",
    "POPULATION_SAMPLERS",
    "SamplerSummary",
    "SearchConfig",
    "SeedRun",
    "SearchResult",
    "StorageError",
    "Winner",
    "base_from_record",
    "base_record",
    "best_scaling",
    "best_seed",
    "build_provenance",
    "comparison_study_name",
    "export_best",
    "factors_with_length",
    "finished_trials",
    "format_table",
    "full_eval_tokens",
    "guard_study",
    "guarded_trial",
    "load_factors",
    "load_named_study",
    "make_pruner",
    "make_storage",
    "open_existing",
    "open_study",
    "pending_studies",
    "provenance_of",
    "ranked_trials",
    "read_comparison",
    "record",
    "rerank_study",
    "reranked_best",
    "reranked_order",
    "resolve_base",
    "WARM_KEY",
    "enqueue_warm_start",
    "warm_start_params",
    "resolve_storage_url",
    "run_comparison",
    "run_search",
    "run_study",
    "space_of_study",
    "sqlite_path",
    "storage_file",
    "study_documents",
    "study_winner",
    "stored_trained_length",
    "write_html",
]
