"""Storage URLs: flag > ``$LONGROPE_OPT_STORAGE`` > ``sqlite:///longrope.db``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.errors import StorageError
from longrope_opt.studies._remote import connect_grpc
from longrope_opt.studies._remote import journal_path
from longrope_opt.studies._remote import open_journal
from longrope_opt.studies._retry import RetryStaleTrial
from longrope_opt.urls import ENV_STORAGE
from longrope_opt.urls import redact_url
from longrope_opt.urls import scrub


DEFAULT_STORAGE = "sqlite:///longrope.db"
_SCHEMES = ("sqlite", "postgresql", "mysql", "grpc", "journal")


def resolve_storage_url(url: str | None = None) -> str:
    """The storage URL to use: `url`, else ``$LONGROPE_OPT_STORAGE``, else the default."""
    url = url or os.environ.get(ENV_STORAGE) or DEFAULT_STORAGE
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if "://" not in url or scheme not in _SCHEMES:
        raise InvalidArgumentError(
            f"`storage` must be a storage URL such as sqlite:///longrope.db, "
            f"postgresql://user@host/db, grpc://host:port or journal:///path/study.log "
            f"(schemes: {', '.join(_SCHEMES)}), got {redact_url(url)!r}."
        )
    return url


def _with_postgres_driver(url: str) -> str:
    # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3; our `postgres` extra installs
    # psycopg2. Pick whichever is installed, and say how to get one when neither is.
    import importlib.util

    if not url.startswith("postgresql://"):
        return url
    if importlib.util.find_spec("psycopg") is not None:
        return url
    if importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://") :]
    raise StorageError(
        f"`storage` {redact_url(url)!r} needs a PostgreSQL driver: pip install "
        "'longrope-opt[postgres]'."
    )


def _serialize_sqlite(engine: Any) -> None:
    # SQLite ignores SELECT ... FOR UPDATE, and pysqlite's deferred transactions let two
    # processes both read a WAITING trial, then both mark it RUNNING: Optuna's trial queue (the
    # enqueued seeds, retried stale trials) could hand one trial to two workers, and the slower
    # one then fails with "Cannot tell a COMPLETE trial". Taking the write lock when each
    # transaction begins (SQLAlchemy's recipe for pysqlite) makes read-then-write atomic.
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _no_implicit_begin(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy's "begin" below emits it

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened while creating the schema get the listeners too


# PostgreSQL's codes for a schema object another session created first: duplicate_object (an
# enum type such as ``studydirection``), duplicate_table, unique_violation (alembic's version row).
_SCHEMA_RACE_CODES = ("42710", "42P07", "23505")


def _open_rdb(url: str, engine_kwargs: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    """`RDBStorage`, opened again when another process was creating the schema at that moment.

    Workers started together on a new database each find no schema and each create it; all but
    one fail on an object the first one made (SQLite: the alembic version row; PostgreSQL: an
    enum type or a table). The schema then exists, so opening again succeeds.
    """
    for attempt in range(4):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **kwargs)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError) as exc:
            duplicate = getattr(exc.orig, "pgcode", None) in _SCHEMA_RACE_CODES
            if not (duplicate or isinstance(exc, sqlalchemy.exc.IntegrityError)):
                raise
            time.sleep(0.5 * (attempt + 1))
    return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **kwargs)


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for another database, or for in-memory SQLite)."""
    if not url.startswith("sqlite"):
        return None
    rest = url.split("://", 1)[1] if "://" in url else ""
    path = rest[1:] if rest.startswith("/") else rest  # sqlite:///rel.db, sqlite:////abs.db
    path = path.split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def storage_file(url: str) -> Path | None:
    """The file a SQLite or journal URL names (None for a database server or a gRPC proxy)."""
    if url.startswith("journal"):
        return journal_path(url)
    return sqlite_path(url)


def open_existing(url: str, *, heartbeat_interval: int | None = None) -> Any | None:
    """The storage `url` names when it already exists, else None: a SQLite or journal file that
    is not there is not created, so that a command refused after this look-up (a target the
    model's config rules out, say) leaves nothing behind. Servers always exist."""
    path = storage_file(url)
    if path is not None and not path.is_file():
        return None
    return make_storage(url, heartbeat_interval=heartbeat_interval)


def make_storage(
    url: str, *, heartbeat_interval: int | None = None, must_exist: bool = False
) -> optuna.storages.BaseStorage:
    """The storage `url` names, with an optional trial heartbeat: an `RDBStorage` (SQLite with a
    patient lock, PostgreSQL, MySQL), Optuna's gRPC proxy client (``grpc://host:port``, see
    `longrope-opt storage-server`) or a journal file (``journal:///path.log``; four slashes for
    an absolute path), the last two as `longrope_opt.studies._remote` makes them.

    With a heartbeat, a trial whose process died is failed after ``2 × interval`` seconds and its
    parameters re-queued while its runs make progress (`RetryStaleTrial`, on Optuna's
    `RetryHeartbeatStaleTrialCallback`).

    Args:
        url: A database URL (`resolve_storage_url`).
        heartbeat_interval: Seconds between a running trial's heartbeats; None or 0: none.
        must_exist: For commands that only read: a SQLite file that does not exist is an error
            naming it (instead of an empty database created by the read).

    Raises:
        StorageError: The database cannot be opened, or (`must_exist`) has no file.
        InvalidArgumentError: In-memory SQLite (a study there would vanish with the process, and
            the heartbeat thread could not see it), or a negative heartbeat interval.
    """
    if heartbeat_interval is not None and heartbeat_interval < 0:
        raise InvalidArgumentError(
            f"`heartbeat_interval` must be >= 0 seconds (0 = off), got {heartbeat_interval}."
        )
    if url.startswith("sqlite") and sqlite_path(url) is None:
        raise InvalidArgumentError(
            f"`storage` {redact_url(url)!r} is an in-memory database: its studies would vanish when this "
            "process ends; give a file, e.g. sqlite:///longrope.db."
        )
    if url.startswith("grpc"):
        return connect_grpc(url, heartbeat_interval=heartbeat_interval or None)
    if url.startswith("journal"):
        return open_journal(url, heartbeat_interval=heartbeat_interval or None,
                            must_exist=must_exist)  # fmt: skip
    path = sqlite_path(url)
    if must_exist and path is not None and not path.is_file():
        raise StorageError(f"`storage` file {str(path)!r} does not exist (nothing to read).")
    url = _with_postgres_driver(url)
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        engine_kwargs["connect_args"] = {"timeout": 60}
    else:
        engine_kwargs["pool_pre_ping"] = True
    kwargs: dict[str, Any] = {}
    if heartbeat_interval:
        kwargs = {
            "heartbeat_interval": heartbeat_interval,
            "grace_period": 2 * heartbeat_interval,
            "heartbeat_stale_trial_callback": RetryStaleTrial(),
        }
    try:
        storage = _open_rdb(url, engine_kwargs, kwargs)
        if url.startswith("sqlite"):
            _serialize_sqlite(storage.engine)
        return storage
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy raises many types; all mean "cannot open"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        # The driver's message may repeat the URL or its password: neither leaves the process.
        raise StorageError(
            f"cannot open `storage` {redact_url(url)!r}: {scrub(first, [url])}"
        ) from None
