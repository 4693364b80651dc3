"""`load_model`: local directories, the offline alias, and one clear error per failure."""

from __future__ import annotations

import huggingface_hub.constants
import pytest

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.errors import ModelLoadError
from longrope_opt.errors import UnsupportedModelError
from longrope_opt.models import load_model
from tests.conftest import build_tiny_model


def _save_tokenizer(path) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(128)}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="w0")))
    tok.save_pretrained(path)


def test_local_directory_roundtrip(tmp_path) -> None:
    model = build_tiny_model("qwen2")
    model.save_pretrained(tmp_path)
    _save_tokenizer(tmp_path)
    loaded, tokenizer = load_model(str(tmp_path), dtype="float32")
    assert loaded.config.model_type == "qwen2" and not loaded.training
    assert loaded.config.use_cache is False
    assert tokenizer is not None


def test_non_rope_model_is_rejected_with_its_type(tmp_path) -> None:
    from transformers import GPT2Config
    from transformers import GPT2LMHeadModel

    GPT2LMHeadModel(
        GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=128, n_positions=32)
    ).save_pretrained(tmp_path)
    _save_tokenizer(tmp_path)
    with pytest.raises(UnsupportedModelError, match="'gpt2' has no rotary position embedding"):
        load_model(str(tmp_path), dtype="float32")


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("./does/not/exist", "`model` path './does/not/exist' does not exist"),
        ("/tmp/nope/model.gguf", "`model` file '/tmp/nope/model.gguf' does not exist"),
    ],
)
def test_missing_files(name: str, pattern: str) -> None:
    with pytest.raises(ModelLoadError, match=pattern):
        load_model(name)


def test_directory_without_config(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="has no config.json"):
        load_model(str(tmp_path))


def test_hub_id_without_network(monkeypatch) -> None:
    # huggingface_hub reads HF_HUB_OFFLINE once, at import: the variable alone, set now, would
    # leave it retrying an unreachable hub for most of a minute.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(
        ModelLoadError, match=r"could not load `model` 'no-such-org/no-such-model'.*no network"
    ):
        load_model("no-such-org/no-such-model")


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (
            {"dtype": "fp8"},
            r"`dtype` must be one of \['auto', 'bfloat16', 'bf16-fp32attn', 'float32', 'float16'\], "
            r"got 'fp8'",
        ),
        ({"attn": "flash"}, r"`attn` must be one of .*got 'flash'"),
    ],
)
def test_bad_dtype_or_attention(kwargs, pattern: str) -> None:
    with pytest.raises(InvalidArgumentError, match=pattern):
        load_model("smollm2-135m", **kwargs)
