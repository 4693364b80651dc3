"""`export_gguf`: a GGUF copy whose tensors are the source's bytes and whose RoPE is the factors."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import export_gguf
from longrope_opt.models import gguf_source
from longrope_opt.rope import ShortLongScaling


HEAD_DIM, TRAINED, TARGET = 16, 64, 256


def _tiny_gguf(path, *, arch="llama", rope_freqs=False, scaling_factor=None, seed=0):
    """A two-tensor GGUF of `arch`: one F32 and one Q8_0 tensor (a quantized input)."""
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), arch=arch)
    writer.add_context_length(TRAINED)
    writer.add_block_count(1)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(10000.0)
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    if scaling_factor is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(scaling_factor)
    writer.add_tensor("token_embd.weight", rng.standard_normal((3, 32)).astype(np.float32))
    weight = rng.standard_normal((32, 64)).astype(np.float32)
    packed = gguf.quants.quantize(weight, gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("blk.0.attn_q.weight", packed, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    if rope_freqs:
        writer.add_tensor("rope_freqs.weight", np.full(HEAD_DIM // 2, 3.0, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _spec() -> RopeSpec:
    return RopeSpec(head_dim=HEAD_DIM, base=10000.0, original_length=TRAINED)


def _scaling(n_hat: int = 0) -> RopeScaling:
    factors = np.linspace(1.0, TARGET / TRAINED, HEAD_DIM // 2)
    return RopeScaling(factors, n_hat, 1.2, method="search")


def _fields(path):
    reader = gguf.GGUFReader(str(path))
    values = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    return values, {t.name: t for t in reader.tensors}


def test_tensors_are_copied_byte_for_byte_and_the_rope_is_the_factors(tmp_path) -> None:
    source = _tiny_gguf(tmp_path / "src.gguf")
    done = export_gguf(source, tmp_path / "out" / "x.gguf", _scaling(), spec=_spec(),
                       target_length=TARGET)  # fmt: skip
    meta, tensors = _fields(done.path)
    src_meta, src_tensors = _fields(source)
    for name, t in src_tensors.items():
        assert tensors[name].tensor_type == t.tensor_type
        assert bytes(tensors[name].data) == bytes(t.data)  # a quantized tensor stays as it was
    np.testing.assert_allclose(tensors["rope_factors_long.weight"].data, _scaling().factors,
                               rtol=1e-6)  # fmt: skip
    np.testing.assert_array_equal(tensors["rope_factors_short.weight"].data, 1.0)
    assert meta["llama.context_length"] == TARGET
    assert meta["llama.rope.scaling.type"] == "longrope"
    assert meta["llama.rope.scaling.original_context_length"] == TRAINED
    assert meta["llama.rope.scaling.attn_factor"] == pytest.approx(1.2)
    assert meta["tokenizer.ggml.tokens"] == src_meta["tokenizer.ggml.tokens"]
    assert done.modelfile.read_text() == f"FROM ./x.gguf\nPARAMETER num_ctx {TARGET}\n"
    assert (done.path.stat().st_mode & 0o044) == 0o044  # an ordinary, readable file


def test_freqs_form_replaces_a_sources_own_factors_and_linear_scale(tmp_path) -> None:
    source = _tiny_gguf(tmp_path / "src.gguf", rope_freqs=True, scaling_factor=2.0)
    done = export_gguf(source, tmp_path / "x.gguf", _scaling(), spec=_spec(),
                       target_length=TARGET, form="freqs")  # fmt: skip
    meta, tensors = _fields(done.path)
    assert "rope_factors_long.weight" not in tensors
    np.testing.assert_allclose(tensors["rope_freqs.weight"].data, _scaling().factors, rtol=1e-6)
    assert meta["llama.rope.scaling.type"] == "linear"
    assert "llama.rope.scaling.factor" not in meta  # a frequency scale of 1: the factors are all


def test_short_long_pair_and_native_factors_are_composed(tmp_path) -> None:
    source = _tiny_gguf(tmp_path / "src.gguf")
    native = tuple(np.linspace(1.0, 2.0, HEAD_DIM // 2))
    spec = RopeSpec(head_dim=HEAD_DIM, base=10000.0, original_length=TRAINED,
                    native_factors=native, native_attention=1.1)  # fmt: skip
    short = RopeScaling(np.full(HEAD_DIM // 2, 1.5), 0, 1.2, method="search")
    pair = ShortLongScaling(short, _scaling(), TRAINED)
    done = export_gguf(source, tmp_path / "x.gguf", pair, spec=spec, target_length=TARGET)
    meta, tensors = _fields(done.path)
    np.testing.assert_allclose(tensors["rope_factors_long.weight"].data,
                               np.array(native) * _scaling().factors, rtol=1e-6)  # fmt: skip
    np.testing.assert_allclose(tensors["rope_factors_short.weight"].data,
                               np.array(native) * 1.5, rtol=1e-6)  # fmt: skip
    assert meta["llama.rope.scaling.attn_factor"] == pytest.approx(1.1 * 1.2)


def test_n_hat_is_refused_unless_dropped_on_purpose(tmp_path) -> None:
    source = _tiny_gguf(tmp_path / "src.gguf")
    with pytest.raises(InvalidArgumentError, match="n_hat=4.*`drop_n_hat`") as err:
        export_gguf(source, tmp_path / "x.gguf", _scaling(4), spec=_spec(), target_length=TARGET)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "x.gguf").exists()
    done = export_gguf(source, tmp_path / "x.gguf", _scaling(4), spec=_spec(),
                       target_length=TARGET, drop_n_hat=True)  # fmt: skip
    assert done.dropped_n_hat == 4


@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("exists", "exists; choose a new file"),
        ("suffix", "must end in .gguf"),
        ("arch", "architecture 'qwen2' is not supported"),
        ("dims", "the GGUF rotates 16 dimensions"),
        ("form", "`form` must be one of"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, case, match) -> None:
    source = _tiny_gguf(tmp_path / "src.gguf", arch="qwen2" if case == "arch" else "llama")
    out = tmp_path / ("x.bin" if case == "suffix" else "x.gguf")
    if case == "exists":
        out.write_text("keep me")
    scaling, spec = _scaling(), _spec()
    if case == "dims":
        spec = RopeSpec(head_dim=32, base=10000.0, original_length=TRAINED)
        scaling = RopeScaling(np.ones(16), 0, 1.0, method="none")
    with pytest.raises(InvalidArgumentError, match=match) as err:
        export_gguf(source, out, scaling, spec=spec, target_length=TARGET,
                    form="q4" if case == "form" else "longrope")  # fmt: skip
    assert "\n" not in str(err.value)
    assert out.read_text() == "keep me" if case == "exists" else not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["src.gguf"] + (
        ["x.gguf"] if case == "exists" else []))  # fmt: skip


def test_gguf_source_refuses_a_transformers_directory(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(InvalidArgumentError, match="is not a GGUF"):
        gguf_source(tmp_path)
    gguf_dir = tmp_path / "g"
    gguf_dir.mkdir()
    model = _tiny_gguf(gguf_dir / "m.gguf")
    assert gguf_source(gguf_dir) == model
    assert gguf_source(model) == model


def test_an_architecture_llama_cpp_cannot_rescale_is_refused_saying_why() -> None:
    # llama.cpp's gemma3 graph passes no factor tensor to its rotary op (read in its source):
    # the refusal says so and where to go instead; an unknown architecture names the supported
    from longrope_opt.models import check_gguf_arch

    check_gguf_arch("llama")  # the supported one: nothing said
    with pytest.raises(InvalidArgumentError) as gemma:
        check_gguf_arch("gemma3")
    assert "gemma3 graph" in str(gemma.value) and "model directory" in str(gemma.value)
    assert len(str(gemma.value).splitlines()) == 1
    with pytest.raises(InvalidArgumentError, match=r"\['llama'\]"):
        check_gguf_arch("falcon")
