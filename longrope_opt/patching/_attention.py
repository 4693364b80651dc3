"""Attention implementations a compute path can switch a loaded model to.

transformers dispatches attention by name (`AttentionInterface`) and builds the mask by the same
name (`AttentionMaskInterface`). `SDPA_FP32` is PyTorch SDPA with q, k, v in fp32 and the output
cast back: on CPUs without AMX the bf16 attention kernel is no faster than fp32's, while bf16
linear layers still are, so "bf16 weights, fp32 attention" can be the fastest exact path.
"""

from __future__ import annotations

from typing import Any


#: Registered name of the fp32-attention implementation.
SDPA_FP32 = "longrope_sdpa_fp32"
#: Registered names of the banded attention for sliding-window layers (`_banded`).
BANDED_NAMES = ("longrope_banded", "longrope_banded_fp32")
#: Names `set_attention` accepts (and the CLI's attention flag offers).
ATTENTION_IMPLEMENTATIONS = ("sdpa", SDPA_FP32, "eager", "flash_attention_2", *BANDED_NAMES)
#: Implementations switched on for a moment by this package (`_prefix.shared_prefix`).
_INTERNAL = ("longrope_prefix",)


def _sdpa_fp32(module: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
    # transformers on use: only where an attention is registered or run
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    dtype = query.dtype
    mask = kwargs.pop("attention_mask", None) if "attention_mask" in kwargs else None
    if args:  # (attention_mask, ...) positionally, as the decoder layers call it
        mask, args = args[0], args[1:]
    if mask is not None and mask.is_floating_point():
        mask = mask.float()
    out, weights = sdpa_attention_forward(
        module, query.float(), key.float(), value.float(), mask, *args, **kwargs
    )  # out: (B, T, H, D) fp32
    return out.to(dtype), weights


def _register() -> None:
    # transformers on use: only where an attention is registered or run
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    if SDPA_FP32 not in AttentionInterface._global_mapping:
        AttentionInterface.register(SDPA_FP32, _sdpa_fp32)
        AttentionMaskInterface.register(SDPA_FP32, sdpa_mask)


def set_attention(model: Any, name: str) -> None:
    """Switch a loaded model's attention implementation to `name` (one of
    `ATTENTION_IMPLEMENTATIONS`); weights are untouched."""
    if name not in ATTENTION_IMPLEMENTATIONS and name not in _INTERNAL:
        raise ValueError(f"`attn` must be one of {list(ATTENTION_IMPLEMENTATIONS)}, got {name!r}.")
    if name == SDPA_FP32:
        _register()
    if name in BANDED_NAMES:
        # the banded module imports torch at its top: only where it is used
        from longrope_opt.patching._banded import register_banded

        register_banded()
    # Every sub-config (and the model's own) reads `_attn_implementation` at forward time.
    model.config._attn_implementation = name
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            config._attn_implementation = name


def attention_of(model: Any) -> str:
    """The model's current attention implementation name."""
    return str(getattr(model.config, "_attn_implementation", "sdpa"))
