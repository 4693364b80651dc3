"""How much filler around the key must see it for the branched passkey form to answer as the
single-key prompt does?

The branched form (`passkey_results(form="branched")`) grafts each key onto a shared haystack;
the filler after the key never sees the key, except a *lead-out* right after it and a *lead-in*
right before the question that the branch runs again with the key in view. This measures, on
one row and length, the single-key prompt against branches with each (lead-out, lead-in): keys
retrieved, keys the two agree on, the mean answer NLL above the single form's.

    python experiments/passkey_lead_in.py --length 16384 --keys 12 --row yarn-cd \
        --variants 0:64,0:512,256:64,1024:64,0:2048,2048:64
"""

from __future__ import annotations

import argparse
import time

import torch

from longrope_opt.evaluation import classic_rows
from longrope_opt.models import chunked_nll
from longrope_opt.models import load_model
from longrope_opt.objectives import passkey_prompts
from longrope_opt.objectives import passkey_results
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.patching import shared_prefix
from longrope_opt.rope import RopeSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--keys", type=int, default=12)
    parser.add_argument("--row", default="yarn-cd")
    parser.add_argument("--variants", default="0:64,0:512,0:2048,2048:64",
                        help="lead-out:lead-in pairs, comma-separated")
    args = parser.parse_args()
    variants = [tuple(int(x) for x in v.split(":")) for v in args.variants.split(",")]
    model, tokenizer = load_model("smollm2-135m")
    spec = RopeSpec.from_config(model.config)
    scaling = {r.name: r.scaling for r in classic_rows(spec, args.length)}[args.row]
    prompts = passkey_prompts(tokenizer, args.length, n_trials=args.keys, seed=0)
    with torch.inference_mode(), apply_rope_scaling(model, scaling):
        start = time.perf_counter()
        single = {i: (c, nll) for i, c, nll in passkey_results(model, prompts, form="single")}
        print(f"single: {sum(c for c, _ in single.values())}/{args.keys} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
        haystack = prompts[0].haystack()
        with shared_prefix(model) as shared:
            shared.capture(haystack)
            for lead_out, lead_in in variants:
                got, start = [], time.perf_counter()
                for p in prompts:
                    a, b = p.key_span
                    q, k = p.question_start, b - a
                    room = q - b
                    o = min(lead_out, room)
                    w = min(lead_in, room - o)
                    ids = torch.cat([p.ids[a : b + o], p.ids[q - w :], p.answer_ids])
                    hidden = shared.branch(a, ids, wide_from=k + o, position=q - w,
                                           wide=(a + o, haystack.numel() - w))  # fmt: skip
                    last = k + o + w + (p.ids.numel() - q) - 1
                    n = p.answer_ids.numel()
                    nll, correct = chunked_nll(model, hidden[last : last + n], p.answer_ids)
                    got.append((correct == n, float(nll)))
                agree = sum(g[0] == single[i][0] for i, g in enumerate(got))
                gap = sum(g[1] - single[i][1] for i, g in enumerate(got)) / args.keys
                print(f"lead-out {lead_out:>5} lead-in {lead_in:>5}: "
                      f"{sum(c for c, _ in got)}/{args.keys}, agree {agree}/{args.keys}, "
                      f"answer NLL {gap:+.3f} vs single "
                      f"({(time.perf_counter() - start) / args.keys:.1f} s a key)", flush=True)


if __name__ == "__main__":
    main()
