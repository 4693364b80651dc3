"""`apply_rope_scaling` on tiny random models of each family, against transformers' own scaling."""

from __future__ import annotations

import gc
import math
import tracemalloc

import numpy as np
import pytest
import torch

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.errors import UnsupportedModelError
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.patching import find_rotary_modules
from longrope_opt.rope import dynamic_ntk
from longrope_opt.rope import longrope_attention_scale
from longrope_opt.rope import ntk
from longrope_opt.rope import pi
from longrope_opt.rope import yarn
from tests.conftest import FAMILIES
from tests.conftest import TINY_LENGTH
from tests.conftest import build_tiny_model


TARGET = 160  # 2.5× the tiny models' trained length
THETA = 10000.0


def _ids(length: int = TARGET, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, 128, (2, length), generator=torch.Generator().manual_seed(seed))


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def _same_weights_with_rope(family: str, rope_parameters: dict) -> torch.nn.Module:
    # Same seed → same weights; only the rope config differs.
    params = {"rope_theta": THETA, **rope_parameters}
    if family == "phi3":
        params["partial_rotary_factor"] = 0.5
    return build_tiny_model(family, rope_parameters=params)


@pytest.mark.parametrize("family", FAMILIES)
def test_identity_equals_unpatched(family: str) -> None:
    model = build_tiny_model(family)
    spec = RopeSpec.from_config(model.config)
    ids = _ids()
    ref = _logits(model, ids)
    with apply_rope_scaling(model, RopeScaling(np.ones(spec.n_factors))):
        out = _logits(model, ids)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)


