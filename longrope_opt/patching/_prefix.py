"""One forward's keys and values reused by many sequences that begin the same way.

Passkey prompts at one length differ only from the key on: before it they are the same
instruction and filler. A 32k prompt costs one full forward, so 20 keys cost 20 forwards. With
the common beginning run once and each prompt running only its own end, a prompt whose key sits
at depth d costs the rows from d on: about 1 − d of the linear work and 1 − d² of the causal
attention, ≈ 0.6 of a forward for keys spread uniformly.

How: an attention implementation registered with transformers (`AttentionInterface`, as
`SDPA_FP32` is) captures each layer's rotated keys and values during the prefix forward. During
a suffix forward it attends to the first `start` captured positions (no mask: all are earlier)
and causally to the suffix itself, with PyTorch's CPU flash kernel, which returns each row's
log-sum-exp; the two partial softmaxes are merged exactly by it. No transformers cache object
is used (its crop API changed within transformers 5), and no (suffix × prefix) mask is built.
Rotary positions stay exact: the suffix runs with position ids start, start+1, ….

Sliding-window layers (Gemma, Mistral, ...) see only keys within their window by *position*:
a continuation's rows attend, in one SDPA call under an explicit mask, to the few captured keys
inside their window and to their own earlier rows inside it; the captured forward itself runs
banded (`_banded`). The mask hook hands each sliding layer a `SlidingBand`, so the window is
the model's own, whatever the family passes to its attention.

CPU only: on other devices `shared_prefix` raises and callers run whole sequences.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from longrope_opt.patching._attention import BANDED_NAMES
from longrope_opt.patching._attention import SDPA_FP32
from longrope_opt.patching._attention import _register as _register_fp32
from longrope_opt.patching._attention import attention_of
from longrope_opt.patching._attention import set_attention
from longrope_opt.patching._banded import BANDED
from longrope_opt.patching._banded import BANDED_FP32
from longrope_opt.patching._banded import SlidingBand
from longrope_opt.patching._banded import is_sliding_mask
from longrope_opt.patching._banded import register_banded
from longrope_opt.patching._banded import sliding_window_of
from longrope_opt.patching._compile import fuse_elementwise
from longrope_opt.patching._compile import is_fused
from longrope_opt.patching._compile import unfuse_elementwise


#: Registered name of the prefix-sharing attention.
PREFIX_ATTENTION = "longrope_prefix"
_STATE = "_longrope_opt_prefix"  # attribute on each attention module: its `_LayerState`


class _LayerState:
    """What one attention layer keeps between the prefix forward and the suffix forwards."""

    def __init__(self, inner: str) -> None:
        self.inner = inner  # the implementation in force before (sdpa or SDPA_FP32)
        self.capture = True
        self.start = 0  # suffix forwards: how many captured positions precede the suffix
        self.wide_from: int | None = None  # branch forwards: suffix rows from here see all
        self.wide = slice(0, 0)  # branch forwards: the captured rows the wide rows also see
        self.key: torch.Tensor | None = None  # (B, KVH, P, D)
        self.value: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None  # continuation forwards: each row's position


def _flash_all(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every query row against every key (no mask): ``(out (B, H, S, D), lse (B, H, S))``.

    Grouped-query attention without repeating the keys: with no mask, the rows of the heads
    that share a kv head are just more rows against it, so the query is regrouped instead
    (a long prefix's keys would otherwise be copied ``H / KVH`` times per layer).
    """
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    b, h, s, d = query.shape
    kvh = key.shape[1]
    grouped = query.reshape(b, kvh, (h // kvh) * s, d)  # heads h = g·rep + r share kv head g
    out, lse = flash(grouped, key, value, 0.0, False, scale=scale)
    return out.reshape(b, h, s, d), lse.reshape(b, h, s)


def _merge(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, pre_k: torch.Tensor,
    pre_v: torch.Tensor, scale: float | None,
    wide: tuple[int, torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:  # fmt: skip
    """softmax over [prefix ‖ causal suffix] from flash passes, merged by log-sum-exp.

    `wide` = ``(row, more_k, more_v)``: query rows from `row` on also attend to `more_k`/`more_v`
    (a third pass over those rows only, merged the same way).
    """
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    query = query.contiguous()
    rep = query.shape[1] // key.shape[1]  # grouped-query attention: one kv head per group
    if rep > 1:  # the suffix is short: repeating its keys costs nothing
        key, value = key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1)
    out_p, lse_p = _flash_all(query, pre_k, pre_v, scale)  # (B, H, S, D), (B, H, S)
    out_s, lse_s = flash(query, key, value, 0.0, True, scale=scale)
    parts = [(out_p.float(), lse_p), (out_s.float(), lse_s)]
    if wide is not None:
        row, more_k, more_v = wide
        out_w, lse_w = _flash_all(query[:, :, row:].contiguous(), more_k, more_v, scale)
        full = torch.zeros_like(out_s, dtype=torch.float32)
        full[:, :, row:] = out_w.float()
        lse = torch.full_like(lse_s, -math.inf)  # rows before `row` do not see this part
        lse[:, :, row:] = lse_w
        parts.append((full, lse))
    top = torch.stack([lse for _, lse in parts]).amax(0)
    weights = [torch.exp(lse - top)[..., None] for _, lse in parts]
    out = sum(o * w for (o, _), w in zip(parts, weights)) / sum(weights)  # (B, H, S, D) fp32
    return out.to(query.dtype)


def _prefix_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, *args: Any, **kwargs: Any
) -> Any:
    # transformers on use: only where an attention is registered or run
    from transformers import AttentionInterface

    state: _LayerState = module.__dict__[_STATE]
    fp32 = state.inner in (SDPA_FP32, BANDED_FP32)
    if state.capture:  # the shared beginning: an ordinary causal forward, remembered
        state.key, state.value = key, value
        name = (BANDED_FP32 if fp32 else BANDED) if attention_mask is not None else state.inner
        inner: Any = AttentionInterface._global_mapping[name]
        return inner(module, query, key, value, attention_mask, *args, **kwargs)
    assert state.key is not None and state.value is not None
    dtype = query.dtype
    if fp32:  # bf16 weights, fp32 attention: as the path's own kernel
        query, key, value = query.float(), key.float(), value.float()
    if isinstance(attention_mask, SlidingBand):
        out = _window_rows(state, query, key, value, attention_mask.window,
                           kwargs.get("scaling", getattr(module, "scaling", None)))  # fmt: skip
        return out.transpose(1, 2).contiguous().to(dtype), None
    pre_k = state.key[:, :, : state.start].to(key.dtype)
    pre_v = state.value[:, :, : state.start].to(value.dtype)
    scale = kwargs.get("scaling", getattr(module, "scaling", None))
    wide = None
    rows, more = query.shape[2], state.wide
    if state.wide_from is not None and state.wide_from < rows and more.stop > more.start:
        wide = (state.wide_from, state.key[:, :, more].to(key.dtype),
                state.value[:, :, more].to(value.dtype))  # fmt: skip
    out = _merge(query, key, value, pre_k, pre_v, scale, wide)  # (B, H, S, D)
    return out.transpose(1, 2).contiguous().to(dtype), None  # (B, S, H, D), as transformers'


def _window_rows(
    state: _LayerState, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    window: int, scale: float | None,
) -> torch.Tensor:  # fmt: skip
    """A sliding layer's continuation rows: ``(B, H, S, D)``.

    Row i (position p_i) sees a captured key at position c when c > p_i - window and either
    c < start, or the row is a wide one and c lies in the wide slice; it sees its own rows j <= i
    with p_i - p_j < window. Only captured keys within reach of some row are gathered.
    """
    assert state.key is not None and state.value is not None and state.positions is not None
    pos = state.positions.to(query.device)  # (S,)
    rows = pos.numel()
    low, high = int(pos.min()) - window + 1, int(pos.max())
    wide_from = rows if state.wide_from is None else state.wide_from
    near = torch.arange(max(0, low), min(state.start, high + 1))
    if wide_from < rows:
        wide = torch.arange(state.wide.start, state.wide.stop)
        near = torch.unique(torch.cat([near, wide[(wide >= low) & (wide <= high)]]))
    near = near.to(query.device)
    row = torch.arange(rows, device=query.device)[:, None]
    in_window = (near[None, :] > pos[:, None] - window) & (near[None, :] <= pos[:, None])
    before = near[None, :] < state.start
    in_wide = (row >= wide_from) & (near[None, :] >= state.wide.start) & (
        near[None, :] < state.wide.stop)
    seen_captured = in_window & (before | in_wide)  # (S, K)
    seen_own = (row >= row.T) & (pos[:, None] - pos[None, :] < window)  # (S, S)
    keys = torch.cat([state.key[:, :, near].to(key.dtype), key], dim=2)
    values = torch.cat([state.value[:, :, near].to(value.dtype), value], dim=2)
    mask = torch.cat([seen_captured, seen_own], dim=1)
    rep = query.shape[1] // key.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(
        query.contiguous(), keys, values, attn_mask=mask, scale=scale, enable_gqa=rep > 1)


def _prefix_mask(*args: Any, **kwargs: Any) -> SlidingBand | None:
    # `_prefix_attention` applies causality itself; a (suffix × total) mask would cost memory.
    # A sliding layer is told its window, whatever the length of the rows at hand.
    local = kwargs.get("local_size")
    if local is None:
        return None
    if not is_sliding_mask(kwargs["mask_function"], int(local), kwargs.get("device", "cpu")):
        raise ValueError("shared prefixes support causal and sliding-window masks only.")
    return SlidingBand(int(local))


def _register() -> None:
    # transformers on use: only where an attention is registered or run
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    if PREFIX_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(PREFIX_ATTENTION, _prefix_attention)
        AttentionMaskInterface.register(PREFIX_ATTENTION, _prefix_mask)


class SharedPrefix:
    """Runs a shared beginning once, then any number of continuations of it (see module doc)."""

    def __init__(self, model: Any, states: list[Any]) -> None:
        self._model = model
        self._states = states
        self.length = 0  # captured positions
        # `resumable_forward` keys a capture by this too: a plain forward's output is the same,
        # but it leaves no keys and values behind
        self.resume_tag = f"{PREFIX_ATTENTION}:{states[0].inner if states else ''}"

    @property
    def keeping(self) -> bool:
        """Whether the next forward is a capture (`resumable_forward` keeps those only)."""
        return bool(self._states) and self._states[0].capture

    def _layer(self, layer: int) -> _LayerState | None:
        for module in self._model.get_decoder().layers[layer].modules():
            state = module.__dict__.get(_STATE)
            if state is not None:
                return state
        return None

    def layer_tensors(self, layer: int) -> dict[str, torch.Tensor]:
        """The keys and values decoder layer `layer` captured (for `resumable_forward`)."""
        state = self._layer(layer)
        if state is None or state.key is None or state.value is None:
            return {}
        return {"key": state.key.contiguous(), "value": state.value.contiguous()}

    def load_layer_tensors(self, layer: int, tensors: dict[str, torch.Tensor]) -> None:
        """Put back what `layer_tensors` gave for a capture of the same tokens."""
        state = self._layer(layer)
        if state is not None and tensors:
            state.key, state.value = tensors["key"], tensors["value"]

    def _run(self, ids: torch.Tensor, start: int, positions: torch.Tensor | None = None) -> torch.Tensor:
        device = self._model.get_output_embeddings().weight.device
        ids = ids.to(device)[None]  # (1, T)
        if positions is None:
            positions = torch.arange(start, start + ids.shape[1])
        for s in self._states:
            s.positions = positions
        positions = positions.to(device)[None]  # (1, T)
        # An explicit all-ones mask: position ids that do not start at 0 must not be read as
        # packed sequences (transformers' masking_utils.find_packed_sequence_indices).
        out = self._model.get_decoder()(
            input_ids=ids, position_ids=positions, attention_mask=torch.ones_like(ids),
            use_cache=False,
        )  # fmt: skip
        return out.last_hidden_state[0]  # (T, H)

    def capture(self, ids: torch.Tensor) -> torch.Tensor:
        """Run the shared beginning (1-D tokens from position 0); returns its hidden states."""
        for s in self._states:
            s.capture = True
        hidden = self._run(ids, 0)
        self.length = int(ids.numel())
        for s in self._states:
            s.capture = False
        return hidden

    def continue_from(self, start: int, ids: torch.Tensor) -> torch.Tensor:
        """Hidden states ``(T, H)`` of `ids` placed at positions ``start …`` after the first
        `start` captured tokens, exactly as in one forward over ``prefix[:start] + ids``."""
        if not 0 < start <= self.length:
            raise ValueError(f"`start` must be in [1, {self.length}], got {start}.")
        for s in self._states:
            s.start, s.wide_from = start, None
        return self._run(ids, start)

    def branch(
        self, start: int, ids: torch.Tensor, *, wide_from: int, position: int,
        wide: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """Hidden states ``(T, H)`` of a branch grafted onto the captured beginning.

        Rows ``ids[:wide_from]`` sit at positions ``start …`` and see the first `start` captured
        tokens, as `continue_from` places them; rows ``ids[wide_from:]`` sit at positions
        ``position …`` and see every captured token. Every row sees the branch's earlier rows.
        The captured tokens after `start` never see the branch: a passkey inserted into a
        haystack that the haystack's later tokens do not read (`passkey_results`'s
        ``"branched"`` form), which costs one forward for any number of keys.

        Args:
            start: Captured tokens the branch's first rows follow (1 … captured length).
            ids: The branch's tokens, 1-D.
            wide_from: First row that sees the whole captured beginning (0 … ``len(ids)``).
            position: Position of row `wide_from` (>= ``start + wide_from``).
        """
        if not 0 < start <= self.length:
            raise ValueError(f"`start` must be in [1, {self.length}], got {start}.")
        if not 0 <= wide_from <= ids.numel():
            raise ValueError(f"`wide_from` must be in [0, {ids.numel()}], got {wide_from}.")
        if position < start + wide_from:
            raise ValueError(f"`position` must be >= {start + wide_from}, got {position}.")
        for s in self._states:
            s.start, s.wide_from = start, wide_from
            s.wide = slice(*(wide or (start, self.length)))
        positions = torch.cat([
            torch.arange(start, start + wide_from),
            torch.arange(position, position + ids.numel() - wide_from),
        ])  # fmt: skip
        return self._run(ids, start, positions)


def can_share_prefix(model: Any) -> bool:
    """Whether `shared_prefix` works for `model`: on the CPU, with SDPA attention (banded or
    not), and no attention SDPA cannot run (soft-capped logits, attention sinks)."""
    device = model.get_output_embeddings().weight.device
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    eager_only = getattr(config, "attn_logit_softcapping", None) is not None or any(
        hasattr(m, "sinks") for m in model.modules())
    chunked = bool(getattr(config, "attention_chunk_size", None))
    sdpa = attention_of(model) in ("sdpa", SDPA_FP32, *BANDED_NAMES)
    return device.type == "cpu" and sdpa and not eager_only and not chunked


@contextlib.contextmanager
def shared_prefix(model: Any) -> Iterator[SharedPrefix]:
    """Context in which `model` can run one prefix and many continuations of it (CPU only).

    The model's attention implementation is switched and restored on exit; element-wise fusion
    (`fuse_elementwise`) is lifted meanwhile, since every continuation has its own length and a
    compiled layer would compile again for each.

    Raises:
        ValueError: The model is not on the CPU, or its attention is not SDPA (fp32 or not).
    """
    device = model.get_output_embeddings().weight.device
    inner = attention_of(model)
    if not can_share_prefix(model):
        raise ValueError(
            f"shared prefixes need a CPU model with SDPA attention; got {device.type} with "
            f"{inner!r}."
        )
    _register()
    if inner == SDPA_FP32:
        _register_fp32()
    if sliding_window_of(model.config) is not None or inner in BANDED_NAMES:
        register_banded()
    fused = is_fused(model)
    if fused:
        unfuse_elementwise(model)
    modules = [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "o_proj")]
    states = [_LayerState(inner) for _ in modules]
    for module, state in zip(modules, states):
        module.__dict__[_STATE] = state
    set_attention(model, PREFIX_ATTENTION)
    try:
        yield SharedPrefix(model, states)
    finally:
        set_attention(model, inner)
        for module in modules:
            module.__dict__.pop(_STATE, None)
        if fused:
            fuse_elementwise(model)
