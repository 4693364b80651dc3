"""How much does a perplexity *ratio* move with nothing but the compute path? (the verdict margin)

`validate` judges a candidate by its perplexity ratio against the best classic row, paired over
documents. A ratio that the compute path alone can move is no reason to ship anything: this
measures, on the same documents and the same two scalings, the ratio under float32 and under
bfloat16 (the CPU default) and prints how far apart they are per document and on average.

    python bench/margin.py                      # SmolLM2, 16k, the 2x winner vs YaRN-cd, 2 docs
    python bench/margin.py --length 8192 --docs 3

Prints one line per document (log ratio on each path and their difference) and the mean; the
default margin of `longrope_opt.evaluation.DEFAULT_MARGIN` cites the committed result
(`bench/results/margin.txt`).
"""

from __future__ import annotations

import argparse
import math
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--docs", type=int, default=2)
    parser.add_argument("--study", default="extend-smollm2-135m-16384")
    parser.add_argument("--storage", default="sqlite:///experiments/results/extend-2x.db")
    args = parser.parse_args()

    import optuna
    import torch

    from longrope_opt import RopeSpec
    from longrope_opt.data import load_samples
    from longrope_opt.evaluation import classic_rows
    from longrope_opt.models import cpu_name
    from longrope_opt.models import load_model
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.studies import study_winner

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.load_study(study_name=args.study, storage=args.storage)
    winner = study_winner(study).scaling
    results = {}
    start = time.perf_counter()
    for dtype in ("float32", "bfloat16"):
        model, tokenizer = load_model("smollm2-135m", dtype=dtype)
        spec = RopeSpec.from_config(model.config)
        reference = next(r.scaling for r in classic_rows(spec, args.length) if r.name == "yarn-cd")
        # documents the study never read: its seed chooses them, the held-out draw is seed 1
        samples = load_samples("builtin", tokenizer, args.length, args.docs, 1)
        with torch.inference_mode():
            ours = evaluate_perplexity(model, samples, winner).sample_ppl
            ref = evaluate_perplexity(model, samples, reference).sample_ppl
        results[dtype] = [math.log(a / b) for a, b in zip(ours, ref)]
    f32, b16 = results["float32"], results["bfloat16"]
    print(f"# python bench/margin.py --length {args.length} --docs {args.docs} on {cpu_name()}, "
          f"{time.perf_counter() - start:.0f} s")  # fmt: skip
    print("doc   log ratio float32   log ratio bfloat16   difference")
    for i, (a, b) in enumerate(zip(f32, b16)):
        print(f"{i:<6}{a:+18.5f}{b:+21.5f}{b - a:+13.5f}")
    mean_a, mean_b = sum(f32) / len(f32), sum(b16) / len(b16)
    print(f"mean  ratio float32 {math.exp(mean_a):.4f}  bfloat16 {math.exp(mean_b):.4f}  "
          f"path moves the ratio by {abs(math.exp(mean_b - mean_a) - 1):.2%}")  # fmt: skip


if __name__ == "__main__":
    main()
