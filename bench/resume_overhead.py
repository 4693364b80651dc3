"""What keeping a forward resumable costs: a perplexity window with and without it.

`load_model` names a directory on the model, and each perplexity window then runs inside
`resumable_forward`: the first layer's call hashes what reaches the layers (the embedded input,
the cos/sin, the weights once per model), and a layer that finishes two minutes after the last
save writes the decoder's output to disk. This times the window both ways, alternating, in one
process (the baseline is the plain window), and one save at the sizes the Gemma 3 runs write:
a decoder output, and the keys and values one layer of a branched passkey haystack's capture
leaves (saved once per layer beside it). No target is asserted.

    python bench/resume_overhead.py                         # smollm2-135m, 8k tokens, 3 rounds
    python bench/resume_overhead.py --model gemma3-270m --tokens 16384 --rounds 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    # torch and the models on use: --help answers at once
    import torch

    from longrope_opt.models import cpu_name
    from longrope_opt.models import load_model
    from longrope_opt.objectives import truncate_window
    from longrope_opt.objectives import window_nll

    model, _ = load_model(args.model)
    ids = torch.randint(0, 1000, (args.tokens,), generator=torch.Generator().manual_seed(0))
    (window,) = truncate_window(len(ids), len(ids))
    scratch = Path(tempfile.mkdtemp())
    seconds: dict[str, list[float]] = {"plain": [], "resumable": []}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for name, where in (("plain", None), ("resumable", scratch)):
                model.longrope_opt_forwards = where
                start = time.perf_counter()
                window_nll(model, ids, window)
                seconds[name].append(time.perf_counter() - start)
        hidden = torch.randn(131072, model.config.hidden_size)
        start = time.perf_counter()
        torch.save({"hidden": hidden}, scratch / "save.pt")
        save = time.perf_counter() - start
        config = model.config.get_text_config()
        heads = config.num_key_value_heads
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv = {k: torch.randn(1, heads, 131072, dim, dtype=model.dtype) for k in ("key", "value")}
        start = time.perf_counter()
        torch.save(kv, scratch / "layer.kv")
        kv_save = time.perf_counter() - start
    plain = min(seconds["plain"])
    print(f"{args.model}, {args.tokens} tokens, {args.rounds} rounds, {cpu_name()}")
    print(f"{'window':<12} {'best s':>8} {'ratio':>7}")
    for name, times in seconds.items():
        print(f"{name:<12} {min(times):8.2f} {min(times) / plain:7.3f}")
    size = hidden.numel() * hidden.element_size() / 2**20
    print(f"one save of a 131072-token decoder output ({size:.0f} MiB): {save:.2f} s")
    kv_size = sum(t.numel() * t.element_size() for t in kv.values()) / 2**20
    print(f"one layer's captured keys and values at 131072 tokens ({kv_size:.0f} MiB, "
          f"{model.dtype}): {kv_save:.2f} s")


if __name__ == "__main__":
    main()
