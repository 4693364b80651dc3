"""Every compute path of the perplexity objective vs naive transformers fp32, at long length.

One run, one worker process per path (so each peak RSS is its own), the same samples and the
same 8 candidates (none, PI, NTK, YaRN, 4 random monotone λ):
  naive              — fp32, ``model(ids, labels=ids)`` (full-vocabulary logits), our RoPE patch;
  <path>[-fused]     — `evaluate_perplexity` on each compute path of `longrope_opt.models.PATHS`
                       (bfloat16, bf16-fp32attn, float32), with and without `fuse_elementwise`;
  auto               — what `--dtype auto` chooses on this machine (its probe, timed).
Prints the CPU, this machine's bf16 and fp32 GEMM peaks, then per path: s/eval, tokens/s, speed
vs naive fp32 and vs the auto choice, peak RSS, Δppl and Spearman ρ of the 8 perplexities
against naive fp32, achieved GFLOP/s and its share of the bf16 peak. No targets are asserted.

    python bench/objective.py                                  # 16k, 1 sample (≈ 45 min here)
    python bench/objective.py --length 4096 --kinds naive,bfloat16,float32
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


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
    if kind == "auto":  # only the choice and its probe time
        start = time.perf_counter()
        model, _ = load_model("smollm2-135m", dtype="auto", fuse=False)
        print(json.dumps({"choice": model.longrope_opt_compute,
                          "load_seconds": time.perf_counter() - start}))  # fmt: skip
        return
    fused = kind.endswith("-fused")
    dtype = "float32" if kind == "naive" else kind.removesuffix("-fused")
    model, tokenizer = load_model("smollm2-135m", dtype=dtype, fuse=fused)
    spec = RopeSpec.from_config(model.config)
    samples = load_samples("builtin", tokenizer, length, k, seed=0)
    cands = candidates(spec, length)
    if fused:  # compile once, outside the timing
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


def gemm_peak_gflops(dtype: str) -> float:
    import torch

    torch.set_num_threads(2)
    a = torch.randn(4096, 4096).to(getattr(torch, dtype))
    b = torch.randn(4096, 4096).to(getattr(torch, dtype))
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
    parser.add_argument(
        "--kinds",
        default="naive,auto,bfloat16,bfloat16-fused,bf16-fp32attn,bf16-fp32attn-fused,float32,"
        "float32-fused",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.length, args.samples)
        return
    from scipy.stats import spearmanr

    from longrope_opt.models import cpu_name

    results, choice = {}, None
    for kind in args.kinds.split(","):
        cmd = [sys.executable, __file__, "--worker", kind, "--length", str(args.length),
               "--samples", str(args.samples)]  # fmt: skip
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        record = json.loads(out.strip().splitlines()[-1])
        if kind == "auto":
            choice = record
        else:
            results[kind] = record
    bf16, fp32 = gemm_peak_gflops("bfloat16"), gemm_peak_gflops("float32")
    flop = forward_flop(args.length) * args.samples
    base = results.get("naive")
    auto_kind = None
    if choice is not None:
        auto_kind = choice["choice"]["path"] + "-fused"  # the CLI default is --fuse
        if auto_kind not in results:
            auto_kind = choice["choice"]["path"]
    print(f"\nCPU: {cpu_name()}; torch threads 2")
    print(f"GEMM peaks measured here (4096³): bf16 {bf16:.0f} GFLOP/s, fp32 {fp32:.0f} GFLOP/s "
          f"(×{bf16 / fp32:.2f}); one forward = {forward_flop(args.length) / 1e12:.2f} TFLOP")  # fmt: skip
    if choice is not None:
        c = choice["choice"]
        print(f"auto: {c['path']} ({c['source']}; probe {c['seconds']}); with --fuse: {auto_kind}")
    print(f"smollm2-135m, {args.length} tokens × {args.samples} sample(s), 8 candidates")
    head = (f"{'path':<21}{'s/eval':>8}{'tok/s':>8}{'×naive':>8}{'×auto':>7}{'peakRSS MB':>11}"
            f"{'Δppl %':>8}{'spearman':>9}{'GFLOP/s':>9}{'%bf16pk':>8}")  # fmt: skip
    print(head)
    print("-" * len(head))
    auto_sec = float(np.median(results[auto_kind]["seconds"])) if auto_kind else float("nan")
    for kind, r in results.items():
        sec = float(np.median(r["seconds"]))
        speed = (float(np.median(base["seconds"])) / sec) if base else float("nan")
        dppl = (100 * max(abs(a / b - 1) for a, b in zip(r["ppl"], base["ppl"]))
                if base else float("nan"))  # fmt: skip
        rho = spearmanr(r["ppl"], base["ppl"]).statistic if base else float("nan")
        gflops = flop / sec / 1e9
        mark = " *" if kind == auto_kind else ""
        print(f"{kind + mark:<21}{sec:8.1f}{r['tokens'] / sec:8.0f}{speed:8.2f}{auto_sec / sec:7.2f}"
              f"{r['peak_mb']:11.0f}{dppl:8.2f}{rho:9.3f}{gflops:9.0f}{100 * gflops / bf16:7.0f}%")  # fmt: skip
    print("(* the auto choice; ×auto > 1 is faster than it. Δppl %: largest relative difference "
          "over the 8 candidates vs naive fp32)")  # fmt: skip


if __name__ == "__main__":
    main()
