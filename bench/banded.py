"""Sliding-window layers banded against transformers' (n, n) mask: a long forward of Gemma 3 270M.

One run, one worker process per (path, length) so that each peak RSS is its own; the same random
tokens, bf16 weights, the decoder body as the objectives run it (`decoder_hidden`):
  masked  — today's path before the banded attention: SDPA with transformers' sliding mask;
  banded  — `longrope_opt.patching.BANDED`, what `load_model` now gives a model with sliding layers.
Every decoder layer is timed (forward hooks), so the table says what a sliding layer costs as a
fraction of a global one, and how the whole forward compares with its global layers alone (the
band is linear in n: the limit is the global layers' causal attention). The LM head and loss are
timed once per length on the banded path (chunked over positions: the 262k vocabulary's logits
at 128k would be 137 GB in fp32). Lengths past `--masked-max` are not run on the masked path:
its mask alone is n² bytes (16 GiB at 128k). No targets are asserted.

    python bench/banded.py                                    # 16k-128k (hours on 2 cores)
    python bench/banded.py --lengths 4k,8k --masked-max 8k    # a quick look
    python bench/banded.py --model smollm2-135m --lengths 8k  # no sliding layers: one path
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def parse_length(text: str) -> int:
    text = text.strip().lower()
    return int(float(text[:-1]) * 1024) if text.endswith("k") else int(text)


def worker(model_name: str, path: str, length: int, loss: bool) -> None:
    import torch

    from longrope_opt.models import chunked_nll
    from longrope_opt.models import decoder_hidden
    from longrope_opt.models import load_model
    from longrope_opt.patching import attention_of
    from longrope_opt.patching import set_attention
    from longrope_opt.patching import sliding_window_of

    torch.set_num_threads(2)
    model, _ = load_model(model_name, dtype="bfloat16", device="cpu")
    if path == "masked":
        set_attention(model, "sdpa")
    layers = model.get_decoder().layers
    kinds = list(getattr(model.config, "layer_types", None) or ["full_attention"] * len(layers))
    seconds = [0.0] * len(layers)
    started: dict[int, float] = {}
    for i, layer in enumerate(layers):
        layer.register_forward_pre_hook(lambda m, a, i=i: started.__setitem__(i, time.perf_counter()))
        layer.register_forward_hook(
            lambda m, a, o, i=i: seconds.__setitem__(i, time.perf_counter() - started[i]))
    ids = torch.randint(0, int(model.config.vocab_size), (length,),
                        generator=torch.Generator().manual_seed(0))  # fmt: skip
    with torch.inference_mode():
        start = time.perf_counter()
        hidden = decoder_hidden(model, ids)
        forward = time.perf_counter() - start
        head = None
        if loss:
            start = time.perf_counter()
            chunked_nll(model, hidden[:-1], ids[1:], count_correct=False)
            head = time.perf_counter() - start
    glob = [s for s, k in zip(seconds, kinds) if "sliding" not in k]
    slide = [s for s, k in zip(seconds, kinds) if "sliding" in k]
    print(json.dumps({
        "path": path, "attn": attention_of(model), "length": length, "forward_s": forward,
        "global_s": sum(glob), "n_global": len(glob), "sliding_s": sum(slide),
        "n_sliding": len(slide), "head_s": head, "window": sliding_window_of(model.config),
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--lengths", default="16k,32k,64k,128k")
    parser.add_argument("--masked-max", default="64k",
                        help="longest length run on the masked path (its mask is n² bytes)")
    parser.add_argument("--output", default=None, help="also write the rows as JSON lines here")
    parser.add_argument("--worker", nargs=3, metavar=("PATH", "LENGTH", "LOSS"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.worker:
        path, length, loss = args.worker
        worker(args.model, path, int(length), loss == "1")
        return

    from longrope_opt.models import cpu_name
    from longrope_opt.models import read_config
    from longrope_opt.patching import band_cost
    from longrope_opt.patching import sliding_window_of

    lengths = [parse_length(x) for x in args.lengths.split(",")]
    window = sliding_window_of(read_config(args.model))
    paths = ("masked", "banded") if window else ("banded",)
    print(f"CPU: {cpu_name()}; model {args.model}, bf16, window {window}")
    rows = []
    for length in lengths:
        for path in paths:
            if path == "masked" and length > parse_length(args.masked_max):
                rows.append({"path": path, "length": length, "skipped": True})
                continue
            cmd = [sys.executable, __file__, "--model", args.model, "--worker", path,
                   str(length), "1" if path == "banded" else "0"]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                tail = done.stderr.strip().splitlines()[-1:] or ["killed"]
                rows.append({"path": path, "length": length, "error": tail[0]})
            else:
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
            if args.output:
                with open(args.output, "a") as f:
                    f.write(json.dumps(rows[-1]) + "\n")
    print()
    by = {(r["path"], r["length"]): r for r in rows}
    print(f"{'length':>7}  {'masked s':>9} {'GiB':>5}  {'banded s':>9} {'GiB':>5}  {'speed-up':>8}"
          f"  {'slide/global':>12} {'band limit':>10}  {'fwd/global':>10}  {'LM head s':>9}")
    for length in lengths:
        b, m = by.get(("banded", length), {}), by.get(("masked", length), {})
        if "forward_s" not in b:
            print(f"{length:>7}  banded: {b.get('error', 'not run')}")
            continue
        if "forward_s" in m:
            masked = f"{m['forward_s']:>9.1f} {m['peak_rss_gib']:>5.1f}"
            speed = f"{m['forward_s'] / b['forward_s']:>7.1f}x"
        else:
            masked = f"{'not run' if m.get('skipped') else 'failed':>9} {'':>5}"
            speed = f"{'':>8}"
        per_slide = b["sliding_s"] / max(1, b["n_sliding"])
        per_global = b["global_s"] / max(1, b["n_global"])
        fraction = per_slide / per_global if b["n_global"] and b["n_sliding"] else float("nan")
        limit = band_cost(length, window) if window else float("nan")
        ratio = b["forward_s"] / b["global_s"] if b["global_s"] else float("nan")
        print(f"{length:>7}  {masked}  {b['forward_s']:>9.1f} {b['peak_rss_gib']:>5.1f}  {speed}"
              f"  {fraction:>12.3f} {limit:>10.3f}  {ratio:>9.2f}x  {b['head_s'] or 0:>9.1f}")
    print("\nslide/global: one sliding layer's seconds over one global layer's (banded path); band "
          "limit: the keys a sliding row sees over a causal row's; fwd/global: the decoder "
          "forward over its global layers alone; LM head: the chunked head and loss, once.")


if __name__ == "__main__":
    main()
