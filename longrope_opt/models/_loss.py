"""The one "decoder body → chunked LM head → loss" path: perplexity, passkey and fine-tuning.

Why not ``model(ids, labels=ids)``: at 16k tokens and a 49k vocabulary that materialises 3.2 GB of
fp32 logits (and copies them again inside the loss). Instead the decoder body runs once, and the
LM head + cross-entropy run over chunks of positions, so peak memory is one chunk of logits.

On a CPU each chunk is also cut along the vocabulary into tiles small enough to stay in cache,
and the log-sum-exp is carried across them: Gemma's 262k vocabulary made the LM head and its
loss 41 % of a 64k forward (every fp32 logit written to memory and read back by each pass of
the softmax), and the tiles do the same arithmetic 2.3× faster (`bench/loss_head.py`). A GPU keeps the one-chunk path: there the logits stream fast and tiles
would only add kernel launches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any


if (
    TYPE_CHECKING
):  # torch is imported where it is used: `longrope_opt.models` stays light to import
    import torch


def final_logits(model: Any, logits: torch.Tensor) -> torch.Tensor:
    """Apply the post-processing some families do to logits inside their forward."""
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch

    config = model.config
    if getattr(config, "logits_scaling", None):  # Granite
        logits = logits / config.logits_scaling
    if getattr(config, "logit_scale", None):  # Cohere
        logits = logits * config.logit_scale
    cap = getattr(config, "final_logit_softcapping", None)  # Gemma 2/3
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def decoder_hidden(
    model: Any, inputs: torch.Tensor, positions: Sequence[int] | None = None
) -> torch.Tensor:
    """Last hidden states of one 1-D token sequence, ``(T, H)``, without a KV cache.

    `positions` (one per token) gives position ids that may jump (PoSE-style skips).
    """
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch

    device = model.get_output_embeddings().weight.device
    ids = inputs.to(device)[None]  # (1, T)
    extra: dict[str, torch.Tensor] = {}
    if positions is not None:
        extra["position_ids"] = torch.as_tensor(list(positions), device=device)[None]  # (1, T)
        # An explicit all-ones mask: without one, transformers reads position ids that jump as
        # packed sequences and masks attention between the pieces (masking_utils.
        # find_packed_sequence_indices) — the far pieces would never see the near ones.
        extra["attention_mask"] = torch.ones_like(ids)  # (1, T)
    return model.get_decoder()(input_ids=ids, use_cache=False, **extra).last_hidden_state[0]


def _chunk(
    model: Any, hidden: torch.Tensor, targets: torch.Tensor, count: bool = True
) -> tuple[torch.Tensor, ...]:
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch
    import torch.nn.functional as F

    logits = final_logits(model, model.get_output_embeddings()(hidden).float())  # (C, V) fp32
    nll = F.cross_entropy(logits, targets, reduction="sum")
    # The argmax is one more full pass over (C, V): only when asked.
    hits = (logits.argmax(-1) == targets).sum() if count else nll.new_zeros((), dtype=torch.long)
    return nll, hits


def _tiled_chunk(
    model: Any, hidden: torch.Tensor, targets: torch.Tensor, count: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """`_chunk`'s sums, the vocabulary in cache-sized tiles: no (C, V) tensor is made."""
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch
    import torch.nn.functional as F

    head = model.get_output_embeddings()
    weight, bias = head.weight, head.bias
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    lse = torch.full(targets.shape, -torch.inf, device=hidden.device)  # (C,) fp32
    picked = torch.zeros(targets.shape, device=hidden.device)  # the targets' logits
    best = torch.full(targets.shape, -torch.inf, device=hidden.device)
    best_at = torch.zeros_like(targets)
    step = tile_vocab(hidden.shape[0])
    for v in range(0, weight.shape[0], step):
        # The same per-element logits as `_chunk`'s (head dtype, then fp32, then the family's
        # own post-processing), one tile of the vocabulary at a time.
        b = None if bias is None else bias[v : v + step]
        logits = final_logits(model, F.linear(hidden, weight[v : v + step], b).float())  # (C, t)
        lse = torch.logaddexp(lse, torch.logsumexp(logits, dim=-1))
        inside = (targets >= v) & (targets < v + logits.shape[1])
        picked = torch.where(inside, logits[rows, (targets - v).clamp(0, logits.shape[1] - 1)],
                             picked)  # fmt: skip
        if count:  # argmax over the whole vocabulary: the first maximum, as `argmax` keeps
            top, at = logits.max(dim=-1)
            better = top > best
            best, best_at = torch.where(better, top, best), torch.where(better, at + v, best_at)
    nll = (lse - picked).sum()
    hits = (best_at == targets).sum() if count else nll.new_zeros((), dtype=torch.long)
    return nll, hits


