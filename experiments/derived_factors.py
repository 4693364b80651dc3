"""Factor files derived from searched ones, for `longrope-opt validate --factors` to measure:
a winner carried to another scale, or a hybrid that swaps one band of λ between two rows.

carry: what grows with ln s grows by k = ln s' / ln s. λ' = λ^k (λ = 1 stays 1, λ = s becomes
s', a ramp s^(i/c) stays that ramp), t'² = 1 + (t² − 1)·k (the table's rule for t, LongRoPE's
t² = 1 + ln s / ln L, is kept), n̂ is kept (it counts tokens). It takes PI, NTK and YaRN-cd at s
to themselves at s'. At 8x on SmolLM2 one forward takes 16–23 min on 2 CPU cores, so a search
there does not fit; a carried winner is the cheap stand-in (experiments/results/extend-8x.txt).

hybrid: the base row with λ on dims a..b−1 taken from the donor; n̂ and t stay the base's. If
the hybrid loses prompts the base retrieves, the donor's band is enough to cause the loss
(experiments/results/retrieval-intervention.txt, retrieval-rescue.txt).

scale: a row with another attention scale t; λ and n̂ stay the row's. What t alone moves, on
a model where the formulas' λ differ less than their t (Gemma 3 at 4x, docs/results.md).

    python experiments/derived_factors.py carry --study-name 4x-new \\
        --storage sqlite:///experiments/results/extend-4x.db --to 65536 -o new-carried-8x.json
    python experiments/derived_factors.py hybrid --base yarn-cd --donor 4x-plain --band 0-20 \\
        --storage sqlite:///experiments/results/extend-4x.db --length 32768 -o ycd-both-plain.json
    longrope-opt validate --factors ycd-both-plain.json --corpus ./prose/ --lengths 32k
    python experiments/derived_factors.py scale --row extend-gemma3-270m-131072 --t 1.0 \\
        --length 131072 --model gemma3-270m \\
        --storage sqlite:///experiments/results/extend-gemma3-128k.db -o guarded-t1.json
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def hybrid(base, donor, a: int, b: int):
    """`base` with λ[a:b] from `donor`; n̂ and t stay the base's."""
    from longrope_opt import RopeScaling

    factors = np.array(base.factors, dtype=np.float64)
    factors[a:b] = np.asarray(donor.factors)[a:b]
    return RopeScaling(factors, base.n_hat, base.attention_scale, method="hybrid")


def _row(name: str, storage: str, length: int, spec):
    """A classic row at `length`, or a study's exported winner."""
    from longrope_opt.evaluation import classic_rows
    from longrope_opt.studies import best_scaling
    from longrope_opt.studies import load_named_study
    from longrope_opt.studies import make_storage

    classic = {r.name: r.scaling for r in classic_rows(spec, length)}
    if name in classic:
        return classic[name]
    return best_scaling(load_named_study(make_storage(storage), name))[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))  # fmt: skip
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("carry", help="a study's winner at another target length")
    c.add_argument("--study-name", required=True)
    c.add_argument("--to", type=int, required=True, help="the new target length")
    h = sub.add_parser("hybrid", help="a band of λ from one row in another")
    h.add_argument("--base", required=True, help="a classic row name or a study name")
    h.add_argument("--donor", required=True, help="a classic row name or a study name")
    h.add_argument("--band", required=True, help="a-b: dims a..b-1 come from the donor")
    h.add_argument("--length", type=int, required=True, help="the rows' target length")
    t = sub.add_parser("scale", help="a row with another attention scale t")
    t.add_argument("--row", required=True, help="a classic row name or a study name")
    t.add_argument("--t", type=float, required=True, help="the attention scale (logits × t²)")
    t.add_argument("--length", type=int, required=True, help="the row's target length")
    for q in (c, h, t):
        q.add_argument("--storage", required=True)
        q.add_argument("-o", "--output", required=True)
        q.add_argument("--model", default="smollm2-135m")
    args = p.parse_args()
    from longrope_opt import RopeSpec
    from longrope_opt.models import read_config
    from longrope_opt.studies import best_scaling
    from longrope_opt.studies import load_named_study
    from longrope_opt.studies import make_storage
    from longrope_opt.studies import record

    spec = RopeSpec.from_config(read_config(args.model))
    if args.what == "carry":
        from longrope_opt.rope import carry

        study = load_named_study(make_storage(args.storage), args.study_name)
        length = int(record.target_length(study) or 0)
        scaling = carry(best_scaling(study)[0], spec.scale(length), spec.scale(args.to))
        record = {**scaling.to_dict(), "target_length": args.to,
                  "carried_from": {"study": args.study_name, "target_length": length}}  # fmt: skip
    elif args.what == "scale":
        from longrope_opt import RopeScaling

        base = _row(args.row, args.storage, args.length, spec)
        scaling = RopeScaling(base.factors, base.n_hat, args.t, method="scaled")
        record = {**scaling.to_dict(), "target_length": args.length,
                  "scaled": {"row": args.row, "attention_scale_was": base.attention_scale}}  # fmt: skip
    else:
        try:
            a, b = (int(x) for x in args.band.split("-"))
        except ValueError:
            p.error(f"--band must look like a-b (e.g. 0-20), got {args.band!r}")
        if not 0 <= a < b <= spec.n_factors:
            p.error(f"--band must satisfy 0 <= a < b <= {spec.n_factors}, got {args.band!r}")
        base = _row(args.base, args.storage, args.length, spec)
        donor = _row(args.donor, args.storage, args.length, spec)
        scaling = hybrid(base, donor, a, b)
        record = {**scaling.to_dict(), "target_length": args.length,
                  "hybrid": {"base": args.base, "donor": args.donor, "band": [a, b]}}  # fmt: skip
    with open(args.output, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
