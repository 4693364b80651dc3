"""The retrieval guard: a study whose best-perplexity trial loses retrieval exports another."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pytest

from longrope_opt.cli import main
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import load_model
from longrope_opt.studies import SearchConfig
from longrope_opt.studies import export_best
from longrope_opt.studies import guard_study
from longrope_opt.studies import record
from longrope_opt.studies import rerank_study
from longrope_opt.studies import run_search
from longrope_opt.studies import space_of_study
from longrope_opt.studies import study_winner
from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus


optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def study_and_model(tmp_path):
    model_dir = save_tiny_model_dir(tmp_path / "model")
    corpus = write_tiny_corpus(tmp_path / "corpus")
    config = SearchConfig(
        model=model_dir, corpus=corpus, samples=1, target_length=256,
        sampler_options={"population_size": 5, "num_mutations": 2, "num_crossovers": 1,
                         "num_parents": 2},
        pruner="none",  # every trial complete: the guard's order is what this file tests
    )  # fmt: skip
    model, tok = load_model(model_dir, dtype="float32")
    storage = f"sqlite:///{tmp_path / 's.db'}"
    study = run_search(config, storage=storage, study_name="g", n_trials=8, model=model,
                       tokenizer=tok, progress=False).study  # fmt: skip
    return study, model, tok, storage


def _factors(study, trial) -> np.ndarray:
    return space_of_study(study, trial).to_scaling(trial.params).factors


def test_best_trial_that_loses_retrieval_is_not_exported(study_and_model, tmp_path, capsys):
    study, model, tok, storage = study_and_model
    seeds = [t for t in study.trials if t.user_attrs.get("seed")]
    searched = [t for t in study.trials if not t.user_attrs.get("seed") and t.value is not None]
    # the re-rank's order: the best searched trial first, another searched one second, the
    # seeds after them (values made up: the guard reads the order, not the numbers)
    ranking = {str(t.number): 1.0 + i for i, t in enumerate(searched[:2])}
    complete = [t for t in study.trials if t.value is not None]
    rerank_study(study, lambda s: ranking.get(_number_of(study, s), 10.0), top=len(complete))
    best, second = searched[0], searched[1]
    assert study_winner(study).trial.number == best.number  # re-ranked winner

    calls: list[int] = []

    def retrieves(scaling, prompts):  # the best trial misses every key; the rest find all
        lost = np.allclose(scaling.factors, _factors(study, best))
        for i, _ in enumerate(prompts):
            calls.append(i)
            yield i, not lost

    result = guard_study(study, model, tok, keys=4, retrieves=retrieves)
    assert result.winner == second.number and result.passed
    assert result.reference in {t.number for t in seeds}
    assert result.retrieved[best.number] == 0  # dropped at its first miss: the seed missed none
    stored = record.read_guard(study)
    assert stored["winner"] == second.number and stored["keys"] == 4
    winner = study_winner(study)
    assert (winner.trial.number, winner.rule) == (second.number, "guarded")
    exported = export_best(study, tmp_path / "f.json")
    assert exported["trial"] == second.number and exported["rule"] == "guarded"
    # the command says which rule chose it
    assert main(["export", "--storage", storage, "--study-name", "g", "-o",
                 str(tmp_path / "g.json")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert f"trial {second.number} (the retrieval guard's winner" in out
    assert json.loads((tmp_path / "g.json").read_text())["rule"] == "guarded"
    # a rerun reads the stored outcomes: nothing is checked again
    calls.clear()
    again = guard_study(study, model, tok, keys=4, retrieves=retrieves)
    assert again.winner == second.number and calls == []


def test_guard_with_no_passing_candidate_keeps_the_seed(study_and_model) -> None:
    study, model, tok, _ = study_and_model
    seeds = {t.number for t in study.trials if t.user_attrs.get("seed")}
    searched = [t for t in study.trials if t.number not in seeds and t.value is not None]
    for i, t in enumerate(searched[:3]):
        record.add_rerank(study, t.number, 1.0 + i)

    def only_seeds(scaling, prompts):
        mine = any(np.allclose(scaling.factors, _factors(study, study.trials[n])) for n in seeds)
        for i, _ in enumerate(prompts):
            yield i, mine

    result = guard_study(study, model, tok, keys=2, retrieves=only_seeds)
    assert not result.passed and result.winner == result.reference  # the best seed itself
    assert set(result.retrieved) == {result.reference, *(t.number for t in searched[:3])}
    winner = study_winner(study)
    assert (winner.trial.number, winner.rule) == (result.reference, "guarded")
    with pytest.raises(InvalidArgumentError, match="`keys` must be an integer >= 1"):
        guard_study(study, model, tok, keys=0)


def _number_of(study, scaling) -> str:
    for t in study.trials:
        if t.value is not None and np.allclose(_factors(study, t), scaling.factors):
            return str(t.number)
    raise AssertionError("no trial has these factors")
