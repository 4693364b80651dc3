"""`export_gguf(..., weights=model)`: a fine-tuned model's GGUF holds its trained weights, in the
source's layout (llama.cpp's q/k order, its names, its tensor types)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from longrope_opt.models import export_gguf
from longrope_opt.models import load_model
from longrope_opt.models import smollm2_gguf
from longrope_opt.models._gguf_weights import _stored
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from tests.gguf_tiny import HEAD_DIM
from tests.gguf_tiny import TRAINED
from tests.gguf_tiny import llama_cpp_log_probs
from tests.gguf_tiny import our_log_probs
from tests.gguf_tiny import write_tiny_llama_gguf


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tiny GGUF, its model with every weight moved (as training moves them), factors."""
    folder = tmp_path_factory.mktemp("gguf-weights")
    source = write_tiny_llama_gguf(folder / "tiny.gguf", smollm2_gguf())
    model, _ = load_model(str(source), dtype="float32", device="cpu", attn="eager")
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    factors = np.linspace(1.0, 4.0, HEAD_DIM // 2)
    scaling = RopeScaling(factors, attention_scale=1.1)
    out = folder / "ft.gguf"
    export_gguf(source, out, scaling, spec=RopeSpec.from_config(model.config),
                target_length=4 * TRAINED, weights=model)  # fmt: skip
    return source, model, scaling, out


def test_the_gguf_holds_the_trained_weights_as_transformers_reads_them(trained) -> None:
    source, model, _, out = trained
    again, _ = load_model(str(out), dtype="float32", device="cpu", attn="eager")
    before, _ = load_model(str(source), dtype="float32", device="cpu", attn="eager")
    ours, theirs = model.state_dict(), again.state_dict()
    assert set(ours) == set(theirs)
    for key, weight in ours.items():  # an F32 source: every weight exactly, q and k included
        torch.testing.assert_close(theirs[key], weight, rtol=0, atol=0, msg=key)
    moved = before.state_dict()["model.layers.0.self_attn.q_proj.weight"]
    assert not torch.equal(moved, theirs["model.layers.0.self_attn.q_proj.weight"])
    # the source's tensors, in its order, then the factor tensors; nothing else
    names = [t.name for t in gguf.GGUFReader(str(out)).tensors]
    assert names == [t.name for t in gguf.GGUFReader(str(source)).tensors] + [
        "rope_factors_long.weight", "rope_factors_short.weight"]  # fmt: skip


def test_a_model_of_another_shape_is_one_line(trained, tmp_path) -> None:
    source, _, scaling, _ = trained
    from longrope_opt.errors import InvalidArgumentError
    from tests.conftest import save_tiny_model_dir

    other, _ = load_model(save_tiny_model_dir(tmp_path / "dir"), dtype="float32", device="cpu")
    spec = RopeSpec.from_config(other.config)
    with pytest.raises(InvalidArgumentError, match="not the model the GGUF holds|rotates"):
        export_gguf(source, tmp_path / "x.gguf", RopeScaling(np.ones(spec.n_factors)),
                    spec=spec, target_length=4 * TRAINED, weights=other)  # fmt: skip
    assert not (tmp_path / "x.gguf").exists()


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_1", "F16"])
def test_a_quantized_source_type_is_kept(kind) -> None:
    data = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)
    qtype = getattr(gguf.GGMLQuantizationType, kind)
    stored, got = _stored(data, qtype)
    assert got == qtype
    back = gguf.quants.dequantize(stored, got)
    assert back.shape == data.shape
    # Q4_1: 16 levels a block of 32 → errors up to ~1/30 of a block's range
    tolerance = {"Q8_0": 0.02, "Q4_1": 0.3, "F16": 1e-3}[kind]
    assert np.abs(back - data).max() < tolerance


def test_a_type_gguf_cannot_quantize_to_falls_back_to_f16_and_vectors_stay_f32() -> None:
    data = np.random.default_rng(0).standard_normal((8, 40)).astype(np.float32)  # rows of 40
    stored, got = _stored(data, gguf.GGMLQuantizationType.Q8_0)  # blocks of 32 do not fit
    assert got == gguf.GGMLQuantizationType.F16
    np.testing.assert_allclose(stored.astype(np.float32), data, atol=1e-3)
    norm, kind = _stored(np.ones(40, dtype=np.float32), gguf.GGMLQuantizationType.Q8_0)
    assert kind == gguf.GGMLQuantizationType.F32 and norm.dtype == np.float32


@pytest.mark.llama_cpp
def test_llama_cpp_runs_the_trained_weights_as_our_patched_model(trained) -> None:
    pytest.importorskip("llama_cpp", reason="the llama-cpp extra (.ci/run installs it)")
    _, model, scaling, out = trained
    n = 4 * TRAINED
    ids = np.random.default_rng(1).integers(0, model.config.vocab_size, n).tolist()
    ours = our_log_probs(model, ids, scaling)
    theirs = llama_cpp_log_probs(out, ids, n)
    nll = [-lp[np.arange(n - 1), ids[1:]].mean() for lp in (ours, theirs)]
    assert abs(nll[0] - nll[1]) < 1e-5 * nll[0]
