"""`PerplexityObjective` inside real Optuna studies on SQLite files."""

from __future__ import annotations

import copy
import math
import re

import numpy as np
import optuna
import pytest
import torch

from longrope_opt import RopeSpec
from longrope_opt.objectives import PerplexityObjective
from longrope_opt.objectives import evaluate_perplexity
from longrope_opt.rope import yarn
from longrope_opt.space import SearchSpace
from tests.conftest import build_tiny_model


optuna.logging.set_verbosity(optuna.logging.WARNING)


def _setup(k: int = 3):
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    g = torch.Generator().manual_seed(0)
    samples = [torch.randint(3, 128, (128,), generator=g) for _ in range(k)]
    return model, samples, SearchSpace(spec, 128)


def test_objective_runs_in_sqlite_study_and_records_attrs(tmp_path) -> None:
    model, samples, space = _setup()
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="t", storage=storage, direction="minimize")
    study.enqueue_trial(space.to_params(yarn(space.spec, 128)))
    study.optimize(PerplexityObjective(model, samples, space=space), n_trials=3)
    reloaded = optuna.load_study(study_name="t", storage=storage)
    trials = reloaded.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(trials) == 3
    first = trials[0]
    # The enqueued YaRN seed evaluates to what evaluate_perplexity gives for YaRN directly.
    direct = evaluate_perplexity(model, samples, space.to_scaling(first.params))
    assert math.isclose(first.value, direct.ppl, rel_tol=1e-9)
    assert first.user_attrs["sample_tokens"] == [127, 127, 127]
    assert first.user_attrs["evaluated_tokens"] == 381
    assert math.isclose(
        math.exp(sum(first.user_attrs["sample_nll"]) / 381), first.value, rel_tol=1e-5
    )
    assert sorted(first.intermediate_values) == [0, 1, 2]


def test_pruned_trial_records_what_it_cost(tmp_path) -> None:
    model, samples, space = _setup(k=4)

    class PruneAfterTwo(optuna.pruners.BasePruner):
        def prune(self, study, trial) -> bool:
            return len(trial.intermediate_values) >= 2

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'p.db'}", pruner=PruneAfterTwo())
    study.optimize(PerplexityObjective(model, samples, space=space), n_trials=2)
    for t in study.trials:
        assert t.state == optuna.trial.TrialState.PRUNED
        assert t.user_attrs["evaluated_tokens"] == 2 * 127
        nll = t.user_attrs["sample_nll"]
        assert t.user_attrs["partial_ppl"] == pytest.approx(math.exp(sum(nll) / 254), rel=1e-5)


def test_nan_fails_the_trial_not_the_study(tmp_path) -> None:
    model, samples, space = _setup(k=1)
    with torch.no_grad():
        model.model.norm.weight.fill_(float("nan"))  # every logit becomes NaN
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'n.db'}")
    study.optimize(PerplexityObjective(model, samples, space=space), n_trials=2)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL] * 2
    assert "non-finite perplexity" in study.trials[0].user_attrs["failure"]


def test_search_space_names_bounds_and_roundtrip() -> None:
    spec = RopeSpec(head_dim=64, base=1e5, original_length=8192)
    space = SearchSpace(spec, 16384)
    dists = space.distributions()
    assert list(dists)[:2] == ["lambda_00", "lambda_01"] and "lambda_31" in dists
    assert dists["lambda_00"].low == 1.0 and dists["lambda_00"].high == pytest.approx(2.5)
    assert dists["lambda_00"].step is None  # the grid is the sampler's (seeds stay exact)
    np.testing.assert_allclose(
        space.snap(np.array([0.5, 1.004, 1.006, 9.0])), [1.0, 1.0, 1.01, 2.5]
    )
    assert dists["n_hat"].choices == (0, 1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 64, 128, 256)
    scaling = yarn(spec, 16384)
    back = space.to_scaling(space.to_params(scaling))
    np.testing.assert_array_equal(back.factors, scaling.factors)
    assert back.attention_scale == pytest.approx(math.sqrt(1 + math.log(2) / math.log(8192)))
    searched = SearchSpace(spec, 16384, attention="search", n_hat=4)
    assert (
        "attention_scale" in searched.distributions() and "n_hat" not in searched.distributions()
    )
    assert searched.to_scaling({**space.to_params(scaling), "attention_scale": 1.2}).n_hat == 4


def test_sample_reports_are_paired_per_sample_nlls(tmp_path) -> None:
    # report="sample": step i holds sample i's mean NLL per token (WilcoxonPruner's pairing key),
    # and the study runs with that pruner on SQLite.
    model, samples, space = _setup(k=6)
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path / 'w.db'}",
        pruner=optuna.pruners.WilcoxonPruner(p_threshold=0.1, n_startup_steps=4),
    )
    study.enqueue_trial({n: 1.0 for n in space.names} | {"n_hat": 0})
    objective = PerplexityObjective(model, samples, space=space, report="sample")
    study.optimize(objective, n_trials=3)
    for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        nll, tokens = t.user_attrs["sample_nll"], t.user_attrs["sample_tokens"]
        assert [t.intermediate_values[i] for i in range(6)] == pytest.approx(
            [n / c for n, c in zip(nll, tokens)]
        )
        assert t.user_attrs["partial_ppl"] == pytest.approx(t.value, rel=1e-5)


