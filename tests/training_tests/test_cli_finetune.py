"""`longrope-opt finetune` on a tiny model directory: trains, exports a loadable longrope model."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from transformers import AutoModelForCausalLM

from longrope_opt.cli import main
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
    assert json.loads((out / "config.json").read_text())["longrope_opt"]["finetune"]["lora"] == 4
    assert (out / "adapter" / "adapter_config.json").is_file()
    assert not (tmp_path / "ft-checkpoints").exists()  # removed once the model is written
    AutoModelForCausalLM.from_pretrained(out)  # the merged weights load in vanilla transformers


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--steps", "0"], "`--steps` must be >= 1, got 0"),
        (["--seed", "-1"], "`--seed` must be an integer >= 0, got -1"),
        (["--study-name", "x"], "give exactly one of `--factors` or `--study-name`"),
        (["--target-length", "64"], "`--target-length` must be an integer > the trained length 64"),
        (["--lora", "0"], "`--lora` must be a rank >= 1, got 0"),
        (["--short-share", "0.2"], "`--short-share` needs `--pose-tokens`"),
        (["--short-share", "1", "--pose-tokens", "32"], "`--short-share` must be in [0, 1), got 1.0"),
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
