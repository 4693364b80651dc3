"""Storage URL resolution and errors."""

from __future__ import annotations

import optuna
import pytest

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.studies import DEFAULT_STORAGE
from longrope_opt.studies import StorageError
from longrope_opt.studies import make_storage
from longrope_opt.studies import resolve_storage_url


def test_flag_beats_env_beats_default(monkeypatch) -> None:
    monkeypatch.delenv("LONGROPE_OPT_STORAGE", raising=False)
    assert resolve_storage_url(None) == DEFAULT_STORAGE == "sqlite:///longrope.db"
    monkeypatch.setenv("LONGROPE_OPT_STORAGE", "sqlite:///env.db")
    assert resolve_storage_url(None) == "sqlite:///env.db"
    assert resolve_storage_url("postgresql+psycopg2://u@h/db") == "postgresql+psycopg2://u@h/db"


@pytest.mark.parametrize("url", ["longrope.db", "redis://x", "sqlite:/x.db", "http://h/db"])
def test_malformed_url(url: str) -> None:
    with pytest.raises(
        InvalidArgumentError, match=f"`storage` must be a storage URL .*got '{url}'"
    ):
        resolve_storage_url(url)


def test_unopenable_database(tmp_path) -> None:
    with pytest.raises(StorageError, match="cannot open `storage`"):
        make_storage(f"sqlite:///{tmp_path}/no/such/dir/x.db")


def test_a_journal_file_keeps_a_study_across_opens(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = "journal:///studies.log"  # relative, as sqlite:///studies.db
    study = optuna.create_study(study_name="j", storage=make_storage(url))
    study.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), n_trials=3)
    assert (tmp_path / "studies.log").is_file()
    again = optuna.load_study(study_name="j", storage=make_storage(url, must_exist=True))
    assert [t.params for t in again.trials] == [t.params for t in study.trials]
    absolute = f"journal:///{tmp_path / 'studies.log'}"  # four slashes: an absolute path
    assert len(optuna.load_study(study_name="j", storage=make_storage(absolute)).trials) == 3


def test_a_retried_trial_is_not_stale_from_its_originals_beat(tmp_path) -> None:
    # Optuna's retry callback copies the failed trial's system attrs, our heartbeat included.
    import time

    from optuna.trial import TrialState

    storage = make_storage(f"journal:///{tmp_path / 'beat.log'}", heartbeat_interval=1)
    study = optuna.create_study(storage=storage)
    old = time.time() - 60.0
    study.enqueue_trial({"x": 0.5})
    waiting = study.trials[-1]
    storage.set_trial_system_attr(waiting._trial_id, "longrope_opt:heartbeat", old)
    trial = study.ask()  # the retry starts now, with a minute-old beat of its original
    assert storage.get_trial(trial._trial_id).state == TrialState.RUNNING
    assert storage._get_stale_trial_ids(study._study_id) == []
    time.sleep(2.5)  # silent for more than two intervals: now it is stale
    assert storage._get_stale_trial_ids(study._study_id) == [trial._trial_id]


class _Duplicate(Exception):
    pgcode = "42710"  # PostgreSQL's duplicate_object: an enum type another session created


def test_a_schema_created_by_another_process_meanwhile_is_opened_again(
    tmp_path, monkeypatch
) -> None:
    import sqlalchemy.exc

    real, calls = optuna.storages.RDBStorage, []

    def racing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:  # another worker was creating the schema at the same moment
            raise sqlalchemy.exc.ProgrammingError("CREATE TYPE studydirection", {}, _Duplicate())
        return real(*args, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", racing)
    storage = make_storage(f"sqlite:///{tmp_path / 'race.db'}")
    assert len(calls) == 2 and storage.get_all_studies() == []


def test_another_database_error_is_not_retried(tmp_path, monkeypatch) -> None:
    import sqlalchemy.exc

    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise sqlalchemy.exc.ProgrammingError("SELECT", {}, Exception("permission denied"))

    monkeypatch.setattr(optuna.storages, "RDBStorage", broken)
    with pytest.raises(StorageError, match="permission denied"):
        make_storage(f"sqlite:///{tmp_path / 'x.db'}")
    assert len(calls) == 1
