"""The branched passkey form's cost: one forward over the haystack, then a branch per key.

`longrope_opt.objectives.passkey_results(form="branched")` runs a length's haystack once and
grafts each key, its lead-in and the question onto it (`SharedPrefix.branch`). This times, in
one process on the same prompts: one plain forward at the length (the unit every plan counts
in), the haystack forward, and the branches for each lead-in asked, and prints a branch's cost in
forwards (what `longrope_opt.pipeline.BRANCH_COST` plans with) and what a row's keys cost.

    python bench/passkey_branched.py                              # 16k, 4 keys, lead-ins 512, 2048
    python bench/passkey_branched.py --length 32768 --keys 4
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--length", type=int, default=16384)
    p.add_argument("--keys", type=int, default=4)
    p.add_argument("--lead-ins", default="512,2048")
    p.add_argument("--row-keys", type=int, default=20, help="keys of the row whose cost is printed")
    args = p.parse_args()
    lead_ins = [int(x) for x in args.lead_ins.split(",")]
    if args.keys < 1 or args.length < 256 or min(lead_ins) < 0:
        p.error(f"--keys must be >= 1, --length >= 256, --lead-ins >= 0, got {args.keys}, "
                f"{args.length}, {args.lead_ins}")  # fmt: skip
    import torch

    from longrope_opt import RopeSpec
    from longrope_opt.models import cpu_name
    from longrope_opt.models import load_model
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.objectives import passkey_prompts
    from longrope_opt.objectives import passkey_results
    from longrope_opt.patching import apply_rope_scaling
    from longrope_opt.rope import yarn

    model, tok = load_model(args.model, device="cpu", fuse=False)
    spec = RopeSpec.from_config(model.config)
    scaling = yarn(spec, max(args.length, spec.original_length + 1))
    prompts = passkey_prompts(tok, args.length, n_trials=args.keys, seed=0)
    with torch.inference_mode(), apply_rope_scaling(model, scaling):
        start = time.perf_counter()
        evaluate_perplexity(model, [prompts[0].ids], None)  # one plain forward: the unit
        forward = time.perf_counter() - start
        rows = []
        for lead_in in lead_ins:
            stamps = [time.perf_counter()]
            for _ in passkey_results(model, prompts, form="branched", lead_in=lead_in):
                stamps.append(time.perf_counter())
            # the first key's time holds the haystack forward; the others are branches only
            branches = (stamps[-1] - stamps[1]) / max(len(prompts) - 1, 1)
            haystack = stamps[1] - stamps[0] - branches
            rows.append((lead_in, haystack, branches))
    path = (getattr(model, "longrope_opt_compute", None) or {}).get("path")
    print(f"branched passkeys at {args.length} tokens, {args.keys} keys; {cpu_name()}, {path}, "
          f"{torch.get_num_threads()} threads; one forward {forward:.1f} s")
    print(f"{'lead-in':>8}{'haystack':>11}{'per branch':>13}{'branch / fwd':>14}"
          f"{f'{args.row_keys} keys / fwd':>16}")
    for lead_in, haystack, branch in rows:
        row = (haystack + args.row_keys * branch) / forward
        print(f"{lead_in:>8}{haystack:>10.1f}s{branch:>12.2f}s{branch / forward:>14.3f}{row:>16.2f}")


if __name__ == "__main__":
    main()
