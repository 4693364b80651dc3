"""Create-or-resume a search study and run it to a total budget."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.trial import TrialState

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import RopeSpec
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import enqueue_seeds
from longrope_opt.samplers import enqueue_space_seeds
from longrope_opt.studies._provenance import check_compatible


logger = logging.getLogger(__name__)
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def open_study(
    *,
    storage: Any,
    study_name: str,
    sampler: optuna.samplers.BaseSampler,
    provenance: dict[str, Any],
    spec: RopeSpec,
    pruner: optuna.pruners.BasePruner | None = None,
    config: dict[str, Any] | None = None,
    seed_space: Any = None,
) -> optuna.Study:
    """Create the study, or load it when it exists (after checking it is the same search).

    A new study gets the provenance and the RoPE spec in its user attrs; with a
    `LongRoPESampler`, the PI/NTK/YaRN seeds are enqueued once. Without a `pruner` nothing is
    pruned (Optuna's default MedianPruner would act on the per-sample reports). `config` (extra
    user attrs, e.g. what a worker needs to rebuild the search) is stored when the study is new.
    With `seed_space` (a `SearchSpace`), its seeds are enqueued once for any sampler.
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
        # The dashboard's axes say what the value is, not "Objective 0".
        study.set_metric_names([str(provenance.get("objective") or "objective")])
        study.set_user_attr("provenance", provenance)
        study.set_user_attr("rope_spec", dataclasses.asdict(spec))
        for key, value in (config or {}).items():
            study.set_user_attr(key, value)
    else:
        check_compatible(study_name, stored, provenance)
        if "rope_spec" not in study.user_attrs:  # made by a script that did not record it
            study.set_user_attr("rope_spec", dataclasses.asdict(spec))
        for key, value in (config or {}).items():
            if key not in study.user_attrs:  # a study made without it adopts this run's
                study.set_user_attr(key, value)
            else:
                _check_same_config(study_name, key, study.user_attrs[key], value)
    if seed_space is not None:
        enqueue_space_seeds(study, seed_space)
    elif isinstance(sampler, LongRoPESampler):  # (not seeded: enqueues nothing)
        enqueue_seeds(study, sampler)
    return study


def _check_same_config(study_name: str, key: str, stored: Any, wanted: Any) -> None:
    # The space and the sampler define what a trial means: a resumed study must keep them.
    if stored is None or stored == wanted:
        return
    if isinstance(stored, dict) and isinstance(wanted, dict):
        # A key the stored dict lacks predates that field: what it means for the old study is
        # the config class's business (`SearchConfig.from_dict` fills its default, and
        # `_check_stored` has compared the configs that way), so it is not compared here.
        for k in sorted(stored):
            if stored.get(k) != wanted.get(k):
                raise InvalidArgumentError(
                    f"study {study_name!r} was created with {k}={stored.get(k)!r}; this run has "
                    f"{k}={wanted.get(k)!r}. Use another `--study-name` or the same settings."
                )
        return
    raise InvalidArgumentError(
        f"study {study_name!r} was created with {key}={stored!r}; this run has {key}={wanted!r}."
    )


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
        logger.warning(
            "Ctrl-C: finishing the current trial, then stopping (Ctrl-C again to abort it)."
        )
        # RuntimeError: the signal landed just outside the optimize loop, where nothing runs.
        with contextlib.suppress(RuntimeError):
            study.stop()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


class _SurplusTrial(Exception):
    """Raised inside a trial started after other workers had already reserved the whole budget."""


def _counts(study: optuna.Study) -> tuple[int, int]:
    """(finished, running) trials of the study, read fresh from storage."""
    trials = study.get_trials(deepcopy=False)
    finished = sum(t.state in FINISHED for t in trials)
    running = sum(t.state == TrialState.RUNNING for t in trials)
    return finished, running


def _guarded(
    objective: Callable[[optuna.Trial], float], study: optuna.Study, n_trials: int, beat: bool
):
    # Two workers can pass the budget check at the same moment; the later one's trial finds the
    # budget taken (finished + other running ≥ total) and fails as surplus without evaluating.
    def run(trial: optuna.Trial) -> float:
        if beat:
            # Optuna's heartbeat thread writes its first beat a moment after the objective has
            # started. A worker killed in between left a RUNNING trial with no beat, which
            # `fail_stale_trials` never fails, and every other worker waited on it for ever.
            study._storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]
        finished, running = _counts(study)
        if finished + running - 1 >= n_trials:
            trial.set_user_attr("surplus", "the budget was already reserved by other workers")
            raise _SurplusTrial(f"trial {trial.number}: study budget {n_trials} already reserved")
        return objective(trial)

    return run


