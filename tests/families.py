"""Every RoPE family of the installed transformers, as tiny random models built from its own config.

Discovered, not listed: a model folder of transformers counts when its modeling module defines a
``*RotaryEmbedding`` and a ``*ForCausalLM`` (the issue's definition). A family added by a new
transformers release therefore shows up here and fails the matrix test until it is supported
(it passes the checks) or refused (`longrope_opt.patching.REFUSED` names it and the reason).

`tiny_config` shrinks the family's default config: the generic sizes below, then the family's own
quirks (`OVERRIDES`: the shape of multi-head latent attention, hybrid layer patterns that must
hold a full-attention layer, ...). The matrix test builds every family in seconds.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import warnings
from dataclasses import dataclass
from typing import Any

import torch


#: Trained length of every tiny model: forwards of `SEQ` tokens read past it.
TRAINED = 32
SEQ = 48
VOCAB = 128

GENERIC: dict[str, Any] = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, vocab_size=VOCAB, max_position_embeddings=TRAINED,
    moe_intermediate_size=32, num_experts=4, num_local_experts=4, n_routed_experts=4,
    num_experts_per_tok=2, n_shared_experts=1, shared_expert_intermediate_size=64,
    q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
    n_group=1, topk_group=1, first_k_dense_replace=1, sliding_window=16,
    pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    # GPT-J / CodeGen spellings
    n_embd=64, n_head=4, n_layer=2, n_positions=TRAINED, rotary_dim=8,
)  # fmt: skip

_MAMBA = dict(mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16, mamba_chunk_size=16)
#: Family quirks, applied after `GENERIC`.
OVERRIDES: dict[str, dict[str, Any]] = {
    # Falcon-H1's Mamba-2 mixer keeps its full-size defaults otherwise (128 heads, a 256-state,
    # chunks of 256): transformers 5.17's chunked scan then builds a (chunk, chunk, heads, state)
    # product of 9 GB for this 0.6M-parameter model
    "falcon_h1": dict(mamba_d_ssm=64, mamba_n_heads=8, mamba_d_head=8, mamba_d_state=16,
                      mamba_chunk_size=16),
    # GPT-J / CodeGen read a fixed sin/cos table of n_positions rows: keep SEQ inside it
    "gptj": dict(n_positions=2 * TRAINED),
    "codegen": dict(n_positions=2 * TRAINED),
    # latent attention with a sparse indexer: every head its own key, a small indexer
    "axk2": dict(num_key_value_heads=4, index_head_dim=16, index_n_heads=2, index_topk=16),
    "deepseek_v32": dict(num_key_value_heads=4, index_head_dim=16, index_n_heads=2, index_topk=16),
    "glm_moe_dsa": dict(num_key_value_heads=4, index_head_dim=16, index_n_heads=2, index_topk=16),
    # hybrids: one attention layer after a recurrent one
    "bamba": dict(attn_layer_indices=[1], **_MAMBA),
    "granitemoehybrid": dict(position_embedding_type="rope",
                             layer_types=["linear_attention", "full_attention"], **_MAMBA),
    "lfm2_moe": dict(layer_types=["conv", "full_attention"]),
    "mimo_v2_flash": dict(head_dim=48, v_head_dim=16),
    "qwen4_exp": dict(indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16,
                      indexer_budget=64, indexer_compress_ratio=4, linear_key_head_dim=16,
                      linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4),
    "zaya": dict(num_experts_per_tok=1),
    # sparse "indexed" global layers: the indexer scores with at most the query heads of key head 0
    "kolibri1_1": dict(index_num_heads=2),
    "gemma3n": dict(num_kv_shared_layers=0, vocab_size_per_layer_input=VOCAB,
                    hidden_size_per_layer_input=8),
    "longcat_flash": dict(num_layers=1, ffn_hidden_size=64, expert_ffn_hidden_size=32,
                          n_routed_experts=4, zero_expert_num=2, moe_topk=2, head_dim=8),
    "dbrx": dict(d_model=64, n_heads=4, n_layers=2, max_seq_len=TRAINED,
                 attn_config=dict(kv_n_heads=2, clip_qkv=8.0),
                 ffn_config=dict(hidden_size=64, ffn_hidden_size=32, moe_num_experts=4,
                                 moe_top_k=2)),
}  # fmt: skip


def _dbrx(config: Any) -> None:
    # transformers' DBRX attention reads rope_theta from its attention sub-config
    config.attn_config.rope_theta = config.rope_parameters["rope_theta"]


#: Family quirks that need the built config.
FIXES: dict[str, Any] = {"dbrx": _dbrx}


@dataclass(frozen=True)
class Family:
    """One RoPE family: its folder name, causal-LM class and config class."""

    name: str
    causal_lm: type
    config_class: type


def families() -> list[Family]:
    """Every model folder of the installed transformers with a rotary module and a causal LM."""
    import transformers.models as models

    found = []
    for info in pkgutil.iter_modules(models.__path__):
        try:
            module = importlib.import_module(f"transformers.models.{info.name}.modeling_{info.name}")
        except ImportError:
            continue
        own = {n: c for n, c in vars(module).items()
               if inspect.isclass(c) and c.__module__ == module.__name__}  # fmt: skip
        rotary = [n for n in own if n.endswith("RotaryEmbedding")]
        causal = sorted(n for n in own if n.endswith("ForCausalLM"))
        if rotary and causal:
            cls = own[causal[0]]
            found.append(Family(info.name, cls, cls.config_class))
    return found + _aliases(found)


def _aliases(found: list[Family]) -> list[Family]:
    """Model types that transformers builds with another family's causal LM from a config of
    their own (``param2moe`` → ``Glm4MoeForCausalLM``): each a family of its own, since its
    config class decides the rotary module's settings."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    by_class = {f.causal_lm.__name__: f for f in found}
    known = {f.name for f in found} | {getattr(f.config_class, "model_type", "") for f in found}
    aliases = []
    for model_type, class_name in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()):
        if model_type not in known and class_name in by_class and model_type in CONFIG_MAPPING:
            aliases.append(Family(model_type, by_class[class_name].causal_lm, CONFIG_MAPPING[model_type]))
    return aliases


