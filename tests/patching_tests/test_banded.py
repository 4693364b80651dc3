"""Banded attention for sliding-window layers: exact, O(n·window), and only where it applies.

The family matrix (`test_families.py`) checks every family with sliding layers end to end; this
module checks the kernel against SDPA under transformers' own mask on random tensors, the bf16
noise against the masked path's own, that no (n, n) tensor is made, and the fallbacks (padding,
a KV cache) and the compute path's choice.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from longrope_opt.patching import BANDED
from longrope_opt.patching import BANDED_FP32
from longrope_opt.patching import attention_of
from longrope_opt.patching import band_attention
from longrope_opt.patching import band_cost
from longrope_opt.patching import banded_for
from longrope_opt.patching import set_attention
from longrope_opt.patching import sliding_window_of
from tests.conftest import build_tiny_model
from tests.conftest import save_tiny_model_dir


def _masked(q, k, v, window, scale=None):
    """SDPA under transformers' sliding mask: key j is row i's when i - window < j <= i."""
    n = q.shape[2]
    i = torch.arange(n)
    mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                          enable_gqa=q.shape[1] != k.shape[1])  # fmt: skip


def _qkv(b, h, kvh, n, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, n, d, generator=g, dtype=dtype),
            torch.randn(b, kvh, n, d, generator=g, dtype=dtype),
            torch.randn(b, kvh, n, d, generator=g, dtype=dtype))  # fmt: skip


@pytest.mark.parametrize(("b", "h", "kvh", "n", "window", "block"), [
    (1, 4, 1, 300, 16, 256),   # Gemma 3's grouping, many windows in one block
    (2, 4, 2, 333, 64, 32),    # batch, block smaller than the window, ragged last block
    (1, 2, 2, 65, 64, 8),      # one row past the window
    (1, 4, 4, 64, 64, 16),     # exactly the window: plain causal
    (1, 4, 2, 40, 64, 16),     # shorter than the window
    (1, 2, 1, 50, 1, 16),      # a window of one key: each row sees itself
])  # fmt: skip
def test_band_equals_sdpa_under_the_sliding_mask(b, h, kvh, n, window, block) -> None:
    q, k, v = _qkv(b, h, kvh, n, 16)
    ours = band_attention(q, k, v, window=window, scale=0.3, block=block)
    reference = _masked(q, k, v, window, scale=0.3)
    assert ours.shape == reference.shape
    scale = reference.abs().max()
    assert (ours - reference).abs().max() <= 1e-5 * scale


def test_band_in_bf16_is_within_the_masked_paths_own_noise() -> None:
    q, k, v = _qkv(1, 4, 1, 1500, 64, seed=4)
    exact = _masked(q.double(), k.double(), v.double(), 100)
    low = [t.bfloat16() for t in (q, k, v)]
    ours = (band_attention(*low, window=100) - exact).abs().mean()
    theirs = (_masked(*low, 100) - exact).abs().mean()
    assert ours <= 1.25 * theirs, (ours, theirs)


class _Largest(TorchDispatchMode):
    """Records the largest tensor any operation makes."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_no_n_by_n_tensor_in_a_forward_of_a_sliding_model() -> None:
    model = build_tiny_model("gemma3", vocab_size=64, max_position_embeddings=4096)
    n = 2048
    ids = torch.randint(3, 64, (1, n), generator=torch.Generator().manual_seed(0))
    for name, expect_small in (("sdpa", False), (BANDED, True)):
        set_attention(model, name)
        with torch.inference_mode(), _Largest() as seen:
            model.get_decoder()(input_ids=ids, use_cache=False)
        # (the sdpa run shows the check can fail: transformers' mask is n × n)
        assert (seen.largest < n * n // 4) == expect_small, (name, seen.largest)


def test_padding_and_a_kv_cache_take_transformers_mask() -> None:
    # Left padding and cached decoding are what the band does not do: they get transformers'
    # own mask and SDPA, and give what SDPA gives.
    model = build_tiny_model("gemma3", vocab_size=64)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 64, (2, 40), generator=g)
    pad = torch.ones_like(ids)
    pad[0, :7] = 0
    outs = {}
    for name in ("sdpa", BANDED):
        set_attention(model, name)
        with torch.inference_mode():
            padded = model(input_ids=ids, attention_mask=pad, use_cache=False).logits
            generated = model.generate(ids[1:], max_new_tokens=24, do_sample=False,
                                       use_cache=True, pad_token_id=0)  # fmt: skip
        outs[name] = padded[:, 7:], generated
    torch.testing.assert_close(outs[BANDED][0], outs["sdpa"][0], atol=1e-5, rtol=1e-5)
    assert torch.equal(outs[BANDED][1], outs["sdpa"][1])


def test_the_window_and_the_banded_names() -> None:
    gemma = build_tiny_model("gemma3").config
    assert sliding_window_of(gemma) == 16
    assert sliding_window_of(build_tiny_model("llama").config) is None
    assert sliding_window_of(build_tiny_model("mistral").config) is None  # window None
    assert sliding_window_of(build_tiny_model("mistral", sliding_window=32).config) == 32
    qwen = build_tiny_model("qwen2", sliding_window=32).config  # use_sliding_window False
    assert sliding_window_of(qwen) is None
    assert banded_for("sdpa") == BANDED and banded_for("longrope_sdpa_fp32") == BANDED_FP32
    assert banded_for("eager") == "eager" and banded_for("flash_attention_2") == "flash_attention_2"
    assert band_cost(100, 512) == 1.0
    assert band_cost(65536, 512) == pytest.approx(2 * 512 / 65536, rel=0.01)


@pytest.mark.parametrize(("family", "dtype", "expected"), [
    ("gemma3", "bfloat16", BANDED), ("gemma3", "bf16-fp32attn", BANDED_FP32),
    ("gemma3", "float32", BANDED), ("llama", "bfloat16", "sdpa"),
    ("llama", "bf16-fp32attn", "longrope_sdpa_fp32"),
])  # fmt: skip
def test_load_model_runs_sliding_layers_banded(tmp_path, family, dtype, expected) -> None:
    from longrope_opt.models import load_model

    path = save_tiny_model_dir(tmp_path / family, family)
    model, _ = load_model(path, dtype=dtype, device="cpu")
    assert attention_of(model) == expected
    model, _ = load_model(path, dtype=dtype, device="cpu", attn="sdpa")  # asked: as asked
    assert attention_of(model) == "sdpa"
