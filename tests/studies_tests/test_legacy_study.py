"""A study written by the release before `SearchConfig` opens, resumes, joins and exports.

`tests/data/legacy_search_study.db` was made by that release (commit 1e2e296 on main, the parent
of the `SearchConfig` change) with, in a folder holding this suite's tiny model as `model/` and
tiny corpus as `corpus/`:

    longrope-opt search --model model --corpus corpus --target-length 256 --samples 2
      --storage sqlite:///legacy.db --study-name legacy --n-trials 8 --population-size 4
      --num-mutations 2 --num-crossovers 2 --num-parents 2 --dtype float32 --no-fuse
      --heartbeat-interval 0

It keeps its argparse keys under the user attr ``search_config``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from longrope_opt.cli import main
from longrope_opt.studies import SearchConfig
from longrope_opt.studies import best_scaling
from longrope_opt.studies import record
from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus


LEGACY = Path(__file__).resolve().parents[1] / "data" / "legacy_search_study.db"
FLAGS = ["--model", "model", "--corpus", "corpus", "--target-length", "256", "--samples", "2",
         "--storage", "sqlite:///legacy.db", "--study-name", "legacy", "--population-size", "4",
         "--num-mutations", "2", "--num-crossovers", "2", "--num-parents", "2",
         "--dtype", "float32", "--no-fuse", "--heartbeat-interval", "0"]  # fmt: skip


@pytest.fixture
def legacy(tmp_path, monkeypatch) -> Path:
    # The study records relative paths, as its user typed them: run where they resolve.
    shutil.copy(LEGACY, tmp_path / "legacy.db")
    save_tiny_model_dir(tmp_path / "model")
    write_tiny_corpus(tmp_path / "corpus")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _load() -> optuna.Study:
    return optuna.load_study(study_name="legacy", storage="sqlite:///legacy.db")


def test_legacy_config_is_read(legacy) -> None:
    study = _load()
    assert record.CONFIG not in study.user_attrs and "search_config" in study.user_attrs
    config = SearchConfig.from_study(study)
    assert config == SearchConfig(
        model="model", corpus="corpus", samples=2, seed=0, target_length=256,
        sampler_options={"population_size": 4, "num_mutations": 2, "num_crossovers": 2,
                         "num_parents": 2, "mutation_prob": 0.3},
        seed_methods=("pi", "ntk", "yarn"),  # every study's seeds before `seed_methods` existed
        draw="order", pruner="none",  # how they drew documents, and no pruner
        passkey_form="single",  # the only passkey prompt then
    )  # fmt: skip


def test_legacy_study_resumes_with_the_same_flags_and_migrates(legacy) -> None:
    before = {t.number: (t.params, t.value) for t in _load().trials}
    assert len(before) == 8
    assert main(["search", *FLAGS, "--n-trials", "12"]) == 0
    study = _load()
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == 12
    assert {n: (t.params, t.value) for n, t in enumerate(study.trials) if n < 8} == before
    assert SearchConfig.from_dict(study.user_attrs[record.CONFIG]) == SearchConfig.from_study(study)
    # other settings are still refused, naming the flag
    assert main(["search", *FLAGS[:-2], "--n-trials", "12", "--num-parents", "3"]) == 2


def test_legacy_study_joins_a_worker_and_exports(legacy, capsys) -> None:
    assert main(["worker", "--storage", "sqlite:///legacy.db", "--study-name", "legacy",
                 "--n-trials", "10", "--dtype", "float32", "--no-fuse",
                 "--heartbeat-interval", "0"]) == 0  # fmt: skip
    assert len(_load().get_trials(states=(TrialState.COMPLETE,))) == 10
    assert main(["export", "--storage", "sqlite:///legacy.db", "--study-name", "legacy",
                 "-o", "f.json"]) == 0  # fmt: skip
    exported = json.loads(Path("f.json").read_text())
    study = _load()
    names = sorted(k for k in study.best_params if k.startswith("lambda_"))
    np.testing.assert_array_equal(exported["factors"], [study.best_params[n] for n in names])
    assert exported["factors"] == list(best_scaling(study)[0].factors)
    assert exported["target_length"] == 256


def test_study_stored_before_a_config_field_resumes(legacy) -> None:
    # A config written before `critical_above` existed lacks the key: it reads as its default, so
    # a run that leaves the field at its default resumes (the 4x script's studies are such studies).
    assert main(["search", *FLAGS, "--n-trials", "9"]) == 0
    study = _load()
    stored = dict(study.user_attrs[record.CONFIG])
    assert stored.pop("critical_above") is None
    assert stored.pop("seed_all") is False  # a field whose default is not None
    assert stored.pop("seed_methods") == ["pi", "ntk", "yarn"]  # new studies set it otherwise
    study.set_user_attr(record.CONFIG, stored)
    assert main(["search", *FLAGS, "--n-trials", "10"]) == 0
    assert len(_load().get_trials(states=(TrialState.COMPLETE,))) == 10
    # a setting the study was not made with is still refused
    assert main(["search", *FLAGS[:-2], "--n-trials", "11", "--num-parents", "3"]) == 2
