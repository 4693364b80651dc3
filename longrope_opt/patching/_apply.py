"""Apply a `RopeScaling` to a loaded transformers model, in place and reversibly.

How: the model's rotary module computes cos/sin once per forward and hands them to every layer.
We shadow that module's ``forward`` with an instance attribute and delete it on exit. Nothing else
is touched: no weights, no buffers, no config. A candidate switch costs two tiny tensors (the
search switches thousands of times), and restoration is exact by construction.

The scaling acts on top of the checkpoint's own RoPE (`RopeSpec.native_factors`, e.g. Llama 3's
``llama3`` scaling): frequency i runs at θ_i / (ν_i·λ_i) and cos/sin are multiplied by the native
scale × t. The composed factors ν·λ become inverse frequencies by transformers' ``longrope``
formula, 1 / (fp32(ν·λ) · base^(2i/d)), so an exported model (`longrope_opt.models.export_model`)
computes the very same fp32 frequencies. The cos/sin themselves come from the family's own forward
run on a view of the module (`longrope_opt.patching._compat`): every layout is the family's.

The identity (λ = 1, n̂ = 0, t = 1) runs the module's own forward: the checkpoint as loaded, bit for
bit, dynamic rope types included. n̂ > 0 keeps that own RoPE for positions n < n̂ (the paper's start
tokens with the "original" RoPE): n̂ depends on position, not frequency, so no ``inv_freq`` buffer
can express it; it is applied here, where cos/sin are computed.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from longrope_opt.errors import UnsupportedModelError
from longrope_opt.patching._compat import BUFFERS
from longrope_opt.patching._compat import buffer_names
from longrope_opt.patching._compat import find_rotary_modules
from longrope_opt.patching._compat import is_identity_like
from longrope_opt.patching._compat import layer_types
from longrope_opt.patching._compat import module_device
from longrope_opt.patching._compat import probe
from longrope_opt.patching._compat import rope_denominators
from longrope_opt.patching._compat import table_forward
from longrope_opt.patching._compat import view_forward
from longrope_opt.patching._families import check_supported
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import ShortLongScaling
from longrope_opt.rope import extended_layer_types


_MISSING = object()


def composed_inv_freq(spec: RopeSpec, scaling: RopeScaling, device: torch.device) -> torch.Tensor:
    """1 / (fp32(ν·λ) · base^(2i/d)): the frequencies a patched model runs, as transformers'
    ``longrope`` computes them from exported factors (so export and patch agree bit for bit)."""
    composed = spec.native() * scaling.factors
    factors = torch.tensor(composed, dtype=torch.float32, device=device)
    return 1.0 / (factors * rope_denominators(spec.rotary_dim, spec.base, device))


def _positions(position_ids: torch.Tensor) -> torch.Tensor:
    # M-RoPE passes (3, B, T) ids; its text positions are the first axis's.
    return position_ids[0] if position_ids.dim() == 3 else position_ids


def _select(keep: torch.Tensor, native: Any, scaled: Any) -> Any:
    if isinstance(scaled, (tuple, list)):
        return type(scaled)(_select(keep, n, s) for n, s in zip(native, scaled))
    return torch.where(keep.to(scaled.device), native, scaled)


def _cast_for_autocast(out: Any, device: torch.device) -> Any:
    # Training under autocast over fp32 weights: q/k come out of the autocast matmuls in bf16;
    # fp32 cos/sin would promote q·cos to fp32 and run attention in fp32.
    if not torch.is_autocast_enabled(device.type):
        return out
    dtype = torch.get_autocast_dtype(device.type)
    if isinstance(out, (tuple, list)):
        return type(out)(_cast_for_autocast(o, device) for o in out)
    return out.to(dtype) if out.is_floating_point() else out


def _one(
    module: nn.Module, spec: RopeSpec, scaling: RopeScaling, kind: str, native: Callable[..., Any]
) -> Callable[..., Any]:
    """The rescaled forward for one factor set (called with the rotary module's arguments)."""
    if is_identity_like(scaling.factors, scaling.n_hat, scaling.attention_scale):
        return native
    device = module_device(module)
    inv = composed_inv_freq(spec, scaling, device)
    attention = spec.native_attention * scaling.attention_scale
    # Start tokens (n < n̂) keep the spec's own RoPE: ν and its native scale, no t.
    own = RopeScaling(np.ones(spec.n_factors))
    inv_own = composed_inv_freq(spec, own, device) if scaling.n_hat > 0 else None

    def compute(x, position_ids, args, kw, frequencies, scale):
        if kind == BUFFERS:
            layer_type = kw.get("layer_type", args[0] if args else None)
            return view_forward(module, x, position_ids, frequencies.to(x.device), scale,
                                layer_type)  # fmt: skip
        # GPT-J / CodeGen: their table's dtypes (read at position 0, always in the table),
        # computed from frequencies, so positions past the table work too
        like = native(x, torch.zeros_like(position_ids[..., :1]), *args, **kw)
        return table_forward(module, x, position_ids, frequencies, scale, like)

    def forward(x: torch.Tensor, position_ids: torch.Tensor, *args: Any, **kw: Any) -> Any:
        with torch.autocast(device_type=x.device.type, enabled=False):
            out = compute(x, position_ids, args, kw, inv, attention)
            if inv_own is not None:
                keep = (_positions(position_ids) < scaling.n_hat)[..., None]  # (B, T, 1)
                start = compute(x, position_ids, args, kw, inv_own, spec.native_attention)
                out = _select(keep, start, out)
        return _cast_for_autocast(out, x.device)

    return forward


def _make_forward(
    module: nn.Module,
    spec: RopeSpec,
    scaling: RopeScaling | ShortLongScaling,
    native: Callable[..., Any],
    extended: tuple[str, ...],
) -> Any:
    kind = probe(module, module.__class__.__name__)
    _check_size(module, spec, kind, extended)
    if isinstance(scaling, ShortLongScaling):
        short = _one(module, spec, scaling.short, kind, native)
        long = _one(module, spec, scaling.long, kind, native)
        boundary = scaling.original_length

        def pick(x: torch.Tensor, position_ids: torch.Tensor, *args: Any, **kw: Any) -> Any:
            # transformers' longrope switch: the whole forward uses one set, chosen by its
            # largest position (so a KV cache built below L is stale once a forward passes L).
            if int(position_ids.max()) + 1 <= boundary:
                return short(x, position_ids, *args, **kw)
            return long(x, position_ids, *args, **kw)

        rescaled = pick
    else:
        rescaled = _one(module, spec, scaling, kind, native)
    own_types = layer_types(module)

    @torch.no_grad()
    def forward(self: nn.Module, x: torch.Tensor, position_ids: torch.Tensor, *args: Any,
                **kw: Any):  # fmt: skip
        layer_type = kw.get("layer_type", args[0] if args else None)
        if own_types and layer_type not in extended:
            return native(x, position_ids, *args, **kw)  # a local layer: as it is
        return rescaled(x, position_ids, *args, **kw)

    return forward


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


def _own_forward(module: nn.Module) -> Callable[..., Any]:
    # What the module runs now: an installed forward (an export's exact RoPE), else its class's.
    current = module.__dict__.get("forward", _MISSING)
    if current is not _MISSING:
        return current
    return types.MethodType(type(module).forward, module)


def _extended(model: nn.Module) -> tuple[str, ...]:
    config = getattr(model, "config", None)
    text = getattr(config, "get_text_config", None)
    return extended_layer_types(text() if callable(text) else config)


def _spec(model: nn.Module, spec: RopeSpec | None) -> RopeSpec:
    found = check_supported(model.config)  # refused families fail here, in one line
    return found if spec is None else spec


def model_type_of(module: nn.Module) -> str:
    config = getattr(module, "config", None)
    return str(getattr(config, "model_type", None) or type(module).__name__)


def _check_size(module: nn.Module, spec: RopeSpec, kind: str, extended: tuple[str, ...]) -> None:
    if kind != BUFFERS:
        return
    name = buffer_names(extended[0] if layer_types(module) and extended else None)[0]
    size = getattr(module, name).numel()
    if size != spec.n_factors:
        raise UnsupportedModelError(
            f"model type {model_type_of(module)!r}: its rotary module runs {size} frequencies "
            f"where its config describes {spec.n_factors} (rotary_dim {spec.rotary_dim}); the "
            "config and the module disagree, so no factor set can be installed exactly."
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
    spec = _spec(model, spec)
    _check(scaling, spec)
    extended = _extended(model)
    for module in find_rotary_modules(model):
        native = _own_forward(module)
        module.forward = types.MethodType(
            _make_forward(module, spec, scaling, native, extended), module
        )
    return model


@contextlib.contextmanager
def apply_rope_scaling(
    model: nn.Module, scaling: RopeScaling | ShortLongScaling, *, spec: RopeSpec | None = None
) -> Iterator[nn.Module]:
    """Make `model` compute RoPE with `scaling` inside the ``with`` block; restore it on exit.

    `scaling` acts on top of the checkpoint's own RoPE (see `RopeSpec`): position n, frequency i
    gets the angle n·θ_i/(ν_i·λ_i) and cos/sin scaled by the native scale × t when n ≥ n̂, and the
    checkpoint's own RoPE when n < n̂. Angles are fp32; cos/sin come out as the family's forward
    makes them. The identity scaling is the model as loaded, bit for bit. Contexts nest (the inner
    one wins until it exits; each acts on the checkpoint's own RoPE, not on the outer one).

    Args:
        model: A loaded transformers causal LM with RoPE (Llama, Mistral, Qwen2/3, Phi-3, Gemma,
            Cohere, DeepSeek, ... : `longrope_opt.patching.families` lists them), whatever
            rope type it was loaded with.
        scaling: λ (length ``rotary_dim // 2``), n̂, t; or a `ShortLongScaling`, whose set is
            picked per forward by its largest position (transformers' ``longrope`` switch).
        spec: The model's `RopeSpec`; read from ``model.config`` when omitted.

    Yields:
        The same model, patched.

    Raises:
        UnsupportedModelError: The model has no RoPE we can patch exactly.
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
    spec = _spec(model, spec)
    _check(scaling, spec)
    extended = _extended(model)
    forwards = []
    for module in modules:  # every check before the first module is touched
        native = _own_forward(module)
        forwards.append(_make_forward(module, spec, scaling, native, extended))
    saved: list[tuple[nn.Module, Any]] = []
    try:
        for module, forward in zip(modules, forwards):
            saved.append((module, module.__dict__.get("forward", _MISSING)))
            module.forward = types.MethodType(forward, module)
        yield model
    finally:
        for module, previous in reversed(saved):
            if previous is _MISSING:
                del module.__dict__["forward"]
            else:
                module.forward = previous