# Phi-3 in transformers 5 accepts only default/longrope rope types, so it is checked by longrope.
@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (lambda spec: pi(spec, TARGET), {"rope_type": "linear", "factor": TARGET / TINY_LENGTH}),
        (lambda spec: ntk(spec, TARGET), {"rope_type": "dynamic", "factor": 1.0}),
        (
            lambda spec: dynamic_ntk(spec, TARGET, factor=2.0),
            {"rope_type": "dynamic", "factor": 2.0},
        ),
        (lambda spec: yarn(spec, TARGET), {"rope_type": "yarn", "factor": TARGET / TINY_LENGTH}),
    ],
    ids=["pi=linear", "ntk=dynamic", "dynamic_ntk=dynamic(f=2)", "yarn=yarn"],
)
def test_methods_equal_transformers_rope_types(family: str, ours, theirs: dict) -> None:
    model = build_tiny_model(family)
    spec = RopeSpec.from_config(model.config)
    reference = _same_weights_with_rope(family, theirs)
    ids = _ids()
    with apply_rope_scaling(model, ours(spec)):
        out = _logits(model, ids)
    torch.testing.assert_close(out, _logits(reference, ids), atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_monotone_lambda_equals_transformers_longrope(family: str) -> None:
    model = build_tiny_model(family)
    spec = RopeSpec.from_config(model.config)
    rng = np.random.default_rng(7)
    long_factor = np.sort(rng.uniform(1.0, 1.25 * TARGET / TINY_LENGTH, spec.n_factors))
    attn = longrope_attention_scale(TARGET / TINY_LENGTH, TINY_LENGTH)
    reference = _same_weights_with_rope(
        family,
        {
            "rope_type": "longrope",
            "long_factor": long_factor.tolist(),
            "short_factor": [1.0] * spec.n_factors,
            "original_max_position_embeddings": TINY_LENGTH,
            "factor": TARGET / TINY_LENGTH,
        },
    )
    ids = _ids()  # longer than the trained length → transformers uses long_factor
    with apply_rope_scaling(model, RopeScaling(long_factor, 0, attn)):
        out = _logits(model, ids)
    torch.testing.assert_close(out, _logits(reference, ids), atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", ["llama", "phi3"])
def test_patch_wins_over_dynamic_rope_types(family: str) -> None:
    # Models loaded with dynamic/longrope rewrite inv_freq in their own forward; ours must win.
    rope = (
        {"rope_type": "dynamic", "factor": 2.0}
        if family == "llama"
        else {
            "rope_type": "longrope",
            "long_factor": [3.0] * 4,
            "short_factor": [1.0] * 4,
            "original_max_position_embeddings": TINY_LENGTH,
            "factor": 2.5,
        }
    )
    dynamic_model = _same_weights_with_rope(family, rope)
    plain = build_tiny_model(family)
    spec = RopeSpec.from_config(plain.config)
    scaling = RopeScaling(np.linspace(1.0, 2.0, spec.n_factors), 0, 1.1)
    ids = _ids()
    with apply_rope_scaling(plain, scaling):
        ref = _logits(plain, ids)
    _logits(dynamic_model, ids)  # let it update its own buffers first
    with apply_rope_scaling(dynamic_model, scaling, spec=spec):
        out = _logits(dynamic_model, ids)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize("family", ["llama", "phi3"])
def test_n_hat_cos_sin_against_direct_formula(family: str) -> None:
    model = build_tiny_model(family)
    spec = RopeSpec.from_config(model.config)
    n_hat, t = 5, 1.3
    factors = np.linspace(1.0, 3.0, spec.n_factors)
    rotary = find_rotary_modules(model)[0]
    positions = torch.arange(TARGET)[None]  # (1, T)
    x = torch.zeros(1, TARGET, 64)
    with apply_rope_scaling(model, RopeScaling(factors, n_hat, t)):
        cos, sin = rotary(x, positions)  # (1, T, rotary_dim)
    n = np.arange(TARGET, dtype=np.float64)[:, None]
    theta = spec.inv_freq()[None, :]
    angle = np.where(n < n_hat, n * theta, n * theta / factors[None, :])  # (T, d/2)
    scale = np.where(n < n_hat, 1.0, t)
    expected_cos = np.concatenate([np.cos(angle), np.cos(angle)], axis=-1) * scale
    expected_sin = np.concatenate([np.sin(angle), np.sin(angle)], axis=-1) * scale
    np.testing.assert_allclose(cos[0].double().numpy(), expected_cos, atol=2e-5)
    np.testing.assert_allclose(sin[0].double().numpy(), expected_sin, atol=2e-5)
    # and the start tokens really are the unscaled ones, the rest really are scaled
    assert np.allclose(
        cos[0, :n_hat].numpy(), np.cos(np.concatenate([n[:n_hat] * theta] * 2, -1)), atol=1e-6
    )
    assert not np.allclose(
        cos[0, n_hat:].numpy(), np.cos(np.concatenate([n[n_hat:] * theta] * 2, -1)), atol=1e-3
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_n_hat_changes_logits_accordingly(family: str) -> None:
    model = build_tiny_model(family)
    spec = RopeSpec.from_config(model.config)
    ids = _ids()
    factors = np.linspace(1.0, 2.5, spec.n_factors)
    unpatched = _logits(model, ids)
    with apply_rope_scaling(model, RopeScaling(factors, 0, 1.2)):
        scaled = _logits(model, ids)
    with apply_rope_scaling(model, RopeScaling(factors, 16, 1.2)):
        mixed = _logits(model, ids)
    with apply_rope_scaling(model, RopeScaling(factors, TARGET, 1.2)):
        all_start = _logits(model, ids)
    # Causal: a query before n̂ sees only keys before n̂, all with original angles.
    torch.testing.assert_close(mixed[:, :16], unpatched[:, :16], atol=1e-6, rtol=0)
    assert not torch.allclose(mixed[:, 16:], scaled[:, 16:], atol=1e-4)
    assert not torch.allclose(mixed[:, 16:], unpatched[:, 16:], atol=1e-4)
    torch.testing.assert_close(all_start, unpatched, atol=1e-6, rtol=0)


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state.update({f"buffer:{k}": v.clone() for k, v in model.named_buffers()})
    return state


@pytest.mark.parametrize("family", FAMILIES)
def test_restores_bit_for_bit(family: str) -> None:
    model = build_tiny_model(family)
    rotary = find_rotary_modules(model)[0]
    before = _state(model)
    ids = _ids()
    ref = _logits(model, ids)
    spec = RopeSpec.from_config(model.config)
    with apply_rope_scaling(model, yarn(spec, TARGET)):
        with apply_rope_scaling(model, RopeScaling(np.full(spec.n_factors, 2.0), 3, 1.5)):
            _logits(model, ids)
        assert "forward" in rotary.__dict__  # the outer patch is back in force
    assert "forward" not in rotary.__dict__
    after = _state(model)
    assert before.keys() == after.keys()
    for k in before:
        assert torch.equal(before[k], after[k]), k
    assert torch.equal(_logits(model, ids), ref)


def test_restores_after_exception() -> None:
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    rotary = find_rotary_modules(model)[0]
    with pytest.raises(RuntimeError, match="boom"):
        with apply_rope_scaling(model, pi(spec, TARGET)):
            raise RuntimeError("boom")
    assert "forward" not in rotary.__dict__


def test_repatch_1000_times_leaks_nothing() -> None:
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    scalings = [RopeScaling(np.full(spec.n_factors, 1.0 + i / 100)) for i in range(10)]
    x = torch.zeros(1, 8, 64)
    pos = torch.arange(8)[None]
    rotary = find_rotary_modules(model)[0]

    def churn(n: int) -> None:
        for i in range(n):
            with apply_rope_scaling(model, scalings[i % 10], spec=spec):
                rotary(x, pos)

    churn(50)  # warm caches and allocator
    gc.collect()
    tracemalloc.start()
    start, _ = tracemalloc.get_traced_memory()
    churn(1000)
    gc.collect()
    end, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert end - start < 64 * 1024, f"grew by {end - start} bytes over 1000 re-patches"
    assert "forward" not in rotary.__dict__


def test_wrong_length_raises() -> None:
    model = build_tiny_model("llama")
    with pytest.raises(
        InvalidArgumentError, match=r"`factors` must have length rotary_dim // 2 = 8 .*got 7"
    ):
        with apply_rope_scaling(model, RopeScaling(np.ones(7))):
            pass
    assert "forward" not in find_rotary_modules(model)[0].__dict__


def test_non_rope_model_raises_naming_type() -> None:
    from transformers import GPT2Config
    from transformers import GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(
        GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=32)
    )
    with pytest.raises(
        UnsupportedModelError, match="'gpt2' has no rotary position embedding"
    ) as info:
        with apply_rope_scaling(gpt2, RopeScaling(np.ones(8))):
            pass
    assert isinstance(info.value, TypeError)


def test_scaling_type_checked() -> None:
    model = build_tiny_model("llama")
    with pytest.raises(
        TypeError, match="`scaling` must be a RopeScaling or ShortLongScaling, got list"
    ):
        with apply_rope_scaling(model, [1.0] * 8):  # type: ignore[arg-type]
            pass


def test_bf16_model_gets_fp32_angles() -> None:
    model = build_tiny_model("llama").to(torch.bfloat16)
    spec = RopeSpec.from_config(model.config)
    rotary = find_rotary_modules(model)[0]
    pos = torch.arange(4096)[None]
    with apply_rope_scaling(model, pi(spec, 128)):
        cos, _ = rotary(torch.zeros(1, 1, 64, dtype=torch.bfloat16), pos)
    assert cos.dtype == torch.bfloat16
    expected = np.cos(4095 * spec.inv_freq()[0] / 2.0)
    # bf16 angles would be off by up to ~16 rad at position 4095; fp32 angles only by bf16 rounding.
    assert math.isclose(float(cos[0, -1, 0]), expected, abs_tol=1e-2)


@pytest.mark.parametrize("family", FAMILIES)
def test_short_long_pair_switches_at_the_trained_length(family: str) -> None:
    from longrope_opt.rope import ShortLongScaling

    model = build_tiny_model(family)
    spec = RopeSpec.from_config(model.config)
    short = RopeScaling(np.linspace(1.0, 1.2, spec.n_factors), 0, 1.1)
    long = RopeScaling(np.linspace(1.0, 4.0, spec.n_factors), 0, 1.1)
    pair = ShortLongScaling(short, long, TINY_LENGTH)
    g = torch.Generator().manual_seed(0)
    for length, chosen in ((TINY_LENGTH, short), (TINY_LENGTH + 1, long)):
        ids = torch.randint(3, 128, (1, length), generator=g)
        with apply_rope_scaling(model, pair):
            both = _logits(model, ids)
        with apply_rope_scaling(model, chosen):
            torch.testing.assert_close(both, _logits(model, ids), atol=0, rtol=0)
        other = long if chosen is short else short
        with apply_rope_scaling(model, other):
            assert not torch.allclose(both, _logits(model, ids), atol=1e-4)


def test_install_is_persistent_and_nests_under_apply() -> None:
    from longrope_opt.patching import install_rope_scaling

    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    ids = torch.randint(3, 128, (1, 2 * TINY_LENGTH), generator=torch.Generator().manual_seed(1))
    installed = yarn(spec, 4 * TINY_LENGTH)
    with apply_rope_scaling(model, installed):
        expected = _logits(model, ids)
    install_rope_scaling(model, installed)
    torch.testing.assert_close(_logits(model, ids), expected, atol=0, rtol=0)
    with apply_rope_scaling(model, ntk(spec, 4 * TINY_LENGTH)):
        assert not torch.allclose(_logits(model, ids), expected, atol=1e-4)
    torch.testing.assert_close(_logits(model, ids), expected, atol=0, rtol=0)  # back to installed