def run_study(
    study: optuna.Study,
    objective: Callable[[optuna.Trial], float],
    *,
    n_trials: int | None,
    timeout: float | None = None,
    show_progress_bar: bool = True,
    graceful_interrupt: bool = False,
    poll_interval: float = 0.5,
) -> int:
    """Run until the study holds `n_trials` finished trials (a total, across runs and workers).

    With a total, trials are started one at a time and only while ``finished + running <
    n_trials`` (other workers' running trials count as reserved), so several workers stop at
    exactly `n_trials` finished trials. When the rest of the budget is held by running trials,
    this worker waits: they finish, or their worker died and the storage's heartbeat fails them
    (`optuna.storages.fail_stale_trials`) and re-queues their candidate for whoever is left.

    Args:
        study: The study.
        objective: The objective.
        n_trials: Total finished (complete or pruned) trials wanted; None runs until `timeout`.
        timeout: Seconds for this call.
        show_progress_bar: A bar over the study's finished trials.
        graceful_interrupt: Make the first Ctrl-C finish the running trial and then raise
            `KeyboardInterrupt` (the CLI uses this).
        poll_interval: Seconds between checks while the budget is held by running trials.

    Returns:
        Trials finished by this call.
    """
    if n_trials is not None and n_trials < 1:
        raise InvalidArgumentError(f"`n_trials` must be >= 1, got {n_trials}.")
    before = finished_trials(study)
    guard = _graceful_sigint(study) if graceful_interrupt else contextlib.nullcontext([False])
    if n_trials is None:
        with guard as interrupted:
            study.optimize(
                objective, timeout=timeout, show_progress_bar=show_progress_bar,
                gc_after_trial=False,
            )  # fmt: skip
        if interrupted[0]:
            raise KeyboardInterrupt
        return finished_trials(study) - before
    deadline = None if timeout is None else time.monotonic() + timeout
    bar = _progress(show_progress_bar, n_trials, before)
    # Optuna has no public accessor for a study's storage; the heartbeat interval is public API
    # of the storages that support heartbeats (RDBStorage).
    interval = getattr(study._storage, "get_heartbeat_interval", None)
    heartbeat = callable(interval) and interval() is not None
    guarded = _guarded(objective, study, n_trials, heartbeat)
    # How long to wait on other workers' running trials before saying which ones (once a wait).
    patience = max(600.0, 10.0 * interval()) if heartbeat and interval else 0.0
    waiting_since: float | None = None
    with guard as interrupted:
        while not interrupted[0] and (deadline is None or time.monotonic() < deadline):
            if heartbeat:
                optuna.storages.fail_stale_trials(study)
            finished, running = _counts(study)
            bar.update(finished - bar.n)
            if finished >= n_trials:
                break
            if finished + running >= n_trials:
                if not heartbeat:  # a dead worker's trial would never be failed: do not wait
                    break
                waiting_since = waiting_since or time.monotonic()
                if waiting_since > 0 and time.monotonic() - waiting_since > patience:
                    _warn_waiting(study)
                    waiting_since = -1.0  # once per wait
                time.sleep(poll_interval)  # the rest is reserved by running trials
                continue
            waiting_since = None
            study.optimize(guarded, n_trials=1, catch=(_SurplusTrial,), gc_after_trial=False)
        bar.update(finished_trials(study) - bar.n)
        bar.close()
    if interrupted[0]:
        raise KeyboardInterrupt
    return finished_trials(study) - before


def _warn_waiting(study: optuna.Study) -> None:
    # A worker killed while its sampler was proposing (before the objective's first heartbeat)
    # leaves a RUNNING trial that no heartbeat check fails; say which, rather than wait silently.
    held = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    logger.warning(
        "still waiting for running trials %s, which hold the rest of the budget; a trial whose "
        "worker died before its first heartbeat is never failed by the heartbeat check: stop this "
        "worker and rerun with a larger --trials, or fail that trial in the storage",
        held,
    )


def _progress(show: bool, total: int, initial: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="trials", unit="trial", disable=not show)
