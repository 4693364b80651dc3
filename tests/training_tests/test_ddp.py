"""The same fine-tune under torchrun: 2 CPU processes (DDP over gloo) with accumulation A reach
the weights of 1 process with accumulation 2A, within fp32 rounding of the all-reduce."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.training_tests.ddp_worker import train


ROOT = Path(__file__).resolve().parents[2]


def test_two_processes_reach_one_process_with_twice_the_accumulation(tmp_path) -> None:
    out = tmp_path / "ddp.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "tests.training_tests.ddp_worker", str(out), "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    together = torch.load(out)
    alone = train(4).state_dict()
    assert together.keys() == alone.keys()
    for name, weight in alone.items():
        torch.testing.assert_close(together[name], weight, atol=1e-6, rtol=1e-5, msg=name)
    # discriminating: one process with the same accumulation as each rank trains elsewhere
    half = train(2).state_dict()
    assert max((half[k] - alone[k]).abs().max().item() for k in alone) > 1e-4
