"""A checkpoint's own RoPE, read from its config: the rescale factors it already runs.

Most checkpoints users extend already carry a RoPE scaling (Llama 3.x: ``llama3``; Qwen past 32k:
``yarn``; Phi-3.5 / Phi-4-mini: ``longrope``; fine-tunes: ``linear``; exports of this package:
``longrope``). An extension acts *on top of* that scaling, so the spec of a model holds it as
native factors ν (θ_native,i = θ_i / ν_i, θ_i = base^(−2i/d)) and a native attention scale, both
computed here the way transformers' ``ROPE_INIT_FUNCTIONS`` compute them (one pure function per
rope type, numpy in float64; the matrix test checks each against transformers' own module).

The trained length — the window the checkpoint was trained or fine-tuned to, from which an
extension's ratio is counted — is the config's ``max_position_embeddings``, except for ``linear``
and ``yarn`` configs whose ``factor × original_max_position_embeddings`` is larger (Qwen's model
cards add ``yarn`` with factor 4 to a 32k config: the checkpoint then reads 128k).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from longrope_opt.errors import UnsupportedModelError


@dataclass(frozen=True)
class NativeRope:
    """What a rope type computes for a config.

    Attributes:
        factors: ν, float64, one per rotary frequency (all ones for the default RoPE).
        attention_scale: The factor transformers multiplies cos/sin by (``attention_scaling``).
        trained_length: The length the checkpoint reads as loaded.
    """

    factors: npt.NDArray[np.float64]
    attention_scale: float
    trained_length: int


def _geometric(dim: int, base: float) -> npt.NDArray[np.float64]:
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def _default(p: Mapping[str, Any], dim: int, base: float, length: int) -> NativeRope:
    return NativeRope(np.ones(dim // 2), 1.0, length)


def _linear(p: Mapping[str, Any], dim: int, base: float, length: int) -> NativeRope:
    factor = float(p["factor"])
    original = p.get("original_max_position_embeddings")
    reach = int(round(factor * original)) if original else length
    return NativeRope(np.full(dim // 2, factor), 1.0, max(length, reach))


def _dynamic(p: Mapping[str, Any], dim: int, base: float, length: int) -> NativeRope:
    # Dynamic NTK is the default RoPE up to max_position_embeddings and rescales itself past it:
    # at the trained length its frequencies are the default ones. The model as loaded (the row
    # "none") keeps its dynamic behaviour; an extension acts on the trained frequencies.
    return NativeRope(np.ones(dim // 2), 1.0, length)


def _yarn_attention(p: Mapping[str, Any], factor: float) -> float:
    if p.get("attention_factor") is not None:
        return float(p["attention_factor"])

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if p.get("mscale") and p.get("mscale_all_dim"):
        return mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"])
    return mscale(factor)


def _yarn(p: Mapping[str, Any], dim: int, base: float, length: int) -> NativeRope:
    original = int(p.get("original_max_position_embeddings") or length)
    factor = p.get("factor")
    factor = float(factor) if factor is not None else length / original
    beta_fast, beta_slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

    def correction(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction(beta_fast), correction(beta_slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    keep = 1.0 - ramp  # 1: the frequency is kept, 0: divided by the factor
    factors = 1.0 / ((1.0 - keep) / factor + keep)
    reach = max(length, int(round(factor * original)))
    return NativeRope(factors, _yarn_attention(p, factor), reach)


def _longrope(p: Mapping[str, Any], dim: int, base: float, length: int) -> NativeRope:
    original = int(p["original_max_position_embeddings"])
    factor = p.get("factor")
    factor = float(factor) if factor is not None else length / original
    t = p.get("attention_factor")
    if t is None:
        t = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    # Past `original` transformers runs the long factors; the trained length is past it.
    chosen = p["long_factor"] if length > original else p["short_factor"]
    return NativeRope(np.asarray(chosen, dtype=np.float64), float(t), length)


def _llama3(p: Mapping[str, Any], dim: int, base: float, length: int) -> NativeRope:
    factor = float(p["factor"])
    low_ff, high_ff = float(p["low_freq_factor"]), float(p["high_freq_factor"])
    old = float(p["original_max_position_embeddings"])
    inv = _geometric(dim, base)
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old / low_ff, inv / factor, inv)
    smooth = (old / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high_ff) & ~(wavelen > old / low_ff)
    native = np.where(medium, smoothed, scaled)
    return NativeRope(inv / native, 1.0, length)


#: transformers' rope types, each as a pure function ``(params, rotary_dim, base, length)``.
ROPE_TYPES: dict[str, Callable[[Mapping[str, Any], int, float, int], NativeRope]] = {
    "default": _default,
    "linear": _linear,
    "dynamic": _dynamic,
    "yarn": _yarn,
    "longrope": _longrope,
    "llama3": _llama3,
}


def native_rope(
    params: Mapping[str, Any], *, rotary_dim: int, base: float, length: int, model_type: str = "?"
) -> NativeRope:
    """The native factors, attention scale and trained length of a config's rope parameters.

    Args:
        params: The config's ``rope_parameters`` (one layer type's, for per-layer-type RoPE).
        rotary_dim: Rotated channels per head.
        base: ``rope_theta``.
        length: The config's ``max_position_embeddings``.
        model_type: For the error message.

    Raises:
        UnsupportedModelError: A rope type this version does not know.
    """
    rope_type = str(params.get("rope_type") or params.get("type") or "default")
    if rope_type not in ROPE_TYPES:
        raise UnsupportedModelError(
            f"model type {model_type!r} uses rope type {rope_type!r}; supported rope types: "
            f"{sorted(ROPE_TYPES)}."
        )
    return ROPE_TYPES[rope_type](params, rotary_dim, base, length)
