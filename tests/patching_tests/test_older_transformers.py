"""Rotary modules as transformers before 5.18 wrote them, rescaled like today's.

Before 5.18 nearly every ``*RotaryEmbedding.forward`` was ``@torch.no_grad()`` stacked on
``@dynamic_rope_update``, and the M-RoPE text modules (Qwen3.5, ...) took position ids only as
``(3, batch, positions)``. The GPU image this project's device run uses has transformers 5.17;
these tests rebuild both shapes from today's modules so that the suite checks them on any
version: a dynamic-NTK model must stay the model as loaded under the identity patch (the update
must not run on the patch's view, where it re-registered the module's own buffers), and an
M-RoPE forward that refuses 2-D position ids must still pass the probe.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import LlamaConfig
from transformers import LlamaForCausalLM
from transformers.modeling_rope_utils import dynamic_rope_update

from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import pi


def _older(module: torch.nn.Module, forward) -> None:
    """Give `module` a class of its own whose forward is `forward` (what an older release had)."""
    module.__class__ = type(type(module).__name__, (type(module),), {"forward": forward})


def _dynamic_llama() -> LlamaForCausalLM:
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         vocab_size=128, max_position_embeddings=32,
                         rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                          "rope_theta": 10000.0})  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    rotary = model.model.rotary_emb
    inner = type(rotary).forward
    while hasattr(inner, "__wrapped__"):
        inner = inner.__wrapped__
    _older(rotary, torch.no_grad()(dynamic_rope_update(inner)))  # 5.17's stack of decorators
    return model


def _logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def test_no_grad_over_dynamic_update_identity_is_the_model_as_loaded() -> None:
    model = _dynamic_llama()
    spec = RopeSpec.from_config(model.config)
    ids = torch.randint(3, 128, (1, 56), generator=torch.Generator().manual_seed(0))  # past 32
    ref = _logits(model, ids)
    with apply_rope_scaling(model, RopeScaling(np.ones(spec.n_factors))):
        assert torch.equal(_logits(model, ids), ref)
    with apply_rope_scaling(model, pi(spec, 64)):  # a real rescale on the same module
        assert not torch.equal(_logits(model, ids), ref)
    assert torch.equal(_logits(model, ids), ref)  # the module's own state is untouched


def test_an_mrope_forward_that_takes_only_three_rows_of_positions_passes_the_probe() -> None:
    model = _dynamic_llama()
    rotary = model.model.rotary_emb

    def forward(self, x, position_ids):  # Qwen3.5's text rotary before 5.18, sections aside
        inv = self.inv_freq[None, None, :, None].float().expand(3, position_ids.shape[1], -1, 1)
        pos = position_ids[:, :, None, :].float()  # IndexError on (batch, positions)
        freqs = (inv @ pos).transpose(2, 3)[0]
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (
            emb.sin() * self.attention_scaling
        ).to(x.dtype)

    _older(rotary, forward)
    spec = RopeSpec.from_config(model.config)
    pos = torch.arange(5)[None].expand(3, 1, 5)
    x = torch.zeros(1, 5, 16)
    with apply_rope_scaling(model, pi(spec, 64)):  # probed on entry: refused before the fix
        cos, _ = rotary(x, pos)
    want = torch.cos(4 * rotary.inv_freq / 2)  # position 4, PI's λ = 2 on every frequency
    torch.testing.assert_close(cos[0, 4, : want.numel()], want)
