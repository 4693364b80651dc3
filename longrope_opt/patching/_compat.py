"""Everything that depends on how the installed transformers lays out rotary embeddings.

transformers 5.x: one ``<Family>RotaryEmbedding`` module per model (``model.model.rotary_emb``)
with ``forward(x, position_ids[, layer_type]) -> (cos, sin)`` (or a complex ``freqs_cis``), whose
output is passed to every layer. Its forward is the family's own code — it decides the layout
(Llama's ``cat``, Cohere's interleave, GPT-OSS's half, M-RoPE's sections, DeepSeek's complex
form) — and reads only two things of the module: ``inv_freq`` and ``attention_scaling`` (per layer
type: ``<type>_inv_freq`` and ``<type>_attention_scaling``), after transformers'
``dynamic_rope_update`` decorator has refreshed them. So a rescaled RoPE is the family's own
undecorated forward run on a *view* of the module whose two attributes are replaced: every layout
is right by construction, and nothing of the module is mutated.

A family whose forward reads anything else (a precomputed table: GPT-J, CodeGen; frequencies
recomputed from the config: PhiMoE) is caught by `probe` before anything is spent: the view's
frequencies must show in the output, or the model is refused (GPT-J and CodeGen have a forward of
their own here, `table_forward`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from longrope_opt.errors import UnsupportedModelError


#: How a rotary module is rescaled: through a view of its buffers, or by recomputing its table.
BUFFERS, TABLE = "buffers", "table"
_KIND = "_longrope_opt_kind"


def model_type(model: nn.Module) -> str:
    """The ``config.model_type`` of a transformers model, or its class name."""
    config = getattr(model, "config", None)
    return str(getattr(config, "model_type", None) or type(model).__name__)


def find_rotary_modules(model: nn.Module) -> list[nn.Module]:
    """All rotary-embedding modules of `model`'s text decoder (each computes cos/sin from
    position ids); vision and audio towers' rotary modules are not the text's and are left out.

    Raises:
        UnsupportedModelError: The model has none (e.g. GPT-2's learned positions).
    """
    found = [
        m
        for name, m in model.named_modules()
        if type(m).__name__.endswith("RotaryEmbedding")
        and (hasattr(m, "inv_freq") or hasattr(m, "embed_positions") or _per_layer_types(m))
        and not any(tower in type(m).__name__ for tower in ("Vision", "Audio"))
        and not any(part in name for part in ("vision", "audio"))
    ]
    if not found:
        raise UnsupportedModelError(
            f"`model` of type {model_type(model)!r} has no rotary position embedding "
            "(no *RotaryEmbedding module with an `inv_freq` buffer); only RoPE models "
            "(Llama, Mistral, Qwen2, Phi-3, ...) can be rescaled."
        )
    return found


def _per_layer_types(module: nn.Module) -> tuple[str, ...]:
    rope_type = getattr(module, "rope_type", None)
    return tuple(rope_type) if isinstance(rope_type, dict) else ()


def layer_types(module: nn.Module) -> tuple[str, ...]:
    """The layer types of a per-layer-type rotary module (Gemma 3 style), else ()."""
    return _per_layer_types(module)


def raw_forward(module: nn.Module) -> Any:
    """The family's forward without transformers' ``dynamic_rope_update`` (which would rewrite
    the frequencies from the config).

    Unwrapped to the innermost function: transformers before 5.18 stacks ``torch.no_grad`` on
    top of ``dynamic_rope_update``, so one ``__wrapped__`` step would leave the update in place,
    and on a view it re-registers the *module's* buffers (a dynamic-NTK model loses its cached
    frequencies). Dropping ``no_grad`` changes nothing: cos/sin come from buffers and positions,
    never from a tensor that requires grad.
    """
    return inspect.unwrap(type(module).forward)


def buffer_names(layer_type: str | None) -> tuple[str, str]:
    """The attribute names the family's forward reads its frequencies and scale from."""
    prefix = f"{layer_type}_" if layer_type else ""
    return f"{prefix}inv_freq", f"{prefix}attention_scaling"


class RopeView:
    """The rotary module as its forward sees it, with other frequencies and attention scale."""

    def __init__(self, module: nn.Module, overrides: dict[str, Any]) -> None:
        self.__dict__.update(overrides)
        self.__dict__["_module"] = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_module"], name)


def view_forward(
    module: nn.Module,
    x: torch.Tensor,
    position_ids: torch.Tensor,
    inv_freq: torch.Tensor,
    attention: float,
    layer_type: str | None = None,
) -> Any:
    """The family's own forward with `inv_freq` and `attention` in place of the module's."""
    freq_name, scale_name = buffer_names(layer_type)
    view = RopeView(module, {freq_name: inv_freq, scale_name: attention})
    kwargs = {"layer_type": layer_type} if layer_type else {}
    return raw_forward(module)(view, x, position_ids, **kwargs)


