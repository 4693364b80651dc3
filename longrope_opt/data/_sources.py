"""Where long documents come from: CPython's own text, local files, or a `datasets` name.

Each source yields ``(doc_id, text)`` lazily, so `load_samples` tokenizes only as many documents as
it needs. Candidates are ordered deterministically (then shuffled by the caller's seed), so the
same seed picks the same documents on every machine with the same source.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from longrope_opt.errors import DataError


#: Stdlib modules shorter than this many bytes cannot hold a long sample; skip them unread.
_MIN_MODULE_BYTES = 20_000


def builtin_documents(min_chars: int = 0) -> list[tuple[str, str]]:
    """Long text that ships with every CPython: reference-manual prose and long stdlib modules.

    Args:
        min_chars: Skip documents shorter than this (a cheap pre-filter before tokenizing).

    Returns:
        ``[(doc_id, text)]`` in a fixed order: the reference manual first, then modules by name.
    """
    # the built-in corpus, read only when asked for
    import pydoc_data.topics as topics

    docs: list[tuple[str, str]] = []
    # The topics are sections of the Python Language Reference; in key order they read as one
    # long technical book (~465k characters).
    manual = "\n\n".join(topics.topics[key] for key in sorted(topics.topics))
    docs.append(("pydoc_data.topics", manual))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py")):
        try:
            size = path.stat().st_size
        except OSError:
            continue
        if size >= max(min_chars, _MIN_MODULE_BYTES):
            docs.append(
                (f"stdlib/{path.name}", path.read_text(encoding="utf-8", errors="replace"))
            )
    return [(doc_id, text) for doc_id, text in docs if len(text) >= min_chars]


#: Stdlib packages that are not code to read: the reference manual's own files (the prose
#: document above) and the codec tables.
_NOT_PACKAGE_DOCUMENTS = ("pydoc_data", "encodings")


def builtin_packages(min_chars: int = 0) -> list[tuple[str, str]]:
    """Longer code that ships with every CPython: each stdlib package's modules as one document.

    A model with a long trained window and an efficient tokenizer reads past every single module
    (Gemma 3 at 64k tokens: only `_pydecimal.py` is that long), as a repository is read past its
    longest file; a package read module by module (sorted paths, tests included) is that
    longer code (`asyncio` 122k Gemma tokens, `idlelib` 353k). They come after the modules in the
    built-in code's order (`load_samples`), so a length the modules serve draws what it drew.

    Returns:
        ``[("stdlib/<package>/", text)]`` by package name, those of at least `min_chars`.
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for package in sorted(p for p in stdlib.iterdir() if (p / "__init__.py").is_file()):
        if package.name in _NOT_PACKAGE_DOCUMENTS:
            continue
        files = sorted(package.rglob("*.py"))
        if sum(f.stat().st_size for f in files) < max(min_chars, _MIN_MODULE_BYTES):
            continue
        text = "\n\n".join(f.read_text(encoding="utf-8", errors="replace") for f in files)
        if len(text) >= min_chars:
            docs.append((f"stdlib/{package.name}/", text))
    return docs


#: Suffixes of the files a corpus folder contributes (plain text, Markdown, Perl's POD).
TEXT_SUFFIXES = (".txt", ".md", ".pod")

#: The fine-tuning stage's default text: Perl's manual, Debian's perl-doc package (Debian 12:
#: 207 POD documents, 2.96M SmolLM2 tokens, 86 of them of 8,192 tokens or more): long technical
#: prose that is neither the search's built-in corpus (CPython's) nor the held-out books (the
#: Rust toolchain's).
PERL_DOC = "perl-doc"


def perl_doc_folder() -> Path:
    """The folder of Perl's manual (``/usr/share/perl/<version>/pod``).

    Raises:
        DataError: perl-doc is not installed (one line saying how to install it).
    """
    found = sorted(p.parent for p in Path("/usr/share/perl").glob("*/pod/perlfunc.pod"))
    if not found:
        raise DataError(
            f"`corpus` {PERL_DOC!r} is Perl's manual from Debian's perl-doc package, which is not "
            "installed: apt-get install perl-doc (or give another corpus)."
        )
    return found[-1]


def text_files(path: Path) -> list[Path]:
    """`path` itself, or every ``.txt``/``.md``/``.pod`` file below it (sorted); one-line errors
    for a missing path or a folder without text files."""
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in TEXT_SUFFIXES and p.is_file())
        if not files:
            raise DataError(f"`corpus` directory {str(path)!r} holds no .txt, .md or .pod files.")
        return files
    raise DataError(f"`corpus` path {str(path)!r} does not exist.")


def file_documents(path: Path) -> list[tuple[str, str]]:
    """One document per text file: `path` itself, or every such file below it (sorted)."""
    return [(str(p), _read_text(p)) for p in text_files(path)]


def _read_text(path: Path) -> str:
    # A binary file (an archive, a model file) renamed or picked up by mistake would otherwise be
    # "read" as replacement characters and tokenized into garbage that still scores.
    data = path.read_bytes()
    if b"\x00" in data[:65536]:
        raise DataError(f"`corpus` file {str(path)!r} is binary, not text (it holds NUL bytes).")
    text = data.decode("utf-8", errors="replace")
    if text.count("\ufffd") > max(16, len(text) // 100):
        raise DataError(f"`corpus` file {str(path)!r} is not UTF-8 text.")
    return text


def dataset_documents(spec: str, seed: int) -> Iterator[tuple[str, str]]:
    """Documents of a `datasets` dataset: ``name[:config][@split]`` (default split ``test``).

    Streams, so only the documents actually used are downloaded; shuffled with a buffer by `seed`.
    The text column is ``text`` (or the first string column).
    """
    try:
        # `datasets` loads in seconds: only for a dataset corpus
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a core dependency
        raise DataError("`corpus` names a dataset but `datasets` is not installed.") from exc
    name, _, split = spec.partition("@")
    name, _, config = name.partition(":")
    # huggingface_hub logs every failed request (retries included) before raising: keep stderr to
    # the one error line below.
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        ds = datasets.load_dataset(name, config or None, split=split or "test", streaming=True)
        ds = ds.shuffle(seed=seed, buffer_size=64)
        for i, row in enumerate(ds):
            column = (
                "text"
                if "text" in row
                else next((k for k, v in row.items() if isinstance(v, str)), None)
            )
            if column is None:
                raise DataError(f"`corpus` dataset {spec!r} has no text column.")
            yield f"{spec}#{i}", row[column]
    except (OSError, ConnectionError, ValueError, FileNotFoundError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(
            f"could not read `corpus` dataset {spec!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__} "
            "(no network? use 'builtin' or a local .txt file or folder)."
        ) from exc
    finally:
        hub_logger.setLevel(level)


def describe_builtin() -> str:
    """Version tag for provenance: the builtin corpus differs between Python versions."""
    return f"builtin(python {sys.version_info.major}.{sys.version_info.minor})"


def text_hash(texts: list[str]) -> str:
    """Short sha256 of the texts actually used (provenance)."""
    h = hashlib.sha256()
    for text in texts:
        h.update(hashlib.sha256(text.encode("utf-8", errors="replace")).digest())
    return h.hexdigest()[:16]
