"""Loading models: hub ids, local directories, GGUF files and the offline `smollm2-135m` alias."""

from __future__ import annotations

from longrope_opt.models._export import export_model
from longrope_opt.models._export import read_export
from longrope_opt.models._load import load_model
from longrope_opt.models._smollm2 import ALIAS as DEFAULT_MODEL
from longrope_opt.models._smollm2 import cache_dir


__all__ = ["DEFAULT_MODEL", "cache_dir", "export_model", "load_model", "read_export"]
