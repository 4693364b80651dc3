"""Fetching an alias's GGUF into the cache (two workers starting at once on a fresh machine), and
converting it where transformers' release cannot convert its tokenizer right."""

from __future__ import annotations

import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from longrope_opt.errors import ModelLoadError
from longrope_opt.models import ALIASES
from longrope_opt.models import Alias
from longrope_opt.models import alias_gguf
from longrope_opt.models import alias_tokenizer_dir
from longrope_opt.models import resolve_alias


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


def _tokenizer_alias(monkeypatch, real: Path, since: str) -> Alias:
    """SmolLM2's real GGUF under another alias name whose tokenizer needs transformers `since`."""

    def extract(workdir: Path) -> Path:
        return Path(shutil.copy(real, workdir / real.name))

    fake = Alias("fake-smol", "fake-smol==1.0", "no_such_module_xyz", real.name, "93 MB", extract,
                 tokenizer_since=since, tokenizer_wrong="it comes out wrong")  # fmt: skip
    monkeypatch.setitem(ALIASES, fake.name, fake)
    return fake


def test_an_old_transformers_is_refused_before_anything_is_fetched(tmp_path, monkeypatch) -> None:
    import transformers

    monkeypatch.setenv("LONGROPE_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    with pytest.raises(ModelLoadError) as error:
        resolve_alias("gemma3-270m")
    said = str(error.value)
    assert "transformers >= 5.23" in said and "this environment has 5.17.0" in said
    assert str(alias_tokenizer_dir("gemma3-270m")) in said  # the way out, named
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_a_tokenizer_converted_elsewhere_beside_the_gguf_is_used(tmp_path, monkeypatch) -> None:
    from transformers import AutoTokenizer

    # this machine's SmolLM2 (the real-model tests fill its cache), before the cache moves
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_alias("smollm2-135m")))
    fake = _tokenizer_alias(monkeypatch, alias_gguf("smollm2-135m"), since="99.0")
    monkeypatch.setenv("LONGROPE_OPT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelLoadError, match="transformers >= 99.0"):  # no release converts it
        resolve_alias(fake.name)
    # a tokenizer converted elsewhere (marked, to tell it from one converted here) is read instead
    tokenizer.model_max_length = 4321
    tokenizer.save_pretrained(alias_tokenizer_dir(fake.name))
    converted = resolve_alias(fake.name)
    assert AutoTokenizer.from_pretrained(str(converted)).model_max_length == 4321
    assert (converted / "model.safetensors").is_file()