#: Logits of one tile at most (elements) on a CPU: 8 MB in fp32, the size that ran fastest on
#: both a 2-core Zen 4 and an AMX Xeon (`bench/loss_head.py`).
TILE_ELEMENTS = 1 << 21


def tile_vocab(positions: int) -> int:
    """Vocabulary entries per tile of `_tiled_chunk`, for a chunk of `positions`."""
    return max(256, TILE_ELEMENTS // max(1, int(positions)))


def _tiles(model: Any, hidden: torch.Tensor, recompute: bool) -> bool:
    # Tiles on a CPU, for inference (a backward through tiles would keep them all), when the
    # head is a plain linear layer whose weight rows are the vocabulary.
    import torch

    head = model.get_output_embeddings()
    return hidden.device.type == "cpu" and not recompute and type(head) is torch.nn.Linear


#: Logits of one chunk at most (elements): 512 MB in fp32. SmolLM2's 49k vocabulary keeps its
#: 2,048 positions a chunk; Gemma's 262k takes 512 (2,048 would be 2 GiB of fp32 logits, and
#: its log-softmax as much again).
CHUNK_ELEMENTS = 1 << 27


def chunk_positions(vocab_size: int, chunk_size: int = 2048) -> int:
    """Positions per LM-head chunk: `chunk_size`, fewer where the vocabulary is large."""
    return max(1, min(chunk_size, CHUNK_ELEMENTS // max(1, int(vocab_size))))


def chunked_nll(
    model: Any,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    chunk_size: int = 2048,
    recompute: bool = False,
    count_correct: bool = True,
) -> tuple[torch.Tensor, int]:
    """Σ NLL of `targets` given `hidden` (``(S, H)`` → ``(S,)``), one LM-head chunk at a time.

    Args:
        model: The causal LM whose head (and final-logit processing) scores the tokens.
        hidden: Hidden states that predict `targets`, position by position.
        targets: Token ids, on any device.
        chunk_size: Positions per chunk at most. On a GPU peak memory is about chunk_size ×
            vocab × 4 bytes, with fewer positions for a large vocabulary (`chunk_positions`);
            on a CPU the vocabulary is tiled and a tile is `TILE_ELEMENTS` at most.
        recompute: Checkpoint each chunk (training: backward recomputes its logits instead of
            keeping them). The sum is then a differentiable fp32 tensor; otherwise fp64.
        count_correct: Count the targets that are the argmax (0 is returned without it).

    Returns:
        ``(nll_sum, n_correct)``: a 0-d tensor, and how many targets are the argmax.
    """
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch
    from torch.utils.checkpoint import checkpoint

    targets = targets.to(hidden.device)
    tiled = _tiles(model, hidden, recompute)
    if not tiled:  # one chunk's logits whole: fewer positions for a large vocabulary
        chunk_size = chunk_positions(model.get_output_embeddings().weight.shape[0], chunk_size)
    total = hidden.new_zeros((), dtype=torch.float32 if recompute else torch.float64)
    correct = 0
    for start in range(0, targets.numel(), chunk_size):
        h, t = hidden[start : start + chunk_size], targets[start : start + chunk_size]
        if recompute:
            nll, hits = checkpoint(_chunk, model, h, t, count_correct, use_reentrant=False)
        elif tiled:
            nll, hits = _tiled_chunk(model, h, t, count_correct)
        else:
            nll, hits = _chunk(model, h, t, count_correct)
        total = total + (nll if recompute else nll.double())
        correct += int(hits)
    return total, correct
