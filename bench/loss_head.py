"""The LM head and its loss on a CPU: one chunk of whole-vocabulary logits against vocabulary tiles.

`chunked_nll` scores a long forward's hidden states. With Gemma 3's 262,144-token vocabulary the
whole-chunk path writes every fp32 logit to memory and reads it back in each pass of the
softmax; at 64k tokens that is 17 G logits, and on a 2-core CPU it took longer than the 18
layers before it. The tiled path (what `chunked_nll` does on a CPU) cuts the vocabulary into
tiles that stay in cache and carries the log-sum-exp across them.

Both paths run here on the same random bf16 hidden states and head of each model's shape (the
whole-chunk path is what `chunked_nll` takes for a head that is not a plain `torch.nn.Linear`,
so a subclass of it selects it), alternating, `--repeats` times each; the table prints the
fastest time of each and their ratio, and the two sums' relative difference. No targets are
asserted; compare ratios only within one run.

    python bench/loss_head.py                        # about 2 minutes on 2 cores
    python bench/loss_head.py --positions 8192 --repeats 3 --threads 2
"""

from __future__ import annotations

import argparse
import platform
import time
from types import SimpleNamespace


#: (name, vocabulary, width) of the heads measured: the two real models.
HEADS = (("gemma3-270m", 262144, 640), ("smollm2-135m", 49152, 576))


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))  # fmt: skip
    p.add_argument("--positions", type=int, default=4096, help="positions scored (default 4096)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each path (default 3)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = p.parse_args()
    import torch

    from longrope_opt.models import chunked_nll

    if args.threads:
        torch.set_num_threads(args.threads)

    class WholeChunkHead(torch.nn.Linear):
        """A head `chunked_nll` does not tile: the whole-chunk path."""

    print(f"{_cpu()}, {torch.get_num_threads()} threads, torch {torch.__version__}; "
          f"{args.positions} positions, bf16, fastest of {args.repeats}")  # fmt: skip
    print(f"{'head':14} {'vocab':>7} {'whole chunk':>12} {'tiles':>8} {'ratio':>6} {'rel. diff':>10}")
    gen = torch.Generator().manual_seed(0)
    for name, vocab, width in HEADS:
        weight = (torch.randn(vocab, width, generator=gen) * 0.05).bfloat16()
        hidden = torch.randn(args.positions, width, generator=gen).bfloat16()
        targets = torch.randint(0, vocab, (args.positions,), generator=gen)
        heads = {}
        for label, cls in (("whole", WholeChunkHead), ("tiles", torch.nn.Linear)):
            head = cls(width, vocab, bias=False, dtype=torch.bfloat16)
            head.weight = torch.nn.Parameter(weight, requires_grad=False)
            heads[label] = SimpleNamespace(config=SimpleNamespace(),
                                           get_output_embeddings=lambda h=head: h)  # fmt: skip
        best = {"whole": float("inf"), "tiles": float("inf")}
        sums = {}
        with torch.inference_mode():
            for _ in range(args.repeats):
                for label, model in heads.items():
                    start = time.perf_counter()
                    total, _ = chunked_nll(model, hidden, targets, count_correct=False)
                    best[label] = min(best[label], time.perf_counter() - start)
                    sums[label] = float(total)
        diff = abs(sums["tiles"] - sums["whole"]) / abs(sums["whole"])
        print(f"{name:14} {vocab:>7} {best['whole']:>11.2f}s {best['tiles']:>7.2f}s "
              f"{best['whole'] / best['tiles']:>5.2f}× {diff:>10.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
