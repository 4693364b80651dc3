"""`longrope-opt eval`: perplexity of classic methods (and searched factors) at given lengths."""

from __future__ import annotations

import argparse
from typing import Any

from longrope_opt.cli._common import add_model_flags
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.cli._common import check_output_file
from longrope_opt.cli._common import int_list
from longrope_opt.errors import InvalidArgumentError


EXAMPLES = """examples:
  # none/PI/NTK/YaRN at 16k on the offline default model
  longrope-opt eval
  # more lengths and methods, sliding window with the paper's stride
  longrope-opt eval --lengths 8k,16k,32k --methods none,pi,ntk,dynamic_ntk,yarn --mode sliding --stride 256
  # searched factors next to the classic methods, on documents the search did not see
  longrope-opt eval --factors factors.json --seed 1 --samples 3
  longrope-opt eval --study-name smollm2-135m-16384 --lengths 8k,16k
  # your own model and text
  longrope-opt eval --model ./my-llama --corpus ./books/ --lengths 8192 --samples 5
  # the paper's Table 4 layout with files: table.csv, table.json and table.html (ppl vs length)
  longrope-opt eval --lengths 8k,16k,32k --methods none,pi,ntk,dynamic_ntk,yarn --factors f.json --output table
  # passkey retrieval accuracy, 10 random keys and depths per length
  longrope-opt eval --task passkey --lengths 4k,8k,16k --trials 10 --factors f.json
  # an exported model directory as transformers loads it, next to the classic methods
  longrope-opt eval --model smol-32k --methods model,yarn --lengths 8k,16k,32k
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    parser = add_subcommand(
        sub,
        "eval",
        summary="perplexity of RoPE scalings at given lengths",
        description="Evaluate perplexity of RoPE scaling methods at one or more context lengths.",
        examples=EXAMPLES,
    )
    add_model_flags(parser)
    group = parser.add_argument_group("evaluation")
    group.add_argument(
        "--task",
        default="perplexity",
        choices=["perplexity", "passkey"],
        help="perplexity on the corpus (default) or passkey retrieval accuracy",
    )
    group.add_argument(
        "--trials", type=int, default=10, help="passkey: random keys per length (default 10)"
    )
    group.add_argument(
        "--output",
        default=None,
        metavar="PREFIX",
        help="also write PREFIX.csv, PREFIX.json and PREFIX.html (value against length)",
    )
    group.add_argument(
        "--lengths",
        default="16384",
        help="comma-separated context lengths, e.g. 8k,16k (default 16384)",
    )
    group.add_argument(
        "--methods",
        default="none,pi,ntk,yarn",
        help="comma-separated: none, pi, ntk, dynamic_ntk, yarn, yarn-cd, ntk-cd (YaRN and NTK "
        "with the critical-dimension correction), or model (the RoPE the model was loaded "
        "with, e.g. an exported directory) (default none,pi,ntk,yarn)",
    )
    group.add_argument(
        "--mode",
        default="truncate",
        choices=["truncate", "sliding"],
        help="truncate: one window per document; sliding: every token once, with --stride",
    )
    group.add_argument(
        "--stride", type=int, default=None, help="sliding-window stride (paper: 256)"
    )
    searched = parser.add_argument_group("searched factors (rows named 'searched')")
    searched.add_argument(
        "--factors",
        default=None,
        metavar="FILE.json",
        help="factors written by `longrope-opt export`",
    )
    searched.add_argument("--study-name", default=None, help="take the best trial of this study")
    add_storage_flag(searched)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Check the flags, call `longrope_opt.pipeline.compare_methods`, print the table."""
    lengths = int_list(args.lengths, name="lengths")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise InvalidArgumentError(
            f"`--methods` must name at least one method (e.g. none,yarn), got {args.methods!r}."
        )
    if args.output:
        check_output_file(f"{args.output}.csv", flag="--output")
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.pipeline import compare_methods

    def show(method: str, length: int, value: float, detail: str, seconds: float) -> None:
        print(f"  {method:<12} {length:>7}  {args.task} {value:9.3f}  ({detail}, {seconds:.1f} s)",
              flush=True)  # fmt: skip

    table = compare_methods(
        args.model, methods=methods, lengths=lengths, task=args.task, corpus=args.corpus,
        samples=args.samples, seed=args.seed, mode=args.mode, stride=args.stride,
        trials=args.trials, factors=args.factors, study_name=args.study_name,
        storage=args.storage, dtype=args.dtype, device=args.device, attn=args.attn,
        fuse=args.fuse, output=args.output, on_value=show,
    )  # fmt: skip
    print()
    print(table.format())
    if table.files:
        print(f"wrote {', '.join(table.files)}")
    return 0
