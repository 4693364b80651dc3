"""One rank of the 2-process fine-tune that `test_ddp.py` runs under torchrun; rank 0 saves the
trained weights. Run from the repository root:

    torchrun --standalone --nproc_per_node 2 -m tests.training_tests.ddp_worker OUT.pt GRAD_ACCUM
"""

from __future__ import annotations

import os
import sys

import torch

from longrope_opt import RopeSpec
from longrope_opt.rope import yarn
from longrope_opt.training import finetune
from tests.conftest import TINY_LENGTH
from tests.conftest import build_tiny_model


TARGET = 4 * TINY_LENGTH


def documents() -> list[torch.Tensor]:
    """The training documents every rank and the single process read."""
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, 128, (TINY_LENGTH,), generator=g) for _ in range(5)]


def train(grad_accum: int) -> torch.nn.Module:
    """The tiny Llama after 3 steps of PoSE fine-tuning in fp32 (the same in every process)."""
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    finetune(model, documents(), yarn(spec, TARGET), steps=3, grad_accum=grad_accum,
             learning_rate=1e-3, warmup_steps=1, autocast_dtype=None, pose_tokens=TINY_LENGTH,
             target_length=TARGET, short_share=0.3, seed=4, progress=False)  # fmt: skip
    return model


if __name__ == "__main__":
    out, accum = sys.argv[1], int(sys.argv[2])
    trained = train(accum)
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save(trained.state_dict(), out)