def _accepted(config_class: type) -> set[str]:
    names: set[str] = set()
    for klass in config_class.__mro__:
        init = vars(klass).get("__init__")
        if init is not None:
            names |= set(inspect.signature(init).parameters)
    return names


def _layer_pattern(types: list[str] | None, n: int) -> list[str] | None:
    """`n` layer types with a global attention layer last (and a local or linear one first,
    when the family has one): a RoPE extension must have a layer to act on."""
    if not types:
        return None
    kinds = list(dict.fromkeys(types))
    full = [k for k in kinds if "full" in k] or [k for k in kinds if "attention" in k and
                                                 not any(w in k for w in ("sliding", "linear", "local", "chunk"))]  # fmt: skip
    if not full:
        return None
    other = [k for k in kinds if k != full[0]]
    return ([other[0]] if other else [full[0]]) * (n - 1) + [full[0]]


def tiny_config(family: Family, **extra: Any) -> Any:
    """The family's default config shrunk to a tiny model (plus `extra` settings).

    The sizes go through the config's ``__init__`` where it takes them, so the fields it derives
    (a latent-attention head's parts, per-layer patterns) stay consistent.
    """
    accepted = _accepted(family.config_class)
    settings = {**GENERIC, **OVERRIDES.get(family.name, {}), **extra}
    kwargs = {k: v for k, v in settings.items() if k in accepted}
    default = family.config_class()
    n = int(settings["num_hidden_layers"])
    pattern = _layer_pattern(getattr(default, "layer_types", None), n)
    if pattern is not None and "layer_types" in accepted and "layer_types" not in kwargs:
        kwargs["layer_types"] = pattern
    config = family.config_class(**kwargs)
    for key, value in OVERRIDES.get(family.name, {}).items():  # what __init__ does not take
        if key not in accepted:
            setattr(config, key, value)
    if family.name in FIXES:
        FIXES[family.name](config)
    _shrink_native_reach(config)
    return config


