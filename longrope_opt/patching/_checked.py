"""The families the family matrix has checked, and the rule for a family it never saw.

The matrix (`tests/patching_tests/test_families.py`) builds a tiny model of every RoPE family of
the installed transformers and checks that a rescaled RoPE reaches its attention exactly. A
family that a later transformers release adds has not been through it: rather than run it
silently (or cap transformers below that release, which would downgrade a user's install), it is
refused in one line when its config is read. The matrix test fails on the ceiling release until
this list is the set of families it finds exact there.
"""

from __future__ import annotations

from typing import Any

from longrope_opt.errors import UncheckedModelError


#: The transformers releases the family matrix ran on: the floor (`.ci/floor`) and the ceiling.
CHECKED_WITH = ("5.17", "5.25")

#: ``model_type`` of the text config of every family the matrix found exact on the ceiling.
CHECKED: frozenset[str] = frozenset({
    "afmoe", "apertus", "apertus1p5_text", "arcee", "aria_text", "axk1", "axk2",
    "bailing_hybrid", "bamba", "bitnet", "codegen", "cohere", "cohere2", "cohere2_moe", "cwm",
    "dbrx", "deepseek_v2", "deepseek_v3", "deepseek_v32", "diffllama", "doge", "dory", "dots1",
    "emu3_text_model", "ernie4_5", "ernie4_5_moe", "exaone", "exaone4", "exaone_moe", "falcon",
    "falcon_h1", "flex_olmo", "flint", "gemma", "gemma2", "gemma3_text", "gemma3n_text", "glm",
    "glm4", "glm4_moe", "glm4_moe_lite", "glm_moe_dsa", "gpt_neox", "gpt_neox_japanese",
    "gpt_oss", "gptj", "granite", "granite_swa", "granitemoe", "granitemoe_swa",
    "granitemoehybrid", "granitemoeshared", "helium", "hrm_text", "hunyuan_v1_dense",
    "hunyuan_v1_moe", "hy_v3", "hy_v4", "hyperclovax", "internlm3", "iquestcoder", "jais2",
    "jetmoe", "kolibri1", "kolibri1_1", "laguna", "lfm2", "lfm2_moe", "llama", "llama4_text",
    "longcat_flash", "mellum", "mimo_v2_flash", "minicpm3", "minicpm5_moe", "minimax",
    "minimax_m2", "minimax_m3_vl_text", "ministral3", "mistral", "mistral4", "mixtral",
    "mllama_text_model", "modernbert-decoder", "moshi", "nanochat", "nemotron", "olmo",
    "olmo2", "olmo3", "olmo_hybrid", "olmoe", "param2moe", "persimmon", "phi", "phi3", "qwen2",
    "qwen2_moe", "qwen3", "qwen3_5_moe_text", "qwen3_5_text", "qwen3_moe", "qwen3_next",
    "qwen4_exp_text", "sarvam_mla", "sarvam_moe", "seed_oss", "smollm3", "solar_open",
    "stablelm", "starcoder2", "vaultgemma", "youtu"
})  # fmt: skip


def _known_to_transformers(model_type: str) -> bool:
    # a model type of the installed transformers (not a hub repository's own code)
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return model_type in CONFIG_MAPPING


def check_checked(text_config: Any) -> None:
    """Refuse a family of the installed transformers that the family matrix never checked.

    Args:
        text_config: The model's text config (what the RoPE extension acts on).

    Raises:
        UncheckedModelError: One line naming the model type, the installed transformers and
            the releases this version checked.
    """
    model_type = getattr(text_config, "model_type", None)
    if not model_type or model_type in CHECKED or not _known_to_transformers(model_type):
        return
    # on use, as above: reading a config's family must not import transformers' model zoo
    import transformers

    installed = ".".join(transformers.__version__.split(".")[:2])
    low, high = CHECKED_WITH
    raise UncheckedModelError(
        f"model type {model_type!r} is not supported: not checked with transformers {installed} "
        f"(this version checked the families of transformers {low}-{high}: "
        "a later longrope-opt may support it)."
    )
