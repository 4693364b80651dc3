"""Storages past one database server: Optuna's gRPC storage proxy and journal files.

Workers share a study through its storage, and this package asks two things of a storage that
Optuna's RDB storage gives natively and these two do not:

* **a trial heartbeat**, so a killed worker loses only its running trial: Optuna's heartbeat
  (`BaseHeartbeat`: a thread beats while a trial runs, `fail_stale_trials` fails the silent ones,
  a callback re-queues their parameters) is implemented here for both, with each beat a trial
  system attr carrying the writer's clock (machines sharing a study need clocks within the
  grace period, two intervals, of each other);
* **a fresh view for the sampler's claims**: a worker claims a candidate (it writes a system attr
  on its trial), then reads the study, and evaluates only if no other running trial claims it.
  A journal's replay reads every new log line on each access, so a claim written before the read
  is seen. Optuna's gRPC client (and the proxy's own cache of the database) re-fetches the
  unfinished trials it knows and every trial with an id above the last finished one it saw, so
  a claim on a trial it knows is always read fresh; a trial it never fetched leaves a gap in the
  trial numbers, which the sampler's reads fill (`longrope_opt.samplers.read_trials`).

The gRPC client also waits for an unreachable proxy (a restart) instead of failing at once: each
call is retried until the proxy answers again or `patience` seconds pass, then fails with one
line naming it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import cast

import optuna
from optuna.storages import GrpcStorageProxy
from optuna.storages import JournalStorage
from optuna.storages._heartbeat import (
    BaseHeartbeat,  # Optuna's heartbeat interface (no public alias)
)
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from longrope_opt.errors import StorageError
from longrope_opt.studies._retry import RetryStaleTrial
from longrope_opt.urls import redact_url


logger = logging.getLogger(__name__)

#: Trial system attr: the writer's clock (seconds) at the trial's last heartbeat.
BEAT_KEY = "longrope_opt:heartbeat"


class StorageUnavailable(StorageError):
    """A storage server stayed unreachable past its patience."""


class AttrHeartbeat(BaseHeartbeat):
    """Optuna's trial heartbeat, kept in a trial system attr (for storages without their own)."""

    _beat_interval: int | None = None

    def _setup_heartbeat(self, interval: int | None) -> None:
        self._beat_interval = interval or None
        self._stale_callback = RetryStaleTrial()

    def record_heartbeat(self, trial_id: int) -> None:
        """Write this process's clock on the running trial."""
        self.set_trial_system_attr(trial_id, BEAT_KEY, time.time())  # type: ignore[attr-defined]

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        if not self._beat_interval:
            return []
        now, grace = time.time(), 2.0 * self._beat_interval
        stale = []
        running = self.get_all_trials(  # type: ignore[attr-defined]
            study_id, deepcopy=False, states=(TrialState.RUNNING,)
        )
        for trial in running:
            # Count from the later of the last beat and the trial's start: a retried trial
            # carries its failed original's system attrs (Optuna's retry callback copies them),
            # beat included, and must not look stale before it has had time to beat itself.
            start = trial.datetime_start
            since = start.timestamp() if start is not None else now
            beat = max(float(trial.system_attrs.get(BEAT_KEY, since)), since)
            if now - beat > grace:
                stale.append(trial._trial_id)
        return stale

    def get_heartbeat_interval(self) -> int | None:
        """Seconds between beats (None: no heartbeat)."""
        return self._beat_interval

    def get_heartbeat_stale_trial_callback(
        self,
    ) -> Callable[[optuna.Study, FrozenTrial], None] | None:
        """Re-queue a stale trial's parameters while its runs make progress (`RetryStaleTrial`)."""
        return self._stale_callback if self._beat_interval else None


class JournalFileStorage(AttrHeartbeat, JournalStorage):
    """A journal file (a shared file system, no database server) with the trial heartbeat.

    Args:
        path: The journal file; created on first write.
        heartbeat_interval: Seconds between a running trial's beats (None: none).
    """

    def __init__(self, path: str | Path, *, heartbeat_interval: int | None = None) -> None:
        JournalStorage.__init__(self, JournalFileBackend(str(path)))
        self._setup_heartbeat(heartbeat_interval)


