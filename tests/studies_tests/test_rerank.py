"""Promotion: a proxy search's best trials re-evaluated at full fidelity, the winner chosen on it."""

from __future__ import annotations

import json

import optuna
import pytest
from optuna.trial import TrialState

from longrope_opt.cli import main
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.studies import best_scaling
from longrope_opt.studies import export_best
from longrope_opt.studies import record
from longrope_opt.studies import rerank_study
from longrope_opt.studies import reranked_best
from tests.studies_tests.test_cli_search import _search_args


optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def searched(tiny_model_dir, tiny_corpus, tmp_path):
    """A finished 8-trial search on the skip proxy (no re-rank yet)."""
    storage = f"sqlite:///{tmp_path / 's.db'}"
    args = _search_args(tiny_model_dir, tiny_corpus, storage, 8, "--mode", "skip",
                        "--skip-tokens", "64")  # fmt: skip
    assert main(args) == 0
    return storage, args


def _complete(study):
    return sorted(study.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: (t.value, t.number))


def test_rerank_picks_the_full_fidelity_winner_and_resumes(searched, tmp_path) -> None:
    storage, _ = searched
    study = optuna.load_study(study_name="tiny", storage=storage)
    top3 = [t.number for t in _complete(study)[:3]]
    # A full-fidelity objective that reverses the proxy's order: the proxy's third is the winner.
    truth = {n: float(10 - i) for i, n in enumerate(top3)}
    calls: list[int] = []

    def evaluate(scaling):
        number = next(t.number for t in study.trials
                      if t.number in top3 and (space_factors(study, t) == scaling.factors).all())  # fmt: skip
        calls.append(number)
        return truth[number]

    scaling, trial = rerank_study(study, evaluate, top=2)
    assert sorted(calls) == sorted(top3[:2]) and trial.number == top3[1]
    assert set(record.read_rerank(study)) == set(top3[:2])
    # widening the re-rank evaluates only the new trial; the stored ones are read
    scaling, trial = rerank_study(optuna.load_study(study_name="tiny", storage=storage), evaluate, top=3)
    assert calls[2:] == [top3[2]] and trial.number == top3[2]
    # best_scaling / export_best follow the re-ranked winner, not study.best_trial
    study = optuna.load_study(study_name="tiny", storage=storage)
    assert study.best_trial.number == top3[0]
    assert best_scaling(study)[1].number == top3[2]
    exported = export_best(study, tmp_path / "best.json")
    assert exported["trial"] == top3[2] and exported["rerank_value"] == truth[top3[2]]
    assert json.loads((tmp_path / "best.json").read_text())["factors"] == list(scaling.factors)


def space_factors(study, trial):
    from longrope_opt.studies import space_of_study

    return space_of_study(study, trial).to_scaling(trial.params).factors


def test_rerank_rejects_bad_top_and_empty_study(searched) -> None:
    storage, _ = searched
    study = optuna.load_study(study_name="tiny", storage=storage)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(InvalidArgumentError, match=r"`rerank` must be an integer >= 1"):
            rerank_study(study, lambda s: 1.0, top=bad)
    empty = optuna.create_study(storage=storage, study_name="empty")
    with pytest.raises(InvalidArgumentError, match="no completed trial"):
        rerank_study(empty, lambda s: 1.0, top=1)
    assert reranked_best(study) is None  # nothing re-ranked yet


def test_cli_search_reranks_at_full_length_once(searched, capsys) -> None:
    storage, args = searched
    capsys.readouterr()
    assert main([*args, "--rerank", "2"]) == 0
    out = capsys.readouterr().out
    study = optuna.load_study(study_name="tiny", storage=storage)
    stored = record.read_rerank(study)
    assert len(stored) == 2 and "re-ranked at full fidelity" in out and "<- re-ranked winner" in out
    assert {int(k) for k in stored} == {t.number for t in _complete(study)[:2]}
    assert all(v > 1.0 for v in stored.values())  # perplexities at the full target length
    # the full-length value differs from the proxy's (another measurement, not a copy)
    assert any(abs(v - study.trials[int(k)].value) > 1e-6 for k, v in stored.items())
    before = dict(stored)
    assert main([*args, "--rerank", "2"]) == 0  # a rerun re-evaluates nothing
    assert record.read_rerank(optuna.load_study(study_name="tiny", storage=storage)) == before


def test_cli_rerank_bad_value_is_one_line_exit_2(searched, capsys) -> None:
    _, args = searched
    capsys.readouterr()
    assert main([*args, "--rerank", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`--rerank` must be an integer >= 0, got -1" in err[0]
