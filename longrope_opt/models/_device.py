"""Where a model runs: the device, and on CUDA the dtype and attention kernel.

The branch logic lives here, apart from the loading, so the CPU machines this project is built
on test every branch (with `torch.cuda` answers patched) without pretending to run a kernel.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

from longrope_opt.errors import InvalidArgumentError


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when available, else ``cpu``; ``cpu``, ``cuda`` and ``cuda:N`` are
    checked against this machine.

    Raises:
        InvalidArgumentError: Another string, CUDA asked for without CUDA, or N out of range.
    """
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch

    if not isinstance(device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise InvalidArgumentError(
            f"`device` must be auto, cpu, cuda or cuda:N, got {device!r}."
        )
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InvalidArgumentError(
                f"`device` {device!r} needs CUDA, and torch sees none here "
                f"(torch {torch.__version__}); use `device` 'cpu'."
            )
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise InvalidArgumentError(
                f"`device` {device!r}: this machine has {torch.cuda.device_count()} CUDA "
                "device(s)."
            )
    return device


def cuda_path(device: str) -> str:
    """The compute path `dtype auto` takes on a CUDA device: bf16 where the GPU supports it
    (Ampere and later), else fp16. No probe: on GPUs the half-precision kernels always win."""
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch

    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


def flash_attention_installed() -> bool:
    """Whether the optional `flash-attn` package (the ``gpu`` extra) is importable."""
    return importlib.util.find_spec("flash_attn") is not None


def choose_attention(device: str, requested: str | None, model_class: Any = None) -> str:
    """The attention implementation to load with.

    Args:
        device: A resolved device.
        requested: What the user asked for (None: the best available).
        model_class: The transformers class to load (its ``_supports_flash_attn``), if known.

    Returns:
        ``requested`` when given and usable; by default ``flash_attention_2`` on CUDA when
        flash-attn is installed and the model supports it, else ``sdpa``.

    Raises:
        InvalidArgumentError: flash-attn asked for but not on CUDA, not installed, or not
            supported by the model.
    """
    supported = model_class is None or bool(getattr(model_class, "_supports_flash_attn", True))
    on_cuda = device.startswith("cuda")
    if requested == "flash_attention_2":
        if not on_cuda:
            raise InvalidArgumentError(
                f"`attn` 'flash_attention_2' needs a CUDA device, got `device` {device!r}."
            )
        if not flash_attention_installed():
            raise InvalidArgumentError(
                "`attn` 'flash_attention_2' needs flash-attn: pip install 'longrope-opt[gpu]'."
            )
        if not supported:
            raise InvalidArgumentError(
                f"`attn` 'flash_attention_2': {model_class.__name__} does not support flash-attn; "
                "use `attn` 'sdpa'."
            )
        return requested
    if requested is not None:
        return requested
    if on_cuda and flash_attention_installed() and supported:
        return "flash_attention_2"
    return "sdpa"


def reset_peak_memory(device: Any) -> None:
    """Start counting peak memory on a CUDA device (nothing elsewhere)."""
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch

    if getattr(device, "type", str(device)).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: Any) -> float | None:
    """Peak memory allocated on a CUDA device since the last reset, in MB; None elsewhere."""
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch

    if not getattr(device, "type", str(device)).startswith("cuda"):
        return None
    return torch.cuda.max_memory_allocated(device) / 2**20
