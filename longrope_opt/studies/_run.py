"""Create-or-resume a search study and run it to a total budget."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys
import threading
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.trial import TrialState

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import RopeSpec
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import enqueue_seeds
from longrope_opt.studies._provenance import check_compatible


FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def open_study(
    *,
    storage: Any,
    study_name: str,
    sampler: optuna.samplers.BaseSampler,
    provenance: dict[str, Any],
    spec: RopeSpec,
    pruner: optuna.pruners.BasePruner | None = None,
) -> optuna.Study:
    """Create the study, or load it when it exists (after checking it is the same search).

    A new study gets the provenance and the RoPE spec in its user attrs; with a
    `LongRoPESampler`, the PI/NTK/YaRN seeds are enqueued once. Without a `pruner` nothing is
    pruned (Optuna's default MedianPruner would act on the per-sample reports).
    """
    pruner = pruner or optuna.pruners.NopPruner()
    study = optuna.create_study(
        storage=storage,
        study_name=study_name,
        sampler=sampler,
        pruner=pruner,
        direction="minimize",
        load_if_exists=True,
    )
    stored = study.user_attrs.get("provenance")
    if stored is None:
        study.set_user_attr("provenance", provenance)
        study.set_user_attr("rope_spec", dataclasses.asdict(spec))
    else:
        check_compatible(study_name, stored, provenance)
    if isinstance(sampler, LongRoPESampler):
        enqueue_seeds(study, sampler)
    return study


def finished_trials(study: optuna.Study) -> int:
    """Trials that used their evaluation budget (complete or pruned)."""
    return len(study.get_trials(deepcopy=False, states=FINISHED))


@contextlib.contextmanager
def _graceful_sigint(study: optuna.Study) -> Iterator[list[bool]]:
    # First Ctrl-C: let the running trial finish, then stop (study.stop()); second: abort it
    # (Optuna then marks that trial FAIL). Either way no trial is left RUNNING.
    interrupted = [False]
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return

    def handler(signum: int, frame: Any) -> None:
        if interrupted[0]:
            raise KeyboardInterrupt
        interrupted[0] = True
        print(
            "\nCtrl-C: finishing the current trial, then stopping (Ctrl-C again to abort it).",
            file=sys.stderr,
            flush=True,
        )
        # RuntimeError: the signal landed just outside the optimize loop, where nothing runs.
        with contextlib.suppress(RuntimeError):
            study.stop()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def run_study(
    study: optuna.Study,
    objective: Callable[[optuna.Trial], float],
    *,
    n_trials: int | None,
    timeout: float | None = None,
    show_progress_bar: bool = True,
    graceful_interrupt: bool = False,
) -> int:
    """Run until the study holds `n_trials` finished trials (a total, across runs and workers).

    Args:
        study: The study.
        objective: The objective.
        n_trials: Total finished (complete or pruned) trials wanted; None runs until `timeout`.
        timeout: Seconds for this call.
        show_progress_bar: Optuna's bar over trials.
        graceful_interrupt: Make the first Ctrl-C finish the running trial and then raise
            `KeyboardInterrupt` (the CLI uses this).

    Returns:
        Trials finished by this call.
    """
    if n_trials is not None and n_trials < 1:
        raise InvalidArgumentError(f"`n_trials` must be >= 1, got {n_trials}.")
    before = finished_trials(study)
    remaining = None if n_trials is None else max(0, n_trials - before)
    if remaining == 0:
        return 0
    callbacks = [optuna.study.MaxTrialsCallback(n_trials, states=FINISHED)] if n_trials else []
    guard = _graceful_sigint(study) if graceful_interrupt else contextlib.nullcontext([False])
    with guard as interrupted:
        study.optimize(
            objective,
            n_trials=remaining,
            timeout=timeout,
            callbacks=callbacks,
            show_progress_bar=show_progress_bar,
            gc_after_trial=False,
        )
    if interrupted[0]:
        raise KeyboardInterrupt
    return finished_trials(study) - before
