"""Create-or-resume a search study and run it to a total budget."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
import warnings
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.trial import TrialState
from tqdm.auto import tqdm

from longrope_opt import record
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import RopeSpec
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import enqueue_seeds
from longrope_opt.samplers import enqueue_space_seeds
from longrope_opt.samplers import read_trials


logger = logging.getLogger(__name__)
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# Seconds a new candidate about to take a budget's last slot waits for a retry being queued
# (Optuna fails a stale trial and queues its retry in two writes; between them is milliseconds).
_LAST_SLOT_GRACE = 1.0


def open_study(
    *,
    storage: Any,
    study_name: str,
    sampler: optuna.samplers.BaseSampler,
    provenance: dict[str, Any],
    spec: RopeSpec,
    pruner: optuna.pruners.BasePruner | None = None,
    config: dict[str, Any] | None = None,
    difference: tuple[str, Any, Any] | None = None,
    seed_space: Any = None,
    direction: str = "minimize",
) -> optuna.Study:
    """Create the study, or load it when it exists (after checking it is the same search).

    A new study gets its record: provenance, the RoPE spec and `config` (the search, what a
    worker needs to rebuild it). An existing one is checked first (`_record.check_same_search`:
    the same model, lengths and objective, and `difference` — the first field of the search
    config that changed, if any — is None), then adopts what it lacks (a config written by an
    earlier release is rewritten in the current form). With a `LongRoPESampler` its seeds are
    enqueued once; with `seed_space` (a `SearchSpace`), that space's seeds for any sampler.
    Without a `pruner` nothing is pruned (Optuna's default MedianPruner would act on the
    per-sample reports).
    """
    pruner = pruner or optuna.pruners.NopPruner()
    study = optuna.create_study(
        storage=storage,
        study_name=study_name,
        sampler=sampler,
        pruner=pruner,
        direction=optuna.study.StudyDirection[direction.upper()],
        load_if_exists=True,
    )
    stored = record.read_provenance(study)
    if not stored:
        # The dashboard's axes say what the value is, not "Objective 0".
        study.set_metric_names([str(provenance.get("objective") or "objective")])
        record.write_provenance(study, provenance)
        record.write_spec(study, spec)
        if config is not None:
            record.write_config(study, config)
    else:
        record.check_same_search(
            study_name, stored_provenance=stored, provenance=provenance, difference=difference
        )
        if record.read_spec(study) is None:  # made by a script that did not record it
            record.write_spec(study, spec)
        found = record.read_config(study)
        if config is not None and (found is None or found[1]):  # none yet, or a legacy form
            record.write_config(study, config)
    if seed_space is not None:
        enqueue_space_seeds(study, seed_space)
    elif isinstance(sampler, LongRoPESampler):  # (not seeded: enqueues nothing)
        enqueue_seeds(study, sampler)
    return study


def finished_trials(study: optuna.Study) -> int:
    """Trials that used their evaluation budget (complete or pruned)."""
    return sum(t.state in FINISHED for t in read_trials(study._storage, study._study_id))


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


def _counts(study: optuna.Study) -> tuple[int, int, int]:
    """(finished, running, waiting) trials of the study, read fresh from storage."""
    trials = read_trials(study._storage, study._study_id)  # with those a cache skipped
    finished = sum(t.state in FINISHED for t in trials)
    running = sum(t.state == TrialState.RUNNING for t in trials)
    waiting = sum(t.state == TrialState.WAITING for t in trials)
    return finished, running, waiting


def _guarded(
    objective: Callable[[optuna.Trial], float],
    study: optuna.Study,
    n_trials: int,
    beat: bool,
    ran: dict[str, Any],
):
    # Two workers can pass the budget check at the same moment; the later one's trial finds the
    # budget taken (finished + other running ≥ total) and fails as surplus without evaluating.
    def run(trial: optuna.Trial) -> float:
        ran.update(trial_id=trial._trial_id, error=None, done=False)
        try:
            return _run(trial)
        except BaseException as exc:
            ran["error"] = exc
            raise
        finally:
            ran["done"] = True

    def _run(trial: optuna.Trial) -> float:
        if beat:
            # Optuna's heartbeat thread writes its first beat a moment after the objective has
            # started. A worker killed in between left a RUNNING trial with no beat, which
            # `fail_stale_trials` never fails, and every other worker waited on it for ever.
            study._storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]
        finished, running, waiting = _counts(study)
        # A new candidate also leaves the slots of waiting trials to them. Optuna fails a dead
        # worker's trial, then queues its retry: a worker that asked in between got a new
        # candidate, and the retry, queued a moment later, would find the last slot taken.
        frozen = study._storage.get_trial(trial._trial_id)  # no public accessor by id
        queued = "fixed_params" in frozen.system_attrs or "failed_trial" in frozen.system_attrs
        reserved = running - 1 + (0 if queued else waiting)  # enqueued, or a retry
        if not queued and beat and finished + reserved == n_trials - 1:
            # The last slot: a retry may be on its way (failed, not yet queued). Waiting a beat
            # costs one second once per study, against a dead worker's candidate never measured.
            time.sleep(_LAST_SLOT_GRACE)
            finished, running, waiting = _counts(study)
            reserved = running - 1 + waiting
        if finished + reserved >= n_trials:
            trial.set_user_attr("surplus", "the budget was already reserved by other workers")
            raise _SurplusTrial(f"trial {trial.number}: study budget {n_trials} already reserved")
        reason = _duplicate(study, frozen)
        if reason:
            trial.set_user_attr("surplus", reason)
            raise _SurplusTrial(f"trial {trial.number}: {reason}")
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
    ran: dict[str, Any] = {}  # the last trial `guarded` ran: id, its error, whether it ended
    guarded = _guarded(objective, study, n_trials, heartbeat, ran)
    # How long to wait on other workers' running trials before saying which ones (once a wait).
    patience = max(600.0, 10.0 * interval()) if heartbeat and interval else 0.0
    waiting_since: float | None = None
    with guard as interrupted:
        while not interrupted[0] and (deadline is None or time.monotonic() < deadline):
            if heartbeat:
                with warnings.catch_warnings():  # experimental since Optuna 2.9
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    optuna.storages.fail_stale_trials(study)
            finished, running, _ = _counts(study)
            bar.update(finished - bar.n)
            if finished >= n_trials:
                break
            if finished + running >= n_trials:
                if not heartbeat:  # a dead worker's trial would never be failed: do not wait
                    _warn_stopping(study, finished, n_trials)
                    break
                waiting_since = waiting_since or time.monotonic()
                if waiting_since > 0 and time.monotonic() - waiting_since > patience:
                    _warn_waiting(study)
                    waiting_since = -1.0  # once per wait
                time.sleep(poll_interval)  # the rest is reserved by running trials
                continue
            waiting_since = None
            try:
                study.optimize(guarded, n_trials=1, catch=(_SurplusTrial,), gc_after_trial=False)
            except Exception as exc:
                if not _failed_under_us(study, ran, exc):
                    raise
        bar.update(finished_trials(study) - bar.n)
        bar.close()
    if interrupted[0]:
        raise KeyboardInterrupt
    return finished_trials(study) - before


def _duplicate(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> str | None:
    """Why `frozen`, an enqueued trial, would measure a candidate the study already holds, if so.

    * It retries a stale trial that completed after all. A worker that only looked dead (silent
      past the grace period) can record its value in the same moment another worker fails its
      trial: on SQLite, which has no row locks, both writes succeed and the later one wins.
    * It is a second retry of the same trial: two workers' heartbeat checks both failed it (on
      SQLite both writes succeed) and each queued a retry; the first-numbered one is measured.
    * It is a seed another worker enqueued too. Workers that start on a new study at the same
      moment each find no seed yet and each enqueue them; the first-numbered copy is measured.
    """
    storage = study._storage  # no public accessor for one trial by id
    with warnings.catch_warnings():  # experimental since Optuna 2.8, as Optuna's own call sites
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # (the heartbeat's own retry class: `RetryFailedTrialCallback` is deprecated since 4.9)
        number = optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(frozen)
    if number is not None:
        tid = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
        if storage.get_trial(tid).state == TrialState.COMPLETE:
            return "the trial it retries completed after all"
    seed = frozen.user_attrs.get("seed")
    if number is None and seed is None:
        return None
    for other in read_trials(storage, study._study_id):
        if other.number >= frozen.number:
            break
        if other.state == TrialState.FAIL:
            continue
        if number is not None and other.system_attrs.get("failed_trial") == number:
            return f"trial {other.number} retries trial {number} already"
        if number is None and other.user_attrs.get("seed") == seed:
            return f"seed {seed!r} is trial {other.number} already"
    return None


def _failed_under_us(study: optuna.Study, ran: dict[str, Any], exc: Exception) -> bool:
    """Whether `exc` is Optuna failing to record a trial another worker had already failed.

    A worker silent for longer than the heartbeat's grace period (a stalled machine, a database
    lock held for seconds) looks dead to the others: one of them fails its running trial and
    re-queues the candidate. When the objective then returns, Optuna's `optimize` cannot record
    the value on a finished trial and raises (``Cannot tell a FAIL trial``, or its own assertion
    after it). The result is surplus, not lost: the re-queued copy is evaluated by whoever takes
    it. This worker goes on with its next trial instead of dying.
    """
    if not ran.get("done") or exc is ran.get("error"):
        return False  # raised by the objective itself, or before it ran
    trial = study._storage.get_trial(ran["trial_id"])  # no public accessor for one trial by id
    if trial.state != TrialState.FAIL:
        return False
    logger.warning(
        "trial %d was failed by another worker's heartbeat check while it ran (this worker was "
        "silent past the grace period); its result is dropped and its candidate is re-queued",
        trial.number,
    )
    return True


def _warn_stopping(study: optuna.Study, finished: int, n_trials: int) -> None:
    # Without a heartbeat, a RUNNING trial may be another live worker's or a dead process's
    # (a killed run): there is no telling, so stop, but never silently short of the budget.
    held = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    logger.warning(
        "study %r stops at %d of %d finished trials: running trials %s hold the rest of the "
        "budget, and without a heartbeat a trial whose process died is never failed; if no "
        "worker runs them, fail them in the storage, or run with a heartbeat (the default)",
        study.study_name, finished, n_trials, held,
    )  # fmt: skip


def _warn_waiting(study: optuna.Study) -> None:
    # A worker killed while its sampler was proposing (before the objective's first heartbeat)
    # leaves a RUNNING trial that no heartbeat check fails; say which, rather than wait silently.
    held = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    logger.warning(
        "still waiting for running trials %s, which hold the rest of the budget; a trial whose "
        "worker died before its first heartbeat is never failed by the heartbeat check: stop this "
        "worker and rerun with a larger total (`n_trials`), or fail that trial in the storage",
        held,
    )


def _progress(show: bool, total: int, initial: int) -> Any:

    return tqdm(total=total, initial=initial, desc="trials", unit="trial", disable=not show)
