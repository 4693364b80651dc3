"""A forward stopped between layers resumes from its last saved layer, and only its own."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from longrope_opt import RopeSpec
from longrope_opt.models import decoder_hidden
from longrope_opt.objectives import window_nll
from longrope_opt.objectives._windows import truncate_window
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.patching import resumable_forward
from longrope_opt.patching._resume import KEEP
from longrope_opt.rope import pi
from longrope_opt.rope import yarn
from tests.conftest import build_tiny_model


LAYERS = 5
FAMILIES = {
    "llama": {},
    # sliding layers beside global ones, the rotary module called once per layer type
    "gemma3": {"layer_types": ["sliding_attention", "sliding_attention", "full_attention"] * 2},
}


class _Stop(Exception):
    pass


def _model(family: str) -> Any:
    extra = dict(FAMILIES[family])
    if "layer_types" in extra:
        extra["layer_types"] = extra["layer_types"][:LAYERS]
    return build_tiny_model(family, num_hidden_layers=LAYERS, **extra)


def _ids(seed: int = 0, n: int = 96) -> torch.Tensor:
    return torch.randint(3, 128, (n,), generator=torch.Generator().manual_seed(seed))


def _count_layer_work(model: Any) -> list[int]:
    # a layer's MLP runs only when the layer computes (a layer passed through does not call it)
    ran: list[int] = []
    for i, layer in enumerate(model.get_decoder().layers):
        layer.mlp.register_forward_hook(lambda *_, i=i: ran.append(i))
    return ran


def _stop_after(model: Any, layer: int) -> Any:
    def stop(*_: Any) -> None:
        raise _Stop

    return model.get_decoder().layers[layer].register_forward_hook(stop)


def _stopped_forward(model: Any, ids: torch.Tensor, where: Path, layer: int) -> None:
    # the stop's hook after the block's own: the layer saves its output, then the process stops
    # (the block ends by the exception: what it saved stays for the rerun)
    with pytest.raises(_Stop), torch.inference_mode(), resumable_forward(model, where, every=0):
        handle = _stop_after(model, layer)
        try:
            decoder_hidden(model, ids)
        finally:
            handle.remove()


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("stop", [0, 2, LAYERS - 1])
def test_a_stopped_forward_resumes_after_its_last_layer_bit_for_bit(
    tmp_path, family, stop
) -> None:
    model, ids = _model(family), _ids()
    with torch.inference_mode():
        whole = decoder_hidden(model, ids)
    _stopped_forward(model, ids, tmp_path, stop)
    assert len(list(tmp_path.glob("*.pt"))) == 1  # kept for the rerun
    ran = _count_layer_work(model)
    with torch.inference_mode(), resumable_forward(model, tmp_path, every=0):
        resumed = decoder_hidden(model, ids)
    assert torch.equal(resumed, whole)
    # the first layer runs (its call makes the key); those up to the stop are passed through
    assert ran == [0, *range(stop + 1, LAYERS)]
    assert list(tmp_path.glob("*.pt")) == []  # finished: nothing left to resume
    assert all("forward" not in vars(layer) for layer in model.get_decoder().layers)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_another_scaling_input_or_weight_does_not_resume_from_a_saved_forward(
    tmp_path, family
) -> None:
    model, ids = _model(family), _ids()
    spec = RopeSpec.from_config(model.config)
    with apply_rope_scaling(model, yarn(spec, 256)):
        _stopped_forward(model, ids, tmp_path, 3)
    ran = _count_layer_work(model)
    cases = [
        (pi(spec, 256), ids),  # other factors
        # the same factors, the start tokens kept unscaled
        (dataclasses.replace(yarn(spec, 256), n_hat=4), ids),
        (yarn(spec, 256), _ids(seed=1)),  # other text
    ]
    for scaling, text in cases:
        ran.clear()
        with torch.inference_mode(), apply_rope_scaling(model, scaling):
            fresh = decoder_hidden(model, text)
            with resumable_forward(model, tmp_path, every=0):
                again = decoder_hidden(model, text)
        assert torch.equal(again, fresh)
        assert ran == list(range(LAYERS)) * 2
    with torch.no_grad():
        model.get_decoder().layers[1].mlp.down_proj.weight.mul_(1.001)
    ran.clear()
    with torch.inference_mode(), apply_rope_scaling(model, yarn(spec, 256)):
        with resumable_forward(model, tmp_path, every=0):
            decoder_hidden(model, ids)
    assert ran == list(range(LAYERS))  # the weights changed: computed again
    assert len(list(tmp_path.glob("*.pt"))) == 1  # the yarn forward's, still there to resume


def test_the_saved_forwards_are_pruned_to_the_newest(tmp_path) -> None:
    model = _model("llama")
    for seed in range(KEEP + 2):
        _stopped_forward(model, _ids(seed), tmp_path, 1)
    assert len(list(tmp_path.glob("*.pt"))) == KEEP


def test_nothing_is_saved_when_the_forward_is_quicker_than_every(tmp_path) -> None:
    model = _model("llama")
    handle = _stop_after(model, LAYERS - 1)
    try:
        with pytest.raises(_Stop), torch.inference_mode():
            with resumable_forward(model, tmp_path, every=3600):
                decoder_hidden(model, _ids())
    finally:
        handle.remove()
    assert not tmp_path.exists() or list(tmp_path.glob("*.pt")) == []


def test_a_window_of_a_loaded_model_resumes_and_scores_the_same(tmp_path) -> None:
    # `load_model` names the directory on the model; the window's loss reads it
    model, ids = _model("gemma3"), _ids(n=80)
    window = truncate_window(len(ids), len(ids))[0]
    with torch.inference_mode():
        whole = window_nll(model, ids, window)
    model.longrope_opt_forwards = tmp_path
    _stopped_forward(model, ids, tmp_path, 2)
    ran = _count_layer_work(model)
    with torch.inference_mode():
        assert window_nll(model, ids, window) == whole
    assert ran == [0, 3, 4]
    assert list(tmp_path.glob("*.pt")) == []


_PROCESS = """
import sys, torch
from pathlib import Path
from longrope_opt.models import decoder_hidden
from longrope_opt.patching import resumable_forward
from tests.conftest import build_tiny_model

