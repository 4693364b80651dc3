"""Sliding-window layers at the cost of their window: banded attention, exact.

transformers gives a sliding-window layer a full ``(n, n)`` boolean mask under SDPA, and PyTorch's
CPU attention computes every block of it, masked or not: a sliding layer costs twice a causal
global one (measured at 8k: 2.7x), and the mask alone is 4 GiB at 64k, 16 GiB at 128k. Only the
band is needed: the first `window` rows are plain causal attention, and every later block of
`block` query rows attends to the ``block + window - 1`` keys that end at its last row, under one
``(block, block + window - 1)`` band mask that is the same for every block. The blocks run as one
batched SDPA call (queries of the heads that share a kv head stacked as rows: no key copies per
head), so a sliding layer costs O(n·w) time and memory.

How it plugs in: two attention implementations registered with transformers by name,
`BANDED` (the model's dtype) and `BANDED_FP32` (fp32 attention, as `SDPA_FP32`), with a mask
function that hands a sliding layer a `SlidingBand` marker instead of the mask, and a global layer
``None`` (SDPA's causal kernel), whenever the mask would be only causal + window (no padding, no
cache offset, no packed sequences, no image blocks: transformers then allows its own causal skip).
Anything else gets transformers' own SDPA mask and runs as SDPA does. A marker, not ``None``: a
family that touched a sliding mask before its attention would fail loudly, never attend to
everything.

Families whose attention SDPA cannot run (logit soft-capping: Gemma 2; attention sinks:
GPT-OSS) run the same blocks through their eager formula (`_math_blocks`), global layers included,
so that the path stays exact for them as well.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


#: Registered names: banded attention in the model's dtype, and with fp32 attention.
BANDED = "longrope_banded"
BANDED_FP32 = "longrope_banded_fp32"
#: Families whose attention adds a mask of its own onto transformers' one before attending (Doge's
#: dynamic mask): they get transformers' SDPA mask exactly as they would without the banded path
#: (transformers 5.17 lets Doge skip it; later releases always build it). Their sliding layers cost
#: what they cost before.
OWN_MASK = frozenset({"doge"})
#: Query rows per block (measured at 8k, window 512, head dim 256, on a 2-core Zen 4: 128 and
#: 256 are level and fastest, 512 is 1.3x and 1024 1.9x their time: `bench/banded.py`).
BLOCK = 256


@dataclass(frozen=True)
class SlidingBand:
    """What a sliding layer receives as its attention mask: "causal, within `window` keys".

    Row ``i`` attends to keys ``j`` with ``i - window < j <= i`` (transformers' sliding
    window: `masking_utils.sliding_window_overlay` and the causal mask).
    """

    window: int


def band_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, window: int,
    scale: float | None = None, block: int = BLOCK,
) -> torch.Tensor:  # fmt: skip
    """Causal attention within a sliding window of `window` keys, in O(n·window).

    Args:
        query: ``(B, H, T, D)``.
        key: ``(B, KVH, T, D)``, ``H`` a multiple of ``KVH`` (grouped-query attention).
        value: ``(B, KVH, T, Dv)``.
        window: Keys each row sees, itself included (>= 1).
        scale: Softmax scale (None: ``D ** -0.5``).
        block: Query rows per block.

    Returns:
        ``(B, H, T, Dv)``, equal to SDPA under the sliding mask within floating-point rounding.
    """
    b, h, t, d = query.shape
    kvh, dv = key.shape[1], value.shape[-1]
    rep = h // kvh
    head = min(t, window)  # rows that see every earlier key: plain causal attention
    first = F.scaled_dot_product_attention(
        query[:, :, :head], key[:, :, :head], value[:, :, :head], is_causal=True, scale=scale,
        enable_gqa=rep > 1,
    )  # fmt: skip
    rows = t - head
    if rows <= 0:
        return first
    blocks = -(-rows // block)
    pad = blocks * block - rows
    span = block + window - 1  # keys of one block: its own rows and the window - 1 before
    # Block n's rows are head + n·block …; its keys start window - 1 earlier (>= 0: head = window).
    keys = F.pad(key[:, :, head - window + 1 :], (0, 0, 0, pad))  # (B, KVH, W-1 + rows + pad, D)
    values = F.pad(value[:, :, head - window + 1 :], (0, 0, 0, pad))

    def windows(x: torch.Tensor, width: int) -> torch.Tensor:  # (B·blocks, KVH, span, width)
        return x.unfold(2, span, block).permute(0, 2, 1, 4, 3).reshape(b * blocks, kvh, span, width)

    q = F.pad(query[:, :, head:], (0, 0, 0, pad))  # (B, H, blocks·block, D)
    # the rep query heads of one kv head become rep·block rows against its keys
    q = q.reshape(b, kvh, rep, blocks, block, d).permute(0, 3, 1, 2, 4, 5)
    q = q.reshape(b * blocks, kvh, rep * block, d)
    r = torch.arange(block, device=query.device)[:, None]
    c = torch.arange(span, device=query.device)[None, :]
    band = ((c >= r) & (c < r + window)).repeat(rep, 1)  # (rep·block, span): key c is row r's
    out = F.scaled_dot_product_attention(q, windows(keys, d), windows(values, dv), attn_mask=band,
                                         scale=scale)  # fmt: skip
    out = out.reshape(b, blocks, kvh, rep, block, dv).permute(0, 2, 3, 1, 4, 5)
    out = out.reshape(b, h, blocks * block, dv)[:, :, :rows]
    return torch.cat([first, out], dim=2)


def _math_blocks(
    module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
    window: int | None, scale: float, softcap: float | None, sinks: torch.Tensor | None,
    block: int = BLOCK,
) -> torch.Tensor:  # fmt: skip
    """The eager formula (soft-capped logits, attention sinks) one block of rows at a time,
    against only the keys the block can see: ``(B, H, T, Dv)``. `window` None: causal."""
    b, h, t, _ = query.shape
    rep = h // key.shape[1]
    key = key.repeat_interleave(rep, 1) if rep > 1 else key
    value = value.repeat_interleave(rep, 1) if rep > 1 else value
    out = []
    low = torch.finfo(query.dtype).min
    for start in range(0, t, block):
        stop = min(t, start + block)
        first = 0 if window is None else max(0, start - window + 1)
        scores = torch.matmul(query[:, :, start:stop], key[:, :, first:stop].transpose(2, 3))
        scores = scores * scale
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        i = torch.arange(start, stop, device=query.device)[:, None]
        j = torch.arange(first, stop, device=query.device)[None, :]
        seen = (j <= i) if window is None else (j <= i) & (j > i - window)
        scores = scores + torch.where(seen, 0.0, low).to(scores.dtype)
        if sinks is None:
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        else:  # GPT-OSS: one learned logit per head joins each row's softmax, then is dropped
            sink = sinks.reshape(1, -1, 1, 1).expand(b, -1, stop - start, -1).to(scores.dtype)
            both = torch.cat([scores, sink], dim=-1)
            both = both - both.max(dim=-1, keepdim=True).values
            probs = F.softmax(both, dim=-1, dtype=both.dtype)[..., :-1].to(value.dtype)
        out.append(torch.matmul(probs, value[:, :, first:stop]))
    return torch.cat(out, dim=2)


def _eager_only(kwargs: dict[str, Any]) -> bool:
    # SDPA has neither soft-capped logits nor attention sinks
    return kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None


def _fallback(module: Any, name: str, query: Any, key: Any, value: Any, mask: Any,
              *args: Any, **kwargs: Any) -> Any:  # fmt: skip
    # A mask transformers materialised (padding, a cache, packed sequences): run it as the
    # model's own path would, SDPA, or its eager formula where SDPA cannot run.
    # transformers on use: only where an attention is registered or run
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if _eager_only(kwargs):
        eager: Any = sys.modules[type(module).__module__].eager_attention_forward
        if mask is not None and mask.dtype == torch.bool:
            mask = torch.where(mask, 0.0, torch.finfo(query.dtype).min).to(query.dtype)
        return eager(module, query, key, value, mask, *args, **kwargs)
    if name != BANDED_FP32:
        return sdpa_attention_forward(module, query, key, value, mask, *args, **kwargs)
    dtype = query.dtype  # bf16 weights, fp32 attention: as `SDPA_FP32`
    if mask is not None and mask.is_floating_point():
        mask = mask.float()
    out, weights = sdpa_attention_forward(module, query.float(), key.float(), value.float(),
                                          mask, *args, **kwargs)  # fmt: skip
    return out.to(dtype), weights


def _banded(name: str) -> Any:
    def forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                *args: Any, **kwargs: Any) -> Any:  # fmt: skip
        plain = attention_mask is None or isinstance(attention_mask, SlidingBand)
        if not plain or query.shape[2] != key.shape[2] or query.shape[2] == 1:
            return _fallback(module, name, query, key, value, attention_mask, *args, **kwargs)
        window = attention_mask.window if isinstance(attention_mask, SlidingBand) else None
        dtype = query.dtype
        if name == BANDED_FP32:
            query, key, value = query.float(), key.float(), value.float()
        scale = kwargs.get("scaling")
        if _eager_only(kwargs):
            scale = scale if scale is not None else module.head_dim**-0.5
            out = _math_blocks(module, query, key, value, window=window, scale=scale,
                               softcap=kwargs.get("softcap"), sinks=kwargs.get("s_aux"))  # fmt: skip
        elif window is None or window >= query.shape[2]:
            rep = query.shape[1] // key.shape[1]
            out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scale,
                                                 enable_gqa=rep > 1)  # fmt: skip
        else:
            out = band_attention(query, key, value, window=window, scale=scale)
        return out.transpose(1, 2).contiguous().to(dtype), None  # (B, T, H, D), as transformers'

    forward.__name__ = f"{name}_forward"
    return forward


def is_sliding_mask(mask_function: Any, window: int, device: Any) -> bool:
    """Whether a transformers mask function is its sliding-window rule for `window` (not a
    chunked or bidirectional one), read off the function at the band's edges."""
    def at(q: int, kv: int) -> bool:
        zero = torch.tensor(0, device=device)
        return bool(mask_function(zero, zero, torch.tensor(q, device=device),
                                  torch.tensor(kv, device=device)))  # fmt: skip

    far = window + 3
    return (at(far, far) and at(far, far - window + 1) and not at(far, far - window)
            and not at(far, far + 1) and at(window - 1, 0) and at(window, 1))  # fmt: skip


