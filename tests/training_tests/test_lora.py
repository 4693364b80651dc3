"""LoRA through peft: adapters on the attention projections and the norms, merged into the
export with the adapted model's logits, and loadable by peft on the extended base."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from longrope_opt import RopeSpec
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import export_model
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import RopeScaling
from longrope_opt.training import add_lora
from longrope_opt.training import finetune
from tests.conftest import TINY_LENGTH
from tests.conftest import build_tiny_model


TARGET = 4 * TINY_LENGTH


def _documents(n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, 128, (TINY_LENGTH,), generator=g) for _ in range(n)]


def _logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits.float()


def test_lora_trains_the_projections_and_norms_only() -> None:
    model = build_tiny_model("llama")
    adapted = add_lora(model, 4)
    trainable = [n for n, p in adapted.named_parameters() if p.requires_grad]
    assert any("q_proj.lora_A" in n for n in trainable) and any("o_proj.lora_B" in n for n in trainable)
    assert any("input_layernorm" in n for n in trainable) and any("model.norm." in n for n in trainable)
    assert not any("mlp" in n or "embed" in n or "lm_head" in n for n in trainable)
    with pytest.raises(InvalidArgumentError, match="`lora` must be an integer rank >= 1, got 0"):
        add_lora(build_tiny_model("llama"), 0)


def test_a_merged_adapter_exports_the_adapted_models_logits(tmp_path) -> None:
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    rng = np.random.default_rng(0)
    scaling = RopeScaling(np.sort(rng.uniform(1.0, 4.0, spec.n_factors)), 0, 1.1)
    base_dir = export_model(model, None, tmp_path / "extended", scaling, target_length=TARGET)
    result = finetune(model, _documents(2), scaling, steps=3, learning_rate=1e-2, lora=4,
                      pose_tokens=TINY_LENGTH, target_length=TARGET, autocast_dtype=None,
                      progress=False)  # fmt: skip
    adapted = result.adapter
    ids = torch.randint(3, 128, (1, TINY_LENGTH + 40), generator=torch.Generator().manual_seed(1))
    with apply_rope_scaling(model, scaling):
        want = _logits(adapted, ids)
    adapted.save_pretrained(tmp_path / "adapter")
    size = sum(p.stat().st_size for p in (tmp_path / "adapter").iterdir())
    assert size < 1_000_000  # the tiny model's adapter: a fraction of its weights
    merged = adapted.merge_and_unload()
    out = export_model(merged, None, tmp_path / "merged", scaling, target_length=TARGET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reloaded = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
        # the adapter alone, on the extended model it was trained on, as peft loads it
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="eager").eval()
        plain = _logits(base, ids)  # before peft wraps it (in place)
        again = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    assert not torch.allclose(plain, want, atol=1e-4)  # the training moved it
    torch.testing.assert_close(_logits(reloaded, ids), want, atol=1e-5, rtol=0)
    torch.testing.assert_close(_logits(again, ids), want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("lora", [None, 2])
def test_without_a_learning_rate_lora_trains_at_ten_times_full_fine_tunings(lora) -> None:
    from transformers import TrainerCallback

    from longrope_opt.training import FULL_LEARNING_RATE
    from longrope_opt.training import LORA_LEARNING_RATE

    seen: list[float] = []

    class Peak(TrainerCallback):  # what Trainer was told, not what the module says it tells it
        def on_train_begin(self, args, state, control, **kwargs):
            seen.append(args.learning_rate)

    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    finetune(model, _documents(1), RopeScaling(np.ones(spec.n_factors)), steps=1, lora=lora,
             autocast_dtype=None, callbacks=[Peak()], progress=False)  # fmt: skip
    assert seen == [LORA_LEARNING_RATE if lora else FULL_LEARNING_RATE]
    assert LORA_LEARNING_RATE == 10 * FULL_LEARNING_RATE
