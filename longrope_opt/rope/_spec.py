"""`RopeSpec` (what a model's RoPE is) and `RopeScaling` (how to rescale it).

Every context-extension method in this library is expressed as one `RopeScaling`: a rescale vector
λ (one factor per rotary frequency), a start-token threshold n̂ and an attention scale t. Pair i of
the token at position n is rotated by n·θ_i/λ_i (n ≥ n̂) or n·θ_i (n < n̂), and cos/sin are
multiplied by t for n ≥ n̂ only. This is the representation transformers' `longrope` uses
(`inv_freq = 1 / (ext_factors * base ** (2i/d))`), extended by n̂ (LongRoPE paper, §3.2).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import numpy as np
import numpy.typing as npt

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope._config import read_rope


@dataclass(frozen=True)
class RopeSpec:
    """The rotary embedding of a pretrained model, read from its config.

    A spec describes the model *as loaded*: its own RoPE scaling (``llama3``, ``yarn``,
    ``longrope``, ... ) is the native factors ν, and every `RopeScaling` applied to the model acts
    on top of them (frequency i runs at θ_i / (ν_i · λ_i), cos/sin scaled by the native scale × t).
    The identity scaling is the checkpoint as loaded.

    Attributes:
        head_dim: Size of one attention head.
        base: RoPE base θ (``rope_theta``); θ_i = base^(−2i/rotary_dim).
        original_length: The trained length L: the window the checkpoint was trained or fine-tuned
            to (``max_position_embeddings``; see `longrope_opt.rope._native`). An extension's
            ratio is s = L' / L.
        rotary_dim: Number of rotated channels per head (``head_dim * partial_rotary_factor``).
            Defaults to ``head_dim``.
        native_factors: ν, the checkpoint's own factors relative to θ_i (empty: all ones, the
            default RoPE).
        native_attention: The checkpoint's own attention scale (transformers'
            ``attention_scaling``; 1 for the default RoPE).
        rope_type: The checkpoint's rope type, for tables and messages.
    """

    head_dim: int
    base: float
    original_length: int
    rotary_dim: int = 0
    native_factors: tuple[float, ...] = ()
    native_attention: float = 1.0
    rope_type: str = "default"

    def __post_init__(self) -> None:
        if not isinstance(self.head_dim, int) or self.head_dim < 2:
            raise InvalidArgumentError(
                f"`head_dim` must be an integer >= 2, got {self.head_dim!r}."
            )
        if self.rotary_dim == 0:
            object.__setattr__(self, "rotary_dim", self.head_dim)
        rd = self.rotary_dim
        if not isinstance(rd, int) or rd < 4 or rd % 2 or rd > self.head_dim:
            raise InvalidArgumentError(
                f"`rotary_dim` must be an even integer in [4, head_dim={self.head_dim}], got {rd!r}."
            )
        if not (math.isfinite(self.base) and self.base > 1.0):
            raise InvalidArgumentError(f"`base` must be a finite number > 1, got {self.base!r}.")
        if not isinstance(self.original_length, int) or self.original_length < 1:
            raise InvalidArgumentError(
                f"`original_length` must be an integer >= 1, got {self.original_length!r}."
            )
        native = tuple(float(x) for x in self.native_factors)
        if native and (len(native) != rd // 2 or not all(math.isfinite(x) and x > 0 for x in native)):
            raise InvalidArgumentError(
                f"`native_factors` must hold rotary_dim // 2 = {rd // 2} finite numbers > 0, "
                f"got {len(native)} values."
            )
        if native and all(x == 1.0 for x in native):
            native = ()  # one spelling of the default RoPE, so equal specs compare equal
        object.__setattr__(self, "native_factors", native)
        t = float(self.native_attention)
        if not (math.isfinite(t) and t > 0):
            raise InvalidArgumentError(f"`native_attention` must be a finite number > 0, got {t}.")
        object.__setattr__(self, "native_attention", t)

    @property
    def n_factors(self) -> int:
        """How many factors a rescale vector has (one per rotary frequency, ``rotary_dim // 2``)."""
        return self.rotary_dim // 2

    @property
    def is_native_default(self) -> bool:
        """Whether the checkpoint runs the plain RoPE (ν = 1, native scale 1)."""
        return not self.native_factors and self.native_attention == 1.0

    def native(self) -> npt.NDArray[np.float64]:
        """ν as an array (ones for the default RoPE), shape (n_factors,)."""
        if not self.native_factors:
            return np.ones(self.n_factors)
        return np.array(self.native_factors, dtype=np.float64)

    def raw(self) -> RopeSpec:
        """The same RoPE without its native scaling (θ_i = base^(−2i/d), scale 1)."""
        return RopeSpec(self.head_dim, self.base, self.original_length, self.rotary_dim)

    def scale(self, target_length: int) -> float:
        """The extension ratio s = L' / L, validated to be > 1."""
        if (
            not isinstance(target_length, (int, np.integer))
            or target_length <= self.original_length
        ):
            raise InvalidArgumentError(
                f"`target_length` must be an integer > the trained length "
                f"{self.original_length}, got {target_length!r}."
            )
        return target_length / self.original_length

    def raw_inv_freq(self) -> npt.NDArray[np.float64]:
        """θ_i = base^(−2i/rotary_dim), float64, shape (n_factors,)."""
        exponents = np.arange(0, self.rotary_dim, 2, dtype=np.float64) / self.rotary_dim
        return 1.0 / (self.base**exponents)

    def inv_freq(self) -> npt.NDArray[np.float64]:
        """The checkpoint's inverse frequencies θ_i / ν_i (float64): the identity's frequencies."""
        return self.raw_inv_freq() / self.native()

    @classmethod
    def from_config(cls, config: Any, *, trained_length: int | None = None) -> RopeSpec:
        """Read the spec of a checkpoint from its transformers config.

        Handles every rope type of `longrope_opt.rope.ROPE_TYPES` (its native factors and attention
        scale), per-layer-type RoPE (the spec of the layers an extension rescales: see
        `extended_layer_types`), partial rotary, multi-head latent attention (``qk_rope_head_dim``)
        and the GPT-J/CodeGen configs (``rotary_dim``, base 10000).

        Args:
            config: A ``transformers.PretrainedConfig`` (duck-typed: no transformers import here).
            trained_length: Override of the trained length (the window the checkpoint was
                trained or fine-tuned to), when the config does not say it.

        Raises:
            InvalidArgumentError: The config has no RoPE base or no length.
            UnsupportedModelError: A rope type this version does not know.
        """
        spec = cls(**read_rope(config))
        if trained_length is None:
            return spec
        if isinstance(trained_length, bool) or not isinstance(trained_length, int) or trained_length < 1:
            raise InvalidArgumentError(
                f"`trained_length` must be an integer >= 1, got {trained_length!r}."
            )
        return dataclasses.replace(spec, original_length=trained_length)


@dataclass(frozen=True)
class RopeScaling:
    """A rescaled RoPE: per-frequency factors λ, start-token threshold n̂, attention scale t.

    Attributes:
        factors: λ, float64, shape (rotary_dim // 2,), finite and > 0 (1.0 = unchanged frequency).
        n_hat: Positions n < n_hat keep the original angle n·θ_i and no attention scale.
        attention_scale: t, multiplies cos and sin at positions ≥ n_hat (so logits scale by t²).
    """

    factors: npt.NDArray[np.float64]
    n_hat: int = 0
    attention_scale: float = 1.0
    # Name of the method that produced it (for tables and provenance); not part of equality.
    method: str = field(default="custom", compare=False)

    def __post_init__(self) -> None:
        try:
            f = np.array(self.factors, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"`factors` must be a 1-D sequence of numbers, got {type(self.factors).__name__}."
            ) from exc
        if f.ndim != 1 or f.size == 0:
            raise InvalidArgumentError(
                f"`factors` must be a non-empty 1-D sequence, got shape {tuple(f.shape)}."
            )
        bad = np.flatnonzero(~np.isfinite(f) | (f <= 0))
        if bad.size:
            i = int(bad[0])
            raise InvalidArgumentError(
                f"`factors` must be finite and > 0; got {float(f[i])} at index {i}."
            )
        f.setflags(write=False)
        object.__setattr__(self, "factors", f)
        if isinstance(self.n_hat, bool) or not isinstance(self.n_hat, (int, np.integer)):
            raise InvalidArgumentError(f"`n_hat` must be an integer >= 0, got {self.n_hat!r}.")
        if self.n_hat < 0:
            raise InvalidArgumentError(f"`n_hat` must be an integer >= 0, got {self.n_hat}.")
        object.__setattr__(self, "n_hat", int(self.n_hat))
        t = self.attention_scale
        if isinstance(t, bool) or not isinstance(t, (int, float, np.floating, np.integer)):
            raise InvalidArgumentError(
                f"`attention_scale` must be a finite number > 0, got {t!r}."
            )
        if not (math.isfinite(float(t)) and t > 0):
            raise InvalidArgumentError(f"`attention_scale` must be a finite number > 0, got {t}.")
        object.__setattr__(self, "attention_scale", float(t))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RopeScaling):
            return NotImplemented
        return (
            np.array_equal(self.factors, other.factors)
            and self.n_hat == other.n_hat
            and self.attention_scale == other.attention_scale
        )

    def __hash__(self) -> int:
        return hash((self.factors.tobytes(), self.n_hat, self.attention_scale))

    def check(self, spec: RopeSpec) -> RopeScaling:
        """Validate against a model's spec (the factor count must match); returns self."""
        if self.factors.size != spec.n_factors:
            raise InvalidArgumentError(
                f"`factors` must have length rotary_dim // 2 = {spec.n_factors} for this model, "
                f"got {self.factors.size}."
            )
        return self

    def inv_freq(self, spec: RopeSpec) -> npt.NDArray[np.float64]:
        """Rescaled inverse frequencies θ_i / (ν_i·λ_i) (float64): what the patched model runs."""
        self.check(spec)
        return spec.inv_freq() / self.factors

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (factors as a list)."""
        return {
            "factors": [float(x) for x in self.factors],
            "n_hat": self.n_hat,
            "attention_scale": self.attention_scale,
            "method": self.method,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RopeScaling:
        """Inverse of :meth:`to_dict`."""
        if "factors" not in data:
            raise InvalidArgumentError("`factors` is missing from the scaling dict.")
        return cls(
            factors=data["factors"],  # __post_init__ converts, with a one-line error
            n_hat=data.get("n_hat", 0),
            attention_scale=data.get("attention_scale", 1.0),
            method=data.get("method", "custom"),
        )
