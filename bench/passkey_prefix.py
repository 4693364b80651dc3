"""Passkey prompts: one forward each vs one shared forward over their common beginning.

`longrope_opt.objectives.passkey_results` runs the instruction-and-filler beginning that every
prompt of a length shares once, then each prompt from where it departs from it (CPU, SDPA).
This prints both timings and their ratio, measured in one process on the same prompts, and
checks that the outcomes and the answer NLLs agree.

    python bench/passkey_prefix.py                       # 8k, 6 keys (minutes on a CPU)
    python bench/passkey_prefix.py --length 32768 --keys 10
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--length", type=int, default=8192)
    p.add_argument("--keys", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.keys < 2 or args.length < 256:
        p.error(f"--keys must be >= 2 and --length >= 256, got {args.keys} and {args.length}")
    import torch

    from longrope_opt import RopeSpec
    from longrope_opt.models import cpu_name
    from longrope_opt.models import load_model
    from longrope_opt.objectives import passkey_prompts
    from longrope_opt.objectives import passkey_results
    from longrope_opt.patching import apply_rope_scaling
    from longrope_opt.rope import yarn

    model, tok = load_model(args.model, device="cpu", fuse=False)
    spec = RopeSpec.from_config(model.config)
    scaling = yarn(spec, max(args.length, spec.original_length + 1))
    prompts = passkey_prompts(tok, args.length, n_trials=args.keys, seed=args.seed)
    timings, results = {}, {}
    with torch.inference_mode(), apply_rope_scaling(model, scaling):
        for share in (False, True):
            start = time.perf_counter()
            results[share] = {i: (c, n) for i, c, n in passkey_results(model, prompts,
                                                                      share_prefix=share)}  # fmt: skip
            timings[share] = time.perf_counter() - start
    same = all(results[True][i][0] == results[False][i][0] for i in results[False])
    worst = max(abs(results[True][i][1] - results[False][i][1]) for i in results[False])
    path = (getattr(model, "longrope_opt_compute", None) or {}).get("path")
    depths = ", ".join(f"{q.depth:.2f}" for q in prompts)
    print(f"passkey prompts at {args.length} tokens, {args.keys} keys (depths {depths}); "
          f"{cpu_name()}, {path}, {torch.get_num_threads()} threads")
    print(f"{'one forward per prompt':<28}{timings[False]:9.1f} s   1.00x")
    print(f"{'shared beginning':<28}{timings[True]:9.1f} s   {timings[False] / timings[True]:.2f}x")
    print(f"same outcomes: {same}; largest answer-NLL difference {worst:.2e} nats")


if __name__ == "__main__":
    main()
