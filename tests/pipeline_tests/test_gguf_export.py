"""`longrope-opt export --gguf`: a study's winner as a GGUF, and the refusals (one line, exit 2,
nothing written)."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest

from longrope_opt.cli import main
from longrope_opt.models import load_model
from longrope_opt.models import smollm2_gguf
from longrope_opt.rope import RopeScaling
from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus
from tests.gguf_tiny import llama_cpp_log_probs
from tests.gguf_tiny import our_log_probs
from tests.gguf_tiny import write_tiny_llama_gguf


def _search(model: str, corpus: str, storage: str, name: str, length: str, *extra: str) -> int:
    return main([
        "search", "--model", model, "--corpus", corpus, "--target-length", length,
        "--samples", "1", "--storage", storage, "--study-name", name, "--n-trials", "2",
        "--population-size", "4", "--num-mutations", "1", "--num-crossovers", "1",
        "--num-parents", "2", "--dtype", "float32", "--no-fuse", *extra,
    ])  # fmt: skip


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """A study of the tiny GGUF model, and two of a transformers directory (fast to load) with
    n_hat 0 and 4, in one storage."""
    folder = tmp_path_factory.mktemp("gguf-studies")
    model = write_tiny_llama_gguf(folder / "tiny.gguf", smollm2_gguf())
    corpus = folder / "corpus"
    corpus.mkdir()
    for i in range(2):  # ordinary English: SmolLM2's tokenizer
        (corpus / f"d{i}.txt").write_text(" ".join(f"the word {j} of text {i}." for j in range(300)))
    storage = f"sqlite:///{folder / 's.db'}"
    assert _search(str(model), str(corpus), storage, "plain", "1024", "--n-hat", "0") == 0
    directory = save_tiny_model_dir(folder / "dir")
    words = write_tiny_corpus(folder / "words")
    for name, n_hat in (("dir-plain", "0"), ("dir-nhat", "4")):
        assert _search(directory, words, storage, name, "256", "--n-hat", n_hat) == 0
    return folder, storage


def test_export_writes_the_winner_into_a_copy_of_the_models_gguf(studies, capsys) -> None:
    folder, storage = studies
    out, factors = folder / "out" / "plain.gguf", folder / "plain.json"
    (folder / "out").mkdir()
    code = main(["export", "--storage", storage, "--study-name", "plain", "-o", str(factors),
                 "--gguf", str(out)])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert f"llama-cli -m {out} -c 1024" in printed and "Modelfile" in printed
    reader = gguf.GGUFReader(str(out))
    tensors = {t.name: t for t in reader.tensors}
    exported = json.loads(factors.read_text())["rope_parameters"]
    np.testing.assert_allclose(tensors["rope_factors_long.weight"].data, exported["long_factor"],
                               rtol=1e-6)  # fmt: skip
    assert reader.fields["llama.context_length"].contents() == 1024
    attn = reader.fields["llama.rope.scaling.attn_factor"].contents()
    assert attn == pytest.approx(exported["attention_factor"], rel=1e-6)
    assert (folder / "out" / "Modelfile").read_text().startswith("FROM ./plain.gguf\n")


@pytest.mark.parametrize("case", ["exists", "n_hat", "not_a_gguf", "suffix"])
def test_bad_input_is_one_line_exit_2_and_nothing_is_written(studies, tmp_path, capsys, case):
    folder, storage = studies
    out = tmp_path / ("x.bin" if case == "suffix" else "x.gguf")
    # n_hat: a winner with n_hat 4; not_a_gguf: a transformers model directory, no GGUF to copy
    name = {"n_hat": "dir-nhat", "not_a_gguf": "dir-plain"}.get(case, "plain")
    if case == "exists":
        out.write_text("keep me")
    code = main(["export", "--storage", storage, "--study-name", name,
                 "-o", str(tmp_path / "f.json"), "--gguf", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1, err
    expected = {"exists": "`--gguf`", "n_hat": "`--drop-n-hat`", "not_a_gguf": "is not a GGUF",
                "suffix": "must end in .gguf"}[case]  # fmt: skip
    assert expected in err[0]
    assert out.read_text() == "keep me" if case == "exists" else not out.exists()
    assert not (tmp_path / "f.json").exists()  # refused before anything was written


def test_drop_n_hat_writes_it_and_says_what_was_dropped(studies, tmp_path, capsys) -> None:
    folder, storage = studies
    out = tmp_path / "n.gguf"
    # the directory's tiny Llama has the tiny GGUF's rotary dimensions: its GGUF stands in
    code = main(["export", "--storage", storage, "--study-name", "dir-nhat", "-o",
                 str(tmp_path / "f.json"), "--gguf", str(out), "--drop-n-hat",
                 "--gguf-source", str(folder / "tiny.gguf")])  # fmt: skip
    assert code == 0 and out.is_file()
    assert "dropped: n_hat=4" in capsys.readouterr().out


@pytest.mark.slow  # a whole `extend`, then llama.cpp (the llama-cpp extra: not in .ci/floor)
@pytest.mark.llama_cpp
def test_extend_of_a_gguf_ends_with_a_gguf_llama_cpp_runs(studies, tmp_path, capsys) -> None:
    folder, _ = studies
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(8):  # the search's 3 documents, the validation's held-out ones
        (corpus / f"d{i}.txt").write_text(
            " ".join(f"line {j} of book {i} says {j * i % 97}." for j in range(260)))  # fmt: skip
    out = tmp_path / "extended"
    code = main(["extend", str(folder / "tiny.gguf"), "--to", "1024", "--trials", "3",
                 "--corpus", str(corpus), "--dtype", "float32", "--no-fuse", "--storage",
                 f"sqlite:///{tmp_path / 'e.db'}", "--out", str(out)])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == f"run it in llama.cpp: llama-cli -m {out / 'model.gguf'} -c 1024"
    shipped = _shipped_factors(out)  # the winner's, or the formula's the verdict ships
    reader = gguf.GGUFReader(str(out / "model.gguf"))
    long = next(t for t in reader.tensors if t.name == "rope_factors_long.weight")
    np.testing.assert_allclose(long.data, shipped["rope_parameters"]["long_factor"], rtol=1e-6)
    assert (out / "Modelfile").read_text() == "FROM ./model.gguf\nPARAMETER num_ctx 1024\n"
    # llama.cpp itself runs it as our patched model runs the winner (tests/integration has more)
    pytest.importorskip("llama_cpp", reason="the llama-cpp extra (.ci/run installs it)")
    model, _ = load_model(str(folder / "tiny.gguf"), dtype="float32", device="cpu")
    ids = np.random.default_rng(1).integers(0, model.config.vocab_size, 1024).tolist()
    ours = our_log_probs(model, ids, RopeScaling.from_dict(shipped))
    theirs = llama_cpp_log_probs(out / "model.gguf", ids, 1024)
    nll = [-lp[np.arange(1023), ids[1:]].mean() for lp in (ours, theirs)]
    assert abs(nll[0] - nll[1]) < 1e-5 * nll[0]


def _shipped_factors(out):
    """The factors file of what `extend` ships: the reference formula's when its verdict does
    not dominate (``factors-<row>.json``), else the searched winner's."""
    formula = sorted(out.glob("factors-*.json"))
    return json.loads((formula[0] if formula else out / "factors.json").read_text())


