"""`export_model`: vanilla transformers loads the export and computes exactly our patched logits."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.models import export_model
from longrope_opt.models import load_model
from longrope_opt.models import read_export
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import ShortLongScaling
from longrope_opt.rope import yarn
from tests.conftest import FAMILIES
from tests.conftest import TINY_LENGTH
from tests.conftest import build_tiny_model
from tests.conftest import save_tiny_model_dir


def _random_monotone(n: int, low: float, high: float, seed: int) -> np.ndarray:
    return np.sort(np.random.default_rng(seed).uniform(low, high, n))


def _pair(spec: RopeSpec, target: int, seed: int = 0) -> ShortLongScaling:
    long = RopeScaling(
        _random_monotone(spec.n_factors, 1.0, 1.25 * target / spec.original_length, seed), 0, 1.07
    )
    short = RopeScaling(_random_monotone(spec.n_factors, 1.0, 1.2, seed + 1), 0, 1.07)
    return ShortLongScaling(short, long, spec.original_length)


def _logits(model, ids, positions=None):
    with torch.no_grad():
        kw = {} if positions is None else {"position_ids": positions}
        return model(ids, **kw).logits


@pytest.mark.parametrize("family", FAMILIES)
def test_vanilla_load_equals_patched_bit_for_bit(family, tmp_path) -> None:
    model = build_tiny_model(family)
    spec = RopeSpec.from_config(model.config)
    pair = _pair(spec, 4 * TINY_LENGTH)
    out = export_model(model, None, tmp_path / "m", pair, target_length=4 * TINY_LENGTH)
    vanilla = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
    assert vanilla.config.rope_parameters["rope_type"] == "longrope"
    assert vanilla.config.max_position_embeddings == 4 * TINY_LENGTH
    generator = torch.Generator().manual_seed(0)
    # Below, at and past the trained length: the short set, the short set, the long set.
    for length in (TINY_LENGTH // 2, TINY_LENGTH, TINY_LENGTH + 1, 3 * TINY_LENGTH):
        ids = torch.randint(3, 128, (1, length), generator=generator)
        with apply_rope_scaling(model, pair):
            ours = _logits(model, ids)
        assert torch.equal(_logits(vanilla, ids), ours), (family, length)
    # The in-memory model is unchanged by the export.
    assert model.config.rope_parameters["rope_type"] == "default"
    assert not hasattr(model.config, "longrope_opt")


def test_single_scaling_exports_identity_short_factors(tmp_path) -> None:
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    long = yarn(spec, 2 * TINY_LENGTH)
    out = export_model(model, None, tmp_path / "m", long, target_length=2 * TINY_LENGTH)
    config = json.loads((out / "config.json").read_text())
    params = config["rope_parameters"]
    assert params["short_factor"] == [1.0] * spec.n_factors
    assert params["long_factor"] == pytest.approx(list(long.factors), rel=0, abs=0)
    assert params["attention_factor"] == long.attention_scale
    assert config["longrope_opt"]["requires_loader"] is False
    assert "vanilla transformers" in (out / "README.md").read_text().lower()


def test_n_hat_export_needs_and_uses_our_loader(tmp_path) -> None:
    directory = save_tiny_model_dir(tmp_path / "src")
    model, tokenizer = load_model(directory, dtype="float32")
    spec = RopeSpec.from_config(model.config)
    long = RopeScaling(_random_monotone(spec.n_factors, 1.0, 4.0, 3), 12, 1.1)
    out = export_model(model, tokenizer, tmp_path / "m", long, target_length=4 * TINY_LENGTH)
    assert json.loads((out / "config.json").read_text())["longrope_opt"]["requires_loader"]
    assert "load_model" in (out / "README.md").read_text()
    ids = torch.randint(3, 128, (1, 3 * TINY_LENGTH), generator=torch.Generator().manual_seed(1))
    with apply_rope_scaling(model, long):
        ours = _logits(model, ids)
    loaded, _ = load_model(str(out), dtype="float32")
    assert read_export(loaded.config).long == long
    assert torch.equal(_logits(loaded, ids), ours)
    # Vanilla transformers cannot express n̂: it loads the factors without it (and differs).
    vanilla = AutoModelForCausalLM.from_pretrained(out).eval()
    assert not torch.allclose(_logits(vanilla, ids), ours, atol=1e-4)


def test_export_rejects_a_target_within_the_trained_length(tmp_path) -> None:
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    with pytest.raises(ValueError, match="target_length"):
        export_model(model, None, tmp_path / "m", yarn(spec, 128), target_length=TINY_LENGTH)


@pytest.mark.slow
def test_smollm2_export_round_trip_at_2k(tmp_path) -> None:
    """The real model, fp32, 2k tokens: positions from 0 use the short factors, positions
    shifted past 8192 the long ones; vanilla transformers matches the patched model exactly."""
    model, tokenizer = load_model("smollm2-135m", dtype="float32")
    spec = RopeSpec.from_config(model.config)
    pair = _pair(spec, 2 * spec.original_length, seed=7)
    out = export_model(
        model, tokenizer, tmp_path / "m", pair, target_length=2 * spec.original_length
    )
    vanilla = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ids = torch.randint(100, 40000, (1, 2048), generator=torch.Generator().manual_seed(0))
    for offset in (0, spec.original_length):
        positions = torch.arange(offset, offset + 2048)[None]
        with apply_rope_scaling(model, pair):
            ours = _logits(model, ids, positions)
        theirs = _logits(vanilla, ids, positions)
        assert torch.equal(theirs, ours), offset


def test_an_attention_factor_vllm_does_not_apply_is_said_in_one_line(tmp_path, caplog) -> None:
    # vLLM scales by √(1 + ln s / ln L) whatever the export's attention_factor: an export whose
    # factor differs says so (the keys vLLM would read make transformers warn: not written)
    from longrope_opt.models import vllm_attention_factor

    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    target = 4 * TINY_LENGTH
    served = vllm_attention_factor(TINY_LENGTH, target)
    assert served == pytest.approx((1 + np.log(4) / np.log(TINY_LENGTH)) ** 0.5)
    factors = _random_monotone(spec.n_factors, 1.0, 4.0, 0)
    for name, t, said in (("own", 1.2, True), ("vllm", served, False)):
        caplog.clear()
        with caplog.at_level("WARNING", logger="longrope_opt.models._export"):
            out = export_model(model, None, tmp_path / name, RopeScaling(factors, 0, t),
                               target_length=target)  # fmt: skip
        lines = [r.getMessage() for r in caplog.records if "vLLM" in r.getMessage()]
        assert len(lines) == (1 if said else 0), lines
        if said:
            assert f"{served:.4f}" in lines[0] and "1.2000" in lines[0] and str(out) in lines[0]
        params = json.loads((out / "config.json").read_text())["rope_parameters"]
        assert "long_mscale" not in params and "short_mscale" not in params
