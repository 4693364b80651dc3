"""Studies: storage URLs, create-or-resume with provenance, run to a total budget, export,
and the base stage of a secondary (progressive) search."""

from __future__ import annotations

from longrope_opt.studies._export import best_scaling
from longrope_opt.studies._export import export_best
from longrope_opt.studies._export import factors_with_length
from longrope_opt.studies._export import load_factors
from longrope_opt.studies._export import load_named_study
from longrope_opt.studies._export import rope_parameters
from longrope_opt.studies._provenance import build_provenance
from longrope_opt.studies._run import finished_trials
from longrope_opt.studies._run import open_study
from longrope_opt.studies._run import run_study
from longrope_opt.studies._stages import BASE_ATTR
from longrope_opt.studies._stages import base_record
from longrope_opt.studies._stages import resolve_base
from longrope_opt.studies._storage import DEFAULT_STORAGE
from longrope_opt.studies._storage import StorageError
from longrope_opt.studies._storage import make_storage
from longrope_opt.studies._storage import resolve_storage_url


__all__ = [
    "BASE_ATTR",
    "DEFAULT_STORAGE",
    "StorageError",
    "base_record",
    "best_scaling",
    "build_provenance",
    "export_best",
    "factors_with_length",
    "finished_trials",
    "load_factors",
    "load_named_study",
    "make_storage",
    "open_study",
    "resolve_base",
    "resolve_storage_url",
    "rope_parameters",
    "run_study",
]