@pytest.mark.slow  # a whole `extend` of the tiny GGUF
def test_an_extend_that_ships_a_formula_names_a_gguf_holding_the_formula(studies, tmp_path,
                                                                        capsys) -> None:  # fmt: skip
    # A margin no search clears (49 %): the verdict ships the best formula, and the GGUF the
    # summary names holds that formula's factors, not the study's best trial's.
    folder, _ = studies
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(6):
        (corpus / f"d{i}.txt").write_text(
            " ".join(f"line {j} of book {i} says {j * i % 97}." for j in range(260)))  # fmt: skip
    out = tmp_path / "extended"
    code = main(["extend", str(folder / "tiny.gguf"), "--to", "1024", "--trials", "3",
                 "--margin", "0.49", "--corpus", str(corpus), "--dtype", "float32", "--no-fuse",
                 "--storage", f"sqlite:///{tmp_path / 'e.db'}", "--out", str(out)])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out.strip().splitlines()
    ref = json.loads((out / "validation.json").read_text())["reference"]["1024"]
    assert f"ship {ref}" in printed[printed.index("") + 1] or "exported too" in printed[
        printed.index("") + 1]  # fmt: skip
    assert printed[-2] == f"load it: AutoModelForCausalLM.from_pretrained({str(out / f'model-{ref}')!r})"
    assert printed[-1] == f"run it in llama.cpp: llama-cli -m {out / 'model.gguf'} -c 1024"
    assert any(line.strip().startswith(f"{ref} as a GGUF") for line in printed), printed
    formula = json.loads((out / f"factors-{ref}.json").read_text())
    winner = json.loads((out / "factors.json").read_text())
    reader = gguf.GGUFReader(str(out / "model.gguf"))
    long = next(t for t in reader.tensors if t.name == "rope_factors_long.weight").data
    np.testing.assert_allclose(long, formula["rope_parameters"]["long_factor"], rtol=1e-6)
    assert not np.allclose(long, winner["rope_parameters"]["long_factor"], rtol=1e-6)
    attn = reader.fields["llama.rope.scaling.attn_factor"].contents()
    assert attn == pytest.approx(formula["attention_scale"], rel=1e-6)


def test_extend_asked_for_a_gguf_of_a_model_without_one_is_one_line(studies, tmp_path, capsys):
    folder, _ = studies
    code = main(["extend", str(folder / "dir"), "--to", "256", "--corpus", str(folder / "words"),
                 "--gguf", "--storage", f"sqlite:///{tmp_path / 'e.db'}", "--out",
                 str(tmp_path / "o")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "is not a GGUF" in err[0], err
    assert not (tmp_path / "o").exists() and not (tmp_path / "e.db").exists()
