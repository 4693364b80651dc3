"""Does the cheap ``"skip"`` objective rank RoPE rescalings like the real one? (issue 5)

The comparison of search strategies (`longrope-opt compare`) needs thousands of evaluations, which
16k-token perplexity (≈ 45 s each here) cannot afford. Its objective is the ``"skip"`` mode: a
few short samples whose second half sits at the far end of the target window. This script
evaluates the same candidates both ways in one process and prints Spearman's ρ between them and
the cost of one evaluation of each.

    python bench/proxy.py                                   # 16k, ≈ 15 min here
    python bench/proxy.py --configs 8x1024x2,8x1024x4       # K samples x TOKENS x CHUNKS

The truncate perplexities are cached in bench/results/proxy-truncate-<length>.json (delete it to
re-measure), so trying other skip configurations costs only their own evaluations.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument(
        "--configs", default="8x1024x2,8x1024x4,8x1024x8", help="KxTOKENSxCHUNKS,... (skip mode)"
    )
    parser.add_argument(
        "--extra", type=int, default=6, help="mutants of YaRN/NTK near the optimum"
    )
    args = parser.parse_args()

    import torch
    from objective import candidates
    from scipy.stats import spearmanr

    from longrope_opt import RopeScaling
    from longrope_opt import RopeSpec
    from longrope_opt.data import load_samples
    from longrope_opt.models import load_model
    from longrope_opt.objectives import evaluate_perplexity

    torch.set_num_threads(2)
    model, tokenizer = load_model("smollm2-135m", fuse=True)
    spec = RopeSpec.from_config(model.config)
    cands = candidates(spec, args.length)
    rng = np.random.default_rng(1)
    near = [c for c in cands if c.method in ("ntk", "yarn")]
    for i in range(args.extra):  # the region a search spends its time in
        base = near[i % len(near)].factors
        f = np.sort(np.clip(base * rng.uniform(0.85, 1.15, base.shape), 1.0, None))
        cands.append(RopeScaling(f, int(rng.choice([0, 4, 16])), 1.0, method=f"mut{i}"))
    long_samples = load_samples("builtin", tokenizer, args.length, 1, seed=0)
    configs = [tuple(int(x) for x in c.split("x")) for c in args.configs.split(",")]
    evaluate_perplexity(model, long_samples[:1], cands[0], window=2048)  # compile

    cache = ROOT / "bench" / "results" / f"proxy-truncate-{args.length}.json"
    cached = json.loads(cache.read_text()) if cache.exists() else {}
    if cached.get("n") != len(cands):
        cached = {}
    rows = {"truncate": [], **{c: [] for c in configs}}
    secs = {k: 0.0 for k in rows}
    for i, scaling in enumerate(cands):
        t0 = time.perf_counter()
        if cached:
            rows["truncate"].append(cached["ppl"][i])
        else:
            rows["truncate"].append(evaluate_perplexity(model, long_samples, scaling).ppl)
        secs["truncate"] += cached["seconds"] / len(cands) if cached else time.perf_counter() - t0
        for k, tokens, chunks in configs:
            samples = load_samples("builtin", tokenizer, tokens, k, seed=0)
            t0 = time.perf_counter()
            r = evaluate_perplexity(
                model,
                samples,
                scaling,
                mode="skip",
                window=args.length,
                skip_tokens=tokens,
                skip_chunks=chunks,
            )
            secs[(k, tokens, chunks)] += time.perf_counter() - t0
            rows[(k, tokens, chunks)].append(r.ppl)
        line = "  ".join(f"{rows[k][-1]:8.3f}" for k in rows)
        print(f"  {scaling.method:<7} n̂={scaling.n_hat:<3} {line}", file=sys.stderr, flush=True)

    n = len(cands)
    if not cached:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(
            json.dumps({"n": n, "ppl": rows["truncate"], "seconds": secs["truncate"]})
        )
    print(f"\n{n} candidates, target length {args.length}; ρ = Spearman vs truncate")
    print(f"{'objective':<22} {'s/eval':>7} {'speed×':>7} {'rho(all)':>9} {'rho(near)':>10}")
    base = secs["truncate"] / n
    near_idx = [i for i, c in enumerate(cands) if c.method not in ("none", "pi")]
    for key, vals in rows.items():
        name = f"truncate 1x{args.length}" if key == "truncate" else "skip {}x{}x{}".format(*key)
        rho = spearmanr(rows["truncate"], vals).statistic
        rho_near = spearmanr(
            [rows["truncate"][i] for i in near_idx], [vals[i] for i in near_idx]
        ).statistic
        print(
            f"{name:<22} {secs[key] / n:7.2f} {base / (secs[key] / n):7.1f} {rho:9.3f} {rho_near:10.3f}"
        )


if __name__ == "__main__":
    main()
