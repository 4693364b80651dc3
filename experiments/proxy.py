"""Which cheap objective ranks near-optimal RoPE rescalings like the number users check? (issue 15)

A search spends nearly all its evaluations among candidates within a few percent of each other,
so a proxy is only useful if it orders *those* right. This script evaluates ≥ 24 near-optimal
candidates (YaRN, NTK, their critical-dimension corrections, a searched winner, and mutants of
them) with every objective variant, in one process, and prints each variant's cost per evaluation
and Spearman ρ against the reference: full-length perplexity on documents the search does not use
(and, for the needle variants, against the full-length needle loss too).

    python experiments/proxy.py                       # 16k, 24 candidates (≈ 70 min on 2 cores)
    python experiments/proxy.py --length 32768        # 4x: the reference alone is ≈ 2 min a candidate

Results go to experiments/results/proxy-<length>.jsonl, one line per (candidate, variant); a rerun
skips what is there (resumable), so an interrupted run continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np


ROOT = Path(__file__).resolve().parents[1]


def candidates(spec, length: int, n: int, seed: int) -> list:
    """YaRN, NTK, their critical-dimension corrections, the stored 16k winner (at 2x), and
    mutants of them (λ × exp(N(0, 0.03)) per dimension, sorted; n̂ in {0, 4, 12})."""
    from longrope_opt import RopeScaling
    from longrope_opt.rope import METHODS
    from longrope_opt.space import SearchSpace

    t = SearchSpace(spec, length).fixed_attention_scale
    base = [METHODS[m](spec, length) for m in ("yarn", "ntk")]
    base = [RopeScaling(b.factors, 0, t, method=b.method) for b in base]
    critical = SearchSpace(spec, length, shape="critical")
    for name, params in critical.seed_params()[:2]:
        sc = critical.to_scaling(params)
        base.append(RopeScaling(sc.factors, 0, t, method=name))
    winner = ROOT / "bench" / "results" / "searched-smollm2-16k.json"
    if winner.exists() and length == 2 * spec.original_length:
        w = json.loads(winner.read_text())
        base.append(RopeScaling(np.array(w["factors"]), w["n_hat"], t, method="searched"))
    rng = np.random.default_rng(seed)
    out = list(base)
    while len(out) < n:
        parent = base[len(out) % len(base)]
        f = np.sort(np.maximum(parent.factors * np.exp(rng.normal(0, 0.03, parent.factors.shape)), 1.0))
        out.append(RopeScaling(f, int(rng.choice([0, 4, 12])), t, method=f"{parent.method}~{len(out)}"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--candidates", type=int, default=24)
    parser.add_argument("--held-out", type=int, default=2, help="reference documents")
    parser.add_argument("--skip-tokens", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--without", nargs="*", default=[], metavar="PREFIX",
        help="leave out variants whose name starts with PREFIX (e.g. 'needle full': at 32k it is "
        "four 32k forwards per candidate)",
    )  # fmt: skip
    parser.add_argument(
        "--table", action="store_true", help="only print the table of what the results file holds"
    )
    args = parser.parse_args()
    out = ROOT / "bench" / "results" / f"proxy-{args.length}.jsonl"
    if args.table:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        done = {(r["candidate"], r["variant"]): r for r in rows}
        names = list(dict.fromkeys(r["variant"] for r in rows))
        table(done, 1 + max(r["candidate"] for r in rows), names, args.length)
        return

    import torch

    from longrope_opt import RopeSpec
    from longrope_opt.data import load_samples
    from longrope_opt.models import load_model
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.objectives import needle_nll
    from longrope_opt.objectives import needle_prompts
    from longrope_opt.patching import apply_rope_scaling

    torch.set_num_threads(2)
    model, tokenizer = load_model("smollm2-135m", fuse=True)
    spec = RopeSpec.from_config(model.config)
    L, K = args.length, args.skip_tokens
    search = load_samples("builtin", tokenizer, L, 1, seed=args.seed)  # what a search sees
    held = load_samples(
        "builtin", tokenizer, L, args.held_out, seed=args.seed + 1, exclude=search.doc_ids
    )
    short = load_samples("builtin", tokenizer, K, 4, seed=args.seed)
    needle_full = needle_prompts(tokenizer, search, L, seed=args.seed)
    needle_skip = needle_prompts(tokenizer, short[:2], L, skip_tokens=K, seed=args.seed)

    def needle(prompts) -> float:
        nll = sum(needle_nll(model, p)[0] for p in prompts)
        tokens = sum(p.answer_span[1] - p.answer_span[0] for p in prompts)
        return math.exp(nll / tokens)

    variants = {
        "reference": lambda: evaluate_perplexity(model, held, None).ppl,
        f"ppl truncate 1x{L}": lambda: evaluate_perplexity(model, search, None).ppl,
        f"ppl skip 4x{K}x2": lambda: evaluate_perplexity(
            model, short, None, mode="skip", window=L, skip_tokens=K, skip_chunks=2
        ).ppl,
        f"ppl skip 4x{K}x4": lambda: evaluate_perplexity(
            model, short, None, mode="skip", window=L, skip_tokens=K, skip_chunks=4
        ).ppl,
        f"needle full 1x4x{L}": lambda: needle(needle_full),
        f"needle skip 2x4x{K}": lambda: needle(needle_skip),
    }
    variants = {k: v for k, v in variants.items() if not any(k.startswith(p) for p in args.without)}
    if "reference" not in variants:
        parser.error("--without: the reference cannot be left out")
    done = {}
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done[(r["candidate"], r["variant"])] = r
    cands = candidates(spec, L, args.candidates, args.seed)
    evaluate_perplexity(model, short[:1], None, mode="skip", window=L, skip_tokens=K)  # compile
    for i, sc in enumerate(cands):
        for name, run in variants.items():
            if (i, name) in done:
                continue
            t0 = time.perf_counter()
            with apply_rope_scaling(model, sc), torch.inference_mode():
                value = float(run())
            row = {"candidate": i, "method": sc.method, "variant": name, "value": value,
                   "seconds": round(time.perf_counter() - t0, 2)}  # fmt: skip
            done[(i, name)] = row
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{i:>3} {sc.method:<14} {name:<24} {value:10.4f} {row['seconds']:7.1f}s",
                  file=sys.stderr, flush=True)  # fmt: skip
    table(done, len(cands), list(variants), L)


def table(done: dict, n: int, variants: list, length: int) -> None:
    """Print the median cost and Spearman ρ (with a bootstrap 95 % interval over candidates).

    Each variant is ranked over the candidates it was run on (column n): an expensive variant
    may cover only the first candidates (``--candidates 12 --without …``)."""
    from scipy.stats import spearmanr

    ref_all = {i: done[(i, "reference")]["value"] for i in range(n) if (i, "reference") in done}
    best = min(ref_all.values())
    near_all = {i for i, v in ref_all.items() if v <= 1.03 * best}
    needle_ref = next((v for v in variants if v.startswith("needle full")), None)
    rng = np.random.default_rng(0)
    print(f"\n{len(ref_all)} candidates at {length} ({len(near_all)} within 3 % of the best "
          f"reference perplexity {best:.3f}); ρ = Spearman, [bootstrap 95 % over candidates]")  # fmt: skip
    print(f"{'objective':<26}{'n':>4}{'s/eval':>8}{'ρ vs ref':>10}{'95 % CI':>16}{'ρ near':>8}"
          f"{'ρ vs needle-full':>18}")  # fmt: skip
    for v in variants:
        ids = [i for i in sorted(ref_all) if (i, v) in done]
        if len(ids) < 3:
            continue
        ref = np.array([ref_all[i] for i in ids])
        vals = np.array([done[(i, v)]["value"] for i in ids])
        secs = np.median([done[(i, v)]["seconds"] for i in ids])  # robust to a busy machine
        rho = spearmanr(ref, vals).statistic
        boots = []
        for _ in range(2000):
            k = rng.integers(0, len(ids), len(ids))
            if len(set(k)) > 2:
                boots.append(spearmanr(ref[k], vals[k]).statistic)
        lo, hi = np.nanpercentile(boots, [2.5, 97.5])
        near = [k for k, i in enumerate(ids) if i in near_all]
        rho_near = spearmanr(ref[near], vals[near]).statistic if len(near) > 2 else math.nan
        rho_n = math.nan
        if needle_ref is not None and v.startswith("needle"):
            both = [k for k, i in enumerate(ids) if (i, needle_ref) in done]
            nref = np.array([done[(ids[k], needle_ref)]["value"] for k in both])
            rho_n = spearmanr(nref, vals[both]).statistic if len(both) > 2 else math.nan
        print(f"{v:<26}{len(ids):4d}{secs:8.1f}{rho:10.3f}   [{lo:5.2f}, {hi:5.2f}]{rho_near:8.3f}"
              f"{rho_n:18.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
