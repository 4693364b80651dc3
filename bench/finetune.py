"""What a fine-tuning step costs against a plain transformers forward + backward of its tokens.

A `finetune` step (transformers' Trainer, the patched RoPE, PoSE positions spread to the target,
the LM head's loss in chunks, AdamW) on SmolLM2 with `--tokens` real tokens at positions up to
`--target`, with and without gradient checkpointing, and the same work in a plain loop without
Trainer, against ``model(ids, labels=ids).loss.backward()`` on the same tokens (full-vocabulary
logits, no optimizer), all in one process under the same bf16 autocast. The steps run first, the baseline last: peak RSS is the process's
high-water mark, so the steps' figures are their own and the baseline's includes them.

    python bench/finetune.py                          # SmolLM2, 8k real tokens spread to 64k
    python bench/finetune.py --tokens 2048 --target 16384 --steps 3

Prints one line per variant: seconds per step (median of the timed steps; the first step of
each run, which builds the optimizer state, is not timed), tokens/s, peak RSS, and the ratio to
the baseline.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--corpus", default="builtin")
    parser.add_argument("--tokens", type=int, default=8192, help="real tokens a step")
    parser.add_argument("--target", type=int, default=65536, help="positions spread to")
    parser.add_argument("--steps", type=int, default=3, help="steps a variant (first untimed)")
    args = parser.parse_args()

    import torch
    from transformers import TrainerCallback

    from longrope_opt.data import load_samples
    from longrope_opt.models import cpu_name
    from longrope_opt.models import load_model
    from longrope_opt.patching import apply_rope_scaling
    from longrope_opt.rope import RopeSpec
    from longrope_opt.rope import yarn
    from longrope_opt.training import ChunkedLoss
    from longrope_opt.training import PoseSamples
    from longrope_opt.training import finetune

    model, tokenizer = load_model(args.model, dtype="float32", fuse=False)
    docs = list(load_samples(args.corpus, tokenizer, args.tokens, args.steps, 1))
    spec = RopeSpec.from_config(model.config)
    scaling = yarn(spec, args.target)
    print(f"# python bench/finetune.py --model {args.model} --tokens {args.tokens} --target "
          f"{args.target} --steps {args.steps} on {cpu_name()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, bf16 autocast over fp32 weights")  # fmt: skip

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_step_begin(self, *_: object, **__: object) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, *_: object, **__: object) -> None:
            self.seconds.append(time.perf_counter() - self.start)

    rows = []
    for name, checkpointing in (("finetune step", False), ("finetune step, checkpointed", True)):
        clock = Clock()
        finetune(model, docs, scaling, steps=args.steps, pose_tokens=args.tokens,
                 target_length=args.target, gradient_checkpointing=checkpointing,
                 callbacks=[clock], progress=False)  # fmt: skip
        rows.append((name, statistics.median(clock.seconds[1:] or clock.seconds), _rss_gib()))
    # the same work without Trainer: our loss (`ChunkedLoss`) and an AdamW step in a plain loop,
    # under the same patched RoPE and positions (what Trainer itself costs is the difference)
    model.train()
    item = PoseSamples(docs, tokens=args.tokens, target=args.target, items=len(docs))
    loss_of = ChunkedLoss(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, betas=(0.9, 0.95), weight_decay=0.0)
    seconds = []
    with apply_rope_scaling(model, scaling):
        for i in range(len(docs)):
            batch = {k: v[None] for k, v in item[i].items()}
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_of(**batch)["loss"]
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            seconds.append(time.perf_counter() - start)
    rows.append(("own loop, no Trainer", statistics.median(seconds[1:] or seconds), _rss_gib()))
    seconds = []
    for doc in docs:
        ids = doc[None]
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - start)
    base = statistics.median(seconds[1:] or seconds)
    rows.append(("plain forward + backward", base, _rss_gib()))
    print(f"{'variant':<30}{'s/step':>9}{'tokens/s':>10}{'peak RSS':>11}{'× plain':>9}")
    for name, s, rss in rows:
        print(f"{name:<30}{s:9.1f}{args.tokens / s:10.0f}{rss:9.1f} GiB{s / base:9.2f}")


if __name__ == "__main__":
    main()