def _shrink_native_reach(config: Any) -> None:
    # A native yarn/llama3 scaling built for a 4k pretrained window reaches 128k: bring its
    # pretrained window down so the tiny model's trained length stays a few dozen tokens.
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    params = getattr(text, "rope_parameters", None)
    if not isinstance(params, dict):
        return
    sets = [v for v in params.values() if isinstance(v, dict)] or [params]
    for p in sets:
        original, factor = p.get("original_max_position_embeddings"), p.get("factor")
        if original and factor and original * factor > TRAINED:
            p["original_max_position_embeddings"] = max(2, int(TRAINED // factor))


def build(family: Family, config: Any | None = None, seed: int = 0) -> Any:
    """A tiny random model of `family` in eval mode (fp32)."""
    config = config if config is not None else tiny_config(family)
    torch.manual_seed(seed)
    return family.causal_lm(config).eval()


def logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """Logits without a KV cache (what every objective runs)."""
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits.float()


def config_of(family: Family) -> Any:
    """The family's tiny config, or its default one where the tiny one cannot be made (a
    refused family's config validators): what `check_supported` judges."""
    from huggingface_hub.errors import StrictDataclassError

    try:
        return tiny_config(family)
    except (TypeError, ValueError, RuntimeError, AttributeError, KeyError, IndexError,
            StrictDataclassError):  # fmt: skip
        return family.config_class()


def is_refused(family: Family) -> bool:
    """Whether `check_supported` refuses the family from its config."""
    return bool(_reason(family))


def _reason(family: Family) -> str:
    from longrope_opt.errors import UncheckedModelError
    from longrope_opt.errors import UnsupportedModelError
    from longrope_opt.patching import check_supported

    try:
        check_supported(config_of(family))
    except UncheckedModelError:
        return ""  # not refused: the matrix checks it (and fails until CHECKED lists it)
    except UnsupportedModelError as exc:
        return re.sub(r"^model type '[^']*'( is not supported)?: ", "", str(exc))
    return ""


def family_table() -> str:
    """The generated page `docs/families.md`: every family, supported or refused and why."""
    import transformers

    rows, supported = [], 0
    for family in families():
        config = config_of(family)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        model_type = getattr(text, "model_type", family.name)
        reason = _reason(family)
        status = "refused" if reason else "supported"
        supported += not reason
        rows.append(f"| `{family.name}` | `{model_type}` | {status} | {reason.replace('|', '/')} |")
    return (
        "# Model families\n\n"
        "<!-- generated by `python -m tests.families > docs/families.md`; the family matrix test\n"
        "     (tests/patching_tests/test_families.py) fails when it is out of date -->\n\n"
        f"transformers {transformers.__version__}: {len(rows)} model types with a rotary "
        f"embedding and a causal LM (a model folder, or a model type built with another "
        f"folder's causal LM); **{supported} supported**, {len(rows) - supported} refused "
        "with the reason below (`UnsupportedModelError`, before any weight is loaded).\n\n"
        "Supported means: on a tiny random model of the family, built from its own config, the "
        "identity scaling is the model as loaded bit for bit; PI and YaRN equal transformers' "
        "own `linear` and `yarn` rope types (where the family's config takes rope types); "
        "searched factors exported and reloaded give the patched logits; and the spec read from "
        "the config has the rotary module's frequencies. Checkpoints that already carry a RoPE "
        "scaling (`llama3`, `yarn`, `longrope`, `linear`, `dynamic`) are extended on top of it "
        "(see [concepts](concepts.md)). A family that a later transformers release adds is "
        "refused when its config is read (\"not checked with transformers X.Y\", "
        "`UncheckedModelError`) until the matrix has checked it.\n\n"
        "| family | model type | status | why refused |\n|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )


if __name__ == "__main__":
    import logging

    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    print(family_table(), end="")
