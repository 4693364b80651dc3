"""A search that generalises: several documents of several kinds, the population pruner, the
retrieval constraint inside the search, and what `validate` shows of the overfit."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from longrope_opt.cli import main
from longrope_opt.data import load_samples
from longrope_opt.models import load_tokenizer
from longrope_opt.samplers import CONSTRAINTS_KEY
from longrope_opt.studies import SearchConfig
from longrope_opt.studies import record
from longrope_opt.studies import run_search
from longrope_opt.studies import study_documents
from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus


optuna.logging.set_verbosity(optuna.logging.WARNING)
EVOLUTION = {"population_size": 5, "num_mutations": 3, "num_crossovers": 3, "num_parents": 2}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("generalise")
    return {
        "root": root,
        "model": save_tiny_model_dir(root / "model"),
        "a": write_tiny_corpus(root / "books", n_docs=4, words=500, seed=1),
        "b": write_tiny_corpus(root / "code", n_docs=4, words=500, seed=2),
    }


def _search(setup, name: str, n_trials: int, **fields) -> optuna.Study:
    config = SearchConfig(**{
        "model": setup["model"], "corpus": setup["a"], "samples": 3, "target_length": 256,
        "sampler_options": EVOLUTION, "pruner": "population", **fields,
    })  # fmt: skip
    storage = f"sqlite:///{setup['root'] / 'studies.db'}"
    return run_search(config, storage=storage, study_name=name, n_trials=n_trials,
                      dtype="float32", fuse=False, progress=False).study  # fmt: skip


def test_two_corpora_take_turns_and_the_study_records_which(setup) -> None:
    tok = load_tokenizer(setup["model"])
    both = f"{setup['a']},{setup['b']}"
    docs = load_samples(both, tok, 256, 4, seed=0)
    assert docs.doc_kinds == [setup["a"], setup["b"], setup["a"], setup["b"]]
    assert [d.startswith(k) for d, k in zip(docs.doc_ids, docs.doc_kinds)] == [True] * 4
    study = _search(setup, "two-corpora", 6, corpus=both, samples=4)
    prov = record.read_provenance(study)
    assert prov["doc_ids"] == docs.doc_ids and prov["doc_kinds"] == docs.doc_kinds
    for t in study.trials:  # every trial says what it read, pruned ones included
        assert t.user_attrs["documents"] == docs.doc_ids[: len(t.user_attrs["documents"])]
    # and validate leaves every one of them out, from either corpus
    held = load_samples(both, tok, 256, 4, seed=0, exclude=study_documents(study))
    assert not set(held.doc_ids) & set(docs.doc_ids)


def test_the_builtin_corpus_is_prose_and_code() -> None:
    tok = load_tokenizer("smollm2-135m")
    docs = load_samples("builtin", tok, 4096, 2, seed=0)
    assert docs.doc_kinds == ["builtin:prose", "builtin:code"]


def test_a_candidate_that_cannot_enter_the_population_reads_no_more_documents(setup) -> None:
    study = _search(setup, "pruned", 16)
    finished = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) == 16
    pruned = [t for t in finished if t.state == TrialState.PRUNED]
    assert pruned
    for t in pruned:
        read = len(t.user_attrs["sample_nll"])
        assert read == t.last_step + 1 == len(t.user_attrs["documents"])
    assert any(len(t.user_attrs["sample_nll"]) < 3 for t in pruned)  # documents were skipped
    for t in finished:
        if t.state == TrialState.COMPLETE:
            assert len(t.user_attrs["sample_nll"]) == 3
    assert all(t.state == TrialState.COMPLETE for t in finished if t.user_attrs.get("seed"))


@pytest.mark.parametrize("pruner", ["population", "none"])
def test_the_retrieval_constraint_measures_only_candidates_that_would_enter(
    setup, monkeypatch, pruner
) -> None:
    from longrope_opt.objectives import _retrieval

    measured: list[int] = []
    real = _retrieval.passkey_results

    def counting(model, prompts, **kw):
        for out in real(model, prompts, **kw):
            measured.append(out[0])
            yield out

    monkeypatch.setattr(_retrieval, "passkey_results", counting)
    keys = 2
    study = _search(setup, f"retrieval-{pruner}", 14, retrieval_keys=keys, pruner=pruner)
    stored = record.read_retrieval(study)
    assert stored["keys"] == keys and stored["seed"] == 2
    # one forward per prompt per measured trial: the bar (best seed) once, then candidates
    assert len(measured) == keys * len(stored["misses"])
    seeds = {t.number for t in study.trials if t.user_attrs.get("seed")}
    candidates = [int(n) for n in stored["misses"] if int(n) not in seeds]
    assert len([n for n in stored["misses"] if int(n) in seeds]) == 1  # only the bar's seed
    assert len(candidates) < 14 - len(seeds)  # most trials paid nothing
    ranked = sorted((t for t in study.trials if t.state == TrialState.COMPLETE),
                    key=lambda t: (t.number))  # fmt: skip
    for t in study.trials:
        assert CONSTRAINTS_KEY in t.system_attrs or t.state not in (
            TrialState.COMPLETE, TrialState.PRUNED)  # fmt: skip
        if t.number in candidates:  # measured: it would have entered, so it completed
            assert t.state == TrialState.COMPLETE
            assert t.user_attrs["retrieval_misses"] == sum(stored["misses"][str(t.number)])
            assert t.system_attrs[CONSTRAINTS_KEY] == [
                t.user_attrs["retrieval_misses"] - t.user_attrs["retrieval_bar"]
            ]
        elif t.number not in seeds:
            assert "retrieval_misses" not in t.user_attrs
            assert t.system_attrs.get(CONSTRAINTS_KEY) in ([0.0], None)
    if pruner == "population":  # every complete candidate entered, so every one was measured
        assert {t.number for t in ranked if t.number not in seeds} == set(candidates)


def test_validate_prints_the_in_sample_ratio_beside_the_held_out_one(setup, capsys) -> None:
    storage = f"sqlite:///{setup['root'] / 'studies.db'}"
    _search(setup, "overfit", 8)
    args = ["validate", "--study-name", "overfit", "--storage", storage, "--corpus", setup["b"],
            "--docs", "2", "--lengths", "256", "--keys", "0", "--classic", "yarn,yarn-cd",
            "--dtype", "float32"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "overfit overfit:best: in-sample " in out and "→ held-out " in out
    # two classic rows are not every row that could be best, and no passkey was measured
    assert "(best of the rows measured: yarn, yarn-cd)" in out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict "))
    assert "perplexity only" in verdict and "dominates" not in verdict


def test_a_study_keeps_its_passkey_form_and_the_constraint_measures_in_it(setup) -> None:
    # the tiny model runs the CPU's SDPA path (float32), where the branched form runs
    study = _search(setup, "retrieval-branched", 8, retrieval_keys=2, passkey_form="branched")
    config = SearchConfig.from_study(study)
    assert config.passkey_form == "branched"
    assert record.read_retrieval(study)["form"] == "branched"
    # resumed without saying: the stored form; a new study without saying: the single form
    resumed = _search(setup, "retrieval-branched", 9, retrieval_keys=2)
    assert SearchConfig.from_study(resumed).passkey_form == "branched"
    fresh = _search(setup, "retrieval-default", 6, retrieval_keys=2)
    assert SearchConfig.from_study(fresh).passkey_form == "single"
    with pytest.raises(Exception, match="passkey_form"):
        SearchConfig(passkey_form="multi")