def test_report_must_be_known() -> None:
    model, samples, space = _setup()
    with pytest.raises(ValueError, match=r"`report` must be one of \['running', 'sample'\]"):
        PerplexityObjective(model, samples, space=space, report="mean")


def _count_forwards(model) -> list[int]:
    # one entry per pass through the decoder's final norm: one per document window
    seen: list[int] = []
    model.model.norm.register_forward_hook(lambda *_: seen.append(1))
    return seen


def test_a_retried_trial_measures_only_the_documents_its_killed_run_did_not(tmp_path) -> None:
    # A sitting that ends kills the running trial; Optuna's heartbeat fails it and queues a retry
    # carrying its user attrs. The retry must not pay again for documents already measured.
    model, samples, space = _setup(k=3)
    params = space.to_params(yarn(space.spec, 128))

    class KillAtStep1(optuna.pruners.BasePruner):
        def prune(self, study, trial) -> bool:
            if 1 in trial.intermediate_values:
                raise RuntimeError("killed")  # the process dies after its second document
            return False

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'r.db'}", pruner=KillAtStep1())
    study.enqueue_trial(params)
    objective = PerplexityObjective(model, samples, space=space)
    study.optimize(objective, n_trials=1, catch=(RuntimeError,))
    killed = study.trials[0]
    assert killed.state == optuna.trial.TrialState.FAIL
    assert len(killed.user_attrs["sample_nll"]) == 2
    optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)(study, killed)

    forwards = _count_forwards(model)
    study.pruner = optuna.pruners.NopPruner()
    study.optimize(objective, n_trials=1)
    retry = study.trials[1]
    assert retry.params == killed.params
    assert forwards == [1]  # the third document only
    direct = evaluate_perplexity(model, samples, space.to_scaling(params))
    assert math.isclose(retry.value, direct.ppl, rel_tol=1e-5)
    assert sorted(retry.intermediate_values) == [0, 1, 2]
    assert retry.user_attrs["sample_tokens"] == [127, 127, 127]


def test_a_fresh_trial_measures_every_document(tmp_path) -> None:
    model, samples, space = _setup(k=2)
    forwards = _count_forwards(model)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'f.db'}")
    study.optimize(PerplexityObjective(model, samples, space=space), n_trials=2)
    assert len(forwards) == 4


def test_a_first_document_measured_ahead_is_read_by_its_trial_once(tmp_path) -> None:
    # `extend` times its plan on the first seed's first document; that trial must not pay again.
    model, samples, space = _setup(k=2)
    params = space.to_params(yarn(space.spec, 128))
    objective = PerplexityObjective(model, samples, space=space)
    forwards = _count_forwards(model)
    objective.measure_first_ahead(params)
    assert forwards == [1]
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'a.db'}")
    study.enqueue_trial(params)
    study.enqueue_trial(params)  # the same numbers again: measured in full, the first is used up
    study.optimize(objective, n_trials=2)
    assert len(forwards) == 1 + 1 + 2
    direct = evaluate_perplexity(model, samples, space.to_scaling(params))
    for trial in study.trials:
        assert math.isclose(trial.value, direct.ppl, rel_tol=1e-6)
        assert trial.user_attrs["sample_tokens"] == [127, 127]
    assert study.trials[0].user_attrs["sample_nll"] == study.trials[1].user_attrs["sample_nll"]


def test_a_first_document_measured_ahead_shows_the_layer_bar(capsys) -> None:
    # The plan's timing forward is a quarter of an hour at 128k on a CPU: it counts its layers
    # as a trial does, and only when the objective was asked for progress.
    model, samples, space = _setup(k=2)
    params = space.to_params(yarn(space.spec, 128))
    PerplexityObjective(model, samples, space=space).measure_first_ahead(params)
    assert "layer" not in capsys.readouterr().err
    PerplexityObjective(model, samples, space=space, progress=True).measure_first_ahead(params)
    n_layers = len(model.get_decoder().layers)
    # tqdm draws at most every 0.1 s and clears this bar when done: on a fast machine only its
    # first frame shows, so the test asks for the bar and its total, not a later count
    # (each window's layers and its LM head)
    assert re.search(rf"layers:.*\d+/{n_layers + 1} ", capsys.readouterr().err)


def test_a_first_document_measured_ahead_does_not_serve_other_numbers_or_samples(tmp_path) -> None:
    model, samples, space = _setup(k=2)
    params = space.to_params(yarn(space.spec, 128))
    objective = PerplexityObjective(model, samples, space=space)
    objective.measure_first_ahead(params)
    other = copy.copy(objective)  # as re-ranking reads other samples with the same objective
    other.samples = list(reversed(samples))
    forwards = _count_forwards(model)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'b.db'}")
    study.enqueue_trial(params)
    study.optimize(other, n_trials=1)
    assert len(forwards) == 2
    study.optimize(objective, n_trials=1)  # not enqueued: other numbers, both documents
    assert len(forwards) == 4
