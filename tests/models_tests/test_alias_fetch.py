"""Fetching an alias's GGUF into the cache: two workers starting at once on a fresh machine."""

from __future__ import annotations

import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from longrope_opt.models import ALIASES
from longrope_opt.models import Alias
from longrope_opt.models import alias_gguf


def test_two_workers_fetching_at_once_both_get_the_whole_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LONGROPE_OPT_CACHE", str(tmp_path / "cache"))
    payload = bytes(range(256)) * 4096
    both_copied = threading.Barrier(2)
    copyfile = shutil.copyfile

    def copy_then_wait(src, dst, **kwargs):
        # the worst order, every time: both copies made before either is renamed into place
        out = copyfile(src, dst, **kwargs)
        both_copied.wait(timeout=30)
        return out

    def extract(workdir: Path) -> Path:
        out = workdir / "fake.gguf"
        out.write_bytes(payload)
        return out

    monkeypatch.setattr(shutil, "copyfile", copy_then_wait)

    fake = Alias(
        "fake-model", "fake-model==1.0", "no_such_module_xyz", "fake.gguf", "1 MB", extract
    )
    monkeypatch.setitem(ALIASES, fake.name, fake)
    with ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(lambda _: alias_gguf(fake.name), range(2)))
    assert paths[0] == paths[1]
    assert paths[0].read_bytes() == payload
    # nothing half-written is left beside it
    assert sorted(p.name for p in paths[0].parent.iterdir()) == ["fake.gguf"]
