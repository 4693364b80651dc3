"""A LoRA fine-tune kept as its adapter: the directory `finetune --lora` writes, without its merged
weights, loads as the merged model it was.

`finetune --lora` writes a whole model directory (the adapter merged, hundreds of MB) with the
adapter beside it in ``adapter/`` (a few MB). Delete the merged weights and what is left (the
config with its factors and training record, the tokenizer, the adapter) is a fine-tuned model
that can be committed, mailed and re-checked on other text elsewhere without training again:
`load_model` rebuilds the merged model once, from the base model the record names, exactly as
the fine-tune exported it, and keeps it in the cache. Only ``base_model`` must load there.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from longrope_opt.errors import ModelLoadError
from longrope_opt.models._aliases import cache_dir
from longrope_opt.models._export import CONFIG_KEY
from longrope_opt.models._export import export_model
from longrope_opt.models._export import read_export


logger = logging.getLogger(__name__)
ADAPTER = "adapter"  # the adapter's folder inside a model directory written by `finetune --lora`
# what `export_model` writes into the record itself: the rest is the caller's metadata
_EXPORT_KEYS = ("requires_loader", "native", "short", "long", "original_length", "target_length")


def is_adapter_dir(path: str | Path) -> bool:
    """Whether `path` is a `finetune --lora` model directory without its merged weights."""
    folder = Path(path).expanduser()
    return (
        folder.is_dir()
        and (folder / "config.json").is_file()
        and (folder / ADAPTER / "adapter_config.json").is_file()
        and not any(folder.glob("*.safetensors"))
        and not any(folder.glob("pytorch_model*.bin"))
    )


def merged_adapter_dir(path: str | Path, *, load: Callable[[str, int], tuple[Any, Any]]) -> Path:
    """The model directory `path`'s adapter makes, merged once and cached.

    Args:
        path: A directory for which `is_adapter_dir` holds.
        load: ``load(base, trained_length) -> (model, tokenizer)``: the base model in float32 on
            the CPU, as `finetune` loaded it (`load_model` passes its own).

    Returns:
        A model directory in ``cache_dir() / "adapters"`` holding the weights `finetune` wrote:
        the base model, the adapter merged in, saved in the recorded dtype with the recorded
        factors. Keyed by the config and adapter's bytes: an edited adapter merges again.

    Raises:
        ModelLoadError: The config records no base model, or peft is missing.
    """
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    from transformers import AutoConfig

    folder = Path(path).expanduser()
    config = AutoConfig.from_pretrained(folder)
    record = getattr(config, CONFIG_KEY, None)
    finetuned = record.get("finetune") if isinstance(record, dict) else None
    base = finetuned.get("base_model") if isinstance(finetuned, dict) else None
    scaling = read_export(config)
    if not isinstance(record, dict) or not isinstance(finetuned, dict) or not base or scaling is None:
        raise ModelLoadError(
            f"`model` {str(folder)!r} holds an adapter but its config records no base model "
            "and factors (not written by `finetune --lora`)."
        )
    digest = hashlib.sha256()
    for part in (folder / "config.json", *sorted((folder / ADAPTER).iterdir())):
        if part.is_file():
            digest.update(part.name.encode() + b"\0" + part.read_bytes())
    out = cache_dir() / "adapters" / digest.hexdigest()[:20]
    if (out / "config.json").is_file():
        return out
    try:
        # on use: peft is the optional `lora` extra
        from peft import PeftModel
    except ImportError:
        raise ModelLoadError(f"`model` {str(folder)!r} is a LoRA adapter: loading it needs "
                             "peft: pip install 'longrope-opt[lora]'.") from None  # fmt: skip
    logger.info("merging the adapter of %s into %s (once)", folder, base)
    # the weights the fine-tune started from: fp32, as `finetune` loads them
    model, tokenizer = load(str(base), scaling.original_length)
    merged = PeftModel.from_pretrained(model, str(folder / ADAPTER)).merge_and_unload()
    # the dtype the fine-tune saved in (the config's own says the in-memory model's)
    dtype = str(finetuned.get("save_dtype") or "float32")
    metadata = {k: v for k, v in record.items() if k not in _EXPORT_KEYS}
    # written beside, then renamed: a process stopped mid-write leaves no half model in the cache
    partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    export_model(merged, tokenizer, partial, scaling, target_length=int(record["target_length"]),
                 dtype=dtype, metadata=metadata)  # fmt: skip
    try:
        partial.replace(out)
    except OSError:  # another process merged it first: the same bytes
        if not (out / "config.json").is_file():
            raise
        shutil.rmtree(partial, ignore_errors=True)
    return out
