"""Everything that depends on how the installed transformers lays out rotary embeddings.

transformers 5.x: one ``<Family>RotaryEmbedding`` module per model (``model.model.rotary_emb``)
with ``forward(x, position_ids) -> (cos, sin)``, whose output is passed to every layer as
``position_embeddings``; buffers ``inv_freq`` / ``original_inv_freq`` and a float
``attention_scaling``. transformers 4.3x–4.41 kept a ``rotary_emb`` per attention layer with the
same forward contract, so finding *every* rotary module (not only the model-level one) covers both.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from longrope_opt.errors import UnsupportedModelError


def model_type(model: nn.Module) -> str:
    """The ``config.model_type`` of a transformers model, or its class name."""
    config = getattr(model, "config", None)
    return str(getattr(config, "model_type", None) or type(model).__name__)


def find_rotary_modules(model: nn.Module) -> list[nn.Module]:
    """All rotary-embedding modules of `model` (each computes cos/sin from position ids).

    Raises:
        UnsupportedModelError: The model has none (e.g. GPT-2's learned positions), or its rotary
            module uses per-layer-type RoPE (Gemma-3 style), which this version cannot patch.
    """
    found = [
        m
        for m in model.modules()
        if type(m).__name__.endswith("RotaryEmbedding") and hasattr(m, "inv_freq")
    ]
    if not found:
        raise UnsupportedModelError(
            f"`model` of type {model_type(model)!r} has no rotary position embedding "
            "(no *RotaryEmbedding module with an `inv_freq` buffer); only RoPE models "
            "(Llama, Mistral, Qwen2, Phi-3, ...) can be rescaled."
        )
    for m in found:
        rope_type = getattr(m, "rope_type", None)
        if isinstance(rope_type, dict):
            raise UnsupportedModelError(
                f"`model` of type {model_type(model)!r} uses per-layer-type RoPE "
                f"({sorted(rope_type)}); only a single RoPE per model is supported."
            )
    return found


def rope_denominators(rotary_dim: int, base: float, device: torch.device) -> torch.Tensor:
    """base^(2i/d) in fp32, computed exactly as transformers' default and longrope init do."""
    exponent = (
        torch.arange(0, rotary_dim, 2, dtype=torch.int64).to(device, torch.float) / rotary_dim
    )
    return base**exponent  # (d/2,)


def default_inv_freq(rotary_dim: int, base: float, device: torch.device) -> torch.Tensor:
    """θ_i = base^(−2i/d) in fp32, computed exactly as transformers does.

    Bit-for-bit the same as ``compute_default_rope_parameters``, so the identity scaling
    reproduces an unpatched model exactly (fp32 rounding of the exponent included).
    """
    return 1.0 / rope_denominators(rotary_dim, base, device)  # (d/2,)


def module_device(module: nn.Module) -> torch.device:
    """Device of the rotary module's ``inv_freq`` buffer."""
    buf: Any = module.inv_freq
    return buf.device if isinstance(buf, torch.Tensor) else torch.device("cpu")
