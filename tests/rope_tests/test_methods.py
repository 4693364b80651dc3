"""The classic methods as rescale vectors: properties, and agreement with transformers' formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import METHODS
from longrope_opt.rope import attention_scale_for
from longrope_opt.rope import dynamic_ntk
from longrope_opt.rope import get_method
from longrope_opt.rope import none
from longrope_opt.rope import ntk
from longrope_opt.rope import pi
from longrope_opt.rope import yarn


SMOL = RopeSpec(head_dim=64, base=100000.0, original_length=8192)


def test_spec_inv_freq_is_base_power() -> None:
    inv = SMOL.inv_freq()
    assert inv.shape == (32,)
    assert inv[0] == 1.0
    np.testing.assert_allclose(inv[1] / inv[0], 100000.0 ** (-2 / 64))


@pytest.mark.parametrize("target", [16384, 32768, 10000])
def test_pi_is_constant_s(target: int) -> None:
    s = target / 8192
    np.testing.assert_array_equal(pi(SMOL, target).factors, np.full(32, s))


@pytest.mark.parametrize("target", [16384, 65536])
def test_ntk_endpoints_and_monotone(target: int) -> None:
    f = ntk(SMOL, target).factors
    s = target / 8192
    assert f[0] == 1.0
    assert math.isclose(f[-1], s, rel_tol=1e-12)
    assert np.all(np.diff(f) > 0)


def test_dynamic_ntk_is_identity_within_window_and_ntk_beyond() -> None:
    np.testing.assert_array_equal(dynamic_ntk(SMOL, 4096).factors, np.ones(32))
    np.testing.assert_allclose(dynamic_ntk(SMOL, 16384).factors, ntk(SMOL, 16384).factors)
    # transformers' factor f: scale = f·n/L − (f − 1)
    f2 = dynamic_ntk(SMOL, 16384, factor=2.0).factors
    assert math.isclose(f2[-1], 2.0 * 2 - 1.0)


def test_yarn_bounds_ramp_and_attention() -> None:
    sc = yarn(SMOL, 32768)
    f = sc.factors
    assert np.all(f >= 1.0) and np.all(f <= 4.0 + 1e-12)
    assert np.all(np.diff(f) >= 0)
    assert f[0] == 1.0 and math.isclose(f[-1], 4.0)
    assert math.isclose(sc.attention_scale, 0.1 * math.log(4.0) + 1.0)


def test_yarn_matches_transformers_formula() -> None:
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(
        hidden_size=576,
        num_attention_heads=9,
        max_position_embeddings=8192,
        rope_parameters={"rope_type": "yarn", "factor": 2.0, "rope_theta": 100000.0},
    )
    inv, attn = ROPE_INIT_FUNCTIONS["yarn"](config, torch.device("cpu"))
    ours = yarn(SMOL, 16384)
    np.testing.assert_allclose(ours.inv_freq(SMOL), inv.double().numpy(), rtol=1e-6)
    assert math.isclose(ours.attention_scale, attn, rel_tol=1e-12)


def test_methods_registry_and_lookup() -> None:
    assert set(METHODS) == {"none", "pi", "ntk", "dynamic_ntk", "yarn"}
    assert get_method("pi") is pi
    with pytest.raises(InvalidArgumentError, match=r"unknown method 'pii' .*\(did you mean 'pi'\?\); available: "):
        get_method("pii")
    np.testing.assert_array_equal(none(SMOL).factors, np.ones(32))


def test_attention_rules() -> None:
    assert attention_scale_for("none", SMOL, 16384) == 1.0
    assert math.isclose(attention_scale_for("yarn", SMOL, 16384), 0.1 * math.log(2) + 1)
    assert math.isclose(
        attention_scale_for("longrope", SMOL, 16384), math.sqrt(1 + math.log(2) / math.log(8192))
    )
    with pytest.raises(InvalidArgumentError, match="`attention_rule`"):
        attention_scale_for("su", SMOL, 16384)


@pytest.mark.parametrize("target", [8192, 100, 0])
def test_target_length_must_exceed_trained_length(target: int) -> None:
    with pytest.raises(
        InvalidArgumentError,
        match=rf"`target_length` must be .*> the trained length 8192, got {target}",
    ):
        pi(SMOL, target)


def test_spec_from_config_partial_rotary_and_trained_length() -> None:
    pytest.importorskip("transformers")
    from transformers import Phi3Config

    config = Phi3Config(
        hidden_size=64,
        num_attention_heads=4,
        max_position_embeddings=4096,
        original_max_position_embeddings=1024,
        partial_rotary_factor=0.5,
    )
    spec = RopeSpec.from_config(config)
    # A default-RoPE checkpoint reads max_position_embeddings as loaded: that is its trained
    # length, whatever it was pretrained at before (the pre-extension length is not the base).
    assert (spec.head_dim, spec.rotary_dim, spec.n_factors, spec.original_length) == (
        16,
        8,
        4,
        4096,
    )
    assert spec.is_native_default
    assert RopeSpec.from_config(config, trained_length=1024).original_length == 1024


def test_scaling_roundtrip_and_hash() -> None:
    sc = yarn(SMOL, 16384)
    back = RopeScaling.from_dict(sc.to_dict())
    assert back == sc and hash(back) == hash(sc)
    assert not sc.factors.flags.writeable


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (
            {"factors": [1.0, float("nan")]},
            r"`factors` must be finite and > 0; got nan at index 1",
        ),
        ({"factors": [1.0, -2.0]}, r"`factors` must be finite and > 0; got -2.0 at index 1"),
        ({"factors": [1.0, 0.0]}, r"`factors` must be finite and > 0; got 0.0 at index 1"),
        ({"factors": [[1.0]]}, r"`factors` must be a non-empty 1-D sequence, got shape \(1, 1\)"),
        ({"factors": []}, r"`factors` must be a non-empty 1-D sequence"),
        ({"factors": ["x"]}, r"`factors` must be a 1-D sequence of numbers"),
        ({"factors": [1.0], "n_hat": -1}, r"`n_hat` must be an integer >= 0, got -1"),
        ({"factors": [1.0], "n_hat": 1.5}, r"`n_hat` must be an integer >= 0, got 1.5"),
        (
            {"factors": [1.0], "attention_scale": float("inf")},
            r"`attention_scale` must be a finite number > 0, got inf",
        ),
        (
            {"factors": [1.0], "attention_scale": 0},
            r"`attention_scale` must be a finite number > 0, got 0",
        ),
    ],
)
def test_scaling_validation(kwargs: dict, pattern: str) -> None:
    with pytest.raises(InvalidArgumentError, match=pattern) as info:
        RopeScaling(**kwargs)
    assert isinstance(info.value, ValueError)


def test_scaling_length_checked_against_spec() -> None:
    with pytest.raises(InvalidArgumentError, match=r"length rotary_dim // 2 = 32 .*got 31"):
        RopeScaling(np.ones(31)).check(SMOL)


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"head_dim": 1, "base": 1e4, "original_length": 64}, "head_dim"),
        ({"head_dim": 64, "base": 1.0, "original_length": 64}, "base"),
        ({"head_dim": 64, "base": 1e4, "original_length": 0}, "original_length"),
        ({"head_dim": 64, "base": 1e4, "original_length": 64, "rotary_dim": 7}, "rotary_dim"),
    ],
)
def test_spec_validation(kwargs: dict, arg: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"`{arg}` must be"):
        RopeSpec(**kwargs)


def test_critical_dimension_against_a_hand_computation() -> None:
    from longrope_opt.rope import critical_dimension

    # Llama-2: θ 1e4, d 128, L 4096. log_θ(4096/2π) = ln 651.9 / ln 1e4 = 0.70355; × 64 = 45.03,
    # so index 45 turns once in 2π·1e4^(90/128) = 4,007 ≤ 4096 positions, index 46 in 4,600.
    llama2 = RopeSpec(head_dim=128, base=10000.0, original_length=4096)
    assert critical_dimension(llama2) == 46
    # SmolLM2: θ 1e5, d 64, L 8192: periods 5,847 at index 19 and 8,379 at index 20.
    smol = RopeSpec(head_dim=64, base=100000.0, original_length=8192)
    assert critical_dimension(smol) == 20
    # LLaMA3-8B (θ 5e5, d 128, L 8192): 35, as LongRoPE2 gives in dimension units (70).
    assert critical_dimension(RopeSpec(head_dim=128, base=500000.0, original_length=8192)) == 35
    # Index 1 turns once in 628.3 positions: past L = 628 by a fraction, so it is critical.
    exact = RopeSpec(head_dim=4, base=10000.0, original_length=int(2 * np.pi * 100))
    assert 2 * np.pi * 10000.0 ** (2 / 4) > exact.original_length
    assert critical_dimension(exact) == 1
    # Every period within L: no dimension needs extension.
    assert critical_dimension(RopeSpec(head_dim=8, base=2.0, original_length=4096)) == 4
