"""`extend` and `search` on a checkpoint that already carries a RoPE scaling (a tiny Llama with
transformers' ``llama3`` rope type, as every Llama 3.x), and the one-line refusal of a family this
version cannot extend, before any weight is read."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch
from transformers import AutoModelForCausalLM

from longrope_opt.cli import main
from longrope_opt.models import load_model
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import METHODS
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.studies import record
from longrope_opt.studies import study_winner
from longrope_opt.viz import lambda_curve_figure
from longrope_opt.viz import lambda_records
from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus


LLAMA3 = dict(rope_type="llama3", rope_theta=10000.0, factor=4.0, low_freq_factor=1.0,
              high_freq_factor=4.0, original_max_position_embeddings=64)  # fmt: skip
TRAINED = 256  # the llama3 checkpoint reads 4 × its 64-token pretrained window


@pytest.fixture(scope="module")
def llama3(tmp_path_factory):
    root = tmp_path_factory.mktemp("llama3")
    model = save_tiny_model_dir(root / "model", max_position_embeddings=TRAINED,
                                rope_parameters=dict(LLAMA3))  # fmt: skip
    return {"root": root, "model": model,
            "corpus": write_tiny_corpus(root / "corpus", n_docs=10, words=1200)}  # fmt: skip


def test_extend_acts_on_top_of_the_native_rope(llama3) -> None:
    root = llama3["root"]
    storage = f"sqlite:///{root / 'extend.db'}"
    args = ["extend", llama3["model"], "--to", str(2 * TRAINED), "--corpus", llama3["corpus"],
            "--dtype", "float32", "--no-fuse", "--trials", "6", "--storage", storage,
            "--out", str(root / "out")]  # fmt: skip
    assert main(args) == 0
    (summary,) = [s for s in optuna.get_all_study_summaries(storage)
                  if s.study_name.startswith("extend-")]  # fmt: skip
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    spec = record.read_spec(study)
    assert spec is not None and spec.rope_type == "llama3"
    assert spec.original_length == TRAINED  # the checkpoint's length, not the pretrained 64
    assert not spec.is_native_default
    # the seeds are the classic methods for 2× on top of llama3, not 8× of the raw RoPE
    curves = lambda_records(study)
    assert curves["native"] == "llama3"
    assert curves["curves"]["seed yarn"] == pytest.approx(
        list(METHODS["yarn"](spec, 2 * TRAINED).factors), rel=0, abs=0
    )
    assert max(curves["curves"]["seed yarn"]) <= 2.0 + 1e-12
    assert "llama3" in lambda_curve_figure(curves).layout.title.text
    # the export composes native × searched and loads in vanilla transformers, as patched
    winner = study_winner(study)
    folder = root / "out" / "model"
    config = json.loads((folder / "config.json").read_text())
    assert config["rope_parameters"]["rope_type"] == "longrope"
    np.testing.assert_allclose(config["rope_parameters"]["short_factor"], spec.native(), rtol=1e-12)
    np.testing.assert_allclose(config["rope_parameters"]["long_factor"],
                               spec.native() * winner.scaling.factors, rtol=1e-12)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vanilla = AutoModelForCausalLM.from_pretrained(folder).eval()
    ours, _ = load_model(llama3["model"], dtype="float32")
    ids = torch.randint(3, 128, (1, TRAINED + 64), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        unpatched = ours(ids).logits
        with apply_rope_scaling(ours, RopeScaling(np.ones(spec.n_factors))):
            assert torch.equal(ours(ids).logits, unpatched)  # the row "none": as loaded
        with apply_rope_scaling(ours, winner.scaling):
            expected = ours(ids).logits
        torch.testing.assert_close(vanilla(ids).logits, expected, atol=1e-5, rtol=0)
    assert "llama3" in (root / "out" / "report.html").read_text()


def test_search_records_the_native_spec(llama3) -> None:
    storage = f"sqlite:///{llama3['root'] / 'search.db'}"
    assert main(["search", "--model", llama3["model"], "--corpus", llama3["corpus"],
                 "--target-length", str(2 * TRAINED), "--n-trials", "3", "--dtype", "float32",
                 "--storage", storage, "--study-name", "native"]) == 0  # fmt: skip
    study = optuna.load_study(study_name="native", storage=storage)
    spec = record.read_spec(study)
    model, _ = load_model(llama3["model"], dtype="float32")
    assert spec == RopeSpec.from_config(model.config)  # the native factors survive the storage


def test_an_unsupported_family_is_one_line_before_any_weight(tmp_path, capfd) -> None:
    # recurrent_gemma (all attention local: refused) is in every transformers release we support
    from transformers import RecurrentGemmaConfig

    folder = Path(save_tiny_model_dir(tmp_path / "model"))
    config = RecurrentGemmaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, vocab_size=128)  # fmt: skip
    config.save_pretrained(folder)  # a recurrent_gemma config beside Llama weights: never read
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    assert main(["extend", str(folder), "--to", "256", "--trials", "1",
                 "--storage", f"sqlite:///{tmp_path / 'x.db'}", "--out", str(tmp_path / "o")]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and "model type 'recurrent_gemma' is not supported" in err[-1]
    assert not any("loading" in line for line in err)


def test_the_user_says_the_trained_length_when_the_config_does_not(tmp_path) -> None:
    # A checkpoint fine-tuned to 128 tokens whose config still says 256
    model = save_tiny_model_dir(tmp_path / "model", max_position_embeddings=256)
    corpus = write_tiny_corpus(tmp_path / "corpus", n_docs=10, words=1200)
    storage = f"sqlite:///{tmp_path / 's.db'}"
    assert main(["extend", model, "--to", "512", "--trained-length", "128", "--corpus", corpus,
                 "--dtype", "float32", "--no-fuse", "--trials", "4", "--storage", storage,
                 "--out", str(tmp_path / "out")]) == 0  # fmt: skip
    (summary,) = [s for s in optuna.get_all_study_summaries(storage)
                  if s.study_name.startswith("extend-")]  # fmt: skip
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    spec = record.read_spec(study)
    assert spec.original_length == 128  # 4x, not 2x of the config's 256
    assert max(lambda_records(study)["curves"]["seed yarn"]) == pytest.approx(4.0)
    config = json.loads((tmp_path / "out" / "model" / "config.json").read_text())
    assert config["longrope_opt"]["original_length"] == 128
    assert config["rope_parameters"]["original_max_position_embeddings"] == 128
    assert "longrope_opt_trained_length" not in config  # the export's own length is the target
    # validate adopts what the search was told
    assert main(["validate", "--study-name", summary.study_name, "--storage", storage,
                 "--corpus", corpus, "--docs", "2", "--keys", "0", "--classic", "yarn-cd",
                 "--dtype", "float32"]) == 0  # fmt: skip
    # so does a fine-tune of the study's winner: its export is 4x of 128 too
    tuned = tmp_path / "tuned"
    assert main(["finetune", "--study-name", summary.study_name, "--storage", storage,
                 "--model", model, "--corpus", corpus, "--samples", "1", "--steps", "1",
                 "--output", str(tuned)]) == 0  # fmt: skip
    tuned_config = json.loads((tuned / "config.json").read_text())
    assert tuned_config["longrope_opt"]["original_length"] == 128
    # and eval's rows: the title names the trained length the search was told
    assert main(["eval", "--model", model, "--study-name", summary.study_name, "--storage",
                 storage, "--corpus", corpus, "--lengths", "512", "--samples", "1",
                 "--methods", "pi", "--dtype", "float32", "--output",
                 str(tmp_path / "eval")]) == 0  # fmt: skip
    assert "trained at 128" in json.loads((tmp_path / "eval.json").read_text())["title"]
    with pytest.raises(SystemExit):  # argparse: not a number
        main(["extend", model, "--to", "512", "--trained-length", "x"])
    assert main(["extend", model, "--to", "512", "--trained-length", "1"]) == 2


@pytest.mark.parametrize("config_class", ["Gemma3TextConfig", "Olmo3Config"])
def test_a_model_whose_layers_are_all_windowed_is_one_line_before_any_weight(
    config_class, tmp_path, capfd
) -> None:
    # 2 layers under the default pattern (a global layer every 6th / 4th): all sliding-window
    import transformers

    from longrope_opt.errors import UnsupportedModelError
    from longrope_opt.pipeline import extend

    folder = Path(save_tiny_model_dir(tmp_path / "model"))
    config = getattr(transformers, config_class)(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=128, sliding_window=16,
        max_position_embeddings=128,
    )  # fmt: skip
    assert set(config.layer_types) == {"sliding_attention"}
    config.save_pretrained(folder)  # beside Llama weights: never read
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    capfd.readouterr()  # the set-up's own output
    assert main(["extend", str(folder), "--to", "256", "--trials", "1",
                 "--storage", f"sqlite:///{tmp_path / 'x.db'}", "--out", str(tmp_path / "o")]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no global attention to extend" in err[0], err
    assert not (tmp_path / "o").exists()  # nothing written
    with pytest.raises(UnsupportedModelError, match="no global attention to extend"):
        extend(str(folder), 256, trials=1, storage=f"sqlite:///{tmp_path / 'y.db'}",
               out=tmp_path / "o2", progress=False)  # fmt: skip
