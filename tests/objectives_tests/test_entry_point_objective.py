"""An objective installed from an entry point that maximizes: it searches, re-ranks and exports
its best trial (larger is better all the way)."""

from __future__ import annotations

import json
import math

import optuna

from longrope_opt.cli import main
from longrope_opt.studies import record
from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus


OBJECTIVE = '''
from longrope_opt.objectives import Objective, evaluate_perplexity


class InversePerplexity(Objective):
    """1 / perplexity: larger is better."""

    direction = "maximize"

    def measure(self, trial, scaling):
        value = 1.0 / evaluate_perplexity(self.model, self.samples, None).ppl
        self.report(trial, value, 0)
        return value
'''


def _install(site) -> None:
    """A distribution `my-objectives` whose entry point registers `inv-ppl`."""
    (site / "my_objectives.py").write_text(OBJECTIVE)
    info = site / "my_objectives-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-objectives\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[longrope_opt.objectives]\ninv-ppl = my_objectives:InversePerplexity\n"
    )


def test_entry_point_objective_that_maximizes_searches_reranks_and_exports_its_best(
    tmp_path, monkeypatch, capsys
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _install(site)
    monkeypatch.syspath_prepend(str(site))
    model = save_tiny_model_dir(tmp_path / "model")
    corpus = write_tiny_corpus(tmp_path / "corpus", n_docs=4, words=600)
    storage = f"sqlite:///{tmp_path / 's.db'}"
    args = ["search", "--objective", "inv-ppl", "--model", model, "--corpus", corpus,
            "--samples", "1", "--target-length", "256", "--dtype", "float32", "--no-fuse",
            "--storage", storage, "--study-name", "inv", "--n-trials", "7",
            "--population-size", "5", "--num-mutations", "1", "--num-crossovers", "1",
            "--num-parents", "2", "--rerank", "3", "--rerank-samples", "2"]  # fmt: skip
    assert main(args) == 0
    study = optuna.load_study(study_name="inv", storage=storage)
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    values = {t.number: t.value for t in study.trials if t.value is not None}
    assert all(0 < v < 1 for v in values.values())  # inverse perplexities
    reranked = record.read_rerank(study)
    top3 = sorted(values, key=lambda n: (-values[n], n))[:3]
    assert set(reranked) == set(top3)  # the largest values were re-ranked, not the smallest
    winner = max(reranked, key=lambda n: (reranked[n], -n))
    assert all(0 < v < 1 for v in reranked.values())  # measured by the objective itself
    out = capsys.readouterr().out
    assert "higher is better" in out and "best found" in out
    assert main(["export", "--storage", storage, "--study-name", "inv", "-o",
                 str(tmp_path / "f.json")]) == 0  # fmt: skip
    exported = json.loads((tmp_path / "f.json").read_text())
    assert exported["trial"] == winner and exported["rule"] == "re-ranked"
    assert math.isclose(exported["rerank_value"], reranked[winner])
