"""A tiny random Llama as a GGUF that both transformers and llama.cpp load.

Its tokenizer is SmolLM2's (copied from the published GGUF: both loaders need a real vocabulary),
its weights random F32 in llama.cpp's layout (transformers' GGUF loader undoes the q/k
permutation, so both run the same model). Trained length `TRAINED`; a test runs it past that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch

from longrope_opt.patching import apply_rope_scaling


TRAINED = 256  # llama.cpp pads a context to a multiple of 256: a smaller window is never "within"
HIDDEN, HEADS, KV_HEADS, FF, LAYERS = 64, 4, 2, 128, 2
HEAD_DIM = HIDDEN // HEADS


def write_tiny_llama_gguf(path: Path, tokenizer_gguf: Path, *, seed: int = 0) -> Path:
    """Write the tiny model to `path` with the tokenizer metadata of `tokenizer_gguf`."""
    source = gguf.GGUFReader(str(tokenizer_gguf))
    vocab = len(source.fields["tokenizer.ggml.tokens"].data)
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_context_length(TRAINED)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FF)
    writer.add_block_count(LAYERS)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for field in source.fields.values():
        if field.name.startswith("tokenizer."):
            kind = field.types[0]
            sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)

    def w(*shape: int, scale: float) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    # GGUF shapes are (out, in) as numpy arrays, like torch's Linear weights
    writer.add_tensor("token_embd.weight", w(vocab, HIDDEN, scale=1.0))
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    kv = KV_HEADS * HEAD_DIM
    for i in range(LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", w(HIDDEN, HIDDEN, scale=0.5))
        writer.add_tensor(f"blk.{i}.attn_k.weight", w(kv, HIDDEN, scale=0.5))
        writer.add_tensor(f"blk.{i}.attn_v.weight", w(kv, HIDDEN, scale=0.2))
        writer.add_tensor(f"blk.{i}.attn_output.weight", w(HIDDEN, HIDDEN, scale=0.2))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(FF, HIDDEN, scale=0.2))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w(FF, HIDDEN, scale=0.2))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w(HIDDEN, FF, scale=0.2))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities over the last axis, in float64."""
    logits = logits.astype(np.float64)
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))


def our_log_probs(model: Any, ids: list[int], scaling: Any = None) -> np.ndarray:
    """``(len(ids), vocab)`` log-probabilities of our model, patched with `scaling` if given."""
    with torch.inference_mode():
        if scaling is None:
            logits = model(torch.tensor([ids])).logits
        else:
            with apply_rope_scaling(model, scaling):
                logits = model(torch.tensor([ids])).logits
    return log_softmax(logits[0].float().numpy())


def llama_cpp_log_probs(path: Path, ids: list[int], n_ctx: int, **rope: Any) -> np.ndarray:
    """The same from llama.cpp (llama-cpp-python) on the GGUF at `path`, with an F32 KV cache
    (its default F16 cache alone moves this peaky tiny model's log-probs by ~1)."""
    import llama_cpp  # on use: the llama-cpp extra, imported by the tests that need it

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                          logits_all=True, n_threads=2, verbose=False, type_k=0, type_v=0,
                          **rope)  # fmt: skip
    try:
        llm.eval(ids)
        return log_softmax(np.array(llm.scores[: len(ids)]))
    finally:
        llm.close()
