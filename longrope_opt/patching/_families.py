"""Which model families an extension supports, and why the others are refused.

Supported: every family of the installed transformers whose tiny model passes the matrix test
(`tests/patching_tests/test_families.py`: the identity is the model as loaded bit for bit, PI and
YaRN equal transformers' own ``linear`` / ``yarn`` rope types, an export reloads in vanilla
transformers with the patched logits). The test discovers the families, so a family a new
transformers release adds fails it until it is supported or listed here.

Refused, before any weight is loaded where the config tells (`check_supported`), with the reason
in one line: the families below, a rope type this version cannot compose (`ROPE_TYPES`), global
layers without RoPE, and global layers with more than one RoPE. `docs/families.md` is the table.
"""

from __future__ import annotations

from typing import Any

from longrope_opt.errors import UnsupportedModelError
from longrope_opt.patching._checked import check_checked
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import extended_layer_types


_UNVERIFIED = (
    "not verified: the family matrix test cannot build a tiny model of it from its default "
    "config, so this version has not checked that a rescaled RoPE reaches its attention exactly"
)

#: Refused families (by ``config.model_type``) and why.
REFUSED: dict[str, str] = {
    "lara_mini": (
        "its global ('full_attention') layers use no RoPE; only its sliding-window layers rotate, "
        "within their window, so there is no RoPE to extend"
    ),
    "recurrent_gemma": (
        "its attention is local (attention_window_size): no layer attends past its window, so "
        "there is no RoPE to extend"
    ),
    "phimoe": (
        "its rotary module recomputes the frequencies from the config in every forward "
        "(PhimoeRotaryEmbedding) and takes its attention scale from the config's short/long "
        "mscale, so a rescaled RoPE cannot be installed exactly"
    ),
    "zaya": (
        "a tiny model's logits do not change when its rotary frequencies do: its attention does "
        "not consume the rotary module's output in a form this version rescales"
    ),
    "blt": _UNVERIFIED,
    "csm": _UNVERIFIED,
    "csm_depth_decoder_model": _UNVERIFIED,
    "cohere_compass": _UNVERIFIED,
    "cohere_compass_text": _UNVERIFIED,
    "dots3_note": _UNVERIFIED,
    "dots3_note_text": _UNVERIFIED,
    "inkling2": _UNVERIFIED,
    "inkling2_text": _UNVERIFIED,
    "phi4_multimodal": _UNVERIFIED,
    "zamba2": _UNVERIFIED,
}


def _text_config(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def check_supported(config: Any) -> RopeSpec:
    """Refuse a family this version cannot extend exactly, from its config alone.

    Args:
        config: A transformers config (the model's, multimodal ones included).

    Returns:
        The checkpoint's `RopeSpec` (its native RoPE and trained length).

    Raises:
        UnsupportedModelError: One line naming the model type and the reason.
    """
    text = _text_config(config)
    for model_type in {getattr(config, "model_type", None), getattr(text, "model_type", None)}:
        if model_type in REFUSED:
            raise UnsupportedModelError(
                f"model type {model_type!r} is not supported: {REFUSED[model_type]}."
            )
    extended_layer_types(text)  # raises for global layers without RoPE or with several
    spec = RopeSpec.from_config(text)  # raises for a model without RoPE
    check_checked(text)  # a family a later transformers added: refused until checked
    return spec
