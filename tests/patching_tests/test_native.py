"""Checkpoints that already carry a RoPE scaling are extended on top of what they are.

Llama 3.x (``llama3``), Qwen past 32k (``yarn``), Phi-3.5 (``longrope``), fine-tunes (``linear``)
and dynamic NTK, on tiny Llama, Qwen2, Qwen3 and Phi-3 models: the identity is the model as loaded
bit for bit, the spec's native factors are the module's frequencies, a searched scaling composes
with them (its frequencies are θ/(ν·λ)), and an export reloads in vanilla transformers with the
patched logits.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers import LlamaConfig
from transformers import LlamaForCausalLM
from transformers import Phi3Config
from transformers import Phi3ForCausalLM
from transformers import Qwen2Config
from transformers import Qwen2ForCausalLM
from transformers import Qwen3Config
from transformers import Qwen3ForCausalLM

from longrope_opt.models import export_model
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.patching import composed_inv_freq
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import critical_dimension
from longrope_opt.rope import pi
from longrope_opt.rope import yarn


PRETRAINED = 32  # the pre-extension window of the native scalings
SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, vocab_size=128, pad_token_id=0)  # fmt: skip
FAMILIES = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "phi3": (Phi3Config, Phi3ForCausalLM),
}
NATIVE = {
    "llama3": (4 * PRETRAINED, dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                    high_freq_factor=4.0,
                                    original_max_position_embeddings=PRETRAINED)),
    "yarn": (PRETRAINED, dict(rope_type="yarn", factor=4.0,
                              original_max_position_embeddings=PRETRAINED)),
    "longrope": (4 * PRETRAINED, dict(rope_type="longrope",
                                      short_factor=[1.0 + 0.05 * i for i in range(8)],
                                      long_factor=[1.0 + 0.6 * i for i in range(8)],
                                      original_max_position_embeddings=PRETRAINED)),
    "linear": (2 * PRETRAINED, dict(rope_type="linear", factor=2.0)),
    "dynamic": (PRETRAINED, dict(rope_type="dynamic", factor=2.0)),
}  # fmt: skip


def _model(family: str, native: str):
    config_class, model_class = FAMILIES[family]
    length, params = NATIVE[native]
    params = {"rope_theta": 10000.0, "partial_rotary_factor": 1.0, **params}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = config_class(**SIZES, max_position_embeddings=length, rope_parameters=params)
        if family == "phi3":
            config.original_max_position_embeddings = PRETRAINED
        torch.manual_seed(0)
        return model_class(config).eval()


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def _ids(n: int) -> torch.Tensor:
    return torch.randint(3, 128, (1, n), generator=torch.Generator().manual_seed(0))


# Phi-3's config takes longrope only (its checkpoints: Phi-3.5, Phi-4-mini)
CASES = [(f, n) for f in FAMILIES for n in NATIVE if f != "phi3" or n == "longrope"]


@pytest.mark.parametrize(("family", "native"), CASES)
def test_identity_is_the_model_as_loaded(family: str, native: str) -> None:
    model = _model(family, native)
    spec = RopeSpec.from_config(model.config)
    assert spec.rope_type == native
    ids = _ids(spec.original_length + 24)  # past the trained length: dynamic/longrope switch
    ref = _logits(model, ids)
    with apply_rope_scaling(model, RopeScaling(np.ones(spec.n_factors))):
        assert torch.equal(_logits(model, ids), ref)


@pytest.mark.parametrize(("family", "native"), CASES)
def test_spec_is_the_checkpoint(family: str, native: str) -> None:
    model = _model(family, native)
    spec = RopeSpec.from_config(model.config)
    rotary = model.model.rotary_emb
    ids = _ids(spec.original_length + 24)
    _logits(model, ids)  # longrope switches its buffer to the long factors on a long forward
    if native != "dynamic":  # dynamic: the native is its trained-length (plain) frequencies
        np.testing.assert_allclose(spec.inv_freq(), rotary.inv_freq.double().numpy(), rtol=2e-6)
        assert spec.native_attention == pytest.approx(rotary.attention_scaling, rel=1e-12)
    # the trained length is the checkpoint's, not the pre-extension window
    assert spec.original_length == model.config.max_position_embeddings or native in ("yarn",)
    if native == "yarn":
        assert spec.original_length == 4 * PRETRAINED  # factor × original: what it reads


@pytest.mark.parametrize("native", list(NATIVE))
def test_seeds_act_on_the_native_frequencies(native: str) -> None:
    model = _model("llama", native)
    spec = RopeSpec.from_config(model.config)
    target = 4 * spec.original_length
    scaling = pi(spec, target)
    inv = composed_inv_freq(spec, scaling, torch.device("cpu")).double().numpy()
    np.testing.assert_allclose(inv, spec.inv_freq() / 4.0, rtol=2e-6)  # θ/(ν·s)
    assert yarn(spec, target).factors.shape == (spec.n_factors,)
    assert 0 <= critical_dimension(spec) <= spec.n_factors


@pytest.mark.parametrize(("family", "native"), CASES)
def test_export_composes_and_reloads_in_vanilla_transformers(family, native, tmp_path) -> None:
    model = _model(family, native)
    spec = RopeSpec.from_config(model.config)
    rng = np.random.default_rng(1)
    scaling = RopeScaling(np.sort(rng.uniform(1.0, 3.0, spec.n_factors)), 0, 1.05)
    ids = _ids(spec.original_length + 24)
    with apply_rope_scaling(model, scaling):
        ours = _logits(model, ids)
    out = export_model(model, None, tmp_path / "m", scaling, target_length=4 * spec.original_length)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vanilla = AutoModelForCausalLM.from_pretrained(out).eval()
    params = vanilla.config.rope_parameters
    np.testing.assert_allclose(params["long_factor"], spec.native() * scaling.factors, rtol=1e-12)
    assert params["attention_factor"] == pytest.approx(spec.native_attention * 1.05, rel=1e-12)
    torch.testing.assert_close(_logits(vanilla, ids), ours, atol=0, rtol=0)  # bit for bit
    if native != "dynamic":  # below the trained length: the checkpoint's own factors
        np.testing.assert_allclose(params["short_factor"], spec.native(), rtol=1e-12)


def test_cohere_interleaved_identity_and_yarn() -> None:
    from transformers import CohereConfig
    from transformers import CohereForCausalLM

    config = CohereConfig(**SIZES, max_position_embeddings=PRETRAINED)
    torch.manual_seed(0)
    model = CohereForCausalLM(config).eval()
    spec = RopeSpec.from_config(config)
    ids = _ids(2 * PRETRAINED)
    ref = _logits(model, ids)
    with apply_rope_scaling(model, RopeScaling(np.ones(spec.n_factors))):
        assert torch.equal(_logits(model, ids), ref)
    theirs = CohereConfig(**SIZES, max_position_embeddings=PRETRAINED, rope_parameters=dict(
        rope_type="yarn", rope_theta=config.rope_parameters["rope_theta"], factor=2.0,
        original_max_position_embeddings=PRETRAINED))  # fmt: skip
    reference = CohereForCausalLM(theirs).eval()
    reference.load_state_dict(model.state_dict())
    with apply_rope_scaling(model, yarn(spec, 2 * PRETRAINED)):
        torch.testing.assert_close(_logits(model, ids), _logits(reference, ids), atol=1e-5, rtol=0)
