"""`finetune`: next-token training of a RoPE-patched model on long samples.

One plain loop that runs the same on a laptop CPU and a GPU: AdamW on the model's own weights,
bf16 autocast (fp32 master weights when the model is loaded in fp32), gradient checkpointing of
every decoder layer, and the LM head + cross-entropy over chunks of positions (each chunk
recomputed in backward) so a 16k-token step never holds 16k × vocab logits. The RoPE is the
searched one for the whole run (`apply_rope_scaling`), exactly as the search evaluated it.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.errors import LongRopeOptError
from longrope_opt.models import chunked_nll
from longrope_opt.models import decoder_hidden
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import ShortLongScaling


@dataclass
class FinetuneResult:
    """What a fine-tuning run did.

    Attributes:
        losses: Mean next-token loss (nats/token) of each optimizer step.
        tokens: Tokens trained on.
        seconds: Wall time of the loop.
    """

    losses: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0


def _check(name: str, value: Any, low: float, kind: type = int) -> None:
    what = "an integer" if kind is int else "a finite number"
    ok = not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else int)
    if not (ok and math.isfinite(value) and value >= low):
        raise InvalidArgumentError(f"`{name}` must be {what} >= {low}, got {value!r}.")


def sequence_loss(
    model: Any,
    ids: torch.Tensor,
    *,
    positions: Sequence[int] | None = None,
    chunk_size: int = 2048,
) -> torch.Tensor:
    """Mean next-token loss of one 1-D sequence, differentiable, without full-vocabulary logits.

    `positions` (one per token) gives position ids that may jump (PoSE-style training).
    """
    inputs = ids[:-1]  # (T-1,)
    hidden = decoder_hidden(model, inputs, None if positions is None else list(positions)[:-1])
    targets = ids[1:]  # (T-1,)
    total, _ = chunked_nll(model, hidden, targets, chunk_size=chunk_size, recompute=True)
    return total / targets.numel()


def pose_positions(tokens: int, length: int, chunks: int, rng: np.random.Generator) -> list[int]:
    """Position ids for `tokens` real tokens in `chunks` equal pieces with random gaps, spread
    over ``0 … length − 1`` (PoSE: every relative distance up to `length` is trained over steps)."""
    size = tokens // chunks
    sizes = [size] * (chunks - 1) + [tokens - size * (chunks - 1)]
    slack = length - tokens  # positions skipped in total, split at random between the pieces
    cuts = np.sort(rng.integers(0, slack + 1, size=chunks - 1))
    gaps = np.diff(np.concatenate([[0], cuts]))  # skip before piece 1 … chunks−1
    positions: list[int] = list(range(sizes[0]))
    start = sizes[0]
    for j in range(1, chunks):
        start += int(gaps[j - 1])
        positions.extend(range(start, start + sizes[j]))
        start += sizes[j]
    return positions


def _checkpointing(model: Any, on: bool) -> None:
    # transformers 5.x renamed gradient_checkpointing_* to activation_checkpointing_*.
    if on:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    elif hasattr(model, "activation_checkpointing_disable"):
        model.activation_checkpointing_disable()
    else:
        model.gradient_checkpointing_disable()


def finetune(
    model: Any,
    samples: Sequence[torch.Tensor],
    scaling: RopeScaling | ShortLongScaling,
    *,
    steps: int,
    learning_rate: float = 2e-5,
    warmup_steps: int = 0,
    grad_accum: int = 1,
    autocast_dtype: str | None = "bfloat16",
    gradient_checkpointing: bool = True,
    max_grad_norm: float = 1.0,
    chunk_size: int = 2048,
    pose_tokens: int | None = None,
    pose_chunks: int = 2,
    seed: int = 0,
    progress: bool = True,
) -> FinetuneResult:
    """Train `model` in place for `steps` optimizer steps on `samples` with RoPE `scaling`.

    Args:
        model: A transformers causal LM (fp32 weights recommended: bf16 autocast keeps the
            matmuls fast and the AdamW updates exact).
        samples: 1-D token tensors, each one training sequence (e.g. `load_samples` at L').
            Step k uses samples ``k·grad_accum … k·grad_accum + grad_accum − 1`` (cycling).
        scaling: The factors to train with (the search's result at L').
        steps: Optimizer steps.
        learning_rate: AdamW peak learning rate (the paper: 2e-5 for LLaMA2 at 128k).
        warmup_steps: Linear warm-up steps, then constant.
        grad_accum: Sequences per optimizer step.
        autocast_dtype: ``"bfloat16"`` (default), ``"float16"``, or None for no autocast.
        gradient_checkpointing: Recompute each decoder layer in backward (memory ∝ layers × T).
        max_grad_norm: Gradient clipping norm.
        chunk_size: Positions per LM-head chunk.
        pose_tokens: Train on this many real tokens per sample instead of the whole sample,
            cut in `pose_chunks` pieces whose position ids are spread over the sample's length
            at random gaps (positional skip-wise training, PoSE, Zhu et al. 2023): the positions
            of a long sequence at the attention cost of a short one. None (default) trains on full samples.
        pose_chunks: Pieces per sample with `pose_tokens`.
        seed: Seeds the PoSE gaps (step k, sequence j draw from ``(seed, k, j)``).
        progress: Show a progress bar.

    Returns:
        A `FinetuneResult` with the loss of every step.

    Raises:
        InvalidArgumentError: Bad step counts, learning rate or samples.
        LongRopeOptError: The loss became NaN or infinite (the step is named).
    """
    _check("steps", steps, 1)
    _check("grad_accum", grad_accum, 1)
    _check("warmup_steps", warmup_steps, 0)
    _check("learning_rate", learning_rate, 0.0, float)
    if not samples:
        raise InvalidArgumentError("`samples` must hold at least one sample, got 0.")
    if any(int(s.numel()) < 2 for s in samples):
        raise InvalidArgumentError("every sample must have at least 2 tokens.")
    if pose_tokens is not None:
        _check("pose_tokens", pose_tokens, 2 * pose_chunks)
        if any(pose_tokens > int(s.numel()) for s in samples):
            raise InvalidArgumentError(
                f"`pose_tokens` must be <= the sample length {min(int(s.numel()) for s in samples)}, "
                f"got {pose_tokens}."
            )
    device = model.get_output_embeddings().weight.device
    amp = getattr(torch, autocast_dtype) if autocast_dtype else None
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: min(1.0, (k + 1) / warmup_steps) if warmup_steps else 1.0
    )
    was_training = model.training
    if gradient_checkpointing:
        _checkpointing(model, True)
    model.train()
    result = FinetuneResult()
    bar = None
    if progress:

        bar = tqdm(total=steps, desc="fine-tune", unit="step", file=sys.stderr)
    start = time.perf_counter()
    try:
        with apply_rope_scaling(model, scaling):
            for step in range(steps):
                optimizer.zero_grad(set_to_none=True)
                step_loss = 0.0
                for micro in range(grad_accum):
                    ids = samples[(step * grad_accum + micro) % len(samples)]
                    positions = None
                    if pose_tokens is not None:
                        rng = np.random.default_rng([seed, step, micro])
                        positions = pose_positions(pose_tokens, int(ids.numel()), pose_chunks, rng)
                        ids = ids[:pose_tokens]
                    with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                        loss = sequence_loss(
                            model, ids, positions=positions, chunk_size=chunk_size
                        )
                    if not torch.isfinite(loss):
                        raise LongRopeOptError(
                            f"fine-tuning loss is {float(loss.detach())} at step {step} (sequence {micro}); "
                            "lower `learning_rate` or check the factors."
                        )
                    (loss / grad_accum).backward()
                    step_loss += float(loss.detach()) / grad_accum
                    result.tokens += int(ids.numel()) - 1
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
                optimizer.step()
                schedule.step()
                result.losses.append(step_loss)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{step_loss:.4f}")
    finally:
        if bar is not None:
            bar.close()
        if gradient_checkpointing:
            _checkpointing(model, False)
        model.train(was_training)
        result.seconds = time.perf_counter() - start
    return result
