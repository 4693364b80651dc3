"""`validate` on a tiny model: held-out documents, resume without a forward, files, verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from longrope_opt.cli import main
from longrope_opt.data import load_samples
from longrope_opt.evaluation import CLASSIC
from longrope_opt.evaluation import MeasurementStore
from longrope_opt.evaluation import study_rows
from longrope_opt.evaluation import summarize
from longrope_opt.evaluation import validate
from longrope_opt.models import load_model
from longrope_opt.studies import record
from longrope_opt.studies import study_documents
from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus


optuna.logging.set_verbosity(optuna.logging.WARNING)
EVO = ["--population-size", "5", "--num-mutations", "1", "--num-crossovers", "1",
       "--num-parents", "2"]  # fmt: skip


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate")
    model = save_tiny_model_dir(root / "model")
    corpus = write_tiny_corpus(root / "corpus", n_docs=5, words=600)
    storage = f"sqlite:///{root / 's.db'}"
    assert main(["search", "--model", model, "--corpus", corpus, "--samples", "1",
                 "--target-length", "256", "--dtype", "float32", "--no-fuse", "--storage",
                 storage, "--study-name", "tiny", "--n-trials", "6", *EVO]) == 0  # fmt: skip
    return {"root": root, "model": model, "corpus": corpus, "storage": storage}


def _count_forwards(model) -> list[int]:
    calls = [0]
    model.get_decoder().register_forward_pre_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_validate_leaves_out_the_studys_documents_and_resumes_with_no_forward(searched) -> None:
    study = optuna.load_study(study_name="tiny", storage=searched["storage"])
    used = record.read_provenance(study)["doc_ids"]
    model, tok = load_model(searched["model"], dtype="float32")
    calls = _count_forwards(model)
    docs = load_samples(searched["corpus"], tok, 256, 3, exclude=study_documents(study))
    assert not set(docs.doc_ids) & set(used)  # the searched document is never a held-out one
    store = MeasurementStore(searched["storage"], path="float32")
    rows = study_rows(study)
    first = validate(model, tok, rows, docs, lengths=[128, 256], store=store, keys=3,
                     progress=False)  # fmt: skip
    n_rows = len(CLASSIC) + len(rows)
    assert first.measured == 2 * n_rows * (3 + 3)  # 2 lengths × rows × (3 documents + 3 keys)
    assert calls[0] > 0
    calls[0] = 0
    again = validate(model, tok, rows, docs, lengths=[128, 256],
                     store=MeasurementStore(searched["storage"], path="float32"), keys=3,
                     progress=False)  # fmt: skip
    assert calls[0] == 0 and again.measured == 0  # every number came from the storage
    assert again.ppl == first.ppl and again.passkey == first.passkey
    # one more document measures only that document, for every row
    more = load_samples(searched["corpus"], tok, 256, 4, exclude=study_documents(study))
    grown = validate(model, tok, rows, more, lengths=[256], store=store, keys=3, progress=False)
    assert grown.measured == n_rows
    summary = summarize(grown)
    assert summary.reference[256] in CLASSIC
    assert set(summary.verdicts) == {r.name for r in rows}


def test_validate_command_writes_its_files_and_refuses_a_corpus_of_searched_text(
    searched, capsys
) -> None:
    out = searched["root"] / "table"

    def args(corpus: str) -> list[str]:
        return ["validate", "--study-name", "tiny", "--storage", searched["storage"], "--corpus",
                corpus, "--docs", "2", "--keys", "2", "--lengths", "256", "--dtype", "float32",
                "--output", str(out)]  # fmt: skip

    assert main(args(searched["corpus"])) == 0
    printed = capsys.readouterr().out
    assert "reference:" in printed and "verdict tiny:" in printed
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["validation"]["documents"] and data["verdicts"]
    assert out.with_suffix(".csv").read_text().startswith("length,row,")
    assert "plotly" in out.with_suffix(".html").read_text()
    assert out.with_suffix(".txt").read_text().strip() in printed
    # a corpus holding only the searched document: nothing left to validate on
    only = searched["root"] / "only"
    only.mkdir()
    study = optuna.load_study(study_name="tiny", storage=searched["storage"])
    searched_doc = record.read_provenance(study)["doc_ids"][0]
    text = Path(searched_doc).read_text()
    (only / "copy.txt").write_text(text)  # the same text under another path
    (only / "other.txt").write_text(text + " w5")
    assert main(args(str(only))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has 1 document(s) of >= 256 tokens, need" in err[0]
