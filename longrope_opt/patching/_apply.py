"""Apply a `RopeScaling` to a loaded transformers model, in place and reversibly.

How: the model's rotary module computes cos/sin once per forward and hands them to every layer.
We shadow that module's ``forward`` with an instance attribute that computes cos/sin from our λ,
n̂ and t, and delete the attribute on exit. Nothing else is touched: no weights, no buffers, no
config. That makes a candidate switch cost two tiny tensors (the search switches thousands of
times), makes restoration exact by construction, and wins over ``dynamic``/``longrope`` rope types,
whose decorated forward would otherwise rewrite ``inv_freq`` on every call.

n̂ depends on position, not frequency, so no ``inv_freq`` buffer can express it; it is applied
here, where cos/sin are computed.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from longrope_opt.patching._compat import default_inv_freq
from longrope_opt.patching._compat import find_rotary_modules
from longrope_opt.patching._compat import module_device
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec


_MISSING = object()


def _make_forward(
    original_inv_freq: torch.Tensor, scaled_inv_freq: torch.Tensor, scaling: RopeScaling
) -> Any:
    n_hat = scaling.n_hat
    t = scaling.attention_scale

    @torch.no_grad()
    def forward(
        self: nn.Module, x: torch.Tensor, position_ids: torch.Tensor, *args: Any, **kw: Any
    ):
        # Angles in fp32 whatever the model dtype: bf16 angles are wrong past a few thousand
        # positions. Autocast off so a caller's autocast region cannot downcast them.
        with torch.autocast(device_type=x.device.type, enabled=False):
            pos = position_ids[..., None].float()  # (B, T, 1)
            freqs = pos * scaled_inv_freq.to(x.device)  # (B, T, d/2)
            if n_hat > 0:
                keep = pos < n_hat  # (B, T, 1): start tokens keep original angles, no scale
                freqs = torch.where(keep, pos * original_inv_freq.to(x.device), freqs)
            emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, d)
            cos, sin = emb.cos(), emb.sin()
            if t != 1.0:
                scale = torch.where(keep, 1.0, t) if n_hat > 0 else t
                cos, sin = cos * scale, sin * scale
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)

    return forward


@contextlib.contextmanager
def apply_rope_scaling(
    model: nn.Module, scaling: RopeScaling, *, spec: RopeSpec | None = None
) -> Iterator[nn.Module]:
    """Make `model` compute RoPE with `scaling` inside the ``with`` block; restore it on exit.

    Position n, frequency i gets the angle n·θ_i/λ_i and cos/sin scaled by t when n ≥ n̂, and the
    original n·θ_i unscaled when n < n̂. Angles are fp32; cos/sin are cast to the model dtype.
    Contexts nest (the inner one wins until it exits).

    Args:
        model: A loaded transformers causal LM with RoPE (Llama, Mistral, Qwen2, Phi-3, ...),
            whatever rope type it was loaded with.
        scaling: λ (length ``rotary_dim // 2``), n̂, t.
        spec: The model's `RopeSpec`; read from ``model.config`` when omitted.

    Yields:
        The same model, patched.

    Raises:
        UnsupportedModelError: The model has no RoPE we can patch.
        InvalidArgumentError: The factor count does not match the model.

    Example:
        >>> with apply_rope_scaling(model, yarn(spec, 16384)):
        ...     loss = model(ids, labels=ids).loss
    """
    if not isinstance(scaling, RopeScaling):
        raise TypeError(f"`scaling` must be a RopeScaling, got {type(scaling).__name__}.")
    modules = find_rotary_modules(model)
    spec = spec or RopeSpec.from_config(model.config)
    scaling.check(spec)
    saved: list[tuple[nn.Module, Any]] = []
    try:
        for module in modules:
            device = module_device(module)
            original = default_inv_freq(spec.rotary_dim, spec.base, device)  # (d/2,) fp32
            # Divide in float64 and round once: λ = 1 then reproduces `original` bit for bit.
            factors = torch.tensor(scaling.factors, dtype=torch.float64, device=device)
            scaled = (original.double() / factors).float()  # (d/2,) fp32
            saved.append((module, module.__dict__.get("forward", _MISSING)))
            module.forward = types.MethodType(_make_forward(original, scaled, scaling), module)
        yield model
    finally:
        for module, previous in reversed(saved):
            if previous is _MISSING:
                del module.__dict__["forward"]
            else:
                module.forward = previous
