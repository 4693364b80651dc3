"""The fine-tuning stage on transformers' Trainer: resumable to the same weights, PoSE positions
that cover every distance, and mixed windows under the factor set inference would pick."""

from __future__ import annotations

import numpy as np
import pytest
import safetensors.torch
import torch

from longrope_opt import RopeSpec
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import ShortLongScaling
from longrope_opt.rope import yarn
from longrope_opt.training import ChunkedLoss
from longrope_opt.training import PoseSamples
from longrope_opt.training import finetune
from longrope_opt.training import pose_positions
from tests.conftest import TINY_LENGTH
from tests.conftest import build_tiny_model
from tests.conftest import build_tiny_model as _build


TARGET = 4 * TINY_LENGTH


def _documents(n: int, length: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 128, (length,), generator=g) for _ in range(n)]


def test_pose_positions_follow_the_reference_form() -> None:
    for k in range(200):
        pos = pose_positions(40, TARGET, np.random.default_rng(k))
        assert len(pos) == 40 and pos[0] == 0 and pos[-1] <= TARGET - 1
        steps = np.diff(pos)
        assert (steps >= 1).all() and (steps > 1).sum() <= 1  # two chunks, one skip
        first = int(np.argmax(steps > 1)) + 1 if (steps > 1).any() else None
        assert first is None or 1 <= first <= (40 + 1) // 2


def test_over_a_run_pose_covers_every_distance_up_to_the_target() -> None:
    data = PoseSamples(_documents(3, 40), tokens=40, target=TARGET, items=3000, seed=5)
    seen = np.zeros(TARGET, dtype=bool)
    for i in range(len(data)):
        pos = data[i]["position_ids"].numpy()
        seen[np.abs(pos[:, None] - pos[None, :]).ravel()] = True
    assert seen.all(), np.flatnonzero(~seen)[:10]


def test_items_are_fixed_by_seed_and_index() -> None:
    docs = _documents(3, 40)
    a = PoseSamples(docs, tokens=32, target=TARGET, items=20, short_share=0.3, seed=1)
    b = PoseSamples(docs, tokens=32, target=TARGET, items=20, short_share=0.3, seed=1)
    for i in (0, 7, 19):  # in any order, as a resumed run or another process reads them
        assert torch.equal(a[i]["position_ids"], b[i]["position_ids"])
        assert torch.equal(a[i]["input_ids"], docs[i % 3][:32])
    shorts = [a.is_short(i) for i in range(len(a))]
    assert 0 < sum(shorts) < len(shorts)


def test_short_samples_train_under_short_factors_and_pose_under_long() -> None:
    # the rule inference uses (transformers' longrope): long factors once the largest position
    # passes the trained length; each item's loss equals the model's under the set that rule picks
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    short = RopeScaling(np.ones(spec.n_factors))
    long = yarn(spec, TARGET)
    mixed = ShortLongScaling(short, long, TINY_LENGTH)
    data = PoseSamples(_documents(2, TINY_LENGTH), tokens=TINY_LENGTH, target=TARGET, items=40,
                       short_share=0.5, seed=2)  # fmt: skip
    loss = ChunkedLoss(model, chunk_size=16)
    kinds = set()
    for i in range(len(data)):
        item = {k: v[None] for k, v in data[i].items()}
        last = int(item["position_ids"].max())
        expected = short if last + 1 <= TINY_LENGTH else long
        kinds.add((data.is_short(i), expected is long))
        with torch.no_grad():
            with apply_rope_scaling(model, mixed):
                got = loss(**item)["loss"]
            with apply_rope_scaling(model, expected):
                want = loss(**item)["loss"]
            with apply_rope_scaling(model, short if expected is long else long):
                other = loss(**item)["loss"]
        assert torch.equal(got, want) and not torch.equal(got, other), i
    assert (True, False) in kinds and (False, True) in kinds  # both kinds ran


class _Killed(Exception):
    pass


# SmolLM2 ties its embeddings to its LM head; LoRA checkpoints the adapters inside the model
@pytest.mark.parametrize(("tied", "lora"), [(False, None), (True, None), (True, 4)])
def test_a_resumed_run_reaches_the_uninterrupted_runs_weights(
    tmp_path, monkeypatch, tied, lora
) -> None:
    docs = _documents(3, TINY_LENGTH)  # PoSE reads documents of its real tokens only

    def build_tiny_model(family):  # noqa: F811 - the same model, tied or not
        return _build(family, tie_word_embeddings=tied)

    spec = RopeSpec.from_config(build_tiny_model("llama").config)

    kwargs = dict(steps=4, learning_rate=1e-3, warmup_steps=1, grad_accum=2, autocast_dtype=None,
                  pose_tokens=TINY_LENGTH, target_length=TARGET, short_share=0.25, save_steps=2,
                  chunk_size=32, lora=lora,
                  seed=3, progress=False)  # fmt: skip
    if lora:
        pytest.importorskip("peft", reason="the lora extra (in dev)")
    whole = build_tiny_model("llama")
    straight = finetune(whole, docs, yarn(spec, TARGET), output_dir=tmp_path / "a", **kwargs)
    assert len(straight.losses) == 4

    cut = build_tiny_model("llama")
    real = ChunkedLoss.forward
    calls = [0]

    def dies_in_step_3(self, *args, **kw):  # micro-step 5 = step 3's first: after checkpoint 2
        calls[0] += 1
        if calls[0] == 5:
            raise _Killed
        return real(self, *args, **kw)

    monkeypatch.setattr(ChunkedLoss, "forward", dies_in_step_3)
    with pytest.raises(_Killed):
        finetune(cut, docs, yarn(spec, TARGET), output_dir=tmp_path / "b", **kwargs)
    monkeypatch.setattr(ChunkedLoss, "forward", real)
    assert (tmp_path / "b" / "checkpoint-2").is_dir()
    fresh = build_tiny_model("llama")  # a new process: the weights come from the checkpoint
    resumed = finetune(fresh, docs, yarn(spec, TARGET), output_dir=tmp_path / "b", **kwargs)
    assert resumed.resumed_from is not None and resumed.resumed_from.endswith("checkpoint-2")
    assert resumed.losses == pytest.approx(straight.losses, rel=1e-6)
    # the run's tokens, the steps before the resume included (this call trained 2 of 4 steps)
    assert resumed.resumed_step == 2 and straight.resumed_step == 0
    assert resumed.tokens == straight.tokens == 4 * 2 * (TINY_LENGTH - 1)
    for (name, a), (_, b) in zip(whole.state_dict().items(), fresh.state_dict().items()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=name)
    if lora:  # the adapters trained (and came back from the checkpoint), the rest did not
        trained = [k for k in fresh.state_dict() if "lora_B" in k]
        assert trained and all(fresh.state_dict()[k].abs().sum() > 0 for k in trained)
        # and the checkpoint holds only what trains: the adapters and the norms' copies
        saved = safetensors.torch.load_file(tmp_path / "b" / "checkpoint-4" / "model.safetensors")
        assert saved and all("lora_" in k or "modules_to_save" in k for k in saved)
    elif tied:  # still one tensor after the resume
        assert fresh.lm_head.weight.data_ptr() == fresh.model.embed_tokens.weight.data_ptr()
    # old checkpoints are pruned: disk stays bounded
    assert sorted(p.name for p in (tmp_path / "b").glob("checkpoint-*")) == [
        "checkpoint-2",
        "checkpoint-4",
    ]
