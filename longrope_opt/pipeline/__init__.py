"""What every command does, as one function each (the CLI parses, checks and prints).

`extend` is the whole path: it searches, re-ranks, guards, validates and exports a model in one
study (and with `finetune`, fine-tunes the winner and the best formula alike: `Finetune`), its stages sized to a budget (`make_plan`) and run by the same
`longrope_opt.studies.run_stages` as every search. `validate_candidates`, `compare_methods`,
`export_winner` and `finetune_and_export` are `validate`, `eval`, `export` and `finetune`.
"""

from __future__ import annotations

from longrope_opt.pipeline._eval import MethodTable
from longrope_opt.pipeline._eval import compare_methods
from longrope_opt.pipeline._export import RULES
from longrope_opt.pipeline._export import Exported
from longrope_opt.pipeline._export import export_winner
from longrope_opt.pipeline._extend import SEEDS
from longrope_opt.pipeline._extend import ExtendResult
from longrope_opt.pipeline._extend import extend
from longrope_opt.pipeline._extend import extend_config
from longrope_opt.pipeline._extend import time_forward
from longrope_opt.pipeline._extend_stages import extend_stages
from longrope_opt.pipeline._finetune import finetune_and_export
from longrope_opt.pipeline._finetune_stage import Finetune
from longrope_opt.pipeline._finetune_stage import FinetuneOutcome
from longrope_opt.pipeline._gguf import export_winner_gguf
from longrope_opt.pipeline._plan import Plan
from longrope_opt.pipeline._plan import format_seconds
from longrope_opt.pipeline._plan import make_plan
from longrope_opt.pipeline._plan import parse_budget
from longrope_opt.pipeline._plan import search_forwards
from longrope_opt.pipeline._report import write_report
from longrope_opt.pipeline._stages import Export
from longrope_opt.pipeline._stages import Outcome
from longrope_opt.pipeline._stages import Validate
from longrope_opt.pipeline._validate import ValidationResult
from longrope_opt.pipeline._validate import rerender_validation
from longrope_opt.pipeline._validate import validate_candidates


__all__ = [
    "RULES",
    "SEEDS",
    "Export",
    "Exported",
    "Finetune",
    "FinetuneOutcome",
    "MethodTable",
    "ExtendResult",
    "Outcome",
    "Plan",
    "Validate",
    "ValidationResult",
    "compare_methods",
    "extend",
    "export_winner",
    "export_winner_gguf",
    "extend_config",
    "extend_stages",
    "finetune_and_export",
    "format_seconds",
    "make_plan",
    "parse_budget",
    "search_forwards",
    "time_forward",
    "rerender_validation",
    "validate_candidates",
    "write_report",
]
