"""Promotion: re-evaluate a study's best trials at full fidelity and choose the winner on that.

A search that runs on a cheap proxy (the PoSE-style ``skip`` mode, a short needle prompt) orders
near-optimal candidates only roughly (bench/proxy.py); the number users check is full-length
perplexity. `rerank_study` evaluates the proxy's top trials on the real objective, storing each
value in the study as it is made (user attr `RERANK_KEY`: trial number → value), so the re-rank
resumes after an interruption, shows in optuna-dashboard, and `best_scaling` / `export_best`
pick the re-ranked winner.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import RopeScaling


logger = logging.getLogger(__name__)

#: Study user attr: {trial number (str): full-fidelity value}.
RERANK_KEY = "longrope_opt:rerank"


def rerank_study(
    study: optuna.Study,
    evaluate: Callable[[RopeScaling], float],
    *,
    top: int,
    progress: bool = False,
) -> tuple[RopeScaling, FrozenTrial]:
    """Evaluate the `top` best complete trials with `evaluate`; return the re-ranked winner.

    Trials already re-ranked (in `RERANK_KEY`) are not evaluated again, so rerunning continues
    an interrupted re-rank and a finished one costs nothing. Values are stored after each
    evaluation. Lower is better, as for every objective of this package.

    Args:
        study: A study made by `run_search` (or `open_study`).
        evaluate: The full-fidelity objective: a `RopeScaling` → its value (e.g. full-length
            perplexity of the search documents, `evaluate_perplexity(...).ppl`).
        top: How many of the best trials to re-evaluate (>= 1).
        progress: A progress bar over the evaluations.

    Returns:
        The winner's `RopeScaling` (as the study evaluated it) and its trial.

    Raises:
        InvalidArgumentError: `top` < 1, or the study has no complete trial.
    """
    from longrope_opt.studies._export import space_of_study

    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise InvalidArgumentError(f"`--rerank` must be an integer >= 1, got {top!r}.")
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        raise InvalidArgumentError(f"study {study.study_name!r} has no completed trial to re-rank.")
    best = sorted(complete, key=lambda t: (t.value, t.number))[:top]
    done = {str(k): float(v) for k, v in study.user_attrs.get(RERANK_KEY, {}).items()}
    todo = [t for t in best if str(t.number) not in done]
    bar = _bar(len(todo), study.study_name) if progress and todo else None
    for trial in todo:
        scaling = space_of_study(study, trial).to_scaling(trial.params)
        value = float(evaluate(scaling))
        # Read-modify-write of one attr: another worker re-ranking at the same time can only
        # re-add what it evaluated itself, never drop an entry this one wrote earlier.
        done = {str(k): float(v) for k, v in study.user_attrs.get(RERANK_KEY, {}).items()} | done
        done[str(trial.number)] = value
        study.set_user_attr(RERANK_KEY, done)
        logger.info("re-rank %s trial %d: %.6g (search value %.6g)", study.study_name,
                    trial.number, value, trial.value)  # fmt: skip
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    winner = reranked_best(study)
    assert winner is not None  # at least one trial was re-ranked above
    return winner


def reranked_best(study: optuna.Study) -> tuple[RopeScaling, FrozenTrial] | None:
    """The trial with the lowest finite re-ranked value, or None if the study was not re-ranked."""
    from longrope_opt.studies._export import space_of_study

    stored = study.user_attrs.get(RERANK_KEY) or {}
    finite = {int(k): float(v) for k, v in stored.items() if math.isfinite(float(v))}
    if not finite:
        return None
    number = min(finite, key=lambda k: (finite[k], k))
    trial = study.get_trials(deepcopy=False)[number]
    return space_of_study(study, trial).to_scaling(trial.params), trial


def _bar(total: int, name: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=f"re-rank {name}", unit="eval")
