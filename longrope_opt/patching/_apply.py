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
from longrope_opt.patching._compat import rope_denominators
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import ShortLongScaling


_MISSING = object()


def _cos_sin(
    x: torch.Tensor,
    position_ids: torch.Tensor,
    original_inv_freq: torch.Tensor,
    scaled_inv_freq: torch.Tensor,
    scaling: RopeScaling,
) -> tuple[torch.Tensor, torch.Tensor]:
    n_hat, t = scaling.n_hat, scaling.attention_scale
    out_dtype = x.dtype
    if torch.is_autocast_enabled(x.device.type):
        # Training under autocast over fp32 weights: x is fp32 but q/k come out of the autocast
        # matmuls in bf16; fp32 cos/sin would promote q·cos to fp32 and run attention in fp32.
        out_dtype = torch.get_autocast_dtype(x.device.type)
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
    return cos.to(dtype=out_dtype), sin.to(dtype=out_dtype)


def _scaled_inv_freq(original: torch.Tensor, spec: RopeSpec, scaling: RopeScaling) -> torch.Tensor:
    # transformers' `longrope` formula, 1 / (λ_fp32 · base^(2i/d)), so an exported model computes
    # the very same fp32 frequencies; λ = 1 still gives the default θ_i bit for bit (1·x = x).
    factors = torch.tensor(scaling.factors, dtype=torch.float32, device=original.device)
    return 1.0 / (factors * rope_denominators(spec.rotary_dim, spec.base, original.device))


def _make_forward(
    original_inv_freq: torch.Tensor, spec: RopeSpec, scaling: RopeScaling | ShortLongScaling
) -> Any:
    if isinstance(scaling, ShortLongScaling):
        short, long = scaling.short, scaling.long
        short_f = _scaled_inv_freq(original_inv_freq, spec, short)
        long_f = _scaled_inv_freq(original_inv_freq, spec, long)
        boundary = scaling.original_length

        @torch.no_grad()
        def forward(
            self: nn.Module, x: torch.Tensor, position_ids: torch.Tensor, *args: Any, **kw: Any
        ):
            # transformers' longrope switch: the whole forward uses one set, chosen by its
            # largest position (so a KV cache built below L is stale once a forward passes L).
            if int(position_ids.max()) + 1 <= boundary:
                return _cos_sin(x, position_ids, original_inv_freq, short_f, short)
            return _cos_sin(x, position_ids, original_inv_freq, long_f, long)

        return forward

    scaled = _scaled_inv_freq(original_inv_freq, spec, scaling)

    @torch.no_grad()
    def forward_one(
        self: nn.Module, x: torch.Tensor, position_ids: torch.Tensor, *args: Any, **kw: Any
    ):
        return _cos_sin(x, position_ids, original_inv_freq, scaled, scaling)

    return forward_one


def _check(scaling: Any, spec: RopeSpec) -> None:
    if isinstance(scaling, ShortLongScaling):
        scaling.short.check(spec)
        scaling.long.check(spec)
    elif isinstance(scaling, RopeScaling):
        scaling.check(spec)
    else:
        raise TypeError(
            f"`scaling` must be a RopeScaling or ShortLongScaling, got {type(scaling).__name__}."
        )


def install_rope_scaling(
    model: nn.Module,
    scaling: RopeScaling | ShortLongScaling,
    *,
    spec: RopeSpec | None = None,
) -> nn.Module:
    """Make `model` compute RoPE with `scaling` from now on (the persistent form of
    :func:`apply_rope_scaling`; `load_model` uses it for exports that need n̂).

    Returns:
        The same model. :func:`apply_rope_scaling` still works on top and restores this on exit.
    """
    spec = spec or RopeSpec.from_config(model.config)
    _check(scaling, spec)
    for module in find_rotary_modules(model):
        original = default_inv_freq(spec.rotary_dim, spec.base, module_device(module))
        module.forward = types.MethodType(_make_forward(original, spec, scaling), module)
    return model


@contextlib.contextmanager
def apply_rope_scaling(
    model: nn.Module, scaling: RopeScaling | ShortLongScaling, *, spec: RopeSpec | None = None
) -> Iterator[nn.Module]:
    """Make `model` compute RoPE with `scaling` inside the ``with`` block; restore it on exit.

    Position n, frequency i gets the angle n·θ_i/λ_i and cos/sin scaled by t when n ≥ n̂, and the
    original n·θ_i unscaled when n < n̂. Angles are fp32; cos/sin are cast to the model dtype.
    Contexts nest (the inner one wins until it exits).

    Args:
        model: A loaded transformers causal LM with RoPE (Llama, Mistral, Qwen2, Phi-3, ...),
            whatever rope type it was loaded with.
        scaling: λ (length ``rotary_dim // 2``), n̂, t; or a `ShortLongScaling`, whose set is
            picked per forward by its largest position (transformers' ``longrope`` switch).
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
    if not isinstance(scaling, (RopeScaling, ShortLongScaling)):
        raise TypeError(
            f"`scaling` must be a RopeScaling or ShortLongScaling, got {type(scaling).__name__}."
        )
    modules = find_rotary_modules(model)
    spec = spec or RopeSpec.from_config(model.config)
    _check(scaling, spec)
    saved: list[tuple[nn.Module, Any]] = []
    try:
        for module in modules:
            device = module_device(module)
            original = default_inv_freq(spec.rotary_dim, spec.base, device)  # (d/2,) fp32
            saved.append((module, module.__dict__.get("forward", _MISSING)))
            module.forward = types.MethodType(_make_forward(original, spec, scaling), module)
        yield model
    finally:
        for module, previous in reversed(saved):
            if previous is _MISSING:
                del module.__dict__["forward"]
            else:
                module.forward = previous
