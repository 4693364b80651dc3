"""`load_samples`: determinism, sources, and its errors (with a character-level tokenizer)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from longrope_opt.data import builtin_documents
from longrope_opt.data import check_source
from longrope_opt.data import load_samples
from longrope_opt.errors import DataError
from longrope_opt.errors import InvalidArgumentError


def char_tokenizer(text: str) -> dict[str, list[int]]:
    """Stands in for a transformers tokenizer: one token per character."""
    return {"input_ids": [ord(c) % 50000 for c in text]}


def test_builtin_corpus_has_long_documents() -> None:
    docs = builtin_documents(min_chars=50_000)
    ids = [d for d, _ in docs]
    assert ids[0] == "pydoc_data.topics"
    assert len(docs) >= 5 and all(len(t) >= 50_000 for _, t in docs)


def test_deterministic_for_a_seed_and_prefix_stable() -> None:
    a = load_samples("builtin", char_tokenizer, 20_000, 3, seed=1)
    b = load_samples("builtin", char_tokenizer, 20_000, 3, seed=1)
    c = load_samples("builtin", char_tokenizer, 20_000, 4, seed=1)
    other = load_samples("builtin", char_tokenizer, 20_000, 3, seed=2)
    assert a.doc_ids == b.doc_ids and all(torch.equal(x, y) for x, y in zip(a, b))
    assert c.doc_ids[:3] == a.doc_ids
    assert other.doc_ids != a.doc_ids
    assert all(s.dtype == torch.long and s.shape == (20_000,) for s in a)
    assert a.corpus_hash == b.corpus_hash != other.corpus_hash


def test_local_file_and_folder(tmp_path) -> None:
    (tmp_path / "a.txt").write_text("alpha " * 100)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("beta " * 100)
    (tmp_path / "short.txt").write_text("x")
    folder = load_samples(str(tmp_path), char_tokenizer, 400, 2, seed=0)
    assert sorted(folder.doc_ids) == sorted(
        [str(tmp_path / "a.txt"), str(tmp_path / "sub" / "b.md")]
    )
    single = load_samples(str(tmp_path / "a.txt"), char_tokenizer, 400, 1, seed=0, full=True)
    assert single[0].numel() == 600


def test_too_few_long_documents_says_how_many_and_how_long(tmp_path) -> None:
    (tmp_path / "a.txt").write_text("a" * 300)
    (tmp_path / "b.txt").write_text("b" * 120)
    with pytest.raises(
        DataError,
        match=r"has 1 document\(s\) of >= 200 tokens, need k=2; 2 document\(s\) read, the longest have \[300, 120\] tokens",
    ):
        load_samples(str(tmp_path), char_tokenizer, 200, 2)


@pytest.mark.parametrize(
    ("source", "pattern"),
    [("./no/such/dir", "does not exist"), ("missing.txt", "does not exist")],
)
def test_missing_paths(source: str, pattern: str) -> None:
    with pytest.raises(DataError, match=pattern):
        load_samples(source, char_tokenizer, 100, 1)


def test_empty_folder(tmp_path) -> None:
    with pytest.raises(DataError, match="holds no .txt, .md or .pod files"):
        load_samples(str(tmp_path), char_tokenizer, 100, 1)


def test_unreachable_dataset_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(
        DataError, match=r"could not read `corpus` dataset 'no-such-org/no-such-set'"
    ):
        load_samples("no-such-org/no-such-set", char_tokenizer, 100, 1)


@pytest.mark.parametrize(("length", "k", "arg"), [(1, 1, "length"), (100, 0, "k")])
def test_bad_length_or_k(length: int, k: int, arg: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"`{arg}` must be an integer"):
        load_samples("builtin", char_tokenizer, length, k)


@pytest.mark.parametrize("seed", [-1, 1.5, True])
def test_bad_seed_is_named(seed) -> None:
    with pytest.raises(InvalidArgumentError, match=r"`seed` must be an integer >= 0, got "):
        load_samples("builtin", char_tokenizer, 100, 1, seed)


def test_windows_split_long_documents_and_exclude_whole_documents(tmp_path) -> None:
    text = "".join(chr(97 + i % 26) for i in range(1000))
    (tmp_path / "a.txt").write_text(text)
    (tmp_path / "b.txt").write_text("b" * 450)
    (tmp_path / "c.txt").write_text("c" * 250)
    a, b, c = (str(tmp_path / n) for n in ("a.txt", "b.txt", "c.txt"))
    held = load_samples(str(tmp_path), char_tokenizer, 200, 8, seed=0, windows=5)
    # a gives 5 disjoint windows, b 2 (its 50 spare tokens are dropped), c 1: all 8.
    windows_of_a = [a] + [f"{a}#{start}" for start in (200, 400, 600, 800)]
    assert sorted(held.doc_ids) == sorted(windows_of_a + [b, f"{b}#200", c])
    assert all(x.shape == (200,) for x in held)
    by_id = dict(zip(held.doc_ids, held))
    assert by_id[f"{a}#400"].tolist() == [ord(ch) for ch in text[400:600]]
    # At most `windows` per document.
    two = load_samples(str(tmp_path), char_tokenizer, 200, 5, seed=0, windows=2)
    assert sorted(two.doc_ids) == sorted([a, f"{a}#200", b, f"{b}#200", c])
    # Excluding any window of a document excludes the whole document: only c is left.
    rest = load_samples(str(tmp_path), char_tokenizer, 200, 1, seed=0, exclude=[f"{a}#400", b])
    assert rest.doc_ids == [c]
    # windows=1 (the default) is one sample per document, from its start.
    one = load_samples(str(tmp_path), char_tokenizer, 200, 3, seed=0)
    assert sorted(one.doc_ids) == [a, b, c]
    with pytest.raises(DataError, match=r"has 8 window\(s\) \(up to 5 per document\) of >= 200"):
        load_samples(str(tmp_path), char_tokenizer, 200, 9, seed=0, windows=5)


@pytest.mark.parametrize("windows", [0, -1, 1.5])
def test_bad_windows(windows) -> None:
    with pytest.raises(InvalidArgumentError, match=r"`windows` must be an integer >= 1"):
        load_samples("builtin", char_tokenizer, 100, 1, windows=windows)
    with pytest.raises(InvalidArgumentError, match=r"got 2"):
        load_samples("builtin", char_tokenizer, 100, 1, windows=2, full=True)


def test_whole_packages_follow_the_modules_in_the_builtin_code() -> None:
    # Where the modules serve a length they are drawn exactly as without packages; past the
    # longest module (a model with an efficient tokenizer at 64k), whole packages follow.
    from longrope_opt.data import builtin_packages

    packages = builtin_packages(min_chars=300_000)
    assert {"stdlib/asyncio/", "stdlib/unittest/"} <= {d for d, _ in packages}
    assert not any(d in ("stdlib/encodings/", "stdlib/pydoc_data/") for d, _ in packages)
    short = load_samples("builtin", char_tokenizer, 100_000, 6, seed=0)
    assert not any(d.endswith("/") for d in short.doc_ids)
    longest_module = max(len(t) for d, t in builtin_documents() if d.startswith("stdlib/"))
    long = load_samples("builtin", char_tokenizer, longest_module + 1, 4, seed=0)
    assert long.doc_ids[0] == "pydoc_data.topics"
    assert all(d.startswith("stdlib/") and d.endswith("/") for d in long.doc_ids[1:])
    assert long.doc_kinds[1:] == ["builtin:code"] * 3


def test_a_kind_with_nothing_this_long_is_named_in_a_warning(tmp_path, caplog) -> None:
    # Gemma 3 at 128k: the built-in prose is shorter, so the search reads code only; say so.
    (tmp_path / "long").mkdir()
    (tmp_path / "short").mkdir()
    (tmp_path / "long" / "a.txt").write_text("a" * 500)
    (tmp_path / "long" / "b.txt").write_text("b" * 500)
    (tmp_path / "short" / "c.txt").write_text("c" * 150)
    source = f"{tmp_path / 'long'},{tmp_path / 'short'}"
    with caplog.at_level("WARNING", logger="longrope_opt.data"):
        both = load_samples(source, char_tokenizer, 100, 2, seed=0)
    assert not caplog.records  # each kind gave one: nothing to say
    assert len(set(both.doc_kinds)) == 2
    with caplog.at_level("WARNING", logger="longrope_opt.data"):
        one = load_samples(source, char_tokenizer, 200, 2, seed=0)
    assert len(set(one.doc_kinds)) == 1
    (record,) = caplog.records
    assert f"no {tmp_path / 'short'} document of >= 200 tokens" in record.getMessage()
    caplog.clear()
    with caplog.at_level("WARNING", logger="longrope_opt.data"):
        load_samples(source, char_tokenizer, 200, 1, seed=0)  # the short kind is never asked
    assert not caplog.records


def test_perl_doc_is_a_corpus_of_long_documents() -> None:
    # the fine-tuning stage's default text (Debian's perl-doc, installed by .ci/run)
    from longrope_opt.data import PERL_DOC

    check_source(PERL_DOC)
    docs = load_samples(PERL_DOC, char_tokenizer, 20_000, 3, seed=0)
    assert len(docs) == 3 and all(d.numel() == 20_000 for d in docs)
    assert all(doc.endswith(".pod") for doc in docs.doc_ids)


def test_a_missing_perl_doc_says_how_to_install_it(monkeypatch) -> None:
    import longrope_opt.data._sources as sources

    monkeypatch.setattr(sources, "Path", lambda *_: Path("/nonexistent"))
    with pytest.raises(DataError, match="apt-get install perl-doc"):
        check_source("perl-doc")


def test_at_most_takes_what_the_corpus_holds_in_windows(tmp_path) -> None:
    # training reads windows: k is a ceiling there, not a requirement
    (tmp_path / "a.txt").write_text("a" * 1000)
    (tmp_path / "b.txt").write_text("b" * 450)
    got = load_samples(str(tmp_path), char_tokenizer, 200, 50, seed=0, windows=50, at_most=True)
    assert len(got) == 5 + 2 and all(s.numel() == 200 for s in got)
    with pytest.raises(DataError, match="need k=50"):
        load_samples(str(tmp_path), char_tokenizer, 200, 50, seed=0, windows=50)
    with pytest.raises(DataError, match="need k=1"):  # nothing at all is still an error
        load_samples(str(tmp_path), char_tokenizer, 2000, 1, seed=0, at_most=True)
