"""Optuna objectives over a patched model, and the plain evaluation they are built on."""

from __future__ import annotations

from longrope_opt.objectives._needle import NeedlePrompt
from longrope_opt.objectives._needle import build_needle_prompt
from longrope_opt.objectives._needle import build_needle_skip_prompt
from longrope_opt.objectives._needle import needle_nll
from longrope_opt.objectives._needle import needle_prompts
from longrope_opt.objectives._needle import sentence_starts
from longrope_opt.objectives._needle_objective import NeedlePerplexityObjective
from longrope_opt.objectives._passkey import PasskeyObjective
from longrope_opt.objectives._passkey import PasskeyPrompt
from longrope_opt.objectives._passkey import PasskeyResult
from longrope_opt.objectives._passkey import build_passkey_prompt
from longrope_opt.objectives._passkey import evaluate_passkey
from longrope_opt.objectives._perplexity import PerplexityResult
from longrope_opt.objectives._perplexity import evaluate_perplexity
from longrope_opt.objectives._perplexity import window_nll
from longrope_opt.objectives._perplexity_objective import PerplexityObjective
from longrope_opt.objectives._perplexity_objective import suggest_scaling
from longrope_opt.objectives._registry import ENTRY_POINT_GROUP
from longrope_opt.objectives._registry import OBJECTIVES
from longrope_opt.objectives._registry import available_objectives
from longrope_opt.objectives._registry import check_options
from longrope_opt.objectives._registry import get_objective_factory
from longrope_opt.objectives._registry import sample_length
from longrope_opt.objectives._windows import Window
from longrope_opt.objectives._windows import sliding_windows
from longrope_opt.objectives._windows import truncate_window


__all__ = [
    "NeedlePerplexityObjective",
    "NeedlePrompt",
    "build_needle_prompt",
    "build_needle_skip_prompt",
    "needle_nll",
    "needle_prompts",
    "sentence_starts",
    "PasskeyObjective",
    "PasskeyPrompt",
    "PasskeyResult",
    "build_passkey_prompt",
    "evaluate_passkey",
    "ENTRY_POINT_GROUP",
    "OBJECTIVES",
    "sample_length",
    "suggest_scaling",
    "available_objectives",
    "check_options",
    "get_objective_factory",
    "PerplexityObjective",
    "PerplexityResult",
    "Window",
    "evaluate_perplexity",
    "sliding_windows",
    "truncate_window",
    "window_nll",
]