class _PatientStub:
    """A gRPC stub whose calls wait out an unavailable server (a proxy restarting)."""

    def __init__(self, stub: Any, where: str, patience: float) -> None:
        self._stub, self._where, self._patience = stub, where, patience

    def __getattr__(self, name: str) -> Any:
        import grpc  # optuna's gRPC extra, present whenever a GrpcStorageProxy exists

        call = getattr(self._stub, name)

        def patient(*args: Any, **kwargs: Any) -> Any:
            deadline, warned = time.monotonic() + self._patience, False
            while True:
                try:
                    return call(*args, **kwargs)
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                    if time.monotonic() >= deadline:
                        raise StorageUnavailable(
                            f"the storage proxy at {self._where} has been unreachable for "
                            f"{self._patience:.0f} s; start it again, then rerun the same command "
                            "to resume."
                        ) from None
                    if not warned:
                        logger.warning("storage proxy at %s unreachable; waiting up to %.0f s",
                                       self._where, self._patience)  # fmt: skip
                        warned = True
                    time.sleep(1.0)

        return patient


class GrpcStorage(AttrHeartbeat, GrpcStorageProxy):
    """Optuna's gRPC storage proxy client, with the trial heartbeat and patience for a restarting
    proxy (see the module docstring).

    Args:
        host: The proxy's host.
        port: The proxy's port.
        heartbeat_interval: Seconds between a running trial's beats (None: none).
        patience: Seconds a call waits for an unreachable proxy before failing.
    """

    def __init__(
        self, *, host: str, port: int, heartbeat_interval: int | None = None,
        patience: float = 300.0,
    ) -> None:  # fmt: skip
        self._patience = patience
        GrpcStorageProxy.__init__(self, host=host, port=port)
        self._setup_heartbeat(heartbeat_interval)

    def _setup(self) -> None:
        super()._setup()
        patient = _PatientStub(self._stub, f"{self._host}:{self._port}", self._patience)
        self._stub = cast(Any, patient)  # the same calls, each waiting out a restart
        self._cache.grpc_client = self._stub

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        """Finish (or start) a trial. A completion retried after the proxy went down may find
        its first attempt done: the trial already complete with exactly these values. (Not a
        failure: another worker's heartbeat check failing the same trial must learn that it lost,
        or it would queue a second retry of the candidate.)"""
        try:
            return super().set_trial_state_values(trial_id, state, values)
        except optuna.exceptions.UpdateFinishedTrialError:
            if state != TrialState.COMPLETE or values is None:
                raise
            done = self.get_trial(trial_id)
            if done.state == state and list(done.values or []) == list(values):
                return True  # our own earlier attempt reached the proxy
            raise


def journal_path(url: str) -> Path:
    """The file of a ``journal:`` URL: ``journal:///rel.log`` or ``journal:////abs/path.log``."""
    rest = url.split("://", 1)[1] if "://" in url else ""
    return Path(rest[1:] if rest.startswith("/") else rest)


def open_journal(url: str, *, heartbeat_interval: int | None, must_exist: bool) -> JournalFileStorage:
    """A `JournalFileStorage` for a ``journal:`` URL; a file that cannot be written is one line."""
    path = journal_path(url)
    if not path.name:
        raise StorageError(
            f"`storage` {redact_url(url)!r} names no file (journal:///path/to/study.log)."
        )
    if must_exist and not path.is_file():
        raise StorageError(f"`storage` file {str(path)!r} does not exist (nothing to read).")
    folder = path.parent if str(path.parent) else Path(".")
    writable = os.access(path, os.W_OK) if path.exists() else os.access(folder, os.W_OK | os.X_OK)
    if not folder.is_dir() or not writable:
        raise StorageError(f"cannot write `storage` journal file {str(path)!r}: check the folder "
                           "exists and is writable.")  # fmt: skip
    return JournalFileStorage(path, heartbeat_interval=heartbeat_interval)


def connect_grpc(url: str, *, heartbeat_interval: int | None, timeout: float = 15.0) -> GrpcStorage:
    """A `GrpcStorage` for ``grpc://host:port``; an unreachable proxy is one line."""
    where = url.split("://", 1)[1].rstrip("/")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise StorageError(f"`storage` {redact_url(url)!r} must be grpc://host:port.")
    storage = GrpcStorage(host=host, port=int(port), heartbeat_interval=heartbeat_interval)
    try:
        storage.wait_server_ready(timeout=timeout)
    except ConnectionError:
        raise StorageError(
            f"cannot reach the storage proxy at {where} within {timeout:.0f} s (start it with "
            "`longrope-opt storage-server`)."
        ) from None
    return storage
