"""Promotion: re-evaluate a study's best trials at full fidelity and choose the winner on that.

A search that runs on a cheap proxy (the PoSE-style ``skip`` mode, a short needle prompt), or on
one document, orders near-optimal candidates only roughly (experiments/proxy.py); the number users
check is full-length perplexity on more text. `rerank_study` evaluates the top trials on the
real objective, storing each value in the study record as it is made, so the re-rank resumes
after an interruption, shows in optuna-dashboard, and `study_winner` / `export_best` pick the
re-ranked winner.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial
from tqdm.auto import tqdm

from longrope_opt import record
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import RopeScaling
from longrope_opt.studies._winner import better_first
from longrope_opt.studies._winner import ranked_trials
from longrope_opt.studies._winner import space_of_study


logger = logging.getLogger(__name__)


def rerank_study(
    study: optuna.Study,
    evaluate: Callable[[RopeScaling], float],
    *,
    top: int,
    progress: bool = False,
    documents: Any = None,
) -> tuple[RopeScaling, FrozenTrial]:
    """Evaluate the `top` best complete trials with `evaluate`; return the re-ranked winner.

    Trials already re-ranked are not evaluated again, so rerunning continues an interrupted
    re-rank and a finished one costs nothing. Values are stored after each evaluation. "Best"
    follows the study's direction, for the trials and for their re-ranked values.

    Args:
        study: A study made by `run_search` (or `open_study`).
        evaluate: The full-fidelity objective: a `RopeScaling` → its value (e.g. full-length
            perplexity of the search documents, `evaluate_perplexity(...).ppl`).
        top: How many of the best trials to re-evaluate (>= 1).
        progress: A progress bar over the evaluations.
        documents: The `Samples` `evaluate` reads, recorded in the study so that `validate`
            leaves them out.

    Returns:
        The winner's `RopeScaling` (as the study evaluated it) and its trial.

    Raises:
        InvalidArgumentError: `top` < 1, or the study has no complete trial.
    """
    return rerank_trials(
        study, lambda t: space_of_study(study, t).to_scaling(t.params), evaluate, top=top,
        progress=progress, documents=documents,
    )  # fmt: skip


def rerank_trials(
    study: optuna.Study,
    to_scaling: Callable[[FrozenTrial], RopeScaling],
    evaluate: Callable[[RopeScaling], float],
    *,
    top: int,
    progress: bool = False,
    documents: Any = None,
) -> tuple[RopeScaling, FrozenTrial]:
    """`rerank_study` with the trials' converter given: a pipeline that settled the search
    space passes it, instead of every trial rebuilding it from the study record."""
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise InvalidArgumentError(f"`rerank` must be an integer >= 1, got {top!r}.")
    best, sign = ranked_trials(study)[:top], better_first(study)
    if not best:
        raise InvalidArgumentError(f"study {study.study_name!r} has no completed trial to re-rank.")
    if documents is not None:
        record.write_rerank_documents(
            study, list(documents.doc_ids), list(getattr(documents, "doc_hashes", []))
        )
    values = record.read_rerank(study)
    todo = [t for t in best if t.number not in values]
    bar = _bar(len(todo), study.study_name) if progress and todo else None
    for trial in todo:
        values[trial.number] = float(evaluate(to_scaling(trial)))
        record.add_rerank(study, trial.number, values[trial.number])
        logger.info("re-rank %s trial %d: %.6g (search value %.6g)", study.study_name,
                    trial.number, values[trial.number], trial.value)  # fmt: skip
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    # The winner: best finite re-ranked value, ties to the earlier trial (as `reranked_order`).
    finite = [n for n, v in values.items() if math.isfinite(v)]
    if not finite:
        raise InvalidArgumentError(f"study {study.study_name!r}: every re-ranked value is not finite.")
    number = min(finite, key=lambda n: (sign * values[n], n))
    winner = study.get_trials(deepcopy=False)[number]
    return to_scaling(winner), winner


def _bar(total: int, name: str) -> Any:

    return tqdm(total=total, desc=f"re-rank {name}", unit="eval")
