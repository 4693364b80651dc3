"""Where the time of one long forward goes, by operator, on one compute path.

    python bench/profile_forward.py                          # auto path, 16k tokens
    python bench/profile_forward.py --dtype float32 --length 8192

Runs `evaluate_perplexity` once (decoder body + chunked head) under `torch.profiler` and prints
the operators that take the most self CPU time, with their share, plus the thread count torch
used (both cores should be busy in every phase).
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--fuse", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()

    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile

    from longrope_opt import RopeSpec
    from longrope_opt.data import load_samples
    from longrope_opt.models import cpu_name
    from longrope_opt.models import load_model
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.rope import yarn

    model, tokenizer = load_model("smollm2-135m", dtype=args.dtype, fuse=args.fuse)
    spec = RopeSpec.from_config(model.config)
    samples = load_samples("builtin", tokenizer, args.length, 1, seed=0)
    scaling = yarn(spec, max(args.length, 2 * spec.original_length))
    evaluate_perplexity(model, samples, scaling)  # warm-up (and the one-off compile)
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        ppl = evaluate_perplexity(model, samples, scaling).ppl
    total = time.perf_counter() - start
    choice = model.longrope_opt_compute
    print(f"CPU: {cpu_name()}; torch threads {torch.get_num_threads()}; path {choice['path']} "
          f"({choice['source']}); fuse {args.fuse}")  # fmt: skip
    print(f"{args.length} tokens: {total:.1f} s under the profiler, perplexity {ppl:.4f}")
    events = prof.key_averages()
    self_total = sum(e.self_cpu_time_total for e in events) or 1
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[: args.top]
    print(f"{'operator':<48}{'self s':>9}{'share':>8}{'calls':>8}")
    for e in rows:
        print(f"{e.key[:47]:<48}{e.self_cpu_time_total / 1e6:9.2f}"
              f"{100 * e.self_cpu_time_total / self_total:7.1f}%{e.count:8d}")  # fmt: skip


if __name__ == "__main__":
    main()
