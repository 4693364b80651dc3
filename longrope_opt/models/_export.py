"""`export_model`: a model directory that vanilla transformers loads with the searched factors.

The directory is what ``save_pretrained`` writes (weights, config, tokenizer) with the config's
``rope_parameters`` set to transformers' ``longrope`` type: ``short_factor`` (used when a forward's
positions all lie below the trained length), ``long_factor``, ``original_max_position_embeddings``,
``factor`` and ``attention_factor``; ``max_position_embeddings`` becomes the target length.

transformers cannot express n̂ (start tokens that keep the pretrained angle) nor two attention
scales. When either is needed, the config also says ``"longrope_opt": {"requires_loader": true}``
and `longrope_opt.models.load_model` installs the exact scaling on load; vanilla transformers would
load the same directory *without* n̂, and the README written next to it says so.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import TRAINED_LENGTH_ATTR
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import ShortLongScaling
from longrope_opt.rope import extended_layer_types


logger = logging.getLogger(__name__)


CONFIG_KEY = "longrope_opt"


def rope_parameters(
    scaling: RopeScaling | ShortLongScaling, spec: RopeSpec, target_length: int
) -> dict[str, Any]:
    """transformers ``rope_parameters`` (type ``longrope``) for a factor set or a short/long pair.

    The factors written are the composition with the checkpoint's own RoPE: ν·λ (`RopeSpec`), and
    the attention factor is the native scale × t. A single set becomes the long factors, with the
    checkpoint's own factors ν as short factors (the model as it was below its trained length).
    ``attention_factor`` is the long set's. transformers has no n̂: see `needs_loader`.
    """
    pair = as_pair(scaling, spec)
    native = spec.native()
    params: dict[str, Any] = {
        "rope_type": "longrope",
        "rope_theta": spec.base,
        "short_factor": [float(x) for x in native * pair.short.factors],
        "long_factor": [float(x) for x in native * pair.long.factors],
        "original_max_position_embeddings": spec.original_length,
        "factor": target_length / spec.original_length,
        "attention_factor": spec.native_attention * pair.long.attention_scale,
    }
    # Always written: some configs (Phi-3) require it with longrope
    params["partial_rotary_factor"] = spec.rotary_dim / spec.head_dim
    return params


def vllm_attention_factor(original_length: int, target_length: int) -> float:
    """The factor vLLM scales cos and sin by for a ``longrope`` model without ``long_mscale``:
    √(1 + ln s / ln L), s = target / trained length (Phi-3's rule: vLLM reads no
    ``attention_factor``; `phi3_long_rope_scaled_rope.py`)."""
    scale = target_length / original_length
    return 1.0 if scale <= 1 else math.sqrt(1 + math.log(scale) / math.log(original_length))


#: What serving with vLLM's factor instead of a searched one cost, measured once
#: (`experiments/vllm_check.py`, `experiments/results/vllm-check.json`).
VLLM_FACTOR_COST = (
    "measured once, SmolLM2 at 16k: a winner whose t was searched (1.069) scored 11.760 with it "
    "and 11.720 with vLLM's 1.038 on held-out text; docs/guides/gguf.md"
)


def needs_loader(pair: ShortLongScaling) -> bool:
    """Whether vanilla transformers would compute a different RoPE than `pair` (n̂ > 0 or two t)."""
    return pair.n_hat > 0 or pair.short.attention_scale != pair.long.attention_scale


def as_pair(scaling: RopeScaling | ShortLongScaling, spec: RopeSpec) -> ShortLongScaling:
    """A `ShortLongScaling`; a single set gets the identity as short factors with its own t (the
    model as trained below L, up to t, which transformers' longrope applies to both sets)."""
    if isinstance(scaling, ShortLongScaling):
        return scaling
    if not isinstance(scaling, RopeScaling):
        raise InvalidArgumentError(
            f"`scaling` must be a RopeScaling or ShortLongScaling, got {type(scaling).__name__}."
        )
    short = RopeScaling(np.ones(spec.n_factors), 0, scaling.attention_scale, method="none")
    return ShortLongScaling(short, scaling, spec.original_length)


def check_output_dir(
    path: str | Path,
    *,
    overwrite: bool = False,
    source: str | None = None,
    param: str = "output_dir",
) -> Path:
    """Refuse to write a model directory over something that matters, before any work is done.

    Refused always: the source model's own directory, and an existing file. Refused unless
    `overwrite`: an existing non-empty directory. A missing parent directory is created later.

    Raises:
        InvalidArgumentError: One line naming `param` and the reason.
    """
    out = Path(path).expanduser()
    if source is not None:
        src = Path(source).expanduser()
        if src.exists() and out.exists() and src.resolve() == out.resolve():
            raise InvalidArgumentError(
                f"`{param}` {str(out)!r} is the source model's own directory; write elsewhere."
            )
    if out.exists() and not out.is_dir():
        raise InvalidArgumentError(f"`{param}` {str(out)!r} is an existing file, not a directory.")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise InvalidArgumentError(
            f"`{param}` {str(out)!r} exists and is not empty; choose a new directory or pass "
            "`overwrite`."
        )
    return out


def export_model(
    model: Any,
    tokenizer: Any,
    output_dir: str | Path,
    scaling: RopeScaling | ShortLongScaling,
    *,
    target_length: int,
    dtype: str | None = None,
    metadata: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Save `model` with `scaling` as its RoPE, loadable by ``AutoModelForCausalLM.from_pretrained``.

    Args:
        model: A loaded transformers causal LM (its weights are saved as they are, e.g. fine-tuned).
        tokenizer: Its tokenizer (saved alongside), or None.
        output_dir: Directory to create or overwrite.
        scaling: The long factors alone, or a short/long pair.
        target_length: The context length the factors are for (``max_position_embeddings``).
        dtype: Save weights in this dtype (``"bfloat16"``, ``"float32"``...); default: as loaded.
        metadata: Extra JSON-able facts recorded under ``config.longrope_opt`` (study, values...).
        overwrite: Write into an existing non-empty directory (never the model's own source).

    Returns:
        The directory.

    Raises:
        InvalidArgumentError: Factors of the wrong length, or a target not beyond the trained length.
    """
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch

    spec = RopeSpec.from_config(_text_config(model.config))
    spec.scale(target_length)  # validates target > trained length
    pair = as_pair(scaling, spec)
    pair.short.check(spec)
    pair.long.check(spec)
    if pair.original_length != spec.original_length:
        raise InvalidArgumentError(
            f"`scaling.original_length` must be the model's trained length {spec.original_length}, "
            f"got {pair.original_length}."
        )
    loader = needs_loader(pair)
    source = getattr(model.config, "_name_or_path", None) or getattr(model, "name_or_path", None)
    out = check_output_dir(output_dir, overwrite=overwrite, source=source)
    out.mkdir(parents=True, exist_ok=True)
    config = _text_config(model.config)
    expressible = _expressible(config)
    loader = loader or not expressible  # GPT-J/CodeGen: a fixed sin/cos table, no rope type
    saved = (getattr(config, "rope_parameters", None), config.max_position_embeddings,
             getattr(config, "original_max_position_embeddings", None))  # fmt: skip
    if expressible:
        config.rope_parameters = _with_longrope(config, rope_parameters(pair, spec, target_length))
    config.max_position_embeddings = int(target_length)
    if hasattr(config, "original_max_position_embeddings"):  # Phi-3 keeps its own field
        config.original_max_position_embeddings = spec.original_length
    said = model.config.__dict__.pop(TRAINED_LENGTH_ATTR, None)  # the export's own is the target
    setattr(
        model.config,
        CONFIG_KEY,
        {
            "requires_loader": loader,
            "native": {
                "factors": [float(x) for x in spec.native()],
                "attention_scale": spec.native_attention,
                "rope_type": spec.rope_type,
            },
            "short": pair.short.to_dict(),
            "long": pair.long.to_dict(),
            "original_length": spec.original_length,
            "target_length": int(target_length),
            **(metadata or {}),
        },
    )
    saved_dtype = getattr(model.config, "dtype", None)
    dequantized = _detach_gguf_quantizer(model)
    try:
        if dtype is None:
            model.save_pretrained(out)
        else:  # cast a copy of the weights: the in-memory model keeps its precision
            target = getattr(torch, dtype)
            # Cast each storage once, so tied weights (embeddings = LM head) stay shared and
            # are saved once, as save_pretrained does for the model itself.
            cast: dict[int, Any] = {}
            state = {}
            for key, value in model.state_dict().items():
                ptr = value.data_ptr()
                if ptr not in cast:
                    cast[ptr] = value.to(target)
                state[key] = cast[ptr]
            model.config.dtype = target
            model.save_pretrained(out, state_dict=state)
    finally:
        # The in-memory model keeps its RoPE: the export is a copy, not a conversion.
        if expressible:
            config.rope_parameters = saved[0]
        config.max_position_embeddings = saved[1]
        if saved[2] is not None:
            config.original_max_position_embeddings = saved[2]
        model.config.dtype = saved_dtype
        if dequantized is not None:
            model.hf_quantizer = dequantized[0]
            if dequantized[1] is not None:
                model.config.quantization_config = dequantized[1]
        delattr(model.config, CONFIG_KEY)
        if said is not None:
            setattr(model.config, TRAINED_LENGTH_ATTR, said)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    (out / "README.md").write_text(_readme(out, pair, target_length, loader))
    factor = spec.native_attention * pair.long.attention_scale
    served = vllm_attention_factor(spec.original_length, int(target_length))
    if expressible and abs(factor - served) > 1e-4 * served:
        # The keys vLLM would read (`long_mscale`, `short_mscale`) make transformers warn that
        # `rope_parameters` holds keys it does not know: they are not written; the user is told.
        logger.warning(
            "vLLM reads no attention_factor: serving %s it scales cos/sin by %.4f, not the "
            "exported %.4f (%s)", out, served, factor, VLLM_FACTOR_COST,
        )  # fmt: skip
    return out


def _detach_gguf_quantizer(model: Any) -> tuple[Any, Any] | None:
    """A model loaded from a GGUF holds plain de-quantized weights, yet keeps transformers' GGUF
    quantizer, whose ``save_pretrained`` refuses ("not serializable"): detach it (and its config
    entry) for the save; returns what to put back, or None when there was nothing to detach."""
    quantizer = getattr(model, "hf_quantizer", None)
    config = getattr(model.config, "quantization_config", None)
    method = getattr(getattr(quantizer, "quantization_config", None), "quant_method", None)
    if quantizer is None or str(getattr(method, "value", method)) != "gguf":
        return None
    model.hf_quantizer = None
    if config is not None:
        del model.config.quantization_config
    return quantizer, config


def read_export(config: Any) -> ShortLongScaling | None:
    """The exact short/long scaling recorded by `export_model` in a config, or None.

    Its factors are relative to the RoPE the exported checkpoint was built on: `exported_spec`.
    """
    data = getattr(config, CONFIG_KEY, None)
    if not isinstance(data, dict) or "long" not in data:
        return None
    return ShortLongScaling(
        RopeScaling.from_dict(data["short"]),
        RopeScaling.from_dict(data["long"]),
        int(data["original_length"]),
    )


def exported_spec(config: Any) -> RopeSpec | None:
    """The spec `read_export`'s factors act on: the exported model's RoPE without the export's
    own factors (its native RoPE before the extension, as recorded), or None for a config that
    `export_model` did not write. Exports written before native RoPEs were recorded acted on the
    plain RoPE."""
    data = getattr(config, CONFIG_KEY, None)
    if not isinstance(data, dict) or "long" not in data:
        return None
    raw = RopeSpec.from_config(_text_config(config)).raw()
    native = data.get("native") or {}
    return dataclasses.replace(
        raw,
        original_length=int(data["original_length"]),
        native_factors=tuple(native.get("factors") or ()),
        native_attention=float(native.get("attention_scale", 1.0)),
        rope_type=str(native.get("rope_type", "default")),
    )


def _text_config(config: Any) -> Any:
    # Multimodal configs keep the language model's settings in a text config.
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


#: Rope-parameter keys that only transformers' RoPE computation reads. A config whose rope
#: parameters hold any other key (Mistral 4's ``llama_4_scaling_beta``: an attention temperature
#: that reads ``original_max_position_embeddings``) cannot be rewritten as ``longrope`` without
#: changing something else: its export keeps its config and needs our loader.
ROPE_KEYS = frozenset({
    "rope_type", "type", "rope_theta", "partial_rotary_factor", "factor",
    "original_max_position_embeddings", "low_freq_factor", "high_freq_factor", "beta_fast",
    "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "short_factor", "long_factor",
    "truncate", "short_mscale", "long_mscale",
})  # fmt: skip


def _expressible(config: Any) -> bool:
    """Whether vanilla transformers can load the extension as ``longrope`` rope parameters."""
    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict):
        return False  # GPT-J / CodeGen: a fixed sin/cos table
    extended = extended_layer_types(config)
    sets = [params[k] for k in extended] if extended else [params]
    return all(isinstance(p, dict) and set(p) <= ROPE_KEYS for p in sets)


def _with_longrope(config: Any, params: dict[str, Any]) -> Any:
    """The config's rope parameters with `params` for the layers an extension rescales (every
    layer for a single RoPE; the global layer types for per-layer-type RoPE)."""
    extended = extended_layer_types(config)
    if not extended:
        return params
    per_layer = dict(config.rope_parameters)
    for layer_type in extended:
        per_layer[layer_type] = dict(params)
    return per_layer


def _readme(out: Path, pair: ShortLongScaling, target_length: int, loader: bool) -> str:
    facts = {
        "target_length": target_length,
        "original_length": pair.original_length,
        "long_n_hat": pair.long.n_hat,
        "short_n_hat": pair.short.n_hat,
        "attention_factor": pair.long.attention_scale,
    }
    if loader:
        how = f"""This export needs longrope-opt's loader: it uses n̂ > 0 (start tokens that keep the
pretrained angle) or two attention scales, which transformers' `longrope` cannot express.
Vanilla `from_pretrained` would load it **without** them (slightly different numbers).

```python
from longrope_opt.models import load_model
model, tokenizer = load_model("{out}", dtype="bfloat16")
```
"""
    else:
        how = f"""Vanilla transformers loads it exactly (rope type `longrope`, n̂ = 0):

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("{out}")
tokenizer = AutoTokenizer.from_pretrained("{out}")
```
"""
    return (
        "# LongRoPE-extended model (exported by longrope-opt)\n\n"
        f"{how}\n"
        "A forward whose positions all lie within the trained window uses `short_factor`, a\n"
        "longer one `long_factor` (transformers' longrope switch; as with Phi-3, keys cached by\n"
        "forwards below the window were rotated with the short factors).\n\n"
        f"```json\n{json.dumps(facts, indent=2)}\n```\n"
    )