layer_types = ["sliding_attention", "sliding_attention", "full_attention"] * 2
model = build_tiny_model("gemma3", num_hidden_layers=5, layer_types=layer_types[:5])
ids = torch.randint(3, 128, (96,), generator=torch.Generator().manual_seed(0))
ran = []
for i, layer in enumerate(model.get_decoder().layers):
    layer.mlp.register_forward_hook(lambda *_, i=i: ran.append(i))
def stop(*_):
    raise KeyboardInterrupt
try:
    with torch.inference_mode(), resumable_forward(model, Path(sys.argv[1]), every=0):
        if sys.argv[2] == "stop":  # after the block's own hook: layer 2 saves, then the stop
            model.get_decoder().layers[2].register_forward_hook(stop)
        decoder_hidden(model, ids)
except KeyboardInterrupt:
    pass
print(list({"sliding_attention", "full_attention"}), ran)
"""


def test_another_process_resumes_whatever_order_it_calls_the_rotary_module_in(tmp_path) -> None:
    # Gemma 3's decoder makes its two cos/sin tables in the order of a set of strings, which
    # depends on the process's hash seed: the key must not (seeds 0 and 1 iterate differently)
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]

    def run(seed: int, mode: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(root)}
        done = subprocess.run([sys.executable, "-c", _PROCESS, str(tmp_path), mode], env=env,
                              cwd=root, capture_output=True, text=True, check=True)  # fmt: skip
        return done.stdout.strip().splitlines()[-1]

    stopped, resumed = run(0, "stop"), run(1, "resume")
    assert stopped.split("]")[0] != resumed.split("]")[0]  # the two processes' set orders differ
    assert resumed.endswith("[0, 3, 4]")  # resumed after layer 2: the first layer, then 3 and 4


def test_a_compiled_forward_resumes_and_keeps_its_compiled_layers(tmp_path) -> None:
    # `extend` fuses the element-wise work (`fuse_elementwise`): its forwards resume too, the
    # layers passed through get their compiled forwards back, and a compiled forward's saved
    # output is not an eager one's (they round differently)
    from longrope_opt.patching import fuse_elementwise
    from longrope_opt.patching import unfuse_elementwise

    model, ids = fuse_elementwise(_model("gemma3")), _ids()
    ran: list[int] = []  # a compiled layer calls no module hooks inside: count its forward

    def counted(i: int, forward: Any) -> Any:
        return lambda *args, **kwargs: (ran.append(i), forward(*args, **kwargs))[1]

    for i, layer in enumerate(model.get_decoder().layers):
        layer.forward = counted(i, layer.__dict__["forward"])
    compiled = [layer.__dict__["forward"] for layer in model.get_decoder().layers]
    with torch.inference_mode():
        whole = decoder_hidden(model, ids)
    _stopped_forward(model, ids, tmp_path, 2)
    ran.clear()
    with torch.inference_mode(), resumable_forward(model, tmp_path, every=0):
        resumed = decoder_hidden(model, ids)
    assert torch.equal(resumed, whole)
    assert ran == [0, 3, 4]
    assert all(layer.__dict__["forward"] is f for layer, f in zip(model.get_decoder().layers, compiled))
    _stopped_forward(model, ids, tmp_path, 2)
    unfuse_elementwise(model)
    ran = _count_layer_work(model)
    with torch.inference_mode(), resumable_forward(model, tmp_path, every=0):
        decoder_hidden(model, ids)
    assert ran == list(range(LAYERS))  # eager: run whole
    assert len(list(tmp_path.glob("*.pt"))) == 1  # the compiled forward's, still there
