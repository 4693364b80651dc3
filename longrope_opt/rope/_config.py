"""Reading a `RopeSpec` from a transformers config (duck-typed: no transformers import).

One place for the ways configs spell their RoPE: v5 ``rope_parameters`` (one dict, or one per
layer type), v4 ``rope_scaling`` + ``rope_theta``, partial rotary, multi-head latent attention
(the rotated part of a head is ``qk_rope_head_dim``), and the GPT-J/CodeGen configs, which name
their rotated channels ``rotary_dim`` and hard-code base 10000.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.errors import UnsupportedModelError
from longrope_opt.rope._native import native_rope


#: Layer types whose attention is local: they never see a distance past their window, so an
#: extension leaves their RoPE as it is (Gemma 2/3, OLMo 3, ... : ``sliding_attention``).
LOCAL_LAYER_TYPES = ("sliding", "local", "chunked")
#: Config attributes that size a local layer's window.
WINDOW_ATTRS = ("sliding_window", "attention_chunk_size", "attention_window_size")
#: Families that hard-code their base and name the rotated channels ``rotary_dim``.
FIXED_BASE = {"gptj": 10000.0, "codegen": 10000.0}
#: A config attribute that says the trained length when the checkpoint's config does not
#: (`longrope_opt.models.load_model`'s ``trained_length`` sets it; exports never save it).
TRAINED_LENGTH_ATTR = "longrope_opt_trained_length"


def _model_type(config: Any) -> str:
    return str(getattr(config, "model_type", None) or type(config).__name__)


def is_local(layer_type: str) -> bool:
    """Whether a layer type attends within a window (its RoPE needs no extension)."""
    return any(word in layer_type for word in LOCAL_LAYER_TYPES)


def per_layer_params(config: Any) -> dict[str, dict[str, Any] | None] | None:
    """``{layer_type: rope parameters}`` for per-layer-type RoPE (None for a layer type without
    RoPE), or None for a single RoPE."""
    params = getattr(config, "rope_parameters", None)
    if (
        isinstance(params, Mapping)
        and params
        and all(isinstance(v, Mapping) or v is None for v in params.values())
        and any(isinstance(v, Mapping) for v in params.values())
    ):
        return {str(k): (dict(v) if isinstance(v, Mapping) else None) for k, v in params.items()}
    return None


def extended_layer_types(config: Any) -> tuple[str, ...]:
    """The layer types an extension rescales: every non-local one with a RoPE (empty for a single
    RoPE). A multimodal config answers for its language model.

    Raises:
        UnsupportedModelError: The non-local layer types run different RoPEs (one spec cannot
            describe them), or none of them has a RoPE, or every layer is local.
    """
    text = getattr(config, "get_text_config", None)
    config = text() if callable(text) else config
    used = getattr(config, "layer_types", None)
    if used and all(is_local(t) for t in used) and _windowed(config):
        # a model built with fewer layers than its pattern's period (Gemma 3, OLMo 3 with 2
        # layers) has no global layer; its global RoPE, if any, is used by no layer
        raise UnsupportedModelError(
            f"model type {_model_type(config)!r}: all {len(used)} of its layers are "
            f"{'/'.join(sorted(set(used)))} layers, each attending within its window: there "
            "is no global attention to extend."
        )
    per_layer = per_layer_params(config)
    if per_layer is None:
        return ()
    extended = tuple(k for k in per_layer if not is_local(k) and per_layer[k] is not None)
    # keys that name layer types (some are used) yet no global one is: its RoPE reaches no layer;
    # keys that name no layer type (DeepSeek V4's 'main'/'compress') are judged below
    if (
        extended
        and used
        and any(k in used for k in per_layer)
        and not any(k in used for k in extended)
    ):
        raise UnsupportedModelError(
            f"model type {_model_type(config)!r}: its RoPE for {list(extended)} is used by none "
            f"of its {len(used)} layers ({'/'.join(sorted(set(used)))}): there is no global "
            "attention to extend."
        )
    if not extended:
        nope = [k for k in per_layer if not is_local(k)]
        raise UnsupportedModelError(
            f"model type {_model_type(config)!r}: "
            + (f"its global layer types {nope} use no RoPE; only its local layers rotate, "
               "within their window, so there is no RoPE to extend." if nope else
               f"every layer type {sorted(per_layer)} is local; there is no global attention "
               "to extend.")
        )  # fmt: skip
    first = per_layer[extended[0]]
    if any(per_layer[k] != first for k in extended[1:]):
        raise UnsupportedModelError(
            f"model type {_model_type(config)!r}: its global layer types {list(extended)} run "
            "different RoPEs; one set of factors cannot extend them."
        )
    return extended


def _windowed(config: Any) -> bool:
    """Whether the config's local layers see less than its trained window (layers typed local
    whose window is None, or spans the trained length, attend as global ones do there)."""
    present = [a for a in WINDOW_ATTRS if hasattr(config, a)]
    if not present:
        return True
    trained = getattr(config, "max_position_embeddings", None)
    windows = [getattr(config, a) for a in present]
    return any(isinstance(w, int) and (trained is None or w < trained) for w in windows)


def _params(config: Any) -> dict[str, Any]:
    per_layer = per_layer_params(config)
    if per_layer is not None:
        chosen = per_layer[extended_layer_types(config)[0]]
        assert chosen is not None  # extended layer types have RoPE
        return chosen
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    params = dict(params) if isinstance(params, Mapping) else {}
    if "rope_theta" not in params and getattr(config, "rope_theta", None) is not None:
        params["rope_theta"] = config.rope_theta
    return params


def _attr(config: Any, name: str) -> Any:
    # Configs with per-layer attributes (Gemma 4) raise on the ambiguous global ones.
    try:
        return getattr(config, name, None)
    except RuntimeError:  # transformers' AmbiguousGlobalPerLayerAttributeError
        return None


def read_rope(config: Any) -> dict[str, Any]:
    """The fields of a checkpoint's `RopeSpec` (see `RopeSpec.from_config`, which builds it)."""
    said = getattr(config, TRAINED_LENGTH_ATTR, None)  # the user's word over the config's
    text = getattr(config, "get_text_config", None)  # multimodal: the language model's config
    config = text() if callable(text) else config
    model_type = _model_type(config)
    params = _params(config)
    base = params.get("rope_theta", FIXED_BASE.get(model_type))
    if base is None:
        raise UnsupportedModelError(
            f"`model` of type {model_type!r} has no rotary position embedding (its config names no "
            "`rope_theta`); only RoPE models (Llama, Mistral, Qwen, Phi-3, ...) can be rescaled."
        )
    n_heads = _attr(config, "num_attention_heads") or _attr(config, "n_head")
    hidden = _attr(config, "hidden_size") or _attr(config, "n_embd")
    # Latent attention (DeepSeek) rotates qk_rope_head_dim channels; its configs set head_dim
    # to it, and a config that also names a partial factor counts from head_dim.
    head_dim = _attr(config, "head_dim") or _attr(config, "qk_rope_head_dim")
    if not head_dim and hidden and n_heads:
        head_dim = hidden // n_heads
    if not head_dim:
        raise InvalidArgumentError(f"config of model type {model_type!r} has no head size.")
    if model_type in FIXED_BASE:
        rotary = int(_attr(config, "rotary_dim") or head_dim)
    else:
        partial = params.get("partial_rotary_factor")
        if partial is None:
            partial = _attr(config, "partial_rotary_factor") or 1.0
        rotary = int(int(head_dim) * float(partial))
    length = _attr(config, "max_position_embeddings") or _attr(config, "n_positions")
    if length is None:
        raise InvalidArgumentError("config has no `max_position_embeddings`.")
    native = native_rope(
        params, rotary_dim=rotary, base=float(base), length=int(length), model_type=model_type
    )
    return dict(
        head_dim=int(head_dim),
        base=float(base),
        original_length=int(said) if said else int(native.trained_length),
        rotary_dim=rotary,
        native_factors=tuple(float(x) for x in native.factors),
        native_attention=native.attention_scale,
        rope_type=str(params.get("rope_type") or params.get("type") or "default"),
    )
