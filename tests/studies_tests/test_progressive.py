"""Progressive extension through the CLI on a tiny model: search → export a model directory →
search on top of it (`--base`) → recovery search (`--recovery`) → export the short/long pair →
vanilla transformers computes what our patch computes with the composed factors."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pytest
import torch
from transformers import AutoModelForCausalLM

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.cli import main
from longrope_opt.data import load_samples
from longrope_opt.models import load_model
from longrope_opt.objectives import evaluate_perplexity
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import ShortLongScaling
from longrope_opt.rope import compose
from longrope_opt.space import SearchSpace
from longrope_opt.studies import SearchConfig
from longrope_opt.studies import best_scaling


optuna.logging.set_verbosity(optuna.logging.WARNING)
EVO = ["--population-size", "4", "--num-mutations", "2", "--num-crossovers", "2",
       "--num-parents", "2", "--dtype", "float32", "--no-fuse", "--samples", "1"]  # fmt: skip


def _search(model, corpus, storage, name, target, n, *extra) -> None:
    args = ["search", "--model", model, "--corpus", corpus, "--storage", storage,
            "--study-name", name, "--target-length", str(target), "--n-trials", str(n), *EVO, *extra]  # fmt: skip
    assert main(args) == 0


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def test_two_stages_and_recovery_compose_into_one_vanilla_export(
    tiny_model_dir, tiny_corpus, tmp_path
) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    _search(tiny_model_dir, tiny_corpus, storage, "s1", 128, 6, "--n-hat", "0")
    stage1_dir = tmp_path / "stage1"
    assert main(["export", "--storage", storage, "--study-name", "s1", "-o", str(tmp_path / "s1.json"),
                 "--model-dir", str(stage1_dir), "--save-dtype", "float32"]) == 0  # fmt: skip
    s1 = optuna.load_study(study_name="s1", storage=storage)
    stage1, _ = best_scaling(s1)

    # Stage 2 on the stage-1 model: its spec is the export (native = stage 1's factors, trained
    # to 128), so λ are relative to it by construction; `--base config` says the same (kept for
    # old commands) and is stored as no base.
    _search(
        str(stage1_dir), tiny_corpus, storage, "s2", 256, 6, "--base", "config", "--n-hat", "0"
    )
    s2 = optuna.load_study(study_name="s2", storage=storage)
    assert SearchConfig.from_study(s2).base is None
    exported, _ = load_model(str(stage1_dir), dtype="float32")
    spec1 = RopeSpec.from_config(exported.config)
    assert spec1.original_length == 128 and spec1.rope_type == "longrope"
    np.testing.assert_array_equal(spec1.native(), stage1.factors)
    # A worker rebuilds the secondary search from the study alone.
    assert main(["worker", "--storage", storage, "--study-name", "s2", "--n-trials", "8",
                 "--dtype", "float32", "--no-fuse", "--heartbeat-interval", "0"]) == 0  # fmt: skip
    s2 = optuna.load_study(study_name="s2", storage=storage)
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    assert len(s2.get_trials(states=finished)) == 8
    best2 = s2.best_trial
    relative, _ = best_scaling(s2)
    # t multiplies: the export's own (stage 1's rule at 2x) times stage 2's (at 2x of 128)
    assert relative.attention_scale == pytest.approx(np.sqrt(1 + np.log(2) / np.log(128)))
    assert spec1.native_attention == pytest.approx(np.sqrt(1 + np.log(2) / np.log(64)))
    # The stage-2 trial's value is the perplexity of the composed factors on the plain model.
    model, tokenizer = load_model(tiny_model_dir, dtype="float32")
    samples = load_samples(tiny_corpus, tokenizer, 256, 1, 0)
    absolute = RopeScaling(stage1.factors * relative.factors, 0,
                           spec1.native_attention * relative.attention_scale)  # fmt: skip
    direct = evaluate_perplexity(model, samples, absolute).ppl
    assert best2.value == pytest.approx(direct, rel=1e-5)

    # Short-context recovery on the stage-1 model, with the long factors' attention scale.
    t = str(relative.attention_scale)
    _search(str(stage1_dir), tiny_corpus, storage, "short", 64, 6,
            "--recovery", "--lambda-max", "1.1", "--n-hat", "0", "--attention", t)  # fmt: skip
    short, _ = best_scaling(optuna.load_study(study_name="short", storage=storage))
    assert short.factors.min() >= 1.0 and short.factors.max() <= 1.1
    assert short.attention_scale == relative.attention_scale

    final_dir = tmp_path / "final"
    assert main(["export", "--storage", storage, "--study-name", "s2", "-o", str(tmp_path / "s2.json"),
                 "--short-study", "short", "--model-dir", str(final_dir), "--save-dtype", "float32"]) == 0  # fmt: skip
    params = json.loads((final_dir / "config.json").read_text())["rope_parameters"]
    np.testing.assert_allclose(params["long_factor"], stage1.factors * relative.factors, rtol=1e-15)
    np.testing.assert_allclose(params["short_factor"], stage1.factors * short.factors, rtol=1e-15)
    vanilla = AutoModelForCausalLM.from_pretrained(final_dir).eval()
    pair = ShortLongScaling(short, relative, spec1.original_length)
    g = torch.Generator().manual_seed(0)
    for length in (40, 128, 129, 250):
        ids = torch.randint(3, 128, (1, length), generator=g)
        with apply_rope_scaling(exported, pair):  # on the stage-1 model, as searched
            torch.testing.assert_close(_logits(vanilla, ids), _logits(exported, ids),
                                       atol=1e-5, rtol=0)  # fmt: skip


def test_secondary_space_composes_and_seeds_relative() -> None:
    spec = RopeSpec(head_dim=64, base=100000.0, original_length=8192)
    base = RopeScaling(np.linspace(1.0, 2.5, 32), 0, 1.04)
    space = SearchSpace(spec, 32768, base=base, base_length=16384)
    assert space.lambda_high == pytest.approx(1.25 * 2)  # the relative extension is 2×
    seeds = dict(space.seed_scalings())
    np.testing.assert_allclose(seeds["pi"].factors, 2.0)
    params = space.to_params(seeds["ntk"])
    assert space.to_scaling(params) == compose(
        base, RopeScaling(seeds["ntk"].factors, 0, space.fixed_attention_scale)
    )
    # t follows the total extension (4×), not the relative one.
    assert space.fixed_attention_scale == pytest.approx(np.sqrt(1 + np.log(4) / np.log(8192)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_length": 32768, "base_length": 16384}, None),
        ({"target_length": 32768, "base_length": 32768}, "`base_length` must be an integer in"),
        ({"target_length": 32768, "base_length": None}, "`base_length` must be an integer in"),
        ({"target_length": 8192, "base_length": 4096}, "`base_length` must be an integer in"),
    ],
)
def test_secondary_space_validates_base_length(kwargs, message) -> None:
    spec = RopeSpec(head_dim=64, base=100000.0, original_length=8192)
    base = RopeScaling(np.full(32, 2.0))
    if message is None:
        SearchSpace(spec, base=base, **kwargs)
    else:
        with pytest.raises(ValueError, match=message):
            SearchSpace(spec, base=base, **kwargs)


def test_recovery_space_caps_lambda_and_needs_the_flag(
    tiny_model_dir, tiny_corpus, tmp_path, capsys
) -> None:
    spec = RopeSpec(head_dim=64, base=100000.0, original_length=8192)
    space = SearchSpace(spec, 8192, n_hat=0, attention_value=1.03)
    assert space.is_short and space.lambda_high == 1.25
    assert [m for m, _ in space.seed_scalings()] == ["none", "ntk", "linear"]
    assert all(s.factors.max() <= 1.25 for _, s in space.seed_scalings())
    assert space.fixed_attention_scale == 1.03
    storage = f"sqlite:///{tmp_path / 's.db'}"
    args = ["search", "--model", tiny_model_dir, "--corpus", tiny_corpus, "--storage", storage,
            "--study-name", "x", "--target-length", "64", "--n-trials", "2", *EVO]  # fmt: skip
    assert main(args) == 2
    assert "`--target-length` must be > the trained length 64" in capsys.readouterr().err
    assert main([*args, "--recovery", "--target-length", "128"]) == 2
    assert "must be <= the trained length 64 with `--recovery`, got 128" in capsys.readouterr().err
