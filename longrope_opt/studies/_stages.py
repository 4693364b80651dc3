"""The stages of a search over one study, and the loop that runs them.

A `Search` is what `prepare` made (the study, the model, the objective, the settled space); a
`Stage` reads and writes the study record only, so rerunning the same stages continues where an
interruption stopped and repeats nothing finished. `run_stages` is the one loop `run_search` and
`longrope_opt.extend` share; `Trials`, `Rerank` and `Guard` are the search's own stages.
"""


from __future__ import annotations

import logging
import time
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Protocol

import optuna
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from longrope_opt import record
from longrope_opt.data import load_samples
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import RopeScaling
from longrope_opt.space import SearchSpace
from longrope_opt.studies._config import SearchConfig
from longrope_opt.studies._guard import guard_trials
from longrope_opt.studies._rerank import rerank_trials
from longrope_opt.studies._run import run_study


logger = logging.getLogger(__name__)


@dataclass
class Search:
    """A prepared search: what every stage reads.

    Attributes:
        config: The search as stored in its study (paths absolute, open fields resolved).
        study: Its study.
        model: The loaded model.
        tokenizer: Its tokenizer.
        objective: What each trial runs (the measure, and the retrieval constraint if any).
        measure: The objective itself (its `full_fidelity` re-ranks).
        space: The settled search space: the stages turn trials into scalings with it.
        progress: Progress bars.
    """

    config: SearchConfig
    study: optuna.Study
    model: Any
    tokenizer: Any
    objective: Callable[[optuna.Trial], float]
    measure: Any
    space: SearchSpace
    progress: bool = True

    def scaling_of(self, trial: FrozenTrial) -> RopeScaling:
        """The trial's `RopeScaling`, as its objective evaluated it."""
        return self.space.to_scaling(trial.params)


class Stage(Protocol):
    """One named step over a `Search`; it reads and writes the study record only, so a rerun
    skips what it finished."""

    @property
    def name(self) -> str:
        """The stage's name (the study record's ``stages`` entry)."""

    def run(self, search: Search) -> None:
        """Do this stage's work (none when the study record says it is done)."""


def run_stages(
    search: Search, stages: Sequence[Stage], *, on_stage: Callable[[Stage], None] | None = None
) -> dict[str, float]:
    """Run `stages` over `search` in order: the one loop `run_search` and `extend` share.

    Args:
        search: A prepared search (`prepare`).
        stages: The stages, in order.
        on_stage: Called after each stage (the overall progress bar of `extend`).

    Returns:
        Seconds each stage took in this call, by name.
    """
    seconds: dict[str, float] = {}
    for stage in stages:
        logger.info("stage %s of study %s", stage.name, search.study.study_name)
        start = time.perf_counter()
        stage.run(search)
        seconds[stage.name] = time.perf_counter() - start
        if on_stage is not None:
            on_stage(stage)
    return seconds


# ----- the search's own stages ------------------------------------------------------------------


@dataclass(frozen=True)
class Trials:
    """Run the study until it holds `n_trials` finished trials (a total, across runs and
    workers); `timeout` 0 only creates or checks the study."""

    n_trials: int | None
    timeout: float | None = None
    graceful_interrupt: bool = False
    store_total: bool = True
    name: str = "search"

    def run(self, search: Search) -> None:
        """Record the total, then run trials until the study holds it (`run_study`)."""
        study = search.study
        stored = record.read_total(study)
        if self.store_total and self.n_trials is not None:
            if stored is not None and self.n_trials < stored:
                # Lowering it would silently stop the study's other workers early.
                logger.warning(
                    "`n_trials` %d is below study %r's total of %d trials; the total stays %d.",
                    self.n_trials, study.study_name, stored, stored,
                )  # fmt: skip
            else:
                record.write_total(study, self.n_trials)  # the study's total, for its workers
        if self.timeout != 0:
            run_study(study, search.objective, n_trials=self.n_trials, timeout=self.timeout,
                      show_progress_bar=search.progress,
                      graceful_interrupt=self.graceful_interrupt)  # fmt: skip


@dataclass(frozen=True)
class Rerank:
    """Re-evaluate the `top` best trials on `samples` documents at full fidelity (0: skip)."""

    top: int
    samples: int | None = None
    name: str = "re-rank"

    def run(self, search: Search) -> None:
        """Re-rank on the documents the search read and more (`rerank_study`); 0: nothing."""
        if not self.top or not _complete(search.study):
            return
        if not callable(getattr(search.measure, "full_fidelity", None)):
            raise InvalidArgumentError(
                f"`rerank` needs an objective with `full_fidelity` (an `Objective`); "
                f"{type(search.measure).__name__} has none."
            )
        config = search.config
        docs = load_samples(
            config.corpus, search.tokenizer, config.target_length,
            self.samples or config.samples, config.seed, exclude=config.exclude_docs,
            interleave=config.draw == "kinds",
        )  # fmt: skip
        rerank_trials(search.study, search.scaling_of, search.measure.full_fidelity(docs),
                      top=self.top, progress=search.progress, documents=docs)  # fmt: skip


@dataclass(frozen=True)
class Guard:
    """The retrieval guard on `keys` passkeys over the re-ranked (else `top` best) trials."""

    keys: int
    top: int = 3
    name: str = "guard"

    def run(self, search: Search) -> None:
        """Choose and store the guarded winner (`guard_study`); 0 keys: nothing."""
        if self.keys and _complete(search.study):
            guard_trials(search.study, search.scaling_of, search.model, search.tokenizer,
                         keys=self.keys, length=search.config.target_length, top=self.top,
                         progress=search.progress, form=search.config.passkey_form or "single")  # fmt: skip


def search_stages(
    n_trials: int | None,
    *,
    timeout: float | None = None,
    graceful_interrupt: bool = False,
    store_total: bool = True,
    rerank: int = 0,
    rerank_samples: int | None = None,
    guard_keys: int = 0,
) -> list[Stage]:
    """The search's stages: trials, then the re-rank and the retrieval guard (each may be 0)."""
    for name, value, low in (("rerank", rerank, 0), ("guard_keys", guard_keys, 0),
                             ("rerank_samples", 1 if rerank_samples is None else rerank_samples, 1)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidArgumentError(f"`{name}` must be an integer >= {low}, got {value!r}.")
    if n_trials is not None and (isinstance(n_trials, bool) or n_trials < 1):
        raise InvalidArgumentError(f"`n_trials` must be >= 1, got {n_trials}.")
    if timeout is not None and not timeout >= 0:
        raise InvalidArgumentError(f"`timeout` must be >= 0 seconds, got {timeout}.")
    return [
        Trials(n_trials, timeout, graceful_interrupt, store_total),
        Rerank(rerank, rerank_samples),
        Guard(guard_keys, max(rerank, 3)),
    ]


def _complete(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
