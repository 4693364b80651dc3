"""Long-text samples: the offline built-in corpus, local files, and `datasets` names."""

from __future__ import annotations

from longrope_opt.data._samples import BUILTIN_KINDS
from longrope_opt.data._samples import Samples
from longrope_opt.data._samples import check_source
from longrope_opt.data._samples import load_samples
from longrope_opt.data._samples import split_sources
from longrope_opt.data._sources import PERL_DOC
from longrope_opt.data._sources import TEXT_SUFFIXES
from longrope_opt.data._sources import builtin_documents
from longrope_opt.data._sources import builtin_packages


__all__ = [
    "PERL_DOC",
    "TEXT_SUFFIXES",
    "BUILTIN_KINDS",
    "Samples",
    "builtin_documents",
    "builtin_packages",
    "check_source",
    "load_samples",
    "split_sources",
]
