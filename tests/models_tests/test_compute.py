"""Compute paths: the auto choice is measured once per CPU and model shape, cached, and never
beats a forced `--dtype`; every path computes the same perplexity as fp32."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from longrope_opt.models import PATHS
from longrope_opt.models import _compute
from longrope_opt.models import choose_path
from longrope_opt.models import load_model
from longrope_opt.objectives import evaluate_perplexity
from longrope_opt.patching import SDPA_FP32
from longrope_opt.patching import attention_of
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import yarn
from tests.conftest import build_tiny_model


PROBE = dict(tokens=96, layers=1, reps=1)


def test_the_choice_is_measured_once_then_cached_per_cpu(tmp_path, monkeypatch) -> None:
    model = build_tiny_model("llama")
    monkeypatch.setattr(_compute, "cpu_name", lambda: "CPU A")
    monkeypatch.setattr(_compute, "cpu_features", lambda: "")
    first = choose_path(model, cache=tmp_path, **PROBE)
    assert first.source == "measured" and first.cpu == "CPU A"
    assert set(first.seconds) == set(_compute.CPU_CANDIDATES)
    assert first.path == min(first.seconds, key=first.seconds.get)
    again = choose_path(model, cache=tmp_path, **PROBE)
    assert again.source == "cached" and again.path == first.path
    # another CPU is measured again and kept beside the first
    monkeypatch.setattr(_compute, "cpu_name", lambda: "CPU B")
    assert choose_path(model, cache=tmp_path, **PROBE).source == "measured"
    keys = json.loads((tmp_path / _compute.CACHE_FILE).read_text())["choices"]
    assert [k.split(" | ")[0] for k in keys] == ["CPU A", "CPU B"]
    # another model shape on the same CPU is measured again too
    other = build_tiny_model("llama", hidden_size=32, intermediate_size=64)
    assert choose_path(other, cache=tmp_path, **PROBE).source == "measured"


CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: {family}
model\t\t: {model}
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx2 {extra} fma
processor\t: 1
cpu family\t: 99
flags\t\t: amx_bf16
"""


def test_cpu_features_name_family_model_and_the_matmul_flags() -> None:
    text = CPUINFO.format(family=25, model=17, extra="avx512f avx512_bf16 avx512vl")
    assert _compute.cpu_features(text) == "family 25 model 17 avx512_bf16 avx512f avx2"
    assert _compute.cpu_features("") == ""


def test_one_cpu_name_with_other_instruction_sets_is_measured_again(tmp_path, monkeypatch) -> None:
    # cloud VMs call a Zen 3 and a Zen 4 both "AMD EPYC"; only the latter has fast bf16
    model = build_tiny_model("llama")
    monkeypatch.setattr(_compute, "cpu_name", lambda: "AMD EPYC")
    parse = _compute.cpu_features
    for family_model, extra in (((25, 1), ""), ((25, 17), "avx512f avx512_bf16")):
        text = CPUINFO.format(family=family_model[0], model=family_model[1], extra=extra)
        monkeypatch.setattr(_compute, "cpu_features", lambda text=text: parse(text))
        assert choose_path(model, cache=tmp_path, **PROBE).source == "measured"
        assert choose_path(model, cache=tmp_path, **PROBE).source == "cached"
    keys = json.loads((tmp_path / _compute.CACHE_FILE).read_text())["choices"]
    assert len(keys) == 2 and all(k.startswith("AMD EPYC (family 25 model ") for k in keys)


def test_a_corrupt_cache_is_ignored_with_a_warning(tmp_path, caplog) -> None:
    model = build_tiny_model("llama")
    for text in ("{not json", json.dumps({"version": 1, "choices": {"x": 3}}), '["a list"]'):
        (tmp_path / _compute.CACHE_FILE).write_text(text)
        with caplog.at_level(logging.WARNING, logger="longrope_opt.models._compute"):
            caplog.clear()
            choice = choose_path(model, cache=tmp_path, **PROBE)
        assert choice.source == "measured"
        assert "ignoring the compute-path cache" in caplog.text
    # the file was replaced by a valid one
    assert choose_path(model, cache=tmp_path, **PROBE).source == "cached"


