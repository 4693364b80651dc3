"""Studies: storage URLs, create-or-resume with provenance, run to a total budget, export."""

from __future__ import annotations

from longrope_opt.studies._export import best_scaling
from longrope_opt.studies._export import export_best
from longrope_opt.studies._export import load_factors
from longrope_opt.studies._export import rope_parameters
from longrope_opt.studies._provenance import build_provenance
from longrope_opt.studies._run import finished_trials
from longrope_opt.studies._run import open_study
from longrope_opt.studies._run import run_study
from longrope_opt.studies._storage import DEFAULT_STORAGE
from longrope_opt.studies._storage import StorageError
from longrope_opt.studies._storage import make_storage
from longrope_opt.studies._storage import resolve_storage_url


__all__ = [
    "DEFAULT_STORAGE",
    "StorageError",
    "best_scaling",
    "build_provenance",
    "export_best",
    "finished_trials",
    "load_factors",
    "make_storage",
    "open_study",
    "resolve_storage_url",
    "rope_parameters",
    "run_study",
]
