"""Integration on the real default model, `smollm2-135m`, at short lengths (cached once per machine)."""

from __future__ import annotations

import math

import optuna
import pytest

from longrope_opt import RopeSpec
from longrope_opt.data import load_samples
from longrope_opt.models import load_model
from longrope_opt.objectives import PerplexityObjective
from longrope_opt.objectives import evaluate_perplexity
from longrope_opt.rope import METHODS
from longrope_opt.space import SearchSpace


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    return load_model("smollm2-135m")


def test_spec_is_what_design_says(smollm2) -> None:
    model, _ = smollm2
    assert RopeSpec.from_config(model.config) == RopeSpec(64, 100000.0, 8192, 64)


def test_perplexity_at_2k_is_finite_and_sane(smollm2) -> None:
    model, tokenizer = smollm2
    samples = load_samples("builtin", tokenizer, 2048, 2, seed=3)
    result = evaluate_perplexity(model, samples, None)
    assert 1.5 < result.ppl < 60, result.ppl
    # PI at 4× compresses positions a trained model never saw compressed: clearly worse.
    spec = RopeSpec.from_config(model.config)
    pi = evaluate_perplexity(model, samples, METHODS["pi"](spec, 4 * 8192))
    assert pi.ppl > result.ppl


def test_objective_in_sqlite_study(smollm2, tmp_path) -> None:
    model, tokenizer = smollm2
    spec = RopeSpec.from_config(model.config)
    # Short samples, but the space is the real 16k one: the objective evaluates at sample length.
    samples = load_samples("builtin", tokenizer, 1024, 1, seed=0)
    space = SearchSpace(spec, 16384)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'smol.db'}", study_name="smol")
    for name in ("pi", "yarn"):
        study.enqueue_trial(space.to_params(METHODS[name](spec, 16384)), user_attrs={"seed": name})
    study.optimize(PerplexityObjective(model, samples, space=space), n_trials=2)
    values = {t.user_attrs["seed"]: t.value for t in study.trials}
    assert all(math.isfinite(v) and 1.0 < v < 200 for v in values.values())
    assert values["yarn"] < values["pi"]  # YaRN keeps high frequencies: better at short range
