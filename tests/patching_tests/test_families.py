"""The family matrix: every RoPE family of the installed transformers, supported exactly or refused.

Per supported family, on a tiny random model built from its own config (`tests/families.py`),
at a length past its trained one:
- the identity scaling is the model as loaded, bit for bit;
- the RoPE reaches the attention (PI changes the logits: no vacuous pass);
- PI and YaRN patches equal transformers' own ``linear`` / ``yarn`` rope types (where the family's
  config takes them) within fp32 rounding (the patch divides once by ν·λ, transformers in two
  steps: ≤ 1e-5 on these logits);
- searched factors exported (`export_model`) and reloaded give the patched logits (vanilla
  transformers, or our loader where the family has no rope types);
- the spec read from the config has the module's frequencies;
- a family with sliding-window layers gives the same logits with the banded attention
  (`longrope_opt.patching.BANDED`) as with its own attention and transformers' (n, n) mask.
Per refused family: `check_supported` raises `UnsupportedModelError` from the config alone.
`docs/families.md` is the table these tests read (`python -m tests.families` writes it).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from longrope_opt.errors import UncheckedModelError
from longrope_opt.errors import UnsupportedModelError
from longrope_opt.models import export_model
from longrope_opt.models import exported_spec
from longrope_opt.models import read_export
from longrope_opt.patching import BANDED
from longrope_opt.patching import CHECKED
from longrope_opt.patching import CHECKED_WITH
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.patching import attention_of
from longrope_opt.patching import check_supported
from longrope_opt.patching import install_rope_scaling
from longrope_opt.patching import set_attention
from longrope_opt.patching import sliding_window_of
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import extended_layer_types
from longrope_opt.rope import is_local
from longrope_opt.rope import pi
from longrope_opt.rope import yarn
from tests.families import SEQ
from tests.families import VOCAB
from tests.families import build
from tests.families import config_of
from tests.families import families
from tests.families import family_table
from tests.families import is_refused
from tests.families import logits
from tests.families import tiny_config


FAMILIES = {f.name: f for f in families()}
SUPPORTED = sorted(n for n, f in FAMILIES.items() if not is_refused(f))
REFUSED_FAMILIES = sorted(n for n, f in FAMILIES.items() if is_refused(f))


def _ids(seed: int = 0) -> torch.Tensor:
    return torch.randint(3, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(seed))


def _text(config):
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def _with_rope_type(config, **params):
    """A copy of `config` whose extended layers run transformers' rope type `params`."""
    new = copy.deepcopy(config)
    text = _text(new)
    extended = extended_layer_types(text)
    if extended:
        per_layer = dict(text.rope_parameters)
        for layer_type in extended:
            per_layer[layer_type] = {**per_layer[layer_type], **params}
        text.rope_parameters = per_layer
    else:
        text.rope_parameters = {**text.rope_parameters, **params}
    if "original_max_position_embeddings" in params and hasattr(text, "original_max_position_embeddings"):
        text.original_max_position_embeddings = params["original_max_position_embeddings"]  # Phi-3
    return new


#: Rope-parameter keys of the scaled rope types (a default-RoPE variant drops them).
SCALING_KEYS = {"factor", "low_freq_factor",
                "high_freq_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                "attention_factor", "short_factor", "long_factor", "truncate", "type",
                "short_mscale", "long_mscale"}  # fmt: skip


def _as_default(config):
    """A copy of `config` whose extended layers run the plain RoPE (the reference that
    transformers' ``linear`` / ``yarn`` types and our PI / YaRN both rescale)."""
    new = copy.deepcopy(config)
    text = _text(new)

    def plain(params):
        return {k: v for k, v in params.items() if k not in SCALING_KEYS} | {"rope_type": "default"}

    extended = extended_layer_types(text)
    if extended:
        per_layer = dict(text.rope_parameters)
        for layer_type in extended:
            per_layer[layer_type] = plain(per_layer[layer_type])
        text.rope_parameters = per_layer
    else:
        text.rope_parameters = plain(text.rope_parameters)
    return new


