"""LoRA for long-context fine-tuning, through peft: adapters on the attention projections, norms
trainable.

LongLoRA (Chen et al., ICLR 2024) found that LoRA alone does not adapt a model to long contexts
and that training the normalisation layers (a fraction of a percent of the weights) closes most
of the gap; they go in the adapter as peft's ``modules_to_save``. The adapter is a few MB: it is
what a user on one GPU trains, and the form in which a fine-tuned comparison can be committed and
re-checked elsewhere (`peft.PeftModel.from_pretrained` on the extended model it was trained on).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from longrope_opt.errors import InvalidArgumentError


def attention_projections(model: nn.Module) -> list[str]:
    """Names (the last part) of the linear layers directly inside the attention modules:
    ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` on Llama-like models."""
    names: set[str] = set()
    for module in model.modules():
        if "Attention" in type(module).__name__:
            names |= {n for n, child in module.named_children() if isinstance(child, nn.Linear)}
    return sorted(names)


def norm_modules(model: nn.Module) -> list[str]:
    """Full names of the model's normalisation layers (``…RMSNorm``, ``…LayerNorm``)."""
    return [n for n, m in model.named_modules() if n and type(m).__name__.endswith("Norm")]


def add_lora(model: nn.Module, rank: int, *, alpha: int | None = None) -> Any:
    """Wrap `model` (in place) with LoRA adapters of `rank` on its attention projections; its
    norms train in full. Everything else is frozen.

    Args:
        model: A transformers causal LM.
        rank: LoRA rank r (YaRN's optional LoRA: 16).
        alpha: LoRA alpha (default 2·r).

    Returns:
        The `peft.PeftModel` (``save_pretrained`` writes the adapter, ``merge_and_unload``
        folds it into the model's weights).

    Raises:
        InvalidArgumentError: A rank below 1, or a model without attention projections.
        ImportError: peft is not installed (the ``lora`` extra).
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise InvalidArgumentError(f"`lora` must be an integer rank >= 1, got {rank!r}.")
    try:
        # on use: peft is the optional `lora` extra
        from peft import LoraConfig
        from peft import get_peft_model
    except ImportError:
        raise ImportError("LoRA needs peft: pip install 'longrope-opt[lora]'.") from None
    targets = attention_projections(model)
    if not targets:
        raise InvalidArgumentError(
            f"`lora`: {type(model).__name__} has no linear layers inside an attention module."
        )
    config = LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, lora_dropout=0.0,
                        target_modules=targets, modules_to_save=norm_modules(model),
                        task_type="CAUSAL_LM")  # fmt: skip
    return get_peft_model(model, config)
