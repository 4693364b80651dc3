"""One command that proves the GPU path on a machine with CUDA (≈ 10 minutes on one modern GPU).

    python bench/gpu_check.py                  # after the README's "On a GPU" set-up
    python bench/gpu_check.py --device cuda:1

Checks, each printed with PASS/FAIL, then a table:
  1. the default model loads on CUDA (bf16, or fp16 where bf16 is unsupported);
  2. perplexity of the patched model with SDPA — and with flash-attn 2 when installed — agrees
     with the CPU fp32 reference within 1 % at 4k and 16k tokens for none, YaRN and one searched
     vector (bench/results/searched-smollm2-16k.json);
  3. one 16k and one 32k evaluation timed (tokens/s) with their peak GPU memory;
  4. an 8-trial search runs to completion on CUDA, and rerunning it resumes (adds no trial).
No network beyond what the README's set-up fetched. Exits 2 with one line on a machine without
CUDA, 1 when a check fails, 0 when all pass.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.01


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--skip-cpu-reference", action="store_true",
                        help="only the GPU rows (no agreement check)")  # fmt: skip
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: error: needs a CUDA GPU, and torch sees none here "
              f"(torch {torch.__version__}).", file=sys.stderr)  # fmt: skip
        return 2

    from longrope_opt import RopeScaling
    from longrope_opt import RopeSpec
    from longrope_opt.data import load_samples
    from longrope_opt.models import flash_attention_installed
    from longrope_opt.models import load_model
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.rope import none
    from longrope_opt.rope import yarn
    from longrope_opt.studies import SearchConfig
    from longrope_opt.studies import run_search

    checks: list[tuple[str, bool, str]] = []
    rows: list[str] = []
    searched = json.loads((ROOT / "bench/results/searched-smollm2-16k.json").read_text())
    device = args.device

    model, tokenizer = load_model("smollm2-135m", device=device, attn="sdpa")
    compute = model.longrope_opt_compute
    checks.append(("load on CUDA", str(model.device).startswith("cuda"),
                   f"{compute['path']} on {compute['cpu']}"))  # fmt: skip
    spec = RopeSpec.from_config(model.config)
    methods = {
        "none": lambda n: none(spec),
        "yarn": lambda n: yarn(spec, max(n, 2 * spec.original_length)),
        "searched": lambda n: RopeScaling.from_dict(searched),
    }
    lengths = [4096, 16384]
    samples = {n: load_samples("builtin", tokenizer, n, 1, seed=0) for n in lengths}
    gpu: dict[tuple[str, str, int], float] = {}
    kernels = ["sdpa"] + (["flash_attention_2"] if flash_attention_installed() else [])
    for kernel in kernels:
        if kernel != "sdpa":
            del model
            torch.cuda.empty_cache()
            model, _ = load_model("smollm2-135m", device=device, attn=kernel)
        for n in lengths:
            for name, make in methods.items():
                gpu[kernel, name, n] = evaluate_perplexity(model, samples[n], make(n)).ppl
    if not args.skip_cpu_reference:
        cpu_model, _ = load_model("smollm2-135m", device="cpu", dtype="float32", fuse=False)
        for n in lengths:
            for name, make in methods.items():
                ref = evaluate_perplexity(cpu_model, samples[n], make(n)).ppl
                for kernel in kernels:
                    rel = gpu[kernel, name, n] / ref - 1
                    ok = abs(rel) <= TOLERANCE
                    checks.append((f"ppl {kernel} {name} {n}", ok,
                                   f"{gpu[kernel, name, n]:.4f} vs CPU fp32 {ref:.4f} ({100 * rel:+.2f} %)"))  # fmt: skip
        del cpu_model

    # Timing at 16k and 32k with the default kernel, peak memory per evaluation.
    del model
    torch.cuda.empty_cache()
    model, tokenizer = load_model("smollm2-135m", device=device)
    for n in (16384, 32768):
        data = load_samples("builtin", tokenizer, n, 1, seed=0)
        scaling = yarn(spec, n) if n > spec.original_length else None
        evaluate_perplexity(model, data, scaling)  # warm-up (and the one-off compile)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        ppl = evaluate_perplexity(model, data, scaling).ppl
        torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated(device) / 2**30
        rows.append(f"{n:>7} {seconds:8.2f} {n / seconds:10.0f} {peak:9.2f} {ppl:9.3f}")
        checks.append((f"evaluate {n // 1024}k", ppl == ppl, f"{seconds:.2f} s, {peak:.2f} GiB"))

    # An 8-trial search on CUDA, then the same command again: resumed, nothing added.
    with tempfile.TemporaryDirectory() as folder:
        storage = f"sqlite:///{folder}/gpu.db"
        config = SearchConfig(target_length=16384, samples=1, sampler_options=dict(
            population_size=4, num_mutations=2, num_crossovers=2, num_parents=2))  # fmt: skip
        first = run_search(config, storage=storage, n_trials=8, device=device, model=model,
                           tokenizer=tokenizer, progress=False)  # fmt: skip
        done = len([t for t in first.study.trials if t.state.is_finished()])
        again = run_search(config, storage=storage, n_trials=8, device=device, model=model,
                           tokenizer=tokenizer, progress=False)  # fmt: skip
        peaks = [t.user_attrs.get("peak_gpu_memory_mb") for t in again.study.trials]
        checks.append(("search 8 trials", done == 8 and first.finished == 8,
                       f"best {first.study.best_value:.4f}"))  # fmt: skip
        checks.append(("resume adds nothing", again.finished == 0,
                       f"{len(again.study.trials)} trials"))  # fmt: skip
        checks.append(("peak memory recorded", all(p for p in peaks[3:]),
                       f"{max(p or 0 for p in peaks):.0f} MB"))  # fmt: skip

    print(f"\nGPU: {torch.cuda.get_device_name(device)}; torch {torch.__version__}; "
          f"kernels {', '.join(kernels)}")  # fmt: skip
    print(f"{'tokens':>7} {'s/eval':>8} {'tokens/s':>10} {'peak GiB':>9} {'ppl':>9}")
    print("\n".join(rows))
    for name, ok, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name:<32} {detail}")
    failed = sum(not ok for _, ok, _ in checks)
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
