"""The whole path behind one call: `extend` searches, re-ranks, guards, validates and exports a
model in one study, its stages sized to a budget (`make_plan`) and run by the same
`longrope_opt.studies.run_stages` as every search."""

from __future__ import annotations

from longrope_opt.pipeline._extend import SEEDS
from longrope_opt.pipeline._extend import ExtendResult
from longrope_opt.pipeline._extend import extend
from longrope_opt.pipeline._extend import extend_config
from longrope_opt.pipeline._extend import time_forward
from longrope_opt.pipeline._plan import Plan
from longrope_opt.pipeline._plan import format_seconds
from longrope_opt.pipeline._plan import make_plan
from longrope_opt.pipeline._plan import parse_budget
from longrope_opt.pipeline._report import write_report
from longrope_opt.pipeline._stages import Export
from longrope_opt.pipeline._stages import Outcome
from longrope_opt.pipeline._stages import Validate


__all__ = [
    "SEEDS",
    "Export",
    "ExtendResult",
    "Outcome",
    "Plan",
    "Validate",
    "extend",
    "extend_config",
    "format_seconds",
    "make_plan",
    "parse_budget",
    "time_forward",
    "write_report",
]
