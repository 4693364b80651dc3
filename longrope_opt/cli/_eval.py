"""`longrope-opt eval`: perplexity of classic methods (and searched factors) at given lengths."""

from __future__ import annotations

import argparse
import time
from typing import Any

from longrope_opt.cli._common import add_model_flags
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
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
        "--lengths",
        default="16384",
        help="comma-separated context lengths, e.g. 8k,16k (default 16384)",
    )
    group.add_argument(
        "--methods",
        default="none,pi,ntk,yarn",
        help="comma-separated: none, pi, ntk, dynamic_ntk, yarn (default none,pi,ntk,yarn)",
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


def _searched_scaling(args: argparse.Namespace, spec: Any) -> Any:
    """The searched `RopeScaling` from --factors or --study-name (None if neither)."""
    if args.factors and args.study_name:
        raise InvalidArgumentError("give `--factors` or `--study-name`, not both.")
    if args.factors:
        from longrope_opt.studies import load_factors

        scaling = load_factors(args.factors)
    elif args.study_name:
        import optuna

        from longrope_opt.studies import best_scaling
        from longrope_opt.studies import make_storage
        from longrope_opt.studies import resolve_storage_url

        storage = make_storage(resolve_storage_url(args.storage))
        try:
            study = optuna.load_study(study_name=args.study_name, storage=storage)
        except KeyError:
            raise InvalidArgumentError(
                f"`--study-name` {args.study_name!r} not found in the storage."
            ) from None
        scaling, _ = best_scaling(study)
    else:
        return None
    try:
        return scaling.check(spec)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"searched factors do not fit this model: {exc}") from None


def run(args: argparse.Namespace) -> int:
    """Load once, evaluate every (method, length), print a table."""
    from longrope_opt import RopeSpec
    from longrope_opt.data import load_samples
    from longrope_opt.models import load_model
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.rope import METHODS
    from longrope_opt.rope import get_method

    lengths = int_list(args.lengths, name="lengths")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            raise InvalidArgumentError(
                f"`--methods` entries must be in {sorted(METHODS)}, got {m!r}."
            )
    if args.samples < 1:
        raise InvalidArgumentError(f"`--samples` must be >= 1, got {args.samples}.")
    model, tokenizer = load_model(args.model, dtype=args.dtype, fuse=args.fuse)
    spec = RopeSpec.from_config(model.config)
    searched = _searched_scaling(args, spec)
    if searched is not None:
        methods.append("searched")
    rows: dict[str, dict[int, float]] = {m: {} for m in methods}
    for length in lengths:
        samples = load_samples(
            args.corpus, tokenizer, length, args.samples, args.seed, full=args.mode == "sliding"
        )
        for method in methods:
            # Within the trained window every method is the model as trained (transformers'
            # longrope uses its short factors there); beyond it, the method's own scaling.
            if method == "none" or length <= spec.original_length:
                scaling = None
            elif method == "searched":
                scaling = searched
            else:
                scaling = get_method(method)(spec, length)
            start = time.perf_counter()
            result = evaluate_perplexity(
                model,
                samples,
                scaling,
                mode=args.mode,
                stride=args.stride,
                window=length,
                progress=True,
            )
            rows[method][length] = result.ppl
            print(
                f"  {method:<12} {length:>7}  ppl {result.ppl:9.3f}  "
                f"({result.n_tokens} tokens, {time.perf_counter() - start:.1f} s)",
                flush=True,
            )
    print()
    print(
        f"perplexity on {args.corpus!r} ({args.samples} sample(s), seed {args.seed}, {args.mode}) "
        f"- {args.model}, trained at {spec.original_length}"
    )
    header = f"{'method':<12}" + "".join(f"{L:>10}" for L in lengths)
    print(header)
    print("-" * len(header))
    for method in methods:
        print(f"{method:<12}" + "".join(f"{rows[method][L]:>10.3f}" for L in lengths))
    return 0
