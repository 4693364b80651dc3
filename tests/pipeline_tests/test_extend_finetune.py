"""`longrope-opt extend --finetune`: the winner and the best formula fine-tuned alike, both
validated, the better shipped (its load line, its GGUF); a rerun with nothing left does nothing."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from longrope_opt.cli import main
from longrope_opt.models import load_model
from longrope_opt.models import smollm2_gguf
from longrope_opt.training import LORA_LEARNING_RATE
from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus
from tests.gguf_tiny import write_tiny_llama_gguf


def _run(model: str, corpus: str, root, *extra: str) -> int:
    return main(["extend", model, "--to", "256", "--corpus", corpus, "--dtype", "float32",
                 "--no-fuse", "--heartbeat-interval", "2", "--storage",
                 f"sqlite:///{root / 'e.db'}", "--out", str(root / "out"), "--trials", "5",
                 "--finetune", "3", "--finetune-corpus", corpus, *extra])  # fmt: skip


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
    root = tmp_path_factory.mktemp("extend-finetune")
    model = save_tiny_model_dir(root / "model")
    corpus = write_tiny_corpus(root / "corpus", n_docs=10, words=400)
    return root, model, corpus


def test_both_are_fine_tuned_alike_validated_and_the_better_is_shipped(extended, capsys) -> None:
    root, model, corpus = extended
    assert _run(model, corpus, root) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    out = root / "out"
    tuned = sorted(p.name for p in out.iterdir() if p.name.startswith("finetuned"))
    (formula,) = [n for n in tuned if n.startswith("finetuned-") and not n.endswith("checkpoints")]
    assert "finetuned" in tuned
    metas = {n: json.loads((out / n / "config.json").read_text())["longrope_opt"]["finetune"]
             for n in ("finetuned", formula)}  # fmt: skip
    # alike: the same steps, text, seed, PoSE and mixed windows; the formula recorded as one
    ours, theirs = metas["finetuned"], metas[formula]
    for key in ("steps", "corpus", "seed", "pose_tokens", "short_share", "learning_rate"):
        assert ours[key] == theirs[key], key
    assert len(ours["losses"]) == len(theirs["losses"]) == 3
    assert theirs["method"] == formula.removeprefix("finetuned-") and ours["method"] is None
    assert ours["pose_tokens"] == 64  # the tiny model's trained length
    # no checkpoints left once the models are written
    assert not any(p.name.endswith("-checkpoints") for p in out.iterdir())
    # validated: both fine-tuned rows beside the rows measured before, at the target length;
    # inside the trained window against the base model
    table = (out / "validation-finetuned.txt").read_text()
    assert "finetuned " in table and formula in table and "yarn-cd" in table
    short = (out / "validation-short.txt").read_text()
    assert "none" in short and "finetuned " in short and formula in short
    # the last word: the verdict after fine-tuning, then the load line naming what it ships
    after = next(i for i, line in enumerate(lines) if line.startswith("after fine-tuning alike"))
    shipped = "finetuned" if "dominates" in lines[after] else formula
    assert f"ship {shipped}" in lines[after]
    assert lines[-1] == f"load it: AutoModelForCausalLM.from_pretrained({str(out / shipped)!r})"
    report = (out / "report.html").read_text()
    assert 'id="loss-figure"' in report and report.index("finetuned-verdict") < report.index('id="verdict"')
    # a rerun: nothing left, the same verdict and load line, nothing rewritten
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    start = time.perf_counter()
    assert _run(model, corpus, root) == 0
    again = capsys.readouterr().out.strip().splitlines()
    assert len(again) == 2 and again[0].startswith("nothing left to measure")
    assert "after fine-tuning alike" in again[0] and again[1] == lines[-1]
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == stamps
    assert time.perf_counter() - start < 30


def test_a_killed_fine_tuning_resumes_and_trains_only_what_is_missing(extended, capsys) -> None:
    root, model, corpus = extended
    out = root / "out"
    if not (out / "finetuned").is_dir():  # the test above ran in another process (xdist)
        assert _run(model, corpus, root) == 0
    # as after a kill between the two runs: one model directory gone, the rerun trains it alone
    (formula,) = [p for p in out.iterdir() if p.name.startswith("finetuned-") and p.is_dir()]
    before = (out / "finetuned" / "model.safetensors").stat().st_mtime_ns
    shutil.rmtree(formula)
    assert _run(model, corpus, root) == 0
    assert (formula / "config.json").is_file()
    assert (out / "finetuned" / "model.safetensors").stat().st_mtime_ns == before
    capsys.readouterr()


def test_with_lora_both_train_adapters_alike_at_loras_rate(extended, tmp_path, capsys) -> None:
    _, model, corpus = extended
    assert _run(model, corpus, tmp_path, "--finetune-lora", "2") == 0
    out = tmp_path / "out"
    tuned = [p for p in out.iterdir() if p.name.startswith("finetuned") and p.is_dir()]
    assert len(tuned) == 2
    for folder in tuned:  # merged weights to ship, the adapter beside them, recorded as such
        meta = json.loads((folder / "config.json").read_text())["longrope_opt"]["finetune"]
        assert meta["lora"] == 2 and meta["learning_rate"] == LORA_LEARNING_RATE
        assert (folder / "adapter" / "adapter_config.json").is_file()
        assert (folder / "model.safetensors").is_file()
    assert "after fine-tuning alike" in capsys.readouterr().out


def test_a_rerun_with_other_fine_tuning_trains_again(tmp_path) -> None:
    from longrope_opt.pipeline._finetune_stage import _trained_alike

    folder = tmp_path / "finetuned"
    folder.mkdir()
    settings = {"steps": 3, "pose_tokens": 64, "short_share": 0.2}

    def trained(**meta) -> None:
        record = {"steps": 3, "corpus": "c", "seed": 0, "pose_tokens": 64, "short_share": 0.2,
                  **meta}  # fmt: skip
        (folder / "config.json").write_text(json.dumps({"longrope_opt": {"finetune": record}}))

    trained(learning_rate=None)  # a full run recorded before its rate was: the full default
    assert _trained_alike(folder, settings, "c", 0)
    assert not _trained_alike(folder, {**settings, "lora": 2}, "c", 0)
    assert not _trained_alike(folder, {**settings, "learning_rate": 1e-3}, "c", 0)
    trained(learning_rate=LORA_LEARNING_RATE, lora=2)
    assert _trained_alike(folder, {**settings, "lora": 2}, "c", 0)
    assert not _trained_alike(folder, {**settings, "lora": 4}, "c", 0)
    assert not _trained_alike(folder, settings, "c", 0)  # every weight, after an adapter


@pytest.mark.parametrize("bad, expected", [
    (["--finetune", "0"], "`--finetune` must be an integer >= 1"),
    (["--learning-rate", "1e-4"], "`--learning-rate` needs `--finetune`"),
    (["--finetune-lora", "4"], "`--finetune-lora` needs `--finetune`"),
    (["--finetune", "2", "--finetune-lora", "0"], "`--finetune-lora` must be a rank >= 1, got 0"),
])  # fmt: skip
def test_bad_fine_tuning_flags_are_one_line_before_anything(tmp_path, capsys, bad, expected) -> None:
    code = main(["extend", "smollm2-135m", "--to", "16k", "--storage",
                 f"sqlite:///{tmp_path / 'x.db'}", "--out", str(tmp_path / "o"), *bad])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expected in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # a whole `extend` of the tiny GGUF with fine-tuning
def test_the_gguf_holds_the_fine_tuned_weights_it_ships(tmp_path, capsys) -> None:
    source = write_tiny_llama_gguf(tmp_path / "tiny.gguf", smollm2_gguf())
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(10):  # ordinary English: SmolLM2's tokenizer; 256+ tokens a document
        (corpus / f"d{i}.txt").write_text(
            " ".join(f"line {j} of book {i} says {j * i % 97}." for j in range(260)))  # fmt: skip
    out = tmp_path / "out"
    code = main(["extend", str(source), "--to", "1024", "--trials", "3", "--corpus", str(corpus),
                 "--dtype", "float32", "--no-fuse", "--storage", f"sqlite:///{tmp_path / 'e.db'}",
                 "--out", str(out), "--finetune", "2", "--finetune-corpus", str(corpus)])  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == f"run it in llama.cpp: llama-cli -m {out / 'finetuned.gguf'} -c 1024"
    shipped = lines[-2].split("from_pretrained(")[1].rstrip(")").strip("'")
    assert (out / "Modelfile").read_text().startswith("FROM ./finetuned.gguf\n")
    # the GGUF's weights are the shipped fine-tuned model's, not the source's
    trained, _ = load_model(shipped, dtype="float32", device="cpu")
    again, _ = load_model(str(out / "finetuned.gguf"), dtype="float32", device="cpu")
    base, _ = load_model(str(source), dtype="float32", device="cpu")
    theirs, moved = again.state_dict(), False
    for key, weight in trained.state_dict().items():
        if key in theirs:
            torch.testing.assert_close(theirs[key], weight, rtol=0, atol=0, msg=key)
            moved |= not torch.equal(base.state_dict()[key], weight)
    assert moved
    # and its factors are the shipped model's (the tiny GGUF has no RoPE of its own: ν = 1)
    config = json.loads((Path(shipped) / "config.json").read_text())
    reader = gguf.GGUFReader(str(out / "finetuned.gguf"))
    long = next(t for t in reader.tensors if t.name == "rope_factors_long.weight")
    np.testing.assert_allclose(long.data, config["rope_parameters"]["long_factor"], rtol=1e-6)
