"""The classic context-extension methods, each as a rescale vector λ.

One pure function per method, all with the signature ``(spec, target_length) -> RopeScaling``
(transformers' `ROPE_INIT_FUNCTIONS` pattern). Writing every method as λ (angle n·θ_i/λ_i) makes
them comparable, lets them seed the LongRoPE search, and needs one patching path only.

Notation: d = rotary_dim, i = 0 … d/2−1, θ_i = base^(−2i/d), L = trained length, L' = target
length, s = L'/L.

Every method acts on top of the checkpoint's own RoPE (`RopeSpec.native_factors`): s counts from
its trained length, and YaRN's ramp and the critical dimension read its own frequencies, so PI,
NTK and YaRN on a Llama 3.1 (``llama3``, trained to 128k) are the 128k model extended further.
"""

from __future__ import annotations

import math

import numpy as np

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope._spec import RopeScaling
from longrope_opt.rope._spec import RopeSpec


def none(spec: RopeSpec, target_length: int | None = None) -> RopeScaling:
    """No rescaling: λ_i = 1, n̂ = 0, t = 1 (the model as trained; extrapolates past L)."""
    return RopeScaling(np.ones(spec.n_factors), 0, 1.0, method="none")


def pi(spec: RopeSpec, target_length: int) -> RopeScaling:
    """Position Interpolation (Chen et al. 2023, eq. 2): λ_i = s for every i.

    Equivalent to transformers' ``rope_type="linear"`` with ``factor=s``: dividing every
    frequency by s is the same as dividing the position ids by s.
    """
    s = spec.scale(target_length)
    return RopeScaling(np.full(spec.n_factors, s), 0, 1.0, method="pi")


def _ntk_factors(spec: RopeSpec, scale: float) -> np.ndarray:
    # NTK-aware scaling raises the base to base' = base · scale^(d/(d−2)), so
    # θ'_i = θ_i · scale^(−2i/(d−2)) and λ_i = scale^(2i/(d−2)): λ_0 = 1, λ_{d/2−1} = scale.
    d = spec.rotary_dim
    exponents = np.arange(spec.n_factors, dtype=np.float64) * 2.0 / (d - 2)
    return scale**exponents


def ntk(spec: RopeSpec, target_length: int) -> RopeScaling:
    """NTK-aware scaling (bloc97, 2023; YaRN paper eq. 16): λ_i = s^(2i/(d−2)).

    Interpolates low frequencies (λ_last = s) and leaves high frequencies nearly untouched
    (λ_0 = 1). Equals transformers' ``dynamic`` rope evaluated at sequence length L'.
    """
    s = spec.scale(target_length)
    return RopeScaling(_ntk_factors(spec, s), 0, 1.0, method="ntk")


def dynamic_ntk(spec: RopeSpec, target_length: int, *, factor: float = 1.0) -> RopeScaling:
    """Dynamic NTK (emozilla, 2023): NTK with the scale taken from the current sequence length.

    transformers' ``rope_type="dynamic"`` recomputes the base at sequence length n > L as
    base · (factor·n/L − (factor − 1))^(d/(d−2)). This returns that λ for n = ``target_length``
    (at n ≤ L it is the identity), so evaluating at several lengths gives Dynamic NTK.

    Args:
        spec: The model's RoPE.
        target_length: The sequence length being evaluated.
        factor: transformers' ``factor`` (1.0 makes it plain NTK at s = n/L).
    """
    if not (math.isfinite(factor) and factor >= 1.0):
        raise InvalidArgumentError(f"`factor` must be a finite number >= 1, got {factor!r}.")
    if not isinstance(target_length, (int, np.integer)) or target_length < 1:
        raise InvalidArgumentError(
            f"`target_length` must be an integer >= 1, got {target_length!r}."
        )
    n = max(int(target_length), spec.original_length)
    scale = factor * n / spec.original_length - (factor - 1.0)
    return RopeScaling(_ntk_factors(spec, scale), 0, 1.0, method="dynamic_ntk")


def yarn_attention_scale(s: float) -> float:
    """YaRN's attention temperature √(1/t) = 0.1·ln s + 1 (YaRN paper eq. 22); 1 for s ≤ 1."""
    return 1.0 if s <= 1.0 else 0.1 * math.log(s) + 1.0


def longrope_attention_scale(s: float, original_length: int) -> float:
    """LongRoPE / Phi-3's attention factor √(1 + ln s / ln L); 1 for s ≤ 1.

    Not in the paper: the official code's default ``"su"`` policy, set "empirically because
    attention becomes dispersed" (microsoft/LongRoPE issue #21); transformers' `longrope` default.
    """
    return 1.0 if s <= 1.0 else math.sqrt(1.0 + math.log(s) / math.log(original_length))


