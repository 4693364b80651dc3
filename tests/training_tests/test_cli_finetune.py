"""`longrope-opt finetune` on a tiny model directory: trains, exports a loadable longrope model."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from longrope_opt.cli import main
from longrope_opt.evaluation import model_fingerprint
from longrope_opt.models import is_adapter_dir
from longrope_opt.models import load_model
from longrope_opt.models import read_export


def _factors(path, n_hat: int = 0) -> str:
    record = {"factors": list(np.linspace(1.0, 5.0, 8)), "n_hat": n_hat,
              "attention_scale": 1.1, "target_length": 256}  # fmt: skip
    path.write_text(json.dumps(record))
    return str(path)


def test_finetune_exports_a_longrope_model(tiny_model_dir, tiny_corpus, tmp_path, capsys) -> None:
    out = tmp_path / "ft"
    code = main(["finetune", "--model", tiny_model_dir, "--corpus", tiny_corpus,
                 "--factors", _factors(tmp_path / "f.json"), "--samples", "2", "--steps", "2",
                 "--learning-rate", "1e-3", "--output", str(out), "--save-dtype", "float32"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())
    assert config["rope_parameters"]["rope_type"] == "longrope"
    assert config["max_position_embeddings"] == 256
    losses = config["longrope_opt"]["finetune"]["losses"]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert read_export(model.config).long.attention_scale == 1.1
    # The weights were trained: they differ from the source model's.
    source = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    w = "model.layers.0.self_attn.q_proj.weight"
    assert not np.array_equal(model.state_dict()[w].numpy(), source.state_dict()[w].numpy())


def test_finetune_with_lora_writes_the_merged_model_and_its_adapter(
    tiny_model_dir, tiny_corpus, tmp_path, capsys
) -> None:
    out = tmp_path / "ft"
    code = main(["finetune", "--model", tiny_model_dir, "--corpus", tiny_corpus,
                 "--factors", _factors(tmp_path / "f.json"), "--samples", "2", "--steps", "2",
                 "--learning-rate", "1e-2", "--pose-tokens", "32", "--short-share", "0.5",
                 "--lora", "4", "--output", str(out), "--save-dtype", "float32"])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0
    assert "LoRA adapter" in printed and str(out / "adapter") in printed
    assert "without its merged weights" in printed
    assert json.loads((out / "config.json").read_text())["longrope_opt"]["finetune"]["lora"] == 4
    assert (out / "adapter" / "adapter_config.json").is_file()
    assert not (tmp_path / "ft-checkpoints").exists()  # removed once the model is written
    AutoModelForCausalLM.from_pretrained(out)  # the merged weights load in vanilla transformers


def test_a_lora_model_without_its_merged_weights_loads_as_the_merged_model(
    tiny_model_dir, tiny_corpus, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("LONGROPE_OPT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "ft"
    assert main(["finetune", "--model", tiny_model_dir, "--corpus", tiny_corpus,
                 "--factors", _factors(tmp_path / "f.json"), "--samples", "2", "--steps", "2",
                 "--learning-rate", "1e-2", "--pose-tokens", "32", "--lora", "4",
                 "--output", str(out)]) == 0  # fmt: skip
    light = tmp_path / "light"  # what is committed or mailed: the merged weights deleted
    shutil.copytree(out, light)
    for weights in light.glob("*.safetensors"):
        weights.unlink()
    assert is_adapter_dir(light) and not is_adapter_dir(out)
    whole, _ = load_model(str(out), dtype="float32", device="cpu")
    rebuilt, _ = load_model(str(light), dtype="float32", device="cpu")
    # the fine-tune's own export, bit for bit (bf16 save, recorded factors and training record)
    assert whole.state_dict().keys() == rebuilt.state_dict().keys()
    for name, value in whole.state_dict().items():
        assert torch.equal(value, rebuilt.state_dict()[name]), name
    assert rebuilt.config.longrope_opt == whole.config.longrope_opt
    assert model_fingerprint(rebuilt) == model_fingerprint(whole)  # stored measurements reused
    (cached,) = (tmp_path / "cache" / "adapters").iterdir()
    stamp = (cached / "model.safetensors").stat().st_mtime_ns
    load_model(str(light), dtype="float32", device="cpu")  # merged once: the cache answers
    assert (cached / "model.safetensors").stat().st_mtime_ns == stamp
    # validated as a model: the numbers measured on the whole directory are the adapter's
    measure = ["validate", "--model", tiny_model_dir, "--corpus", tiny_corpus, "--docs", "2",
               "--keys", "0", "--storage", f"sqlite:///{tmp_path / 'v.db'}", "--lengths", "64",
               "--classic", "none", "--dtype", "float32"]  # fmt: skip
    assert main([*measure, "--models", str(out)]) == 0
    capsys.readouterr()
    assert main([*measure, "--models", str(light)]) == 0
    printed = capsys.readouterr().out
    assert "\nlight " in printed and "0 measurements made now" in printed


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--steps", "0"], "`--steps` must be >= 1, got 0"),
        (["--seed", "-1"], "`--seed` must be an integer >= 0, got -1"),
        (["--study-name", "x"], "give exactly one of `--factors`, `--study-name` or `--method`"),
        (["--method", "yarn-cd", "--factors", "f.json"], "give exactly one of"),
        (["--target-length", "64"], "`--target-length` must be an integer > the trained length 64"),
        (["--lora", "0"], "`--lora` must be a rank >= 1, got 0"),
        (["--short-share", "0.2"], "`--short-share` needs `--pose-tokens`"),
        (["--short-share", "1", "--pose-tokens", "32"], "`--short-share` must be in [0, 1), got 1.0"),
        (["--gguf", "x.bin"], "`--gguf` must end in .gguf"),
        (["--gguf", "x.gguf"], "is not a GGUF"),  # a model directory has no GGUF to lay out
    ],
)
def test_finetune_bad_input(tiny_model_dir, tiny_corpus, tmp_path, capsys, extra, message) -> None:
    args = ["finetune", "--model", tiny_model_dir, "--corpus", tiny_corpus,
            "--factors", _factors(tmp_path / "f.json"), "--output", str(tmp_path / "o"), *extra]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.splitlines()
    errors = [line for line in err if "error:" in line]
    assert len(errors) == 1 and message in errors[0], err
    assert not any("Traceback" in line for line in err)


def test_fine_tuned_alike_then_validated_side_by_side(
    tiny_model_dir, tiny_corpus, tmp_path, capsys
) -> None:
    # the searched factors and a formula fine-tuned alike, then one table: the fine-tuned models
    # beside the rows before fine-tuning at the target, and inside the window against the base
    common = ["--model", tiny_model_dir, "--corpus", tiny_corpus, "--samples", "2", "--steps",
              "2", "--learning-rate", "1e-2", "--pose-tokens", "32", "--save-dtype", "float32"]  # fmt: skip
    searched, formula = tmp_path / "ft-searched", tmp_path / "ft-yarn-cd"
    assert main(["finetune", "--factors", _factors(tmp_path / "f.json"), *common,
                 "--output", str(searched)]) == 0  # fmt: skip
    assert main(["finetune", "--method", "yarn-cd", "--target-length", "256", *common,
                 "--output", str(formula)]) == 0  # fmt: skip
    meta = json.loads((formula / "config.json").read_text())["longrope_opt"]["finetune"]
    assert meta["method"] == "yarn-cd" and meta["losses"]
    capsys.readouterr()
    storage = f"sqlite:///{tmp_path / 'v.db'}"
    base = ["validate", "--model", tiny_model_dir, "--corpus", tiny_corpus, "--docs", "2",
            "--keys", "2", "--storage", storage, "--models", str(searched), "--models",
            str(formula), "--output", str(tmp_path / "t")]  # fmt: skip
    assert main([*base, "--lengths", "256", "--classic", "pi,yarn-cd"]) == 0
    data = json.loads((tmp_path / "t.json").read_text())["validation"]
    assert data["rows"] == ["pi", "yarn-cd", "ft-searched", "ft-yarn-cd"]
    assert data["classic"] == ["pi", "yarn-cd", "ft-yarn-cd"]  # the fine-tuned formula too
    assert all(len(v) == 2 for v in data["ppl"]["256"].values())  # the same two documents
    capsys.readouterr()
    # the fine-tuned pair alone (no classic row): the formula's run is the reference, and its
    # rows come from the store
    assert main([*base, "--lengths", "256", "--classic", ""]) == 0
    assert "0 measurements made now" in capsys.readouterr().out
    alone = json.loads((tmp_path / "t.json").read_text())["validation"]
    assert alone["rows"] == ["ft-searched", "ft-yarn-cd"] and alone["classic"] == ["ft-yarn-cd"]
    assert alone["ppl"]["256"]["ft-searched"] == data["ppl"]["256"]["ft-searched"]
    # inside the trained window (64): the base model as it is against the fine-tuned ones
    assert main([*base, "--lengths", "64", "--classic", "none"]) == 0
    data = json.loads((tmp_path / "t.json").read_text())["validation"]
    assert data["rows"] == ["none", "ft-searched", "ft-yarn-cd"]
    err = capsys.readouterr().err
    assert main([*base[:-6], "--lengths", "64", "--classic", "none"]) == 2  # no models: refused
    assert "trained length" in capsys.readouterr().err, err


def test_finetune_writes_the_trained_weights_as_a_gguf(tmp_path, capsys) -> None:
    from longrope_opt.models import load_model
    from longrope_opt.models import smollm2_gguf
    from tests.gguf_tiny import write_tiny_llama_gguf

    source = write_tiny_llama_gguf(tmp_path / "tiny.gguf", smollm2_gguf())
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(2):  # ordinary English: SmolLM2's tokenizer
        (corpus / f"d{i}.txt").write_text(" ".join(f"the word {j} of text {i}." for j in range(300)))
    out, path = tmp_path / "ft", tmp_path / "ft.gguf"
    code = main(["finetune", "--model", str(source), "--corpus", str(corpus), "--factors",
                 _factors(tmp_path / "f.json"), "--target-length", "1024", "--pose-tokens", "256",
                 "--steps", "1", "--learning-rate", "1e-2", "--output", str(out),
                 "--save-dtype", "float32", "--gguf", str(path)])  # fmt: skip
    assert code == 0
    assert f"llama-cli -m {path} -c 1024" in capsys.readouterr().out
    assert (tmp_path / "Modelfile").read_text().startswith("FROM ./ft.gguf\n")
    trained, _ = load_model(str(out), dtype="float32", device="cpu")
    again, _ = load_model(str(path), dtype="float32", device="cpu")
    theirs = again.state_dict()
    for key, weight in trained.state_dict().items():
        if key in theirs:  # a tied LM head is the embedding
            np.testing.assert_array_equal(theirs[key].numpy(), weight.numpy(), err_msg=key)
