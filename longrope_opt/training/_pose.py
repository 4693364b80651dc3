"""Training samples at the target length's positions for the cost of a trained-window forward.

PoSE (Zhu et al., ICLR 2024; its reference `train_pose.py`): a sample is `tokens` real tokens (no
more than the trained window) in two chunks. The first starts at position 0 and its length is
drawn from ``1 … (tokens + 1) // 2``; the second follows it after a skip drawn uniformly from
``0 … target − tokens``, so its last position reaches ``target − 1`` when the skip is largest.
Starting the first chunk at 0 spreads the relative distances trained more evenly than free
offsets (the reference's README). Both chunks read contiguous text (the reference found that
continuity made little difference).

Mixed context windows (LongRoPE2): a share of the samples keep contiguous positions inside the
trained window, so that, by the rule transformers' ``longrope`` rope type applies at inference
(`longrope_opt.rope.ShortLongScaling`: the long factors once the largest position passes the
trained length), they train under the short factors and short prompts keep their quality.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


#: The share of samples kept inside the trained window under the original RoPE (LongRoPE2's
#: mixed context windows) when fine-tuning runs PoSE, in `finetune` and `extend --finetune`.
#: Chosen, not yet measured here: the fine-tuned 8x comparison (experiments/finetune_8x.sh)
#: trains with it and measures its cost at 4k against the base model.
SHORT_SHARE = 0.2


def pose_positions(tokens: int, target: int, rng: np.random.Generator) -> np.ndarray:
    """Position ids of one PoSE sample: `tokens` ids in two chunks spread over ``0 … target − 1``.

    Args:
        tokens: Real tokens in the sample (at least 2, at most `target`).
        target: The length whose positions are trained.
        rng: Draws the first chunk's length and the skip.

    Returns:
        ``(tokens,)`` int64, strictly increasing, starting at 0, at most ``target − 1``.
    """
    first = int(rng.integers(1, (tokens + 1) // 2 + 1))  # 1 … (tokens + 1) // 2
    skip = int(rng.integers(0, target - tokens + 1))  # 0 … target − tokens
    return np.concatenate([np.arange(first), np.arange(first + skip, tokens + skip)])


class PoseSamples(torch.utils.data.Dataset):
    """Training item ``i``: a document's first `tokens` ids and their positions, fixed by
    ``(seed, i)`` alone, so that a resumed run, or N processes each taking every N-th item,
    train on exactly what one uninterrupted process does.

    Item ``i`` reads document ``i mod len(documents)`` (callers shuffle them once) and is a
    short sample (contiguous positions inside the trained window) with probability
    `short_share`, else a PoSE sample over `target` positions.
    """

    def __init__(
        self,
        documents: Sequence[torch.Tensor],
        *,
        tokens: int,
        target: int,
        items: int,
        short_share: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.documents = list(documents)
        self.tokens, self.target, self.items = int(tokens), int(target), int(items)
        self.short_share, self.seed = float(short_share), int(seed)

    def __len__(self) -> int:
        return self.items

    def is_short(self, index: int) -> bool:
        """Whether item `index` stays inside the trained window (mixed context windows)."""
        return bool(np.random.default_rng([self.seed, index, 1]).random() < self.short_share)

    def __getitem__(self, index: int) -> dict[str, Any]:
        ids = self.documents[index % len(self.documents)][: self.tokens]
        if self.is_short(index) or self.tokens >= self.target:
            positions = np.arange(len(ids))
        else:
            positions = pose_positions(
                len(ids), self.target, np.random.default_rng([self.seed, index])
            )
        return {
            "input_ids": ids.long(),
            "position_ids": torch.as_tensor(positions, dtype=torch.long),
        }
