"""Stages of a progressive extension: composing two searches, and short/long factor pairs.

The paper's route to long contexts (LongRoPE §3.3): search factors on the base model, fine-tune
with them, search again *on the fine-tuned model* for a further extension, then search a second,
short factor set so inputs within the trained window keep their quality.

Conventions (one place, so export, search and loading agree):
- A secondary search proposes factors **relative** to its base stage: the model already runs
  θ_i/λ_base,i, and a candidate λ_rel rescales that again, so the composed factors are the product
  λ = λ_base ⊙ λ_rel (monotone × monotone stays monotone). n̂ and t of the new stage replace the
  base's: n̂ always counts start tokens that keep the *pretrained* angle n·θ_i (the paper's
  "original RoPE"), and t is the attention scale for the total extension.
- A short/long pair follows transformers' ``longrope`` rope type: a forward whose positions all
  lie below the trained length L (``max(position_ids) + 1 <= L``) uses the short factors, any
  longer forward the long ones. transformers has a single ``attention_factor`` for both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope._spec import RopeScaling


def carry(scaling: RopeScaling, scale_from: float, scale_to: float) -> RopeScaling:
    """Factors found for one scale, taken to another by one rule (a stand-in for a search there).

    What grows with ln s grows by k = ln s' / ln s: λ' = λ^k (λ = 1 stays 1, λ = s becomes s', a
    ramp s^(i/c) stays that ramp), t'² = 1 + (t² − 1)·k (LongRoPE's t² = 1 + ln s / ln L keeps
    its form), n̂ is kept (it counts tokens). PI, NTK and YaRN-cd at s go to themselves at s'.

    Args:
        scaling: The factors found for `scale_from`.
        scale_from: Its scale s = L'/L (> 1).
        scale_to: The new scale s' (> 1).

    Raises:
        InvalidArgumentError: A scale <= 1, or a t too far below 1 to carry.
    """

    if not (scale_from > 1 and scale_to > 1):
        raise InvalidArgumentError(
            f"`scale_from` and `scale_to` must be > 1, got {scale_from} and {scale_to}."
        )
    k = math.log(scale_to) / math.log(scale_from)
    t2 = 1.0 + (scaling.attention_scale**2 - 1.0) * k
    if t2 <= 0:
        raise InvalidArgumentError(
            f"`attention_scale` {scaling.attention_scale} cannot be carried by k = {k:.3f}."
        )
    return RopeScaling(np.asarray(scaling.factors, dtype=np.float64) ** k, scaling.n_hat,
                       math.sqrt(t2), method="carried")  # fmt: skip


def compose(base: RopeScaling, relative: RopeScaling) -> RopeScaling:
    """The scaling a model extended by `base` runs when a later stage applies `relative` on top.

    Args:
        base: The earlier stage (e.g. the factors the model was fine-tuned with).
        relative: The later stage, relative to `base`: factors multiply, its n̂ and t win.

    Returns:
        Absolute factors λ_base ⊙ λ_rel with the later stage's n̂ and t.

    Raises:
        InvalidArgumentError: The two factor vectors differ in length.

    Example:
        >>> stage2 = compose(stage1, RopeScaling(np.full(32, 2.0)))  # 2× further on every frequency
    """
    if base.factors.shape != relative.factors.shape:
        raise InvalidArgumentError(
            f"`relative` must have {base.factors.size} factors like `base`, "
            f"got {relative.factors.size}."
        )
    return RopeScaling(
        base.factors * relative.factors,
        relative.n_hat,
        relative.attention_scale,
        method=relative.method,
    )


@dataclass(frozen=True)
class ShortLongScaling:
    """Two factor sets picked by sequence length, as transformers' ``longrope`` rope type does.

    Attributes:
        short: Used when every position is below `original_length` (the recovered short factors).
        long: Used for longer forwards (the extension).
        original_length: L, the switch point: ``max(position_ids) + 1 <= L`` picks `short`.
    """

    short: RopeScaling
    long: RopeScaling
    original_length: int

    def __post_init__(self) -> None:
        if not isinstance(self.short, RopeScaling) or not isinstance(self.long, RopeScaling):
            raise InvalidArgumentError("`short` and `long` must both be RopeScaling instances.")
        if self.short.factors.shape != self.long.factors.shape:
            raise InvalidArgumentError(
                f"`short` must have {self.long.factors.size} factors like `long`, "
                f"got {self.short.factors.size}."
            )
        if not isinstance(self.original_length, (int, np.integer)) or self.original_length < 1:
            raise InvalidArgumentError(
                f"`original_length` must be an integer >= 1, got {self.original_length!r}."
            )

    def select(self, seq_len: int) -> RopeScaling:
        """The factor set a forward over positions ``0 … seq_len − 1`` uses."""
        return self.short if seq_len <= self.original_length else self.long

    @property
    def n_hat(self) -> int:
        """The largest n̂ of the two sets (0 when both load in vanilla transformers)."""
        return max(self.short.n_hat, self.long.n_hat)
