"""Two torch jobs on the same cores: how much of the machine do they get done together?

A long run in the background (`nice`) and a second job beside it (a passkey check, a test run)
is how this project works on 2 cores. PyTorch's CPU kernels run on OpenMP threads that spin
while they wait for each other; each process sizes its pool to every core, so two processes
spin against each other. This runs the same decoder-shaped bf16 workload (attention by SDPA,
an MLP, ``--layers`` layers over ``--tokens`` tokens; or ``--model``'s forward and loss, as
the objectives run it) in worker processes:

  alone              — one process, its threads = the cores (the baseline);
  two, default       — two at once, each with threads = the cores, as two commands run;
  two, niced 5/10    — the same at the niceness the background runs use;
  two, passive wait  — the same with ``OMP_WAIT_POLICY=PASSIVE`` (threads sleep, not spin);
  two, 1 thread each — each pinned to one thread (``OMP_NUM_THREADS=1``).

Throughput is forwards per second of all processes together over the baseline's, in one run;
no targets are asserted. Pause any other job first (``kill -STOP``) or its share is counted.

    python bench/contention.py                    # about 2 minutes on 2 cores
    python bench/contention.py --forwards 20 --tokens 4096
    python bench/contention.py --model gemma3-270m --tokens 8192 --forwards 3
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path


def model_forward(name: str, tokens: int):
    """A real model's forward as the objectives run it: decoder body, chunked LM head, loss."""
    import torch

    from longrope_opt.models import chunked_nll
    from longrope_opt.models import decoder_hidden
    from longrope_opt.models import load_model

    model, _ = load_model(name)
    ids = torch.randint(0, 1000, (tokens,), generator=torch.Generator().manual_seed(0))

    def forward() -> None:
        chunked_nll(model, decoder_hidden(model, ids[:-1]), ids[1:], count_correct=False)

    return forward


def worker(tokens: int, layers: int, forwards: int, model: str | None) -> None:
    import torch

    forward = model_forward(model, tokens) if model else shaped_forward(tokens, layers)
    with torch.inference_mode():
        forward()  # warm-up: kernels chosen, memory allocated
        start = time.perf_counter()
        for _ in range(forwards):
            forward()
        print(f"{time.perf_counter() - start:.3f}", flush=True)


def shaped_forward(tokens: int, layers: int):
    """A decoder-shaped bf16 forward: SDPA attention and an MLP per layer, Gemma 3 270M's shapes."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(0)  # the same weights in every worker

    def param(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) / shape[0] ** 0.5).bfloat16()

    width, heads, head_dim = 640, 4, 256  # Gemma 3 270M's shapes
    weights = [
        (param(width, heads * head_dim * 3), param(heads * head_dim, width),
         param(width, 2048), param(2048, width))
        for _ in range(layers)
    ]  # fmt: skip
    x0 = torch.randn(tokens, width, generator=gen).bfloat16()

    def forward() -> None:
        x = x0
        for qkv_w, o_w, up, down in weights:
            q, k, v = (x @ qkv_w).view(tokens, 3, heads, head_dim).permute(1, 2, 0, 3)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + a.permute(1, 0, 2).reshape(tokens, -1) @ o_w
            x = x + F.gelu(x @ up) @ down

    return forward


def run_case(jobs: list[tuple[dict[str, str], int]], args: argparse.Namespace) -> float:
    """Start the jobs together; forwards per second of all of them (the last one to finish)."""
    cmd = [sys.executable, __file__, "--worker", "--tokens", str(args.tokens),
           "--layers", str(args.layers), "--forwards", str(args.forwards)]  # fmt: skip
    cmd += ["--model", args.model] if args.model else []
    procs = []
    for env, nice in jobs:
        full = {**os.environ, **env}
        procs.append(subprocess.Popen(
            ["nice", "-n", str(nice), *cmd], env=full, stdout=subprocess.PIPE, text=True
        ))  # fmt: skip
    walls = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a worker failed (exit {p.returncode})")
        walls.append(float(out.strip().splitlines()[-1]))
    return len(jobs) * args.forwards / max(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--forwards", type=int, default=10)
    parser.add_argument("--model", default=None,
                        help="a real model's forward instead (e.g. gemma3-270m)")  # fmt: skip
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.tokens, args.layers, args.forwards, args.model)
        return
    cores = len(os.sched_getaffinity(0))
    every = {"OMP_NUM_THREADS": str(cores)}
    cases = [
        ("alone", [(every, 0)]),
        ("two, default", [(every, 0), (every, 0)]),
        ("two, niced 5/10", [(every, 5), (every, 10)]),
        ("two, passive wait", [({**every, "OMP_WAIT_POLICY": "PASSIVE"}, 0)] * 2),
        ("two, 1 thread each", [({"OMP_NUM_THREADS": "1"}, 0)] * 2),
    ]
    first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]  # the first core's entry
    info = {k.strip(): v.strip() for k, _, v in (x.partition(":") for x in first.splitlines())}
    cpu = (f"{info.get('model name', platform.processor())} family {info.get('cpu family')} "
           f"model {info.get('model')}")  # fmt: skip
    what = f"--model {args.model}" if args.model else f"--layers {args.layers}"
    print(f"# python bench/contention.py {what} --tokens {args.tokens} "
          f"--forwards {args.forwards} -- {cpu}, {cores} cores")  # fmt: skip
    base = None
    print(f"{'case':<20} {'forwards/s':>10} {'vs alone':>9}")
    for name, jobs in cases:
        rate = run_case(jobs, args)
        base = base or rate
        print(f"{name:<20} {rate:>10.3g} {rate / base:>8.2f}x", flush=True)


if __name__ == "__main__":
    main()
