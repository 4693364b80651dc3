"""`finetune` on a tiny model: finite losses, weights move, RoPE restored, errors are precise."""

from __future__ import annotations

import math

import pytest
import torch

from longrope_opt import RopeSpec
from longrope_opt.patching import find_rotary_modules
from longrope_opt.rope import yarn
from longrope_opt.training import ChunkedLoss
from longrope_opt.training import finetune
from tests.conftest import TINY_LENGTH
from tests.conftest import build_tiny_model


def _samples(n: int, length: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, 128, (length,), generator=g) for _ in range(n)]


@pytest.mark.parametrize("checkpointing", [True, False])
def test_two_steps_finite_loss_and_weights_change(checkpointing) -> None:
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = finetune(
        model, _samples(2, 4 * TINY_LENGTH), yarn(spec, 4 * TINY_LENGTH), steps=2,
        learning_rate=1e-3, gradient_checkpointing=checkpointing, chunk_size=64, progress=False,
    )  # fmt: skip
    assert len(result.losses) == 2 and all(math.isfinite(x) for x in result.losses)
    assert result.tokens == 2 * (4 * TINY_LENGTH - 1)
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert any("layers.0.self_attn.q_proj" in k for k in changed)
    assert "forward" not in find_rotary_modules(model)[0].__dict__  # the RoPE patch is gone
    assert not model.training


def test_chunked_loss_equals_transformers_loss() -> None:
    model = build_tiny_model("llama")
    ids = _samples(1, 100)[0]
    positions = torch.arange(ids.numel())
    ours = ChunkedLoss(model, chunk_size=7)(ids[None], positions[None])["loss"]
    theirs = model(ids[None], labels=ids[None]).loss
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_loss_decreases_on_a_repeated_sequence() -> None:
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    result = finetune(
        model, _samples(1, 2 * TINY_LENGTH), yarn(spec, 2 * TINY_LENGTH), steps=6,
        learning_rate=3e-3, autocast_dtype=None, progress=False,
    )  # fmt: skip
    assert result.losses[-1] < result.losses[0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": 0}, "`steps` must be an integer >= 1, got 0"),
        ({"steps": 1, "grad_accum": 0}, "`grad_accum` must be an integer >= 1, got 0"),
        (
            {"steps": 1, "learning_rate": float("nan")},
            "`learning_rate` must be a finite number >= 0.0",
        ),
    ],
)
def test_bad_arguments(kwargs, message) -> None:
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        finetune(model, _samples(1, 80), yarn(spec, 128), progress=False, **kwargs)


def test_pose_fine_tune_trains_on_fewer_tokens() -> None:
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    result = finetune(
        model, _samples(2, 4 * TINY_LENGTH), yarn(spec, 4 * TINY_LENGTH), steps=2,
        pose_tokens=TINY_LENGTH, progress=False,
    )  # fmt: skip
    assert result.tokens == 2 * (TINY_LENGTH - 1)
    assert all(math.isfinite(x) for x in result.losses)
    with pytest.raises(
        ValueError, match="`pose_tokens` must be <= the sample length 256, got 512"
    ):
        finetune(
            model, _samples(1, 256), yarn(spec, 256), steps=1, pose_tokens=512, progress=False
        )
