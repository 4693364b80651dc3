"""A model's own weights in a source GGUF's layout: what a fine-tuned model's GGUF holds.

`export_gguf` copies a source GGUF's tensors byte for byte. After fine-tuning, the weights are
no longer the source's: each tensor is taken from the trained model instead, named by gguf's own
name map (the one llama.cpp's converter uses), in llama.cpp's q/k row order (its converter
permutes them; transformers' GGUF loader undoes that), and stored in the source tensor's type
where gguf can quantize to it (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), else in F16: a
quantized source stays quantized at the same type, not at a finer one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from longrope_opt.errors import InvalidArgumentError


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's q/k permutation (`LlamaModel.permute`): each head's rotary
    halves interleaved, the order its rope kernel reads."""
    return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))  # fmt: skip


def model_tensors(
    reader: Any, model: Any, arch: str, *, skip: tuple[str, ...] = ()
) -> dict[str, tuple[np.ndarray, Any]]:
    """Every tensor of `reader` (a `gguf.GGUFReader`) but those in `skip` (the RoPE factor
    tensors), taken from `model`'s weights: ``{gguf name: (data, GGML type)}``.

    Raises:
        InvalidArgumentError: A tensor of the source that the model has no weight for (another
            architecture or size).
    """
    import gguf  # on use: `longrope_opt.models` stays light
    import torch

    kinds = {name: k for k, name in gguf.MODEL_ARCH_NAMES.items()}
    blocks = int(reader.fields[f"{arch}.block_count"].contents())
    names = gguf.get_tensor_name_map(kinds[arch], blocks)
    heads = int(reader.fields[f"{arch}.attention.head_count"].contents())
    kv = reader.fields.get(f"{arch}.attention.head_count_kv")
    kv_heads = int(kv.contents()) if kv is not None else heads
    wanted = {t.name: t for t in reader.tensors if t.name not in skip}
    found: dict[str, tuple[np.ndarray, Any]] = {}
    with torch.no_grad():
        for key, weight in model.state_dict().items():
            name = names.get_name(key, try_suffixes=(".weight", ".bias"))
            if name is None or name not in wanted or name in found:  # a tied lm_head the source does not hold
                continue
            data = weight.detach().to(torch.float32).cpu().numpy()
            shape = tuple(int(n) for n in reversed(wanted[name].shape.tolist()))  # GGUF: ne order
            if data.shape != shape:
                raise InvalidArgumentError(
                    f"the model's {key} has shape {list(data.shape)}, the GGUF's {name} "
                    f"{list(shape)}: it is not the model the GGUF holds."
                )
            if name.endswith("attn_q.weight"):
                data = _permute(data, heads)
            elif name.endswith("attn_k.weight"):
                data = _permute(data, kv_heads)
            found[name] = _stored(data, wanted[name].tensor_type)
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise InvalidArgumentError(
            f"the model has no weight for the GGUF's {missing[:3]} ({len(missing)} in all): it "
            "is not the model the GGUF holds."
        )
    return found


def _stored(data: np.ndarray, kind: Any) -> tuple[np.ndarray, Any]:
    """`data` in GGML type `kind` where gguf can quantize to it, else F16 (F32 for vectors:
    norms stay exact, as llama.cpp's converter keeps them)."""
    import gguf  # on use, as in `model_tensors`

    f32 = gguf.GGMLQuantizationType.F32
    if kind == f32 or data.ndim == 1:
        return np.ascontiguousarray(data, dtype=np.float32), f32
    try:
        return gguf.quants.quantize(data, kind), kind
    except (NotImplementedError, gguf.quants.QuantError):
        f16 = gguf.GGMLQuantizationType.F16
        return gguf.quants.quantize(data, f16), f16
