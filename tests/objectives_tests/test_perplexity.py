"""`evaluate_perplexity` on tiny models: chunked loss equals the naive loss; modes; callbacks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.objectives import PerplexityResult
from longrope_opt.objectives import Window
from longrope_opt.objectives import evaluate_perplexity
from longrope_opt.objectives import window_nll
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import yarn
from tests.conftest import build_tiny_model


def _samples(n: int = 3, length: int = 150, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 128, (length,), generator=g) for _ in range(n)]


def _naive_nll(model, ids: torch.Tensor) -> float:
    with torch.no_grad():
        loss = model(ids[None], labels=ids[None]).loss  # mean over ids.numel() - 1 tokens
    return float(loss) * (ids.numel() - 1)


@pytest.mark.parametrize("family", ["llama", "qwen2", "phi3"])
@pytest.mark.parametrize("chunk_size", [7, 64, 4096])
def test_chunked_loss_equals_naive_loss(family: str, chunk_size: int) -> None:
    model = build_tiny_model(family)
    ids = _samples(1)[0]
    with torch.inference_mode():
        nll, count = window_nll(model, ids, Window(0, ids.numel(), 1), chunk_size=chunk_size)
    assert count == ids.numel() - 1
    assert math.isclose(nll, _naive_nll(model, ids), rel_tol=1e-5)


def test_perplexity_is_token_weighted_exp_of_naive_losses() -> None:
    model = build_tiny_model("llama")
    samples = _samples(3)
    spec = RopeSpec.from_config(model.config)
    scaling = yarn(spec, 150)
    result = evaluate_perplexity(model, samples, scaling, chunk_size=32)
    with apply_rope_scaling(model, scaling):
        naive = [_naive_nll(model, s) for s in samples]
    assert result.n_tokens == sum(s.numel() - 1 for s in samples)
    np.testing.assert_allclose(result.sample_nll, naive, rtol=1e-5)
    assert math.isclose(result.ppl, math.exp(sum(naive) / result.n_tokens), rel_tol=1e-5)
    assert len(result.sample_ppl) == 3


def test_sliding_mode_scores_whole_document_and_matches_truncate_for_big_window() -> None:
    model = build_tiny_model("llama")
    samples = _samples(2, length=150)
    full = evaluate_perplexity(model, samples, None, mode="truncate")
    same = evaluate_perplexity(model, samples, None, mode="sliding", window=150, stride=16)
    assert same.sample_nll == pytest.approx(full.sample_nll, rel=1e-6)
    slid = evaluate_perplexity(model, samples, None, mode="sliding", window=48, stride=16)
    assert slid.n_tokens == full.n_tokens  # every token scored once
    assert slid.ppl != pytest.approx(full.ppl, rel=1e-6)  # but with less context


def test_truncate_window_shorter_than_samples() -> None:
    model = build_tiny_model("llama")
    result = evaluate_perplexity(model, _samples(2, length=150), None, window=64)
    assert result.sample_tokens == [63, 63]


def test_on_sample_sees_running_result_and_model_is_restored() -> None:
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    seen: list[tuple[int, int]] = []
    evaluate_perplexity(
        model,
        _samples(3),
        RopeScaling(np.full(spec.n_factors, 2.0)),
        on_sample=lambda i, r: seen.append((i, r.n_tokens)),
    )
    assert seen == [(0, 149), (1, 298), (2, 447)]
    rotary = model.model.rotary_emb
    assert "forward" not in rotary.__dict__


def test_bad_mode_and_missing_stride() -> None:
    model = build_tiny_model("llama")
    with pytest.raises(
        InvalidArgumentError,
        match=r"`mode` must be one of \['truncate', 'sliding', 'skip'\], got 'slide'",
    ):
        evaluate_perplexity(model, _samples(1), None, mode="slide")
    with pytest.raises(InvalidArgumentError, match="`stride` is required"):
        evaluate_perplexity(model, _samples(1), None, mode="sliding")
    with pytest.raises(InvalidArgumentError, match="`samples` must hold at least one sample"):
        evaluate_perplexity(model, [], None)


def test_skip_mode_without_gaps_is_the_truncated_window_scored_after_piece_0() -> None:
    model = build_tiny_model("llama")
    samples = _samples(2, length=150)
    # window == tokens: the pieces are contiguous, so this is plain next-token NLL from token 25.
    skip = evaluate_perplexity(model, samples, None, mode="skip", window=100, skip_tokens=100,
                               skip_chunks=4)  # fmt: skip
    assert skip.sample_tokens == [75, 75]
    with torch.inference_mode():
        for ids, nll in zip(samples, skip.sample_nll):
            ref, count = window_nll(model, ids, Window(0, 100, 25))
            assert count == 75 and math.isclose(nll, ref, rel_tol=1e-5)
    # Spread over a long window the same tokens see far positions: a different loss.
    far = evaluate_perplexity(model, samples, None, mode="skip", window=1000, skip_tokens=100,
                              skip_chunks=4)  # fmt: skip
    assert far.n_tokens == skip.n_tokens
    assert far.ppl != pytest.approx(skip.ppl, rel=1e-6)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_skip_pieces_attend_to_each_other(family: str) -> None:
    # Position ids that jump must not be read as packed sequences: the scored pieces depend on the
    # text of piece 0, however far apart they are placed.
    model = build_tiny_model(family)
    ids = _samples(1, length=64)[0]
    other = ids.clone()
    other[:8] = (other[:8] + 7) % 120 + 3  # change piece 0 only (4 pieces of 16 tokens)
    from longrope_opt.objectives._windows import skip_positions

    # Score only predictions made inside pieces 1-3 (from token 17 on), not from piece 0's end.
    positions = skip_positions(64, 4000, 4)
    with torch.inference_mode():
        a = window_nll(model, ids, Window(0, 64, 17), positions=positions)
        b = window_nll(model, other, Window(0, 64, 17), positions=positions)
    assert a[1] == b[1] == 47
    a, b = PerplexityResult(math.nan, a[0], a[1]), PerplexityResult(math.nan, b[0], b[1])
    assert a.nll_sum != pytest.approx(b.nll_sum, rel=1e-6)


def test_progress_counts_decoder_layers_and_the_head_and_leaves_no_hook(monkeypatch) -> None:
    import tqdm.auto

    seen = []

    class Recording(tqdm.auto.tqdm):  # type: ignore[misc]
        def close(self) -> None:
            seen.append((self.desc, self.n, self.total, self.unit))
            super().close()

    monkeypatch.setattr(tqdm.auto, "tqdm", Recording)
    model = build_tiny_model("llama")
    samples = [torch.randint(3, 128, (100,)) for _ in range(3)]
    evaluate_perplexity(model, samples, None, mode="sliding", window=64, stride=32, progress=True)
    # 3 samples of 100 tokens in windows of 64 every 32: 3 windows each, 2 layers per window and
    # the LM head and loss as one more step (as long as a layer at 128k with a 262k vocabulary)
    assert set(seen) == {("layers", 27, 27, "layer")}  # (close may run again on deletion)
    assert all(not layer._forward_hooks for layer in model.get_decoder().layers)


def test_progress_bar_never_changes_the_result(monkeypatch) -> None:
    # tqdm.update returns True when it redraws; a forward hook returning it would replace the
    # layer's output. Force a redraw on every update so that would show.
    import tqdm.auto

    class AlwaysRedraw(tqdm.auto.tqdm):  # type: ignore[misc]
        def update(self, n: float = 1) -> bool:
            super().update(n)
            return True

    model = build_tiny_model("llama")
    samples = [torch.randint(3, 128, (100,)) for _ in range(2)]
    plain = evaluate_perplexity(model, samples, None, mode="sliding", window=64, stride=32)
    monkeypatch.setattr(tqdm.auto, "tqdm", AlwaysRedraw)
    shown = evaluate_perplexity(
        model, samples, None, mode="sliding", window=64, stride=32, progress=True
    )
    assert shown.sample_nll == plain.sample_nll


def test_known_samples_are_taken_as_given_and_never_more_than_the_samples() -> None:
    model = build_tiny_model("llama")
    samples = _samples(3)
    full = evaluate_perplexity(model, samples, None)
    first = list(zip(full.sample_nll[:2], full.sample_tokens[:2]))
    seen: list[int] = []
    again = evaluate_perplexity(
        model, samples, None, known=first, on_sample=lambda i, r: seen.append(i)
    )
    assert seen == [0, 1, 2]
    assert again.sample_nll[:2] == full.sample_nll[:2]
    assert math.isclose(again.ppl, full.ppl, rel_tol=1e-6)
    with pytest.raises(InvalidArgumentError, match="`known` holds 4"):
        evaluate_perplexity(model, samples, None, known=first * 2)
