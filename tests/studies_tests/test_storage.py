"""Storage URL resolution and errors."""

from __future__ import annotations

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
        InvalidArgumentError, match=f"`storage` must be a database URL .*got '{url}'"
    ):
        resolve_storage_url(url)


def test_unopenable_database(tmp_path) -> None:
    with pytest.raises(StorageError, match="cannot open `storage`"):
        make_storage(f"sqlite:///{tmp_path}/no/such/dir/x.db")