def test_a_cached_path_that_is_not_a_candidate_is_measured_again(tmp_path, monkeypatch) -> None:
    model = build_tiny_model("llama")
    monkeypatch.setattr(_compute, "cpu_name", lambda: "CPU A")
    choose_path(model, cache=tmp_path, candidates=("float32",), **PROBE)
    choice = choose_path(model, cache=tmp_path, candidates=("bfloat16",), **PROBE)
    assert choice.source == "measured" and choice.path == "bfloat16"


def test_auto_measures_and_a_forced_dtype_wins(tiny_model_dir, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LONGROPE_OPT_CACHE", str(tmp_path))
    calls = []
    real = _compute.probe_seconds
    monkeypatch.setattr(
        _compute, "probe_seconds", lambda *a, **k: calls.append(a[1].name) or real(*a, **k)
    )
    model, _ = load_model(tiny_model_dir, dtype="auto")
    assert model.longrope_opt_compute["source"] == "measured"
    assert model.longrope_opt_forwards == tmp_path / "forwards"  # where long forwards resume
    assert sorted(calls) == sorted(_compute.CPU_CANDIDATES)
    chosen = PATHS[model.longrope_opt_compute["path"]]
    assert model.dtype == getattr(torch, chosen.dtype) and attention_of(model) == chosen.attn
    calls.clear()
    model, _ = load_model(tiny_model_dir, dtype="auto")
    assert model.longrope_opt_compute["source"] == "cached" and calls == []
    for name in ("float32", "bf16-fp32attn", "bfloat16"):
        model, _ = load_model(tiny_model_dir, dtype=name)
        assert model.longrope_opt_compute == {**model.longrope_opt_compute, "path": name,
                                              "source": "forced"}  # fmt: skip
        assert model.dtype == getattr(torch, PATHS[name].dtype)
        assert attention_of(model) == PATHS[name].attn
    assert calls == []  # forcing never measures


@pytest.mark.parametrize("name", ["bfloat16", "bf16-fp32attn", "float32"])
def test_every_path_gives_the_fp32_perplexity(name, monkeypatch) -> None:
    model = build_tiny_model("llama", seed=1)
    model.config._attn_implementation = "sdpa"
    spec = RopeSpec.from_config(model.config)
    gen = torch.Generator().manual_seed(0)
    samples = [torch.randint(3, 128, (256,), generator=gen) for _ in range(2)]
    scaling = yarn(spec, 256)
    reference = evaluate_perplexity(model, samples, scaling).ppl
    path = PATHS[name]
    model.to(getattr(torch, path.dtype))
    from transformers import AttentionInterface

    from longrope_opt.patching import set_attention

    set_attention(model, path.attn)
    calls = []
    if path.attn == SDPA_FP32:  # the fp32 attention really runs, on fp32 inputs
        real = AttentionInterface._global_mapping[SDPA_FP32]

        def counting(module, q, *args, **kwargs):
            calls.append(q.dtype)
            return real(module, q, *args, **kwargs)

        monkeypatch.setitem(AttentionInterface._global_mapping, SDPA_FP32, counting)
    ppl = evaluate_perplexity(model, samples, scaling).ppl
    assert ppl == pytest.approx(reference, rel=5e-3)
    if path.attn == SDPA_FP32:
        assert calls and set(calls) == {torch.bfloat16}  # called per layer with bf16 q


def test_device_name_is_the_cpus_off_cuda_and_asks_cuda_only_on_cuda(monkeypatch) -> None:
    import torch

    from longrope_opt.models import cpu_name
    from longrope_opt.models import device_name

    assert device_name(torch.device("cpu")) == cpu_name()
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: f"GPU {device}")
    assert device_name(torch.device("cuda:0")) == "GPU cuda:0"
