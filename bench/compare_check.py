"""Re-evaluate each sampler's best candidate from a `compare` run on the real objective (issue 5).

`longrope-opt compare` searches a cheap proxy. This script takes the best trial of every study in
a comparison, plus the PI/NTK/YaRN seeds, and evaluates them with the search's own objective
(truncate perplexity at the target length) in one process, so the proxy's winners can be checked.

    python bench/compare_check.py --storage sqlite:///bench/results/compare.db
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default="sqlite:///bench/results/compare.db")
    parser.add_argument("--prefix", default="compare-smollm2-135m-16384-skip")
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="chooses the documents")
    args = parser.parse_args()

    import optuna

    from longrope_opt import RopeSpec
    from longrope_opt.data import load_samples
    from longrope_opt.models import load_model
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.rope import METHODS
    from longrope_opt.rope import attention_scale_for
    from longrope_opt.studies import best_scaling

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies = [
        s.study_name
        for s in optuna.get_all_study_summaries(args.storage)
        if s.study_name.startswith(args.prefix + "/")
    ]
    best: dict[str, tuple[float, object, str]] = {}
    for name in sorted(studies):
        sampler = name.split("/")[1]
        study = optuna.load_study(study_name=name, storage=args.storage)
        scaling, trial = best_scaling(study)
        if sampler not in best or trial.value < best[sampler][0]:
            best[sampler] = (trial.value, scaling, name)
    model, tokenizer = load_model("smollm2-135m", fuse=True)
    spec = RopeSpec.from_config(model.config)
    target = 16384
    samples = load_samples("builtin", tokenizer, target, args.samples, args.seed)
    rows = []
    for method in ("pi", "ntk", "yarn"):
        s = METHODS[method](spec, target)
        # the comparison's space fixes the attention scale to the `longrope` rule for every
        # candidate, the seeds included
        s = type(s)(s.factors, 0, attention_scale_for("longrope", spec, target), method=method)
        rows.append((f"seed {method}", float("nan"), s))
    for sampler, (value, scaling, _) in best.items():
        rows.append((sampler, value, scaling))
    print(f"documents: {samples.doc_ids}", file=sys.stderr)
    out = []
    for label, proxy, scaling in rows:
        start = time.perf_counter()
        ppl = evaluate_perplexity(model, samples, scaling).ppl
        out.append((label, proxy, ppl, scaling.n_hat))
        print(f"  {label:<12} {ppl:8.4f}  ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    print(
        f"\nbest candidate of each sampler (over its seeds) at {target} tokens, truncate, "
        f"{args.samples} builtin document(s), seed {args.seed}"
    )
    print(f"{'candidate':<12} {'proxy best':>11} {'ppl 16k':>9} {'n_hat':>6}")
    for label, proxy, ppl, n_hat in sorted(out, key=lambda r: r[2]):
        print(f"{label:<12} {proxy:>11.4f} {ppl:>9.4f} {n_hat:>6}")


if __name__ == "__main__":
    main()
