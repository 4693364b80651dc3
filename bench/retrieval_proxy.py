"""Does a cheap needle test order methods as 32k passkey retrieval does?

The 4x table (studies/extend_4x_smollm2.py) found that both perplexity searches lose passkeys at
32k that YaRN-cd retrieves. A passkey key at 32k costs one 32k forward (≈ 1 min on an AMX CPU,
≈ 5 min without), too much to check every candidate of a search. This bench scores every row
of the table with the needle prompt in ``skip`` mode (LongRoPE2's needle-driven test, PoSE-style:
`--skip-tokens` real tokens of a document whose position ids span the target window, the needle
at a chosen depth, the question at the end) and prints it beside the table's passkey result at
the target, so one can see whether the cheap score would have flagged the retrieval loss.

    python bench/retrieval_proxy.py                          # the 4x table's methods, 32k
    python bench/retrieval_proxy.py --docs 2 --depths 4      # quicker

Needle documents are search-side (the 4x table's held-out windows are excluded). Per method:
mean answer NLL (nats per answer token) with a bootstrap 95 % interval over prompts, answers
retrieved greedily, the same split at depth <= 0.35 (far from the question), the paired
difference in answer NLL against YaRN-cd on the same prompts (bootstrap over prompts), and the
passkey result from <out>.json. Per-prompt values go to `--json`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from contextlib import nullcontext
from pathlib import Path

import numpy as np


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "extend-4x"),
                   help="the 4x table's results prefix (<out>.db, <out>.json)")  # fmt: skip
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--corpus", default="builtin")
    p.add_argument("--target-length", type=int, default=32768)
    p.add_argument("--skip-tokens", type=int, default=2048)
    p.add_argument("--docs", type=int, default=4, help="needle documents")
    p.add_argument("--depths", type=int, default=6, help="needle depths per document")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--json", default=str(ROOT / "bench" / "results" / "retrieval-proxy.json"),
                   help="where the per-prompt values go")  # fmt: skip
    args = p.parse_args()
    for name in ("docs", "depths"):
        if getattr(args, name) < (1 if name == "docs" else 4):
            p.error(f"--{name} is too small, got {getattr(args, name)}")
    return args


def main() -> None:
    args = parse()
    import torch

    from longrope_opt.data import load_samples
    from longrope_opt.objectives import needle_nll
    from longrope_opt.objectives import needle_prompts
    from longrope_opt.patching import apply_rope_scaling

    spec = importlib.util.spec_from_file_location("x4", ROOT / "studies" / "extend_4x_smollm2.py")
    x4 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(x4)

    L = args.target_length
    raw, model, tok, methods = x4.load_table(args.out, args.model, args.dtype, L, "--target-length")
    held = next(row["docs"] for row in raw.values() if "docs" in row)
    docs = load_samples(args.corpus, tok, args.skip_tokens, args.docs, seed=0, exclude=held)
    depths = np.linspace(0.05, 0.95, args.depths).round(3).tolist()
    prompts = needle_prompts(tok, list(docs), L, depths=depths, skip_tokens=args.skip_tokens)
    rng = np.random.default_rng(0)
    print(f"{L} positions, {len(prompts)} needle prompts of {args.skip_tokens} tokens "
          f"({args.docs} documents x depths {depths})")  # fmt: skip
    print(f"{'method':<14}{'answer NLL':>11}{'95 % CI':>18}{'retrieved':>11}{'far':>8}"
          f"{'vs yarn-cd':>11}{'95 % CI':>18}{'passkey ' + str(L):>16}")  # fmt: skip
    per_prompt: dict[str, list[float]] = {}
    for name, scaling in methods.items():
        nll, ok = [], []
        patch = nullcontext() if scaling is None else apply_rope_scaling(model, scaling)
        with torch.inference_mode(), patch:
            for prompt in prompts:
                total, correct = needle_nll(model, prompt)
                nll.append(total / (prompt.answer_span[1] - prompt.answer_span[0]))
                ok.append(correct)
        per_prompt[name] = nll
        nll_a = np.array(nll)
        lo, hi = x4.stats.bootstrap(nll_a, rng, resamples=2000)
        diff = nll_a - np.array(per_prompt.get("yarn-cd", nll))  # yarn-cd comes before searches
        d_lo, d_hi = x4.stats.bootstrap(diff, rng, resamples=2000)
        far = [c for c, p in zip(ok, prompts) if p.depth <= 0.35]
        keys = raw.get(name, {}).get(f"passkey{L}", [])
        passkey = f"{sum(keys)}/{len(keys)}" if keys else "not run"
        print(f"{name:<14}{nll_a.mean():11.3f}   [{lo:6.3f}, {hi:6.3f}]"
              f"{sum(ok):>6}/{len(ok):<4}{sum(far):>4}/{len(far):<3}"
              f"{diff.mean():+11.3f}   [{d_lo:+.3f}, {d_hi:+.3f}]{passkey:>16}", flush=True)  # fmt: skip
    out = Path(args.json)
    prompt_info = [{"depth": p.depth, "needle_position": p.needle_position} for p in prompts]
    out.write_text(json.dumps({"prompts": prompt_info, "answer_nll": per_prompt}, indent=1))


if __name__ == "__main__":
    main()
