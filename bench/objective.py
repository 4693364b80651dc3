"""The perplexity objective vs naive transformers fp32, on smollm2-135m at long length.

One run, three worker processes (so each peak RSS is its own), the same samples and the same 8
candidates (none, PI, NTK, YaRN, 4 random monotone λ):
  naive  — fp32, ``model(ids, labels=ids)`` (full-vocabulary logits), our RoPE patch only;
  ours   — `evaluate_perplexity`: bf16 body, fp32 angles, chunked LM head + loss, SDPA;
  fused  — ours + `fuse_elementwise` (torch.compile of norms and MLPs).
Prints tokens/s ratios, peak-RSS ratios, perplexity difference, Spearman correlation of the 8
perplexities against naive fp32, achieved GFLOP/s and its share of this machine's bf16 GEMM peak
measured in the same run. No absolute targets are asserted.

    python bench/objective.py                      # 16k, 1 sample (≈ 25 min here)
    python bench/objective.py --length 4096 --samples 2
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def candidates(spec, length: int) -> list:
    from longrope_opt import RopeScaling
    from longrope_opt.rope import METHODS

    # Below the trained length (quick smoke runs) the candidates are those for 2× extension.
    length = max(length, 2 * spec.original_length)
    out = [
        METHODS[m](spec, length) if m != "none" else METHODS["none"](spec)
        for m in ("none", "pi", "ntk", "yarn")
    ]
    rng = np.random.default_rng(0)
    s = length / spec.original_length
    for _ in range(4):
        out.append(
            RopeScaling(
                np.sort(rng.uniform(1.0, 1.25 * s, spec.n_factors)), 0, 1.0, method="random"
            )
        )
    return out


def worker(kind: str, length: int, k: int) -> None:
    import torch

    from longrope_opt import RopeSpec
    from longrope_opt.data import load_samples
    from longrope_opt.models import load_model
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.patching import apply_rope_scaling

    torch.set_num_threads(2)
    dtype = "float32" if kind == "naive" else "bfloat16"
    model, tokenizer = load_model("smollm2-135m", dtype=dtype, fuse=kind == "fused")
    spec = RopeSpec.from_config(model.config)
    samples = load_samples("builtin", tokenizer, length, k, seed=0)
    cands = candidates(spec, length)
    if kind == "fused":  # compile once, outside the timing
        evaluate_perplexity(model, samples[:1], cands[0])
    ppls, seconds = [], []
    for scaling in cands:
        start = time.perf_counter()
        if kind == "naive":
            nll = tokens = 0.0
            with torch.no_grad(), apply_rope_scaling(model, scaling):
                for ids in samples:
                    loss = model(ids[None], labels=ids[None]).loss
                    nll += float(loss) * (ids.numel() - 1)
                    tokens += ids.numel() - 1
            ppl = float(np.exp(nll / tokens))
        else:
            ppl = evaluate_perplexity(model, samples, scaling).ppl
        seconds.append(time.perf_counter() - start)
        ppls.append(ppl)
        print(
            f"  [{kind}] {scaling.method:<7} ppl {ppl:8.3f}  {seconds[-1]:6.1f} s",
            file=sys.stderr,
            flush=True,
        )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"ppl": ppls, "seconds": seconds, "peak_mb": peak_mb, "tokens": length * k}))


def bf16_peak_gflops() -> float:
    import torch

    torch.set_num_threads(2)
    a = torch.randn(4096, 4096).bfloat16()
    b = torch.randn(4096, 4096).bfloat16()
    a @ b
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        a @ b
        best = max(best, 2 * 4096**3 / (time.perf_counter() - start) / 1e9)
    return best


def forward_flop(length: int) -> float:
    # smollm2-135m: 30 layers, hidden 576, 9 heads × 64, 3 kv heads, MLP 1536, vocab 49152.
    L, H, D, hidden, kv, mlp, vocab = 30, 9, 64, 576, 192, 1536, 49152
    linear = 2 * length * L * (2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * mlp)
    head = 2 * length * hidden * vocab
    attention = L * 2 * length * length * D * H  # QK^T + PV over the causal half
    return linear + head + attention


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--kinds", default="naive,ours,fused")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.length, args.samples)
        return
    from scipy.stats import spearmanr

    results = {}
    for kind in args.kinds.split(","):
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            kind,
            "--length",
            str(args.length),
            "--samples",
            str(args.samples),
        ]
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        results[kind] = json.loads(out.strip().splitlines()[-1])
    peak = bf16_peak_gflops()
    flop = forward_flop(args.length) * args.samples
    base = results.get("naive")
    print(
        f"\nsmollm2-135m, {args.length} tokens × {args.samples} sample(s), 8 candidates, 2 threads"
    )
    print(
        f"bf16 GEMM peak measured here: {peak:.0f} GFLOP/s; one forward = {forward_flop(args.length) / 1e12:.2f} TFLOP"
    )
    head = f"{'path':<7}{'s/eval':>8}{'tok/s':>8}{'speed×':>8}{'peakRSS MB':>12}{'RSS×':>7}{'ppl(none)':>11}{'Δppl %':>8}{'spearman':>9}{'GFLOP/s':>9}{'%peak':>7}"
    print(head)
    print("-" * len(head))
    for kind, r in results.items():
        sec = float(np.median(r["seconds"]))
        tps = r["tokens"] / sec
        speed = (float(np.median(base["seconds"])) / sec) if base else float("nan")
        rss = r["peak_mb"] / base["peak_mb"] if base else float("nan")
        dppl = (
            100 * max(abs(a / b - 1) for a, b in zip(r["ppl"], base["ppl"]))
            if base
            else float("nan")
        )
        rho = spearmanr(r["ppl"], base["ppl"]).statistic if base else float("nan")
        gflops = flop / sec / 1e9
        print(
            f"{kind:<7}{sec:8.1f}{tps:8.0f}{speed:8.2f}{r['peak_mb']:12.0f}{rss:7.2f}{r['ppl'][0]:11.3f}{dppl:8.2f}{rho:9.3f}{gflops:9.0f}{100 * gflops / peak:6.0f}%"
        )
    print("(Δppl %: largest relative difference over the 8 candidates vs naive fp32)")


if __name__ == "__main__":
    main()
