"""Loading models: hub ids, local directories, GGUF files and the offline aliases (`smollm2-135m`, `gemma3-270m`)."""

from __future__ import annotations

from longrope_opt.models._adapter import ADAPTER
from longrope_opt.models._adapter import is_adapter_dir
from longrope_opt.models._adapter import merged_adapter_dir
from longrope_opt.models._aliases import ALIAS as DEFAULT_MODEL
from longrope_opt.models._aliases import ALIASES
from longrope_opt.models._aliases import Alias
from longrope_opt.models._aliases import alias_gguf
from longrope_opt.models._aliases import alias_tokenizer_dir
from longrope_opt.models._aliases import cache_dir
from longrope_opt.models._aliases import resolve_alias
from longrope_opt.models._aliases import resolve_smollm2
from longrope_opt.models._aliases import smollm2_gguf
from longrope_opt.models._compute import PATHS
from longrope_opt.models._compute import ComputePath
from longrope_opt.models._compute import PathChoice
from longrope_opt.models._compute import choose_path
from longrope_opt.models._compute import cpu_features
from longrope_opt.models._compute import cpu_name
from longrope_opt.models._compute import device_name
from longrope_opt.models._device import choose_attention
from longrope_opt.models._device import cuda_path
from longrope_opt.models._device import flash_attention_installed
from longrope_opt.models._device import peak_memory_mb
from longrope_opt.models._device import reset_peak_memory
from longrope_opt.models._device import resolve_device
from longrope_opt.models._export import as_pair
from longrope_opt.models._export import check_output_dir
from longrope_opt.models._export import export_model
from longrope_opt.models._export import exported_spec
from longrope_opt.models._export import needs_loader
from longrope_opt.models._export import read_export
from longrope_opt.models._export import rope_parameters
from longrope_opt.models._export import vllm_attention_factor
from longrope_opt.models._gguf import GGUF_FORMS
from longrope_opt.models._gguf import GgufExport
from longrope_opt.models._gguf import check_gguf_arch
from longrope_opt.models._gguf import check_gguf_output
from longrope_opt.models._gguf import export_gguf
from longrope_opt.models._gguf import gguf_source
from longrope_opt.models._gguf import read_gguf_arch
from longrope_opt.models._load import load_model
from longrope_opt.models._load import load_tokenizer
from longrope_opt.models._load import read_config
from longrope_opt.models._loss import chunked_nll
from longrope_opt.models._loss import decoder_hidden
from longrope_opt.models._loss import final_logits


__all__ = [
    "ADAPTER",
    "is_adapter_dir",
    "merged_adapter_dir",
    "PATHS",
    "ComputePath",
    "PathChoice",
    "choose_path",
    "cpu_features",
    "cpu_name",
    "device_name",
    "DEFAULT_MODEL",
    "as_pair",
    "cache_dir",
    "smollm2_gguf",
    "ALIASES",
    "Alias",
    "alias_gguf",
    "alias_tokenizer_dir",
    "resolve_alias",
    "resolve_smollm2",
    "choose_attention",
    "cuda_path",
    "flash_attention_installed",
    "peak_memory_mb",
    "reset_peak_memory",
    "check_output_dir",
    "chunked_nll",
    "decoder_hidden",
    "export_model",
    "GGUF_FORMS",
    "GgufExport",
    "check_gguf_arch",
    "check_gguf_output",
    "read_gguf_arch",
    "export_gguf",
    "gguf_source",
    "exported_spec",
    "final_logits",
    "load_model",
    "load_tokenizer",
    "needs_loader",
    "read_config",
    "read_export",
    "resolve_device",
    "rope_parameters",
    "vllm_attention_factor",
]
