"""Result files are replaced whole or not at all (`longrope_opt.files`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from longrope_opt.files import write_text_atomic


def test_replaces_the_file_and_leaves_nothing_beside_it(tmp_path) -> None:
    path = tmp_path / "results.json"
    write_text_atomic(path, '{"a": 1}')
    write_text_atomic(str(path), '{"a": 2, "π": "ü"}')
    assert json.loads(path.read_text(encoding="utf-8")) == {"a": 2, "π": "ü"}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path) -> None:
    path = tmp_path / "results.json"
    path.write_text('{"hours": 7}')
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, '{"hours": 8, "bad": "\ud800"}')  # fails half-way through
    assert json.loads(path.read_text()) == {"hours": 7}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
    with pytest.raises(OSError):
        write_text_atomic(tmp_path / "no" / "folder.json", "{}")


def test_a_process_killed_while_writing_leaves_the_old_file_readable(tmp_path) -> None:
    """SIGKILL lands after the new bytes are written and before the rename, the window where
    an in-place write would leave half a file."""
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"keys": [True] * 10}))
    ready = tmp_path / "ready"
    child = textwrap.dedent(f"""
        import os, pathlib, time, json
        from longrope_opt.files import write_text_atomic
        def stall(fd):
            pathlib.Path({str(ready)!r}).touch()
            time.sleep(60)
        os.fsync = stall
        write_text_atomic({str(path)!r}, json.dumps({{"keys": [False] * 10 ** 6}}))
    """)
    proc = subprocess.Popen([sys.executable, "-c", child])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the child never wrote"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert json.loads(path.read_text()) == {"keys": [True] * 10}


def test_the_file_then_its_folder_reach_the_disk(tmp_path, monkeypatch) -> None:
    import stat

    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    write_text_atomic(tmp_path / "results.json", "{}")
    # The data before the rename, the rename (the folder's entry) after it.
    assert synced == ["file", "folder"]
