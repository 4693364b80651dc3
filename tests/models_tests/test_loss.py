"""`chunked_nll` against the whole-vocabulary loss: the CPU's vocabulary tiles give the same sums
and the same argmax hits, with each family's logit post-processing, a biased head, bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from longrope_opt.models import _loss
from longrope_opt.models import chunked_nll
from longrope_opt.models import final_logits
from tests.conftest import build_tiny_model


VOCAB = 1000


def _whole(model, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[float, int]:
    """Σ NLL and hits from the (S, V) logits at once."""
    logits = final_logits(model, model.get_output_embeddings()(hidden).float())
    nll = F.cross_entropy(logits, targets, reduction="sum")
    return float(nll), int((logits.argmax(-1) == targets).sum())


def _case(family: str, dtype: torch.dtype = torch.float32, seed: int = 0, **config):
    model = build_tiny_model(family, vocab_size=VOCAB, **config).to(dtype)
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(150, model.config.hidden_size, generator=g).to(dtype)
    targets = torch.randint(0, VOCAB, (150,), generator=g)
    with torch.no_grad():
        # a third of the targets are the argmax, so that hits count across tiles
        top = final_logits(model, model.get_output_embeddings()(hidden).float()).argmax(-1)
    targets[::3] = top[::3]
    return model, hidden, targets


@pytest.mark.parametrize("family, config", [
    ("llama", {}), ("gemma3", {"final_logit_softcapping": 3.0}),  # Gemma 2/3 cap the logits
    ("llama", {"logit_scale": 0.7}), ("llama", {"logits_scaling": 2.0}),  # Cohere, Granite
])  # fmt: skip
def test_tiles_sum_what_the_whole_vocabulary_sums(family: str, config, monkeypatch) -> None:
    monkeypatch.setattr(_loss, "TILE_ELEMENTS", 64 * 256)  # 256 entries a tile: 4 tiles
    model, hidden, targets = _case(family, **config)
    assert all(getattr(model.config, k) == v for k, v in config.items())
    assert _loss.tile_vocab(64) == 256 and _loss._tiles(model, hidden, recompute=False)
    with torch.no_grad():
        nll, hits = chunked_nll(model, hidden, targets, chunk_size=64)
        want_nll, want_hits = _whole(model, hidden, targets)
    assert float(nll) == pytest.approx(want_nll, rel=1e-6)
    assert hits == want_hits and hits >= 50


def test_a_biased_head_and_bf16_tile_alike(monkeypatch) -> None:
    monkeypatch.setattr(_loss, "TILE_ELEMENTS", 64 * 300)  # tiles of 300: the last one shorter
    model, hidden, targets = _case("llama", torch.bfloat16)
    head = torch.nn.Linear(model.config.hidden_size, VOCAB, bias=True).to(torch.bfloat16)
    model.set_output_embeddings(head)
    with torch.no_grad():
        nll, hits = chunked_nll(model, hidden, targets, chunk_size=64)
        want_nll, want_hits = _whole(model, hidden, targets)
    assert float(nll) == pytest.approx(want_nll, rel=1e-5)
    assert hits == want_hits


def test_training_and_other_heads_keep_the_whole_chunk_path() -> None:
    model, hidden, _ = _case("llama")
    assert not _loss._tiles(model, hidden, recompute=True)  # a backward would keep every tile
    # off the CPU (a GPU streams logits fast; tiles would only add launches): the meta device
    # stands in for CUDA here
    assert not _loss._tiles(model, hidden.to("meta"), recompute=False)

    class Head(torch.nn.Linear):
        pass

    model.set_output_embeddings(Head(model.config.hidden_size, VOCAB, bias=False))
    assert not _loss._tiles(model, hidden, recompute=False)
