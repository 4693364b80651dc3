"""`load_samples`: k long documents as token tensors, chosen deterministically by a seed."""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Collection
from collections.abc import Iterable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from longrope_opt.data._sources import PERL_DOC
from longrope_opt.data._sources import builtin_documents
from longrope_opt.data._sources import builtin_packages
from longrope_opt.data._sources import dataset_documents
from longrope_opt.data._sources import describe_builtin
from longrope_opt.data._sources import file_documents
from longrope_opt.data._sources import perl_doc_folder
from longrope_opt.data._sources import text_files
from longrope_opt.data._sources import text_hash
from longrope_opt.errors import DataError
from longrope_opt.errors import InvalidArgumentError


logger = logging.getLogger(__name__)


class Samples(list):
    """A list of 1-D ``torch.long`` token tensors, plus where they came from.

    Attributes:
        source: The corpus as given (``"builtin"``, a path, or a dataset name).
        doc_ids: One id per sample (module name, file path, or dataset row).
        doc_kinds: The kind of text of each sample (``builtin:prose``, ``builtin:code``, or the
            source it came from).
        corpus_hash: sha256 prefix over the texts of the chosen documents (provenance).
        doc_hashes: One sha256 prefix per sample, of its whole document's text: the document
            whatever its path, window or length (`exclude` takes these too).
        length: Tokens per sample (every sample has exactly this many unless ``full=True``).
        tokenizer: The tokenizer that made them (objectives that build their own prompts, such as
            `PasskeyObjective`, take it from here).
    """

    source: str
    doc_ids: list[str]
    doc_kinds: list[str]
    doc_hashes: list[str]
    corpus_hash: str
    length: int
    tokenizer: Any


def _looks_like_path(source: str) -> bool:
    # a dataset name never ends with a slash: "books/" is a folder
    return source.startswith((".", "/", "~")) or source.endswith("/") or bool(
        re.search(r"\.(txt|md)$", source)
    )


def split_sources(source: str) -> list[str]:
    """The sources a corpus names: ``"builtin,./books/"`` → ``["builtin", "./books/"]``.

    Raises:
        InvalidArgumentError: An empty name in the list (``"builtin,"``) or a source named twice.
    """
    parts = [p.strip() for p in str(source).split(",")]
    if not parts or any(not p for p in parts):
        raise InvalidArgumentError(
            f"`corpus` must name sources separated by commas, got {source!r}."
        )
    twice = sorted({p for p in parts if parts.count(p) > 1})
    if twice:
        raise InvalidArgumentError(f"`corpus` names {twice[0]!r} twice, got {source!r}.")
    return parts


def check_source(source: str, *, param: str = "corpus") -> None:
    """Fail now on a corpus path that does not exist or holds no text files (before a model
    loads); dataset names are only checked when read. `source` may name several, comma-separated.

    Raises:
        DataError: One line naming `param` (``held_out``, ``finetune_corpus``: the argument
            the text came as).
    """
    try:
        _check_parts(source)
    except DataError as exc:
        if param == "corpus":
            raise
        raise DataError(str(exc).replace("`corpus`", f"`{param}`", 1)) from None


def _check_parts(source: str) -> None:
    for part in split_sources(source):
        if part == "builtin":
            continue
        if part == PERL_DOC:
            perl_doc_folder()
            continue
        path = Path(part).expanduser()
        if path.exists() or _looks_like_path(part):
            text_files(path)


#: The kinds of text the built-in corpus holds: the reference manual's prose, the stdlib's code.
BUILTIN_KINDS = ("builtin:prose", "builtin:code")