def table_forward(
    module: nn.Module, x: torch.Tensor, position_ids: torch.Tensor, inv_freq: torch.Tensor,
    attention: float, like: tuple[torch.Tensor, torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """GPT-J/CodeGen's ``(sin, cos)`` computed from frequencies instead of their fixed table."""
    freqs = position_ids[..., None].float() * inv_freq.to(x.device, torch.float)
    sin, cos = freqs.sin() * attention, freqs.cos() * attention
    return sin.to(like[0].dtype), cos.to(like[1].dtype)


def _first(out: Any) -> torch.Tensor:
    """The cosine part of a rotary output: ``cos`` of ``(cos, sin)``, the real part of a
    complex ``freqs_cis``."""
    tensor = out[0] if isinstance(out, (tuple, list)) else out
    return tensor.real if torch.is_complex(tensor) else tensor


def _probe_forward(module: nn.Module, v: torch.Tensor, layer_type: str | None) -> torch.Tensor:
    """The cos part at positions 0, 1, 2 for test frequencies `v` and attention 2. Position ids
    go in as ``(1, 3)``; an M-RoPE forward of transformers before 5.18 takes only its own
    ``(3, 1, 3)`` (one row per section), so that is tried when the plain form fails."""
    x = torch.zeros(1, 3, 8, dtype=torch.float32)
    pos = torch.arange(3)[None]
    with torch.no_grad():
        try:
            return _first(view_forward(module, x, pos, v, 2.0, layer_type))
        except (RuntimeError, IndexError):
            return _first(view_forward(module, x, pos.expand(3, 1, 3), v, 2.0, layer_type))


def probe(module: nn.Module, model_kind: str) -> str:
    """How `module` is rescaled (`BUFFERS` or `TABLE`), checked once on tiny inputs and cached.

    The check: the family's forward, run on a view with test frequencies v_j and attention 2,
    must return 2·cos(p·v_j) at position p for every j and nothing else. A forward that reads
    anything but the two attributes fails it.

    Raises:
        UnsupportedModelError: The forward does not follow its module's frequencies.
    """
    kind = module.__dict__.get(_KIND)
    if kind is not None:
        return kind
    if hasattr(module, "embed_positions") and not hasattr(module, "inv_freq"):
        kind = TABLE
    else:
        types = layer_types(module) or (None,)
        freq_name = buffer_names(types[0])[0]
        n = getattr(module, freq_name).numel()
        v = torch.linspace(0.1, 1.3, n, dtype=torch.float32)
        try:
            out = _probe_forward(module, v, types[0])
        except (RuntimeError, TypeError, AttributeError, KeyError, IndexError) as exc:
            raise UnsupportedModelError(
                f"model type {model_kind!r}: its rotary module ({type(module).__name__}) cannot "
                f"be run with other frequencies ({type(exc).__name__}: {exc})."
            ) from None
        got = out.reshape(-1, out.shape[-1])[-1].double()  # the last position (p = 2)
        want = 2.0 * torch.cos(2.0 * v.double())
        near = (got[:, None] - want[None, :]).abs() < 1e-5
        if not (near.any(dim=1).all() and near.any(dim=0).all()):
            raise UnsupportedModelError(
                f"model type {model_kind!r}: its rotary module ({type(module).__name__}) does "
                "not compute cos/sin from its `inv_freq` and `attention_scaling` (it recomputes "
                "them or reads a table), so a rescaled RoPE cannot be installed exactly."
            )
        kind = BUFFERS
    module.__dict__[_KIND] = kind
    return kind


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
    """Device of the rotary module's frequency buffer (or table)."""
    for name in ("inv_freq", "embed_positions"):
        buf = getattr(module, name, None)
        if isinstance(buf, torch.Tensor):
            return buf.device
    for buf in module.buffers():
        return buf.device
    return torch.device("cpu")


def keep_rope_fp32(model: nn.Module) -> dict[tuple[int, str], torch.Tensor]:
    """Copies of the rotary modules' float buffers in fp32, to restore after ``model.to(dtype)``
    (which would round the frequencies to bf16: angles wrong by whole turns at long positions,
    where ``from_pretrained(dtype=...)`` keeps them fp32)."""
    saved = {}
    for module in _all_rotary(model):
        for name, buf in module.named_buffers(recurse=False):
            if buf is not None and buf.is_floating_point():
                saved[(id(module), name)] = buf.detach().to(torch.float32).clone()
    return saved


def restore_rope_fp32(model: nn.Module, saved: dict[tuple[int, str], torch.Tensor]) -> None:
    """Put back what `keep_rope_fp32` saved (on each buffer's current device)."""
    for module in _all_rotary(model):
        for name, buf in list(module.named_buffers(recurse=False)):
            key = (id(module), name)
            if key in saved and buf is not None:
                setattr(module, name, saved[key].to(buf.device))


def _all_rotary(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]


def is_identity_like(factors: Any, n_hat: int, attention: float) -> bool:
    """λ = 1, n̂ = 0, t = 1 exactly: the checkpoint as loaded."""
    return n_hat == 0 and attention == 1.0 and all(float(f) == 1.0 for f in factors)

