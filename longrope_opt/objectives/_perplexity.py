"""Perplexity of a patched model on long samples, fast on CPU: `evaluate_perplexity`.

The decoder body runs once per window and the LM head + loss run in chunks
(`longrope_opt.models.chunked_nll`), so no full-vocabulary logits are ever materialised.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import torch
import tqdm.auto

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import chunked_nll
from longrope_opt.models import decoder_hidden
from longrope_opt.objectives._windows import Window
from longrope_opt.objectives._windows import skip_positions
from longrope_opt.objectives._windows import skip_window
from longrope_opt.objectives._windows import sliding_windows
from longrope_opt.objectives._windows import truncate_window
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.patching import resumable_forward
from longrope_opt.rope import RopeScaling


MODES = ("truncate", "sliding", "skip")


@dataclass
class PerplexityResult:
    """Token-weighted perplexity over samples, with the per-sample numbers behind it.

    Attributes:
        ppl: exp(Σ NLL / Σ tokens); ``inf`` when the loss overflowed, ``nan`` when it was NaN.
        nll_sum: Σ NLL (nats) over all scored tokens.
        n_tokens: Number of scored tokens.
        sample_nll: Σ NLL per sample.
        sample_tokens: Scored tokens per sample.
    """

    ppl: float
    nll_sum: float
    n_tokens: int
    sample_nll: list[float] = field(default_factory=list)
    sample_tokens: list[int] = field(default_factory=list)

    @property
    def sample_ppl(self) -> list[float]:
        """Perplexity of each sample on its own."""
        return [safe_exp(n / t) for n, t in zip(self.sample_nll, self.sample_tokens)]


def safe_exp(x: float) -> float:
    if math.isnan(x):
        return math.nan
    return math.exp(x) if x < 700 else math.inf


def window_nll(
    model: Any,
    ids: torch.Tensor,
    window: Window,
    *,
    chunk_size: int = 2048,
    positions: Sequence[int] | None = None,
) -> tuple[float, int]:
    """Σ NLL and token count of one window, without materialising full-vocabulary logits.

    Args:
        model: A causal LM (already patched if a scaling is wanted).
        ids: The whole document, 1-D ``long``.
        window: Which tokens to feed and which to score.
        chunk_size: Positions per LM-head chunk (peak memory ≈ chunk_size × vocab × 4 bytes).
        positions: Position ids of the fed tokens; default ``0 … end − begin − 1``.

    Returns:
        ``(nll_sum, n_scored)``.
    """
    inputs = ids[window.begin : window.end]  # (T,)
    # A model from `load_model` keeps a long forward's progress on disk until its loss is in:
    # a process stopped inside a 45-minute forward resumes it from its last saved layer.
    with resumable_forward(model, getattr(model, "longrope_opt_forwards", None)):
        hidden = decoder_hidden(model, inputs, positions)  # (T, H)
        # Position p predicts token p+1: score [score_from, end) from hidden [score_from-1, end-1).
        first = window.score_from - window.begin
        targets = inputs[first:]  # (S,)
        nll, _ = chunked_nll(
            model, hidden[first - 1 : -1], targets, chunk_size=chunk_size, count_correct=False
        )
    return float(nll), int(targets.numel())


def evaluate_perplexity(
    model: Any,
    samples: Sequence[torch.Tensor],
    scaling: RopeScaling | None,
    *,
    mode: str = "truncate",
    stride: int | None = None,
    window: int | None = None,
    skip_tokens: int = 1024,
    skip_chunks: int = 2,
    chunk_size: int = 2048,
    on_sample: Callable[[int, PerplexityResult], None] | None = None,
    progress: bool = False,
    known: Sequence[tuple[float, int]] = (),
) -> PerplexityResult:
    """Perplexity of `model` with RoPE `scaling` on `samples`.

    Args:
        model: A loaded causal LM with RoPE (see `longrope_opt.models.load_model`).
        samples: 1-D token tensors (see `longrope_opt.data.load_samples`).
        scaling: The RoPE rescaling to apply; ``None`` evaluates the model as it is.
        mode: ``"truncate"`` — one window per sample over its first `window` tokens (the search;
            LongRoPE's truncate option); ``"sliding"`` — windows of `window` tokens every `stride`
            tokens over the whole sample, each token scored once (evaluation tables).
        stride: Sliding stride (required for ``"sliding"``; the paper uses 256).
        window: Context length; defaults to the longest sample.
        skip_tokens: Real tokens per sample in ``"skip"`` mode.
        skip_chunks: Pieces per sample in ``"skip"`` mode.
        chunk_size: Positions per LM-head chunk.
        on_sample: Called after each sample with its index and the running result (the objective
            reports to Optuna here; raising ``optuna.TrialPruned`` stops the evaluation).
        progress: Show a progress bar over decoder layers (windows × layers) with its rate.
        known: ``(Σ NLL, tokens)`` of the first samples, measured before with the same model,
            scaling and options (a retried trial's, recorded by the run that was killed): taken
            as they are, not measured again, and passed to `on_sample` like the others.

    Returns:
        A `PerplexityResult`.
    """
    if mode not in MODES:
        raise InvalidArgumentError(f"`mode` must be one of {list(MODES)}, got {mode!r}.")
    if not samples:
        raise InvalidArgumentError("`samples` must hold at least one sample, got 0.")
    window = window or max(int(s.numel()) for s in samples)
    if mode == "sliding" and stride is None:
        raise InvalidArgumentError("`stride` is required when `mode` is 'sliding' (e.g. 256).")
    result = PerplexityResult(ppl=math.nan, nll_sum=0.0, n_tokens=0)

    def windows_of(ids: torch.Tensor) -> tuple[list[Window], list[int] | None]:
        n = int(ids.numel())
        if mode == "truncate":
            return truncate_window(n, window), None
        if mode == "sliding":
            assert stride is not None  # checked above
            return sliding_windows(n, window, stride), None
        return [skip_window(n, skip_tokens, skip_chunks)], skip_positions(
            skip_tokens, window, skip_chunks
        )

    if len(known) > len(samples):
        raise InvalidArgumentError(
            f"`known` holds {len(known)} samples' results, more than the {len(samples)} samples."
        )
    todo = samples[len(known) :]
    total = sum(len(windows_of(ids)[0]) for ids in todo) if progress else 0
    with (
        torch.inference_mode(),
        _maybe_patch(model, scaling),
        layer_progress(model, total, head=True) as head_done,
    ):
        for i, ids in enumerate(samples):
            if i < len(known):
                nll, count = float(known[i][0]), int(known[i][1])
            else:
                windows, positions = windows_of(ids)
                nll, count = 0.0, 0
                for w in windows:
                    w_nll, w_count = window_nll(
                        model, ids, w, chunk_size=chunk_size, positions=positions
                    )
                    nll, count = nll + w_nll, count + w_count
                    head_done()
            result.sample_nll.append(nll)
            result.sample_tokens.append(count)
            result.nll_sum += nll
            result.n_tokens += count
            result.ppl = safe_exp(result.nll_sum / result.n_tokens)
            if on_sample is not None:
                on_sample(i, result)
    return result


@contextlib.contextmanager
def layer_progress(model: Any, windows: int, *, head: bool = False) -> Iterator[Callable[[], None]]:
    # A 16k evaluation of one document takes minutes: count decoder layers as they finish (a
    # forward hook runs outside a compiled forward, so fused layers are not recompiled). With
    # `head`, each window's LM head and loss is one more step, which the caller marks with the
    # function this yields: at 128k with Gemma's 262k vocabulary it takes as long as a layer.
    if not windows:
        yield lambda: None
        return

    layers = list(getattr(model.get_decoder(), "layers", []))
    steps = len(layers) + (1 if head else 0)
    # looked up on use: `tqdm.auto.tqdm` is the notebook or terminal bar of this process
    bar = tqdm.auto.tqdm(total=windows * steps, desc="layers", unit="layer", leave=False)

    def count(*_: Any) -> None:
        # A forward hook that returns anything but None replaces the layer's output
        # (tqdm.update returns True when it redraws), so this one returns nothing.
        bar.update(1)

    handles = [layer.register_forward_hook(count) for layer in layers]
    try:
        yield count if head else (lambda: None)
    finally:
        for handle in handles:
            handle.remove()
        bar.close()


class _maybe_patch:
    """`apply_rope_scaling` when a scaling is given, else nothing."""

    def __init__(self, model: Any, scaling: RopeScaling | None) -> None:
        self._cm = apply_rope_scaling(model, scaling) if scaling is not None else None

    def __enter__(self) -> None:
        if self._cm is not None:
            self._cm.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._cm is not None:
            self._cm.__exit__(*exc)