def _kinds(
    source: str, length: int, seed: int
) -> tuple[list[tuple[str, Iterable[tuple[str, str]]]], str]:
    """``([(kind, documents in seed order)], description)`` of one source: the built-in corpus is
    two kinds (prose, code), any other source one kind named by itself."""
    if source == "builtin":
        docs = builtin_documents(min_chars=length // 2)
        order = np.random.default_rng(seed).permutation(len(docs))
        shuffled = [docs[i] for i in order]
        prose = [d for d in shuffled if not d[0].startswith("stdlib/")]
        code = [d for d in shuffled if d[0].startswith("stdlib/")]
        # whole packages after the modules, lazily: a length the modules serve draws as before
        code_then_packages = itertools.chain(code, _shuffled_packages(length, seed))
        kinds = [(BUILTIN_KINDS[0], prose), (BUILTIN_KINDS[1], code_then_packages)]
        return kinds, describe_builtin()
    path = perl_doc_folder() if source == PERL_DOC else Path(source).expanduser()
    if source == PERL_DOC or path.exists() or _looks_like_path(source):
        docs = file_documents(path)
        order = np.random.default_rng(seed).permutation(len(docs))
        return [(source, [docs[i] for i in order])], str(path)
    return [(source, dataset_documents(source, seed))], source


def _shuffled_packages(length: int, seed: int) -> Iterator[tuple[str, str]]:
    packages = builtin_packages(min_chars=length // 2)
    order = np.random.default_rng(seed).permutation(len(packages))
    yield from (packages[i] for i in order)


def _candidates(
    source: str, length: int, seed: int, interleave: bool
) -> tuple[list[tuple[str | None, Iterator[tuple[str, str, str]]]], str]:
    """One ``(kind, stream of (kind, doc_id, text))`` per kind, each in seed order, and the
    corpus's description. Without `interleave` (how studies made before kinds existed drew), one
    stream of kind None: the source's documents in seed order, kinds as they fall."""
    parts = split_sources(source)
    if not interleave:
        if len(parts) > 1:
            raise InvalidArgumentError(
                f"`corpus` {source!r} names several sources: they can only be drawn in turn."
            )
        if parts[0] == "builtin":
            docs = builtin_documents(min_chars=length // 2)
            order = np.random.default_rng(seed).permutation(len(docs))
            drawn = [(_builtin_kind(docs[i][0]), *docs[i]) for i in order]
            return [(None, iter(drawn))], describe_builtin()
    streams: list[tuple[str | None, Iterator[tuple[str, str, str]]]] = []
    described = []
    for part in parts:
        kinds, text = _kinds(part, length, seed)
        streams += [(kind, _labelled(kind, docs)) for kind, docs in kinds]
        described.append(text)
    return streams, ",".join(described)


def _labelled(kind: str, docs: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str, str]]:
    for doc_id, text in docs:
        yield kind, doc_id, text


def _builtin_kind(doc_id: str) -> str:
    return BUILTIN_KINDS[1] if doc_id.startswith("stdlib/") else BUILTIN_KINDS[0]


def window_document(sample_id: str) -> str:
    """The document a sample id names: ``doc`` for ``doc#<first token>`` (a later window)."""
    doc, sep, start = sample_id.rpartition("#")
    return doc if sep and start.isdigit() else sample_id


def load_samples(
    source: str,
    tokenizer: Any,
    length: int,
    k: int,
    seed: int = 0,
    *,
    full: bool = False,
    exclude: Collection[str] = (),
    windows: int = 1,
    interleave: bool = True,
    at_most: bool = False,
) -> Samples:
    """Return `k` documents of at least `length` tokens, truncated to `length`.

    Documents are visited in an order fixed by `seed`; the first `k` that are long enough are
    kept, so the same seed gives the same samples, and a larger `k` extends a smaller one.
    A corpus is made of kinds of text: each source named is one, and the built-in corpus is
    two (the reference manual's prose, the stdlib's code: `BUILTIN_KINDS`). Kinds take turns,
    one document each, so a fitness on 2 documents of ``"builtin"`` reads prose and code, and
    one on ``"builtin,./books/"`` reads all three kinds.
    With ``windows > 1`` a document of ``n * length`` tokens gives up to ``min(n, windows)``
    disjoint samples (ids ``doc``, ``doc#<first token>``, ...): a corpus with few very long
    documents still yields `k` held-out samples.

    Args:
        source: ``"builtin"`` (CPython's reference manual, long stdlib modules, then whole stdlib
            packages where no module is long enough: `builtin_packages`; offline), a
            ``.txt``/``.md`` file or a folder of them, or a `datasets` name
            ``name[:config][@split]`` such as ``"pg19@test"`` (needs the hub); or several of
            these, comma-separated (``"builtin,./books/"``).
        tokenizer: A transformers tokenizer (its special-token settings are used as they are).
        length: Tokens per sample (L').
        k: Number of samples.
        seed: Chooses which documents.
        full: Keep whole documents (for sliding-window evaluation) instead of truncating.
        exclude: Documents never to use (e.g. those a search used), by id or by text hash
            (`Samples.doc_hashes`: the same text under another path). A window id
            ``doc#<start>`` excludes the whole document ``doc``.
        windows: Most disjoint `length`-token samples taken from one document (1: its start only).
        at_most: `k` is a ceiling: fewer samples (at least one) are what the corpus has
            (training text read in windows), instead of an error.
        interleave: Kinds take turns (default). False: one source's documents in seed order,
            kinds as they fall (how studies made before kinds existed drew theirs).

    Returns:
        `Samples`: a list of 1-D ``torch.long`` tensors with provenance attributes.

    Raises:
        InvalidArgumentError: `length` < 2, `k` < 1, `seed` < 0, or a malformed source list.
        DataError: Unknown/unreachable source, or fewer than `k` documents are long enough (the
            message gives how many were found and how long the longest ones are).
    """
    # torch on use: `longrope_opt.data` stays light for the CLI's corpus checks
    import torch

    if not isinstance(length, int) or length < 2:
        raise InvalidArgumentError(f"`length` must be an integer >= 2, got {length!r}.")
    if not isinstance(k, int) or k < 1:
        raise InvalidArgumentError(f"`k` must be an integer >= 1, got {k!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidArgumentError(f"`seed` must be an integer >= 0, got {seed!r}.")
    if not isinstance(windows, int) or windows < 1 or (full and windows > 1):
        raise InvalidArgumentError(
            f"`windows` must be an integer >= 1 (1 when full=True), got {windows!r}."
        )
    streams, described = _candidates(source, length, seed, interleave)
    excluded = set(exclude) | {window_document(e) for e in exclude}
    chosen: list[tuple[str, str, str, list[int]]] = []
    seen_lengths: list[int] = []

    def next_long(
        stream: Iterator[tuple[str, str, str]],
    ) -> tuple[str, str, str, list[int]] | None:
        # The stream's next document that is not excluded and long enough (lazily tokenized).
        for kind, doc_id, text in stream:
            if doc_id in excluded or (excluded and text_hash([text]) in excluded):
                continue
            ids = tokenizer(text)["input_ids"]
            seen_lengths.append(len(ids))
            if len(ids) >= length:
                return kind, doc_id, text, ids
        return None

    # Kinds take turns: one long-enough document each per round; a kind that runs out drops out.
    live = [stream for _, stream in streams]
    exhausted: list[Iterator[tuple[str, str, str]]] = []
    while live and len(chosen) < k:
        for stream in list(live):
            found = next_long(stream)
            if found is None:
                live.remove(stream)
                exhausted.append(stream)
                continue
            kind, doc_id, text, ids = found
            for w in range(min(windows, len(ids) // length, k - len(chosen))):
                name = doc_id if w == 0 else f"{doc_id}#{w * length}"
                chosen.append((kind, name, text, ids[w * length :]))
            if len(chosen) == k:
                break
    if len(chosen) < k and not (at_most and chosen):
        longest = sorted(seen_lengths, reverse=True)[:5]
        unit = "document(s)" if windows == 1 else f"window(s) (up to {windows} per document)"
        raise DataError(
            f"`corpus` {source!r} has {len(chosen)} {unit} of >= {length} tokens, need k={k}; "
            f"{len(seen_lengths)} document(s) read, the longest have {longest} tokens."
        )
    # A kind with no document this long leaves the samples to the others: say so, since a
    # search that reads only code (the built-in prose is 112k Gemma tokens) is judged on prose.
    drawn = {c[0] for c in chosen}
    short = [kind for kind, st in streams if kind and kind not in drawn and st in exhausted]
    if short and chosen:
        logger.warning(
            "corpus %r: no %s document of >= %d tokens; the %d sample(s) are %s only.",
            source,
            " or ".join(short),
            length,
            len(chosen),
            " and ".join(sorted(drawn)),
        )
    samples = Samples(
        torch.tensor(ids if full else ids[:length], dtype=torch.long) for *_, ids in chosen
    )
    samples.source = described
    samples.doc_ids = [doc_id for _, doc_id, _, _ in chosen]
    samples.doc_kinds = [kind for kind, _, _, _ in chosen]
    samples.doc_hashes = [text_hash([text]) for _, _, text, _ in chosen]
    samples.corpus_hash = text_hash([text for _, _, text, _ in chosen])
    samples.length = length
    samples.tokenizer = tokenizer
    return samples