def yarn(
    spec: RopeSpec,
    target_length: int,
    *,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    attention_scale: float | None = None,
    truncate: bool = True,
) -> RopeScaling:
    """YaRN "NTK-by-parts" interpolation (Peng et al. 2023, eq. 17–20, 22).

    A frequency that rotates r_i = L·θ_i/2π times over the trained window is extrapolated (λ=1)
    when r_i > beta_fast, interpolated (λ=s) when r_i < beta_slow, and blended linearly in
    between. The blend is on inverse frequencies (θ_i/λ_i = (1−γ)·θ_i/s + γ·θ_i), hence
    λ_i = 1 / ((1−γ_i)/s + γ_i). The ramp bounds are the correction dimensions of
    transformers' ``_compute_yarn_parameters`` (floored/ceiled when ``truncate``).

    Args:
        spec: The model's RoPE.
        target_length: L'.
        beta_fast: Rotation count above which a frequency is left alone (paper: 32).
        beta_slow: Rotation count below which a frequency is fully interpolated (paper: 1).
        attention_scale: t; defaults to 0.1·ln s + 1.
        truncate: Round the ramp bounds to whole dimensions, as transformers does by default.
    """
    s = spec.scale(target_length)
    d = spec.rotary_dim
    low, high = _correction_dim(spec, beta_fast), _correction_dim(spec, beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = np.clip((np.arange(spec.n_factors, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation = 1.0 - ramp  # γ_i: 1 = keep θ_i, 0 = θ_i / s
    factors = 1.0 / ((1.0 - extrapolation) / s + extrapolation)
    t = yarn_attention_scale(s) if attention_scale is None else attention_scale
    return RopeScaling(factors, 0, t, method="yarn")


def _correction_dim(spec: RopeSpec, rotations: float) -> float:
    """The (fractional) index i at which frequency i turns `rotations` times over L.

    For the default RoPE this is transformers' ``find_correction_dim``, the closed form of
    r_i = L·θ_i/2π = rotations. On top of a native scaling (ν ≠ 1) the checkpoint's own
    frequencies θ_i/ν_i are not geometric: ln r_i is interpolated linearly between indices,
    which is the closed form again wherever ν is constant.
    """
    d, L = spec.rotary_dim, spec.original_length
    if not spec.native_factors:
        return d * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(spec.base))
    log_r = np.log(L * spec.inv_freq() / (2 * math.pi))  # decreasing in i
    target = math.log(rotations)
    i = np.arange(log_r.size, dtype=np.float64)
    # np.interp needs increasing x: interpolate i as a function of −ln r (extrapolated linearly)
    x = -log_r
    if target <= log_r[-1]:
        slope = (i[-1] - i[-2]) / (x[-1] - x[-2])
        return float(i[-1] + slope * (-target - x[-1]))
    if target >= log_r[0]:
        slope = (i[1] - i[0]) / (x[1] - x[0])
        return float(i[0] + slope * (-target - x[0]))
    return float(np.interp(-target, x, i))


def critical_dimension(spec: RopeSpec) -> int:
    """The first λ index whose rotation period exceeds the trained length (LongRoPE2, Eq. 7).

    Frequency i turns once every 2π·base^(2i/d) positions. Below this index every frequency
    completed a full turn within the trained length L, so the model saw all its angles; from it
    on, angles past L are new, and those are the dimensions an extension must rescale. In
    dimension units LongRoPE2 writes d_tcd = 2⌈(d/2)·log_base(L/2π)⌉; this returns the index,
    counted exactly (a period equal to L has been fully seen). ``n_factors`` when every period
    fits in L. On top of a native scaling the periods are the checkpoint's own (2π·ν_i/θ_i) and L
    its trained length.

    Examples: Llama-2 (base 1e4, d 128, L 4096) → 46; SmolLM2 (base 1e5, d 64, L 8192) → 20.
    """
    i = np.arange(spec.n_factors, dtype=np.float64)
    if spec.native_factors:  # the checkpoint's own frequencies θ_i/ν_i
        periods = 2 * math.pi / spec.inv_freq()
    else:
        periods = 2 * math.pi * spec.base ** (2 * i / spec.rotary_dim)
    beyond = np.flatnonzero(periods > spec.original_length)
    return int(beyond[0]) if beyond.size else spec.n_factors
