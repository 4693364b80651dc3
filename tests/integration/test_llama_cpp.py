"""The exported GGUF run by llama.cpp itself (llama-cpp-python builds it): an independent
implementation computes the same model as our patched transformers one.

A tiny random Llama (`tests.gguf_tiny`, trained length 64) is extended to 256 tokens: llama.cpp on
the exported GGUF gives the log-probabilities our patched model gives; the source GGUF at the same
length gives different ones (the factors are applied, not ignored); llama.cpp's own YaRN agrees with
our YaRN; a context within the trained window uses the short factors.
"""

from __future__ import annotations

import numpy as np
import pytest

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.models import export_gguf
from longrope_opt.models import load_model
from longrope_opt.models import smollm2_gguf
from longrope_opt.rope import yarn
from tests.gguf_tiny import TRAINED
from tests.gguf_tiny import llama_cpp_log_probs
from tests.gguf_tiny import our_log_probs
from tests.gguf_tiny import write_tiny_llama_gguf


pytestmark = pytest.mark.llama_cpp
llama_cpp = pytest.importorskip("llama_cpp", reason="the llama-cpp extra (.ci/run installs it)")

TARGET = 4 * TRAINED
#: log-probability agreement between two fp32 implementations of the same model, on every token
#: of the vocabulary at every position (this tiny random model is peaky: log-probs down to -60,
#: so angles rounded differently at position 1,000 move the far tail by a few 0.01; llama.cpp
#: runs with an F32 KV cache: its default F16 cache alone moves them by ~1). The perplexities
#: agree to 1e-5.
CLOSE = 0.1


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    source = write_tiny_llama_gguf(folder / "tiny.gguf", smollm2_gguf())
    model, _ = load_model(str(source), dtype="float32", device="cpu")
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, TARGET).tolist()
    return folder, source, model, ids


def _searched(spec: RopeSpec) -> RopeScaling:
    # a λ curve of the shape searches find: 1 on the fast dimensions, rising past the target ratio
    n = spec.n_factors
    factors = np.concatenate([np.ones(n // 4), np.linspace(1.2, 1.3 * TARGET / TRAINED, n - n // 4)])
    return RopeScaling(factors, 0, 1.15, method="search")


def test_llama_cpp_runs_the_exported_factors_as_our_patched_model(tiny) -> None:
    folder, source, model, ids = tiny
    spec = RopeSpec.from_config(model.config)
    scaling = _searched(spec)
    done = export_gguf(source, folder / "searched.gguf", scaling, spec=spec, target_length=TARGET)
    ours = our_log_probs(model, ids, scaling)
    theirs = llama_cpp_log_probs(done.path, ids, TARGET)
    assert np.abs(ours - theirs).max() < CLOSE
    # the source at the same length: the same weights without the factors, a different model
    plain = llama_cpp_log_probs(source, ids, TARGET)
    assert np.abs(our_log_probs(model, ids) - plain).max() < CLOSE  # both agree on it
    assert np.abs(ours - plain).max() > 10 * CLOSE  # and the factors change it
    nll = {k: -v[np.arange(TARGET - 1), ids[1:]].mean() for k, v in
           {"ours": ours, "theirs": theirs, "plain": plain}.items()}  # fmt: skip
    assert abs(nll["ours"] - nll["theirs"]) < 1e-5 * nll["ours"]
    assert abs(nll["ours"] - nll["plain"]) > 100 * abs(nll["ours"] - nll["theirs"])


def test_llama_cpp_yarn_agrees_with_ours(tiny) -> None:
    folder, source, model, ids = tiny
    spec = RopeSpec.from_config(model.config)
    ours = our_log_probs(model, ids, yarn(spec, TARGET))
    theirs = llama_cpp_log_probs(source, ids, TARGET,
                                 rope_scaling_type=llama_cpp.LLAMA_ROPE_SCALING_TYPE_YARN,
                                 rope_freq_scale=TRAINED / TARGET, yarn_orig_ctx=TRAINED)  # fmt: skip
    assert np.abs(ours - theirs).max() < CLOSE


def test_a_context_within_the_trained_window_uses_the_short_factors(tiny) -> None:
    folder, source, model, ids = tiny
    spec = RopeSpec.from_config(model.config)
    searched = _searched(spec)
    done = export_gguf(source, folder / "short.gguf", searched, spec=spec, target_length=TARGET)
    short = ids[:TRAINED]
    # the short factors (the pretrained frequencies) with the attention factor, which llama.cpp
    # applies at every context size, as transformers' longrope does
    as_short = RopeScaling(np.ones(spec.n_factors), 0, searched.attention_scale, method="none")
    theirs = llama_cpp_log_probs(done.path, short, TRAINED)
    assert np.abs(theirs - our_log_probs(model, short, as_short)).max() < CLOSE
    assert np.abs(theirs - our_log_probs(model, short, searched)).max() > 10 * CLOSE
    # the freqs form has one factor set: the long factors at every context size
    freqs = export_gguf(source, folder / "freqs.gguf", searched, spec=spec, target_length=TARGET,
                        form="freqs")  # fmt: skip
    theirs = llama_cpp_log_probs(freqs.path, short, TRAINED)
    assert np.abs(theirs - our_log_probs(model, short, searched)).max() < CLOSE
