"""A stopped shared-prefix capture resumes with the keys and values its layers had captured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from longrope_opt.models import decoder_hidden
from longrope_opt.patching import resumable_forward
from longrope_opt.patching import set_attention
from longrope_opt.patching import shared_prefix
from longrope_opt.patching._resume import KEEP
from tests.conftest import build_tiny_model


LAYERS = 5
ATTENTION = {"llama": ["sdpa"], "gemma3": ["sdpa", "longrope_banded"]}
CASES = [(family, attn) for family, names in ATTENTION.items() for attn in names]


class _Stop(Exception):
    pass


def _model(family: str, attn: str) -> Any:
    extra: dict[str, Any] = {}
    if family == "gemma3":  # sliding layers beside global ones (window 16 in the tiny config)
        extra["layer_types"] = (["sliding_attention"] * 2 + ["full_attention"]) * 2
        extra["layer_types"] = extra["layer_types"][:LAYERS]
    model = build_tiny_model(family, num_hidden_layers=LAYERS, vocab_size=64, **extra)
    set_attention(model, attn)
    return model


def _ids(seed: int = 0, n: int = 90) -> torch.Tensor:
    return torch.randint(3, 64, (n,), generator=torch.Generator().manual_seed(seed))


def _branch(shared: Any) -> torch.Tensor:
    # a key line at depth 30, lead-in and question at the end: every captured layer is read
    tail = torch.randint(3, 64, (12,), generator=torch.Generator().manual_seed(9))
    return shared.branch(30, tail, wide_from=6, position=84, wide=(30, 84))


def _layer_work(model: Any) -> list[int]:
    ran: list[int] = []
    for i, layer in enumerate(model.get_decoder().layers):
        layer.mlp.register_forward_hook(lambda *_, i=i: ran.append(i))
    return ran


def _stopped_capture(model: Any, ids: torch.Tensor, where: Path, layer: int) -> None:
    def stop(*_: Any) -> None:
        raise _Stop

    with pytest.raises(_Stop), torch.inference_mode(), shared_prefix(model) as shared:
        with resumable_forward(model, where, every=0, layer_state=shared):
            handle = model.get_decoder().layers[layer].register_forward_hook(stop)
            try:
                shared.capture(ids)
            finally:
                handle.remove()


def _resumed(model: Any, ids: torch.Tensor, where: Path) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.inference_mode(), shared_prefix(model) as shared:
        with resumable_forward(model, where, every=0, layer_state=shared):
            hidden = shared.capture(ids)
        return hidden, _branch(shared)


@pytest.mark.parametrize(("family", "attn"), CASES)
@pytest.mark.parametrize("stop", [1, 3, LAYERS - 1])
def test_a_stopped_capture_resumes_and_its_branches_are_bit_for_bit(
    tmp_path, family, attn, stop
) -> None:
    model, ids = _model(family, attn), _ids()
    with torch.inference_mode(), shared_prefix(model) as shared:
        whole, branch = shared.capture(ids), _branch(shared)
    _stopped_capture(model, ids, tmp_path, stop)
    assert len(list(tmp_path.glob("*.kv"))) == stop + 1  # each finished layer's keys and values
    ran = _layer_work(model)
    hidden, again = _resumed(model, ids, tmp_path)
    assert torch.equal(hidden, whole)
    assert torch.equal(again, branch)  # the branch read the restored keys and values
    assert ran[: LAYERS - stop] == [0, *range(stop + 1, LAYERS)]  # then the branch's own
    assert list(tmp_path.iterdir()) == []  # finished: nothing left to resume


def test_a_capture_and_a_plain_forward_never_share_a_saved_output(tmp_path) -> None:
    # the same tokens: a plain forward's saved output leaves no keys and values to resume with
    model, ids = _model("gemma3", "sdpa"), _ids()
    with pytest.raises(_Stop), torch.inference_mode(), resumable_forward(model, tmp_path, every=0):
        handle = model.get_decoder().layers[2].register_forward_hook(
            lambda *_: (_ for _ in ()).throw(_Stop()))
        try:
            decoder_hidden(model, ids)
        finally:
            handle.remove()
    ran = _layer_work(model)
    _resumed(model, ids, tmp_path)
    assert ran[:LAYERS] == list(range(LAYERS))  # the capture ran whole
    assert len(list(tmp_path.glob("*.pt"))) == 1  # the plain forward's, still there


def test_a_capture_missing_a_layers_tensors_runs_whole_and_right(tmp_path) -> None:
    model, ids = _model("gemma3", "longrope_banded"), _ids()
    with torch.inference_mode(), shared_prefix(model) as shared:
        shared.capture(ids)
        branch = _branch(shared)
    _stopped_capture(model, ids, tmp_path, 3)
    next(tmp_path.glob("*.2.kv")).unlink()
    ran = _layer_work(model)
    _, again = _resumed(model, ids, tmp_path)
    assert ran[:LAYERS] == list(range(LAYERS))
    assert torch.equal(again, branch)


def test_pruning_a_saved_capture_takes_its_layers_tensors_with_it(tmp_path) -> None:
    model = _model("llama", "sdpa")
    for seed in range(KEEP + 2):
        _stopped_capture(model, _ids(seed), tmp_path, 1)
    kept = {p.stem for p in tmp_path.glob("*.pt")}
    assert len(kept) == KEEP
    assert {p.name.split(".")[0] for p in tmp_path.glob("*.kv")} == kept
    assert len(list(tmp_path.glob("*.kv"))) == 2 * KEEP


def test_the_branched_passkeys_of_a_loaded_model_resume_their_haystack(tmp_path) -> None:
    # `load_model` names the directory on the model; the branched form's capture reads it
    from longrope_opt.objectives import passkey_prompts
    from longrope_opt.objectives import passkey_results
    from tests.objectives_tests.test_passkey import _word_tokenizer

    model = _model("gemma3", "longrope_banded")
    prompts = passkey_prompts(_word_tokenizer(), 200, n_trials=4, seed=3)
    with torch.inference_mode():
        reference = list(passkey_results(model, prompts, form="branched"))
    model.longrope_opt_forwards = tmp_path
    _stopped_capture(model, prompts[0].haystack(), tmp_path, 2)
    ran = _layer_work(model)
    with torch.inference_mode():
        assert list(passkey_results(model, prompts, form="branched")) == reference
    assert ran[: LAYERS - 2] == [0, 3, 4]
    assert list(tmp_path.iterdir()) == []


def test_a_stop_among_the_branches_finds_the_whole_capture_saved(tmp_path, monkeypatch) -> None:
    # the capture's saved layers stay until every branch is measured: a rerun passes through
    # them all, and measures only the keys the stopped run had not yielded
    from longrope_opt.objectives import passkey_prompts
    from longrope_opt.objectives import passkey_results
    from longrope_opt.patching import _resume
    from tests.objectives_tests.test_passkey import _word_tokenizer

    monkeypatch.setattr(_resume, "EVERY", 0.0)
    model = _model("gemma3", "longrope_banded")
    prompts = passkey_prompts(_word_tokenizer(), 200, n_trials=4, seed=3)
    with torch.inference_mode():
        reference = list(passkey_results(model, prompts, form="branched"))
    model.longrope_opt_forwards = tmp_path
    calls = []

    def stop_in_the_third_branch(*_: Any) -> None:
        calls.append(1)
        if len(calls) == 4:  # the capture, two branches, then the stop
            raise _Stop

    handle = model.get_decoder().layers[-1].register_forward_hook(stop_in_the_third_branch)
    first = []
    with pytest.raises(_Stop), torch.inference_mode():
        for result in passkey_results(model, prompts, form="branched"):
            first.append(result)
    handle.remove()
    assert first == reference[:2]
    assert len(list(tmp_path.glob("*.kv"))) == LAYERS  # the whole capture, kept
    ran = _layer_work(model)
    with torch.inference_mode():
        rest = list(passkey_results(model, prompts[2:], form="branched"))
    assert rest == [(i - 2, c, nll) for i, c, nll in reference[2:]]
    assert ran == [0, *range(LAYERS), *range(LAYERS)]  # the capture's first layer, two branches
    assert list(tmp_path.iterdir()) == []


def test_a_caller_that_stops_reading_early_leaves_nothing_saved(tmp_path, monkeypatch) -> None:
    # the guard closes the generator once a candidate can no longer pass: done, not stopped
    from longrope_opt.objectives import passkey_prompts
    from longrope_opt.objectives import passkey_results
    from longrope_opt.patching import _resume
    from tests.objectives_tests.test_passkey import _word_tokenizer

    monkeypatch.setattr(_resume, "EVERY", 0.0)
    model = _model("llama", "sdpa")
    model.longrope_opt_forwards = tmp_path
    prompts = passkey_prompts(_word_tokenizer(), 200, n_trials=3, seed=3)
    with torch.inference_mode():
        results = passkey_results(model, prompts, form="branched")
        next(results)
        assert len(list(tmp_path.glob("*.kv"))) == LAYERS
        results.close()
    assert list(tmp_path.iterdir()) == []
