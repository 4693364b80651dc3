"""How far does fusing the element-wise work (`fuse_elementwise`) move a perplexity? (store paths)

`extend` fuses a model's element-wise work with `torch.compile`; `validate` runs it eager. Fused
kernels keep bf16 intermediates in fp32 where eager rounds each op, so the two do not give the
same perplexity, and the measurement store keeps their records apart
(`longrope_opt.evaluation.measurement_path`). This measures the gap on the same documents: eager
twice (is eager itself repeatable?), then fused twice (the first includes the one-off compile).

    python bench/fusion_numerics.py                                   # SmolLM2, 8k, 2 built-in docs
    python bench/fusion_numerics.py --model gemma3-270m --corpus prose --docs 2

Prints one line per pass (perplexity per document, seconds) and the fused/eager difference.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--corpus", default="builtin")
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--docs", type=int, default=2)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()

    import torch

    from longrope_opt.data import load_samples
    from longrope_opt.models import cpu_name
    from longrope_opt.models import load_model
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.patching import fuse_elementwise

    model, tokenizer = load_model(args.model, dtype=args.dtype)
    samples = load_samples(args.corpus, tokenizer, args.length, args.docs, 1)
    print(f"# python bench/fusion_numerics.py --model {args.model} --corpus {args.corpus} "
          f"--length {args.length} --docs {args.docs} --dtype {args.dtype} on {cpu_name()}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")  # fmt: skip
    seen: dict[str, list[float]] = {}
    for name in ("eager", "eager again", "fused (compiles)", "fused again"):
        if name.startswith("fused"):
            fuse_elementwise(model)  # idempotent
        start = time.perf_counter()
        with torch.inference_mode():
            seen[name] = evaluate_perplexity(model, samples, None).sample_ppl
        cells = "  ".join(f"{p:.5f}" for p in seen[name])
        print(f"{name:<18}{cells}   {time.perf_counter() - start:6.0f} s", flush=True)
    eager, fused = seen["eager"], seen["fused again"]
    repeat = max(abs(a / b - 1) for a, b in zip(seen["eager again"], eager))
    gap = [f / e - 1 for f, e in zip(fused, eager)]
    print(f"eager repeats within {repeat:.2e}; fused/eager - 1 per document: "
          + "  ".join(f"{g:+.3%}" for g in gap))  # fmt: skip


if __name__ == "__main__":
    main()
