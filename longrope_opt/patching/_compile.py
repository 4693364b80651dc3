"""Fuse a decoder's element-wise work with `torch.compile` (optional speed lever on CPU).

On CPU a long forward spends a share of its time in element-wise work (RMSNorm, rotary
application, SiLU·mul, residual adds, transposes, casts), each op a separate pass over
(T, hidden) tensors. Compiling each decoder layer fuses those passes; SDPA stays the same
extern kernel, and cos/sin come in as arguments from the (patched) rotary module, so RoPE
patching works unchanged. What it gains on a given CPU: `python bench/objective.py`.
Compiled code is shared by all layers (nn-module inlining makes weights graph inputs), so the
one-off compile does not grow with depth; a new sequence length compiles once more.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


_FUSED = "_longrope_opt_fused"


def _targets(model: Any) -> list[nn.Module]:
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    layers = getattr(decoder, "layers", None)
    if layers is None:
        return []
    targets = list(layers)
    if hasattr(decoder, "norm"):
        targets.append(decoder.norm)
    return targets


def fuse_elementwise(model: nn.Module) -> nn.Module:
    """Compile `model`'s decoder layers and final norm in place (idempotent); returns the model.

    Numerics: fused kernels keep intermediates in fp32 where eager bf16 rounds each op, so
    outputs differ at bf16 rounding level (they are, if anything, closer to fp32).
    Undo with :func:`unfuse_elementwise`.
    """
    if getattr(model, _FUSED, False):
        return model
    for module in _targets(model):
        module.forward = torch.compile(module.forward, dynamic=False)
    setattr(model, _FUSED, True)
    return model


def unfuse_elementwise(model: nn.Module) -> nn.Module:
    """Restore eager forwards on the modules :func:`fuse_elementwise` compiled."""
    for module in _targets(model):
        module.__dict__.pop("forward", None)
    if hasattr(model, _FUSED):
        delattr(model, _FUSED)
    return model


def is_fused(model: Any) -> bool:
    """Whether :func:`fuse_elementwise` has been applied."""
    return bool(getattr(model, _FUSED, False))