def _band_mask(
    batch_size: int, q_length: int, kv_length: int, q_offset: Any = 0, kv_offset: int = 0,
    mask_function: Any = None, attention_mask: Any = None, local_size: int | None = None,
    allow_is_causal_skip: bool = True, **kwargs: Any,
) -> Any:  # fmt: skip
    """transformers' mask interface: `SlidingBand` / None where the mask is only causal (+ a
    window), transformers' SDPA mask otherwise."""
    # transformers on use: only where an attention is registered or run
    from transformers.masking_utils import causal_mask_function
    from transformers.masking_utils import sdpa_mask

    mask_function = mask_function or causal_mask_function
    device = kwargs.get("device", "cpu")
    config = kwargs.get("config")
    own = getattr(config, "model_type", None) in OWN_MASK
    unpadded = attention_mask is None or bool(attention_mask.all())
    plain = (not own and allow_is_causal_skip and unpadded and q_length == kv_length and q_length > 1
             and isinstance(q_offset, int) and q_offset == 0 and kv_offset == 0)  # fmt: skip
    if plain and local_size is None and mask_function is causal_mask_function:
        return None
    if plain and local_size is not None and is_sliding_mask(mask_function, local_size, device):
        return SlidingBand(int(local_size)) if kv_length > local_size else None
    return sdpa_mask(
        batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
        kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
        local_size=local_size, allow_is_causal_skip=allow_is_causal_skip, **kwargs,
    )


