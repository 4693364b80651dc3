"""`validate` on a tiny model: held-out documents, resume without a forward, files, verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optuna
import pytest

from longrope_opt.cli import main
from longrope_opt.data import load_samples
from longrope_opt.evaluation import CLASSIC
from longrope_opt.evaluation import MEASUREMENT_VERSION
from longrope_opt.evaluation import STORE_STUDY
from longrope_opt.evaluation import MeasurementStore
from longrope_opt.evaluation import classic_rows
from longrope_opt.evaluation import measurement_key
from longrope_opt.evaluation import model_fingerprint
from longrope_opt.evaluation import study_rows
from longrope_opt.evaluation import summarize
from longrope_opt.evaluation import tokens_hash
from longrope_opt.evaluation import validate
from longrope_opt.models import load_model
from longrope_opt.objectives import passkey_prompts
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
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
    # one forward per distinct measurement: the tiny word tokenizer makes prompts alike
    distinct = {n: len({tokens_hash(p.ids) for p in passkey_prompts(tok, n, n_trials=3)})
                for n in (128, 256)}  # fmt: skip
    assert first.measured == sum(n_rows * (3 + distinct[n]) for n in (128, 256))
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


def test_a_scaling_keyed_the_same_whatever_its_last_bit() -> None:
    """The same formula on two CPUs can differ in its last bit (numpy's AVX-512 `power` is not
    its AVX2 one): the key is the same; a real difference is another key."""
    factors = np.linspace(1.0, 4.0, 32) ** 1.3
    bumped = np.nextafter(factors, np.inf)
    assert (bumped != factors).all()
    key = measurement_key("ppl", "m", "c", 64, RopeScaling(factors, 0, 1.07))
    assert key == measurement_key("ppl", "m", "c", 64, RopeScaling(bumped, 0, np.nextafter(1.07, 2)))
    assert key != measurement_key("ppl", "m", "c", 64, RopeScaling(factors * (1 + 1e-9), 0, 1.07))
    assert key != measurement_key("ppl", "m", "c", 64, RopeScaling(bumped, 0, 1.07), exact=True)


def test_records_under_an_earlier_key_format_are_adopted_with_no_forward(searched, tmp_path) -> None:
    study = optuna.load_study(study_name="tiny", storage=searched["storage"])
    model, tok = load_model(searched["model"], dtype="float32")
    calls = _count_forwards(model)
    docs = load_samples(searched["corpus"], tok, 256, 2, exclude=study_documents(study))
    rows = study_rows(study)
    new = MeasurementStore(f"sqlite:///{tmp_path / 'new.db'}", path="float32")
    first = validate(model, tok, rows, docs, lengths=[256], store=new, keys=2, progress=False)
    assert first.measured > 0
    # The same records as an earlier version keyed them: by the scaling's raw bits.
    old = optuna.create_study(storage=f"sqlite:///{tmp_path / 'old.db'}", study_name=STORE_STUDY)
    fingerprint = model_fingerprint(model)
    contents = [("ppl", d[:256]) for d in docs]
    contents += [("passkey", p.ids) for p in passkey_prompts(tok, 256, n_trials=2, seed=0)]
    for row in [*classic_rows(RopeSpec.from_config(model.config), 256), *rows]:
        for kind, content in contents:
            args = (kind, fingerprint, tokens_hash(content), 256, row.scaling)
            value, _ = new.get(measurement_key(*args))
            old.set_user_attr(measurement_key(*args, exact=True), {"float32": {"value": value}})
    calls[0] = 0
    store = MeasurementStore(f"sqlite:///{tmp_path / 'old.db'}", path="float32")
    again = validate(model, tok, rows, docs, lengths=[256], store=store, keys=2, progress=False)
    assert calls[0] == 0 and again.measured == 0
    assert again.ppl == first.ppl and again.passkey == first.passkey


def test_records_of_another_measuring_version_or_imported_are_measured_again(
    searched, tmp_path
) -> None:
    study = optuna.load_study(study_name="tiny", storage=searched["storage"])
    model, tok = load_model(searched["model"], dtype="float32")
    calls = _count_forwards(model)
    docs = load_samples(searched["corpus"], tok, 256, 2, exclude=study_documents(study))
    rows = study_rows(study)[:1]
    url = f"sqlite:///{tmp_path / 'v.db'}"
    first = validate(model, tok, rows, docs, lengths=[256], store=MeasurementStore(url, path="float32"),
                     keys=2, progress=False)  # fmt: skip
    # Rewrite the records: one as an earlier measuring version made it, one as imported from a
    # table, one as written before versions were kept; the rest as they are.
    raw = optuna.load_study(study_name=STORE_STUDY, storage=url)
    keys = sorted(raw.user_attrs)
    edits = {keys[0]: {"version": MEASUREMENT_VERSION - 1}, keys[1]: {"imported": "table.txt"}}
    for key, change in edits.items():
        record = dict(raw.user_attrs[key]["float32"])
        record.pop("version")
        raw.set_user_attr(key, {"float32": {**record, **change}})
    record = dict(raw.user_attrs[keys[2]]["float32"])
    record.pop("version")
    raw.set_user_attr(keys[2], {"float32": record})
    calls[0] = 0
    store = MeasurementStore(url, path="float32")
    assert [store.stale(k) for k in keys[:3]] == [True, True, False]
    again = validate(model, tok, rows, docs, lengths=[256], store=store, keys=2, progress=False)
    assert again.measured == 2 and calls[0] > 0  # exactly the two stale records
    assert again.ppl == first.ppl and again.passkey == first.passkey
    stored = optuna.load_study(study_name=STORE_STUDY, storage=url).user_attrs
    assert all(stored[k]["float32"]["version"] == MEASUREMENT_VERSION for k in keys[:2])


def test_the_branched_form_where_it_cannot_run_is_refused_before_any_forward(searched,
                                                                            tmp_path) -> None:  # fmt: skip
    from longrope_opt.errors import InvalidArgumentError
    from longrope_opt.patching import set_attention

    model, tok = load_model(searched["model"], dtype="float32")
    set_attention(model, "eager")  # as a GPU is: no shared prefix there
    calls = _count_forwards(model)
    docs = load_samples(searched["corpus"], tok, 256, 1)
    store = MeasurementStore(f"sqlite:///{tmp_path / 'm.db'}", path="float32")
    with pytest.raises(InvalidArgumentError, match="'branched' needs a CPU model with SDPA"):
        validate(model, tok, [], docs, lengths=[256], store=store, keys=2, classic=["yarn"],
                 passkey_form="branched", progress=False)  # fmt: skip
    assert calls[0] == 0
    # without keys to measure there is nothing to refuse
    done = validate(model, tok, [], docs, lengths=[256], store=store, keys=0, classic=["yarn"],
                    passkey_form="branched", progress=False)  # fmt: skip
    assert done.measured == 1


def test_the_branched_form_is_stored_apart_and_named_in_the_table(searched) -> None:
    from longrope_opt.evaluation import format_summary
    from longrope_opt.patching import set_attention

    study = optuna.load_study(study_name="tiny", storage=searched["storage"])
    model, tok = load_model(searched["model"], dtype="float32")
    set_attention(model, "sdpa")  # the branched form needs SDPA on the CPU
    calls = _count_forwards(model)
    docs = load_samples(searched["corpus"], tok, 256, 2, exclude=study_documents(study))
    store = MeasurementStore(searched["storage"], path="float32")
    kw = dict(lengths=[256], store=store, keys=4, classic=["yarn"], progress=False)
    single = validate(model, tok, [], docs, **kw)
    calls[0] = 0
    branched = validate(model, tok, [], docs, passkey_form="branched", **kw)
    # perplexity came from the store; the keys were measured again, one haystack forward and
    # a branch per distinct prompt (the tiny tokenizer makes some alike): a form's own outcomes
    prompts = passkey_prompts(tok, 256, n_trials=4)
    distinct = len({tokens_hash(p.ids) for p in prompts})
    haystacks = len({tokens_hash(p.haystack()) for p in prompts})
    assert branched.measured == distinct and calls[0] == haystacks + distinct
    assert single.passkey_form == "single" and branched.passkey_form == "branched"
    assert "(seed 0, branched form)" in format_summary(summarize(branched))
    again = validate(model, tok, [], docs, passkey_form="branched", **kw)
    assert again.measured == 0 and again.passkey == branched.passkey