def _same_weights(family, config, model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = family.causal_lm(config).eval()
    reference.load_state_dict(model.state_dict())
    return reference


def test_every_family_is_supported_or_refused() -> None:
    assert len(FAMILIES) >= 100
    assert len(SUPPORTED) >= 100, f"{len(SUPPORTED)} supported: {REFUSED_FAMILIES}"


@pytest.mark.parametrize("name", SUPPORTED)
def test_supported_family_is_exact(name: str) -> None:
    family = FAMILIES[name]
    config = tiny_config(family)
    model = build(family, config)
    spec = RopeSpec.from_config(_text(config))
    ids = _ids()
    ref = logits(model, ids)
    with apply_rope_scaling(model, RopeScaling(np.ones(spec.n_factors))):
        assert torch.equal(logits(model, ids), ref)  # the model as loaded, bit for bit
    target = 2 * spec.original_length
    with apply_rope_scaling(model, pi(spec, target)):
        ours_pi = logits(model, ids)
    assert not torch.allclose(ours_pi, ref, atol=1e-6), "the RoPE does not reach the attention"
    if getattr(_text(config), "rope_parameters", None) is not None:
        # transformers' linear / yarn rescale the plain RoPE: compare on a default-RoPE twin
        config = _as_default(config)
        model = _same_weights(family, config, model)
        spec = RopeSpec.from_config(_text(config))
        target = 2 * spec.original_length
        try:
            with apply_rope_scaling(model, pi(spec, target)):
                ours_pi = logits(model, ids)
        except UnsupportedModelError:  # the family has no valid plain-RoPE twin (Mistral 4)
            return
        s = target / spec.original_length
        linear = _same_weights(family, _with_rope_type(config, rope_type="linear", factor=s), model)
        torch.testing.assert_close(logits(linear, ids), ours_pi, atol=1e-5, rtol=0)
        params = _text(config).rope_parameters
        if "llama_4_scaling_beta" in str(params):
            return  # its yarn's original_max_position_embeddings also sets an attention temperature
        with apply_rope_scaling(model, yarn(spec, target)):
            ours_yarn = logits(model, ids)
        theirs = _with_rope_type(config, rope_type="yarn", factor=s,
                                 original_max_position_embeddings=spec.original_length)  # fmt: skip
        torch.testing.assert_close(logits(_same_weights(family, theirs, model), ids), ours_yarn,
                                   atol=1e-5, rtol=0)  # fmt: skip


@pytest.mark.parametrize("name", SUPPORTED)
def test_supported_family_exports_what_it_patched(name: str, tmp_path: Path) -> None:
    family = FAMILIES[name]
    model = build(family)
    spec = RopeSpec.from_config(_text(model.config))
    rng = np.random.default_rng(3)
    scaling = RopeScaling(np.sort(rng.uniform(1.0, 4.0, spec.n_factors)), 0, 1.1)
    # past the trained length, where the export switches to the long factors
    ids = torch.randint(3, VOCAB, (1, spec.original_length + 16),
                        generator=torch.Generator().manual_seed(1))  # fmt: skip
    with apply_rope_scaling(model, scaling):
        ours = logits(model, ids)
    out = export_model(model, None, tmp_path / "m", scaling, target_length=4 * spec.original_length)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = family.causal_lm.from_pretrained(out).eval()
    exported = read_export(loaded.config)
    if loaded.config.longrope_opt["requires_loader"]:  # what load_model does
        install_rope_scaling(loaded, exported, spec=exported_spec(loaded.config))
    torch.testing.assert_close(logits(loaded, ids), ours, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", SUPPORTED)
def test_spec_has_the_module_frequencies(name: str) -> None:
    family = FAMILIES[name]
    model = build(family)
    spec = check_supported(model.config)
    rotary = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]
    for module in rotary:
        types = getattr(module, "rope_type", None)
        extended = [t for t in types if t in extended_layer_types(_text(model.config))] if isinstance(types, dict) else [None]  # noqa: E501
        for layer_type in extended:
            name_ = f"{layer_type}_inv_freq" if layer_type else "inv_freq"
            inv = getattr(module, name_, None)
            if inv is None:  # GPT-J / CodeGen: a table, checked by the logits above
                continue
            np.testing.assert_allclose(spec.inv_freq(), inv.double().numpy(), rtol=2e-6)


@pytest.mark.parametrize("name", REFUSED_FAMILIES)
def test_refused_family_fails_from_its_config(name: str) -> None:
    config = config_of(FAMILIES[name])  # the config alone, as from_pretrained reads it
    with pytest.raises(UnsupportedModelError, match="model type"):
        check_supported(config)


def _model_type(name: str) -> str:
    return _text(config_of(FAMILIES[name])).model_type


def test_every_supported_family_is_listed_as_checked() -> None:
    # a family that passes the matrix and is missing from CHECKED would be refused at load
    missing = sorted({_model_type(n) for n in SUPPORTED} - CHECKED)
    assert not missing, f"add to longrope_opt/patching/_checked.py CHECKED: {missing}"


def test_checked_is_what_the_ceiling_supports() -> None:
    import transformers

    installed = ".".join(transformers.__version__.split(".")[:2])
    if installed != CHECKED_WITH[1]:  # older releases lack some families: a superset there
        return
    assert {_model_type(n) for n in SUPPORTED} == CHECKED


def test_a_family_the_matrix_never_saw_is_refused_in_one_line(monkeypatch) -> None:
    # the next transformers adds a family: pretend Llama is one (known to transformers, and
    # not in the checked set)
    import longrope_opt.patching._checked as checked

    config = tiny_config(FAMILIES["llama"])
    monkeypatch.setattr(checked, "CHECKED", checked.CHECKED - {"llama"})
    with pytest.raises(UncheckedModelError, match=r"model type 'llama' is not supported: not "
                       r"checked with transformers \d+\.\d+ .*5\.17-5\.25") as info:  # fmt: skip
        check_supported(config)
    assert "\n" not in str(info.value)
    # a model type transformers does not know (a hub repository's own code) is not judged here
    config.model_type = "my_own_llama"
    check_supported(config)


def test_docs_table_is_current() -> None:
    path = Path(__file__).resolve().parents[2] / "docs" / "families.md"
    text = path.read_text()
    assert text == family_table(), "run: python -m tests.families > docs/families.md"
    # the headline counts are the table's rows
    statuses = [line.split(" | ")[2] for line in text.splitlines() if line.startswith("| `")]
    supported, refused = statuses.count("supported"), statuses.count("refused")
    assert f"**{supported} supported**, {refused} refused" in text
    assert supported + refused == len(statuses) == len(FAMILIES)


def _all_local(name: str) -> Any:
    """The family's tiny config with every layer local (None: its config does not keep that)."""
    family = FAMILIES[name]
    types = getattr(family.config_class(), "layer_types", None) or []
    local = next((t for t in types if is_local(t)), None)
    if local is None:
        return None
    # windows below the tiny trained length (32): a local layer never sees past it
    config = tiny_config(family, layer_types=[local, local], attention_chunk_size=16)
    return config if list(getattr(_text(config), "layer_types", None) or []) == [local, local] else None


#: Families with local layer types whose tiny model can be built without a global layer
#: (Gemma 3 or OLMo 3 with 2 layers under their default pattern).
WITHOUT_GLOBAL = [n for n in SUPPORTED if _all_local(n) is not None]


def test_gemma3_and_olmo3_can_be_built_without_a_global_layer() -> None:
    assert {"gemma3", "olmo3"} <= set(WITHOUT_GLOBAL), WITHOUT_GLOBAL


@pytest.mark.parametrize("name", WITHOUT_GLOBAL)
def test_a_model_without_a_global_layer_is_refused_not_crashed(name: str) -> None:
    config = _all_local(name)
    with pytest.raises(UnsupportedModelError, match="no global attention to extend"):
        check_supported(config)  # from the config alone, before any weight
    model = build(FAMILIES[name], config)
    spec = RopeSpec.from_config(_text(build(FAMILIES[name]).config))
    with pytest.raises(UnsupportedModelError, match="no global attention to extend"):
        with apply_rope_scaling(model, pi(spec, 2 * spec.original_length)):
            pass


def _sliding_config(name: str) -> Any:
    """The family's tiny config with sliding-window layers (window 16 of up to 100 tokens), or
    None where the family has none. Qwen2 and Qwen3 slide only when asked: asked here."""
    extra: dict[str, Any] = {}
    if name in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        extra = dict(use_sliding_window=True, max_window_layers=1,
                     layer_types=["sliding_attention", "full_attention"])  # fmt: skip
    config = tiny_config(FAMILIES[name], **extra)
    return config if sliding_window_of(config) is not None else None


#: Every supported family whose tiny model has sliding-window layers.
SLIDING = [n for n in SUPPORTED if _sliding_config(n) is not None]
#: Sliding families whose masks the banded path hands back to transformers (exact, not faster),
#: and why.
NOT_BANDED = {
    "doge": "its sliding layers add a dynamic mask of their own: transformers builds it",
    "moshi": "its attention does not dispatch through transformers' attention interface",
}


def test_the_sliding_families_include_those_users_extend() -> None:
    assert {"gemma2", "gemma3", "mistral", "qwen2", "cohere2", "gpt_oss"} <= set(SLIDING)


@pytest.mark.parametrize("name", SLIDING)
def test_sliding_family_is_exact_with_banded_attention(name: str) -> None:
    # logits of the banded path equal the model's own (SDPA or eager, with transformers'
    # (n, n) sliding mask) below, at and well past the window, with and without a patch
    import longrope_opt.patching._banded as banded_module

    config = _sliding_config(name)
    model = build(FAMILIES[name], config)
    own = attention_of(model)
    spec = RopeSpec.from_config(_text(config))
    calls = []
    real = banded_module.band_attention, banded_module._math_blocks

    def counted(real_fn):
        def run(*args, **kwargs):
            calls.append(kwargs.get("window"))
            return real_fn(*args, **kwargs)

        return run

    banded_module.band_attention, banded_module._math_blocks = map(counted, real)
    try:
        for n in (8, 16, 17, 48, 100):
            ids = torch.randint(3, VOCAB, (1, n), generator=torch.Generator().manual_seed(n))
            for scaling in (None, pi(spec, 2 * spec.original_length)):
                with contextlib.ExitStack() as stack:
                    if scaling is not None:
                        stack.enter_context(apply_rope_scaling(model, scaling))
                    set_attention(model, own)
                    reference = logits(model, ids)
                    set_attention(model, BANDED)
                    ours = logits(model, ids)
                    set_attention(model, own)
                scale = reference.abs().max().item()
                assert (ours - reference).abs().max().item() <= 1e-5 * scale, (n, scaling)
    finally:
        banded_module.band_attention, banded_module._math_blocks = real
    window = sliding_window_of(config)
    assert (window in calls) == (name not in NOT_BANDED), (name, calls)


@pytest.mark.parametrize("name", SLIDING)
def test_sliding_family_in_bf16_is_within_the_masked_paths_own_noise(name: str) -> None:
    # In bf16 both paths round: the banded logits are as far from the fp32 ones as the masked
    # path's own (mean absolute error, within 10 %)
    config = _sliding_config(name)
    model = build(FAMILIES[name], config)
    own = attention_of(model)
    ids = torch.randint(3, VOCAB, (1, 100), generator=torch.Generator().manual_seed(1))
    exact = logits(model, ids)
    model = model.to(torch.bfloat16)
    errors = {}
    for attn in (own, BANDED):
        set_attention(model, attn)
        errors[attn] = (logits(model, ids) - exact).abs().mean().item()
    assert errors[BANDED] <= 1.1 * errors[own], errors
