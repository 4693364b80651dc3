"""Shared fixtures: tiny random models of each RoPE family, built in-process (no downloads)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest


# Two threads match the CI machine and keep test timings stable.
os.environ.setdefault("OMP_NUM_THREADS", "2")

#: Trained length of every tiny model: sequences past it exercise the extension.
TINY_LENGTH = 64
FAMILIES = ["llama", "mistral", "qwen2", "phi3"]


def tiny_config(family: str, **overrides: Any) -> Any:
    """A 2-layer, hidden-64 config of `family` with a trained length of 64 tokens."""
    import transformers

    classes = {
        "llama": transformers.LlamaConfig,
        "mistral": transformers.MistralConfig,
        "qwen2": transformers.Qwen2Config,
        "phi3": transformers.Phi3Config,
    }
    kwargs: dict[str, Any] = dict(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=128,
        max_position_embeddings=TINY_LENGTH,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    if family == "phi3":
        # Phi-3 variants rotate part of the head; cover the partial-rotary path here.
        kwargs["rope_parameters"]["partial_rotary_factor"] = 0.5
        # Phi3Config's own top-level field (default 4096) overrides the rope parameters'.
        kwargs["original_max_position_embeddings"] = TINY_LENGTH
    if family == "mistral":
        kwargs["sliding_window"] = None
    kwargs.update(overrides)
    return classes[family](**kwargs)


def build_tiny_model(family: str, seed: int = 0, **overrides: Any) -> Any:
    """A random tiny causal LM of `family` in fp32 eval mode, with weights fixed by `seed`."""
    import torch
    import transformers

    config = tiny_config(family, **overrides)
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager"
    ).eval()


@pytest.fixture
def tiny_model() -> Callable[..., Any]:
    """Factory fixture: ``tiny_model("llama", rope_parameters=...)``."""
    return build_tiny_model
