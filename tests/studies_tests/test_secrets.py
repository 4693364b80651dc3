"""A storage URL's password never leaves the process; the study server is private by default.

Every command that takes a storage is run with a PostgreSQL URL that holds a password, against a
server that refuses the connection and against the CI's running server with a wrong password:
the password is in no output, no log record and no file written. The same for `make_storage`
and the library's exceptions.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from longrope_opt.cli import main
from longrope_opt.errors import LongRopeOptError
from longrope_opt.studies import make_storage
from longrope_opt.urls import redact_url
from longrope_opt.urls import scrub
from tests.conftest import default_sigint


ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cretpw-9f2b"
REFUSING = f"postgresql://u:{SECRET}@127.0.0.1:1/db"
#: Every command that opens a storage, with what it needs to get that far.
COMMANDS = {
    "extend": ["extend", "--to", "16k", "--trials", "2", "--storage", "{url}"],
    "search": ["search", "--n-trials", "1", "--storage", "{url}"],
    "worker": ["worker", "--study-name", "x", "--storage", "{url}"],
    "eval": ["eval", "--study-name", "x", "--storage", "{url}"],
    "validate": ["validate", "--study-name", "x", "--storage", "{url}"],
    "validate --store": ["validate", "--store", "{url}", "--classic", "yarn", "--lengths", "16k"],
    "export": ["export", "--study-name", "x", "--storage", "{url}"],
    "compare": ["compare", "--budget", "2", "--storage", "{url}"],
    "finetune": ["finetune", "--study-name", "x", "--storage", "{url}", "-o", "ft"],
    "dashboard": ["dashboard", "--storage", "{url}"],
    "storage-server": ["storage-server", "--storage", "{url}"],
}


def _wrong_password_url(postgres_url: str) -> str:
    # `.ci/postgres.sh` makes the role `longrope_pw`, which must give its password.
    url = make_url(postgres_url).set(username="longrope_pw", password=SECRET)
    return url.render_as_string(hide_password=False)


def _leaks(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


@pytest.fixture(params=["refusing server", "wrong password"])
def secret_url(request, postgres_url) -> str:
    return REFUSING if request.param == "refusing server" else _wrong_password_url(postgres_url)


@pytest.mark.postgres
@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_command_shows_or_writes_the_password(
    command, secret_url, tmp_path, monkeypatch, capfd, caplog
) -> None:
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.DEBUG)
    args = [a.replace("{url}", secret_url) for a in COMMANDS[command]]
    assert main(args) == 2
    out, err = capfd.readouterr()
    assert SECRET not in out and SECRET not in err
    assert SECRET not in caplog.text
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "***" in errors[0], err[-2000:]
    assert not _leaks(tmp_path)


@pytest.mark.postgres
def test_make_storage_and_its_exception_hold_no_password(secret_url) -> None:
    with pytest.raises(LongRopeOptError) as info:
        make_storage(secret_url)
    exc = info.value
    chain = [exc, exc.__cause__, exc.__context__]
    for e in chain:
        if e is not None:
            assert SECRET not in str(e) and SECRET not in repr(e)
    assert "***" in str(exc)


def test_urls_are_shown_as_sqlalchemy_renders_them() -> None:
    url = f"postgresql://user:{SECRET}@db:5432/x?sslpassword=k3y-v4lue&sslmode=require"
    shown = redact_url(url)
    assert shown == "postgresql://user:***@db:5432/x?sslpassword=***&sslmode=require"
    assert redact_url("postgresql://user@db/x") == "postgresql://user@db/x"
    assert redact_url("grpc://proxy:13000?token=abc") == "grpc://proxy:13000?token=***"
    assert redact_url("sqlite:///longrope.db") == "sqlite:///longrope.db"
    # a driver that echoes the URL in another form, or the bare password, is scrubbed too
    said = f"failed for 'postgresql+psycopg2://user:{SECRET}@db/x' with {SECRET} and k3y-v4lue"
    cleaned = scrub(said, [url])
    assert SECRET not in cleaned and "k3y-v4lue" not in cleaned
    assert SECRET not in scrub(f"postgresql://a:{SECRET}@h/d", [])


def test_the_environments_storage_url_is_masked_too(monkeypatch, capfd, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LONGROPE_OPT_STORAGE", REFUSING)
    assert main(["worker", "--study-name", "x"]) == 2
    out, err = capfd.readouterr()
    assert SECRET not in out + err and "***" in err


def test_the_study_server_refuses_a_non_loopback_host_without_allow_remote(capfd) -> None:
    assert main(["storage-server", "--host", "0.0.0.0", "--storage", "sqlite:///x.db"]) == 2
    errors = [line for line in capfd.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "--allow-remote" in errors[0] and "no authentication" in errors[0]


def test_the_dashboard_refuses_a_non_loopback_host_without_allow_remote(capfd, tmp_path) -> None:
    import socket

    with socket.socket() as s:  # a port free now, so only the host can be refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"sqlite:///{tmp_path / 'd.db'}"
    assert main(["dashboard", "--host", "0.0.0.0", "--port", str(port), "--storage", url]) == 2
    errors = [line for line in capfd.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "--allow-remote" in errors[0] and "optuna-dashboard" in errors[0]
    assert not (tmp_path / "d.db").exists()  # refused before the storage was opened


def test_the_study_server_warns_when_it_listens_beyond_loopback(tmp_path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "longrope_opt.cli", "storage-server", "--host", "0.0.0.0",
         "--allow-remote", "--port", str(port), "--storage", f"sqlite:///{tmp_path / 's.db'}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "no authentication" in warnings[0] and "0.0.0.0" in warnings[0]
    assert "serving" in out