def register_banded() -> None:
    """Register `BANDED` and `BANDED_FP32` with transformers' attention and mask interfaces."""
    # transformers on use: only where an attention is registered or run
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    for name in (BANDED, BANDED_FP32):
        if name not in AttentionInterface._global_mapping:
            AttentionInterface.register(name, _banded(name))
            AttentionMaskInterface.register(name, _band_mask)


def sliding_window_of(config: Any) -> int | None:
    """The sliding window of a model with sliding-window layers, else None.

    A window counts when some layer slides (``layer_types`` names ``sliding_attention``), or,
    for families without per-layer types (Mistral), when the config sets one and does not turn
    it off (Qwen2's ``use_sliding_window``).
    """
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    window = getattr(text, "sliding_window", None)
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return None
    if getattr(text, "use_sliding_window", True) is False:
        return None
    types = getattr(text, "layer_types", None)
    if types is not None and not any("sliding" in str(t) for t in types):
        return None
    if getattr(text, "attention_chunk_size", None):  # chunked attention is another mask
        return None
    return window


def banded_for(attn: str) -> str:
    """The banded implementation that stands in for `attn` on a model with sliding layers
    (``sdpa`` → `BANDED`, fp32 SDPA → `BANDED_FP32`); any other name is returned as it is."""
    return {"sdpa": BANDED, "longrope_sdpa_fp32": BANDED_FP32}.get(attn, attn)


def band_cost(n: int, window: int) -> float:
    """Keys a sliding layer's rows see, as a fraction of a causal layer's (the band's limit)."""
    if n <= window:
        return 1.0
    seen = window * (window + 1) / 2 + (n - window) * window
    return seen / (n * (n + 1) / 2)

