"""Optuna objectives over a patched model, and the plain evaluation they are built on.

The registry of objectives (`OBJECTIVES`) imports at once; everything else resolves on first
use (PEP 562): the CLI builds its help from the registry without loading torch (seconds).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING
from typing import Any

from longrope_opt.objectives._registry import ENTRY_POINT_GROUP
from longrope_opt.objectives._registry import OBJECTIVES
from longrope_opt.objectives._registry import available_objectives
from longrope_opt.objectives._registry import check_options
from longrope_opt.objectives._registry import get_objective_factory
from longrope_opt.objectives._registry import sample_length


if TYPE_CHECKING:  # what type checkers see; at run time `__getattr__` imports on use
    from longrope_opt.objectives._base import Objective
    from longrope_opt.objectives._base import suggest_scaling
    from longrope_opt.objectives._forms import LEAD_IN
    from longrope_opt.objectives._forms import PASSKEY_FORMS
    from longrope_opt.objectives._forms import check_passkey_form
    from longrope_opt.objectives._forms import passkey_kind
    from longrope_opt.objectives._needle import NeedlePrompt
    from longrope_opt.objectives._needle import build_needle_prompt
    from longrope_opt.objectives._needle import build_needle_skip_prompt
    from longrope_opt.objectives._needle import needle_nll
    from longrope_opt.objectives._needle import needle_prompts
    from longrope_opt.objectives._needle import sentence_starts
    from longrope_opt.objectives._needle_objective import NeedlePerplexityObjective
    from longrope_opt.objectives._passkey import PasskeyPrompt
    from longrope_opt.objectives._passkey import PasskeyResult
    from longrope_opt.objectives._passkey import build_passkey_prompt
    from longrope_opt.objectives._passkey import check_form_runs
    from longrope_opt.objectives._passkey import evaluate_passkey
    from longrope_opt.objectives._passkey import passkey_prompts
    from longrope_opt.objectives._passkey import passkey_results
    from longrope_opt.objectives._passkey import passkey_trial
    from longrope_opt.objectives._passkey_objective import PasskeyObjective
    from longrope_opt.objectives._perplexity import PerplexityResult
    from longrope_opt.objectives._perplexity import evaluate_perplexity
    from longrope_opt.objectives._perplexity import window_nll
    from longrope_opt.objectives._perplexity_objective import PerplexityObjective
    from longrope_opt.objectives._retrieval import RETRIEVAL_SEED
    from longrope_opt.objectives._retrieval import RetrievalConstraint
    from longrope_opt.objectives._windows import Window
    from longrope_opt.objectives._windows import sliding_windows
    from longrope_opt.objectives._windows import truncate_window

#: Public name -> the module that defines it (imported on first access).
_LAZY = {
    "Objective": "_base",
    "suggest_scaling": "_base",
    "NeedlePrompt": "_needle",
    "build_needle_prompt": "_needle",
    "build_needle_skip_prompt": "_needle",
    "needle_nll": "_needle",
    "needle_prompts": "_needle",
    "sentence_starts": "_needle",
    "NeedlePerplexityObjective": "_needle_objective",
    "LEAD_IN": "_forms",
    "PASSKEY_FORMS": "_forms",
    "PasskeyObjective": "_passkey_objective",
    "PasskeyPrompt": "_passkey",
    "PasskeyResult": "_passkey",
    "build_passkey_prompt": "_passkey",
    "check_form_runs": "_passkey",
    "check_passkey_form": "_forms",
    "passkey_kind": "_forms",
    "evaluate_passkey": "_passkey",
    "passkey_prompts": "_passkey",
    "passkey_results": "_passkey",
    "passkey_trial": "_passkey",
    "PerplexityResult": "_perplexity",
    "evaluate_perplexity": "_perplexity",
    "window_nll": "_perplexity",
    "PerplexityObjective": "_perplexity_objective",
    "RETRIEVAL_SEED": "_retrieval",
    "RetrievalConstraint": "_retrieval",
    "Window": "_windows",
    "sliding_windows": "_windows",
    "truncate_window": "_windows",
}


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once imported, a plain attribute
    return value


__all__ = [
    "Objective",
    "NeedlePerplexityObjective",
    "NeedlePrompt",
    "build_needle_prompt",
    "build_needle_skip_prompt",
    "needle_nll",
    "needle_prompts",
    "sentence_starts",
    "LEAD_IN",
    "PASSKEY_FORMS",
    "PasskeyObjective",
    "PasskeyPrompt",
    "PasskeyResult",
    "build_passkey_prompt",
    "check_passkey_form",
    "check_form_runs",
    "passkey_kind",
    "evaluate_passkey",
    "passkey_prompts",
    "passkey_results",
    "passkey_trial",
    "ENTRY_POINT_GROUP",
    "OBJECTIVES",
    "sample_length",
    "suggest_scaling",
    "available_objectives",
    "check_options",
    "get_objective_factory",
    "PerplexityObjective",
    "RETRIEVAL_SEED",
    "RetrievalConstraint",
    "PerplexityResult",
    "Window",
    "evaluate_perplexity",
    "sliding_windows",
    "truncate_window",
    "window_nll",
]
