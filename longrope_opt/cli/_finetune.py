"""`longrope-opt finetune`: train with searched factors at their length, save a loadable model."""

from __future__ import annotations

import argparse
import importlib.util
import os
from typing import Any

from longrope_opt.cli._common import add_device_flag
from longrope_opt.cli._common import add_overwrite_flag
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.errors import InvalidArgumentError


EXAMPLES = """examples:
  # a handful of 16k steps on Perl's manual (apt-get install perl-doc), saved as a model dir
  longrope-opt finetune --factors factors-16k.json --steps 4 --output ft-16k
  # PoSE: 4k real tokens per step at positions spread over 16k (a fraction of a full step)
  longrope-opt finetune --factors factors-16k.json --steps 8 --pose-tokens 4096 --output ft-16k
  # PoSE with mixed windows: 8k real tokens spread to 64k, a fifth of the samples (the default
  # share) kept inside the 8k window under the original RoPE; killed? the same command resumes
  # from ft-64k-checkpoints/
  longrope-opt finetune --factors smol-64k/factors.json --steps 200 --grad-accum 4 --pose-tokens 8192 --warmup-steps 10 --output ft-64k
  # and as a GGUF for llama.cpp / Ollama (the trained weights, quantized as the model's own GGUF)
  longrope-opt finetune --factors smol-64k/factors.json --steps 200 --pose-tokens 8192 --short-share 0.2 --output ft-64k --gguf ft-64k.gguf
  # LoRA (rank 16) for a GPU that cannot hold full fine-tuning; the adapter lands in ft-64k/adapter
  longrope-opt finetune --factors smol-64k/factors.json --steps 200 --pose-tokens 8192 --lora 16 --output ft-64k-lora
  # the best formula fine-tuned alike (same text, order, seed, steps, schedule), to compare
  longrope-opt finetune --method yarn-cd --target-length 65536 --steps 200 --grad-accum 4 --pose-tokens 8192 --short-share 0.2 --warmup-steps 10 --output ft-64k-yarn-cd
  # then search 32k on top of it (factors relative to the fine-tuned model's own)
  longrope-opt search --model ft-16k --base config --target-length 32768
  # a GPU user scales the same command up (the paper: 400 steps at 128k, lr 2e-5)
  longrope-opt finetune --model HuggingFaceTB/SmolLM2-135M --study-name smol-128k --corpus pg19 --samples 400 --steps 400 --device cuda --output ft-128k
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    parser = add_subcommand(
        sub,
        "finetune",
        summary="fine-tune with searched factors and save the model (progressive extension)",
        description="Train next-token prediction on long samples with the searched RoPE, then "
        "save a model directory whose config carries the factors (transformers `longrope`).",
        examples=EXAMPLES,
    )
    src = parser.add_argument_group("factors (one of)")
    src.add_argument("--factors", default=None, help="JSON written by `longrope-opt export`")
    src.add_argument("--study-name", default=None, help="best trial of this study")
    src.add_argument("--method", default=None, choices=["pi", "ntk", "yarn", "yarn-cd", "ntk-cd"],
                     help="a formula at --target-length, as validate measures it (the "
                     "baseline to fine-tune alike)")  # fmt: skip
    add_storage_flag(src)
    data = parser.add_argument_group("model and data")
    data.add_argument(
        "--model", default="smollm2-135m", help="model to fine-tune (default smollm2-135m)"
    )
    data.add_argument("--corpus", default="perl-doc",
                      help="training text: a folder, .txt, a datasets name (default perl-doc: "
                      "Perl's manual, Debian's perl-doc: 3.0M tokens, 86 documents of 8k or more; neither the "
                      "search's built-in corpus nor the held-out books)")  # fmt: skip
    data.add_argument(
        "--target-length",
        type=int,
        default=None,
        help="sequence length (default: the factors' target length)",
    )
    data.add_argument("--samples", type=int, default=None,
                      help="training sequences, as windows of the corpus's documents (default: "
                      "one per sequence trained, steps x grad-accum, or all the corpus holds)")  # fmt: skip
    data.add_argument("--seed", type=int, default=1, help="chooses the documents (default 1)")
    add_device_flag(data)
    train = parser.add_argument_group("training")
    train.add_argument("--steps", type=int, default=4, help="optimizer steps (default 4)")
    train.add_argument("--learning-rate", type=float, default=None,
                       help="AdamW's peak, decayed linearly (default 2e-5, LongRoPE's; 2e-4 with "
                       "--lora, LoRA's usual)")  # fmt: skip
    train.add_argument("--warmup-steps", type=int, default=0, help="linear warm-up (default 0)")
    train.add_argument("--grad-accum", type=int, default=1, help="sequences per step (default 1)")
    train.add_argument(
        "--pose-tokens",
        type=int,
        default=None,
        help="train on N real tokens per sample with position ids spread over the full length "
        "(PoSE; the attention cost of N tokens). Default: whole samples",
    )
    train.add_argument(
        "--short-share",
        type=float,
        default=None,
        help="with --pose-tokens: the share of samples kept inside the trained window under the "
        "original RoPE (LongRoPE2's mixed context windows; default 0.2 with --pose-tokens, "
        "chosen, its 4k cost measured in the results; 0: PoSE samples only)",
    )
    train.add_argument(
        "--save-steps",
        type=int,
        default=25,
        help="steps between checkpoints; a rerun of the same command resumes from the last "
        "(default 25; the 2 newest are kept)",
    )
    train.add_argument(
        "--lora",
        type=int,
        default=None,
        metavar="R",
        help="train LoRA adapters of rank R on the attention projections (norms in full) "
        "instead of every weight; the merged model is written, the adapter in OUTPUT/adapter "
        "(needs the lora extra: peft). Default: full fine-tuning",
    )
    train.add_argument(
        "--autocast",
        default="bfloat16",
        choices=["bfloat16", "float16", "none"],
        help="mixed precision over fp32 weights (default bfloat16)",
    )
    train.add_argument(
        "--gradient-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="recompute layers in backward (default on)",
    )
    out = parser.add_argument_group("output")
    out.add_argument("-o", "--output", required=True, help="model directory to write")
    out.add_argument("--gguf", default=None, metavar="PATH",
                     help="also write the fine-tuned model as a GGUF for llama.cpp / Ollama "
                     "(its trained weights in the model's own GGUF layout and types; a "
                     "Modelfile beside it). The model must come as a GGUF: smollm2-135m does")  # fmt: skip
    out.add_argument("--checkpoints", default=None, metavar="DIR",
                     help="Trainer's checkpoints, where a rerun resumes (default: OUTPUT-checkpoints)")  # fmt: skip
    add_overwrite_flag(out)
    out.add_argument(
        "--save-dtype",
        default="bfloat16",
        choices=["bfloat16", "float32", "float16"],
        help="dtype of the saved weights (default bfloat16)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Check the flags, call `longrope_opt.pipeline.finetune_and_export`, report the run."""
    if args.short_share is not None and not 0.0 <= args.short_share < 1.0:
        raise InvalidArgumentError(f"`--short-share` must be in [0, 1), got {args.short_share}.")
    if args.short_share and args.pose_tokens is None:
        raise InvalidArgumentError("`--short-share` needs `--pose-tokens` (mixed windows mix PoSE "
                                   "samples with short ones).")  # fmt: skip
    if args.lora is not None:
        if args.lora < 1:
            raise InvalidArgumentError(f"`--lora` must be a rank >= 1, got {args.lora}.")
        if importlib.util.find_spec("peft") is None:  # before the model loads
            raise InvalidArgumentError("`--lora` needs peft: pip install 'longrope-opt[lora]'.")
    for name in ("steps", "samples", "grad_accum", "save_steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise InvalidArgumentError(
                f"`--{name.replace('_', '-')}` must be >= 1, got {getattr(args, name)}."
            )
    if args.seed < 0:
        raise InvalidArgumentError(f"`--seed` must be an integer >= 0, got {args.seed}.")
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.pipeline import finetune_and_export
    from longrope_opt.training import SHORT_SHARE

    if args.short_share is None:  # mixed windows come with PoSE
        args.short_share = SHORT_SHARE if args.pose_tokens is not None else 0.0

    result, out, length = finetune_and_export(
        args.output, factors=args.factors, study_name=args.study_name, method=args.method,
        storage=args.storage,
        model=args.model, corpus=args.corpus, target_length=args.target_length,
        samples=args.samples, seed=args.seed, device=args.device, attn=args.attn,
        overwrite=args.overwrite, save_dtype=args.save_dtype, steps=args.steps,
        learning_rate=args.learning_rate, warmup_steps=args.warmup_steps,
        grad_accum=args.grad_accum,
        autocast_dtype=None if args.autocast == "none" else args.autocast,
        gradient_checkpointing=args.gradient_checkpointing, pose_tokens=args.pose_tokens,
        short_share=args.short_share, save_steps=args.save_steps, checkpoints=args.checkpoints,
        lora=args.lora, gguf=args.gguf,
    )  # fmt: skip
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun the first process reports
        return 0
    losses = ", ".join(f"{x:.4f}" for x in result.losses)
    print(
        f"{args.steps} step(s), {result.tokens} tokens in {result.seconds:.0f} s; losses {losses}"
    )
    if result.resumed_from:  # the seconds are this call's: the steps before ran in another
        print(f"resumed from {result.resumed_from}: {args.steps - result.resumed_step} "
              f"step(s) in this call")  # fmt: skip
    print(f"wrote {out} (rope type longrope, max_position_embeddings {length})")
    if args.gguf is not None:
        print(f"wrote {args.gguf}; run it in llama.cpp: llama-cli -m {args.gguf} -c {length}")
    if result.adapter is not None:
        print(f"LoRA adapter (merged into {out}): {out / 'adapter'}; peft loads it on the model "
              "extended with the same factors: PeftModel.from_pretrained(AutoModelForCausalLM."
              f"from_pretrained(EXTENDED_DIR), {str(out / 'adapter')!r})")  # fmt: skip
        print(f"without its merged weights (delete {out}/*.safetensors) the folder, a few MB, "
              "still loads as this model wherever the base model loads (merged once)")  # fmt: skip
    return 0
