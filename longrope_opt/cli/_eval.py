"""`longrope-opt eval`: perplexity of classic methods (and searched factors) at given lengths."""

from __future__ import annotations

import argparse
import time
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
        help="comma-separated: none, pi, ntk, dynamic_ntk, yarn, or model (the RoPE the model "
        "was loaded with, e.g. an exported directory) (default none,pi,ntk,yarn)",
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
    if not (args.factors or args.study_name):
        return None
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.studies import factors_with_length
    from longrope_opt.studies import make_storage
    from longrope_opt.studies import resolve_storage_url

    storage = (
        make_storage(resolve_storage_url(args.storage), must_exist=True)
        if args.study_name
        else None
    )
    scaling, _ = factors_with_length(
        factors=args.factors, study_name=args.study_name, storage=storage
    )
    try:
        return scaling.check(spec)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"searched factors do not fit this model: {exc}") from None


def _scaling_for(method: str, length: int, spec: Any, searched: Any, plain: bool = True) -> Any:
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.rope import get_method
    from longrope_opt.rope import none

    # Within the trained window every method is the model as loaded (transformers' longrope
    # uses its short factors there); beyond it, the method's own scaling. "model" is the RoPE
    # the model was loaded with (e.g. an `export_model` directory) at every length.
    if method == "model" or length <= spec.original_length:
        return None
    if method == "none":
        return None if plain else none(spec)  # an extended model: force the pretrained angles
    if method == "searched":
        return searched
    return get_method(method)(spec, length)


def _is_plain(model: Any) -> bool:
    # A model that runs its pretrained RoPE as loaded (not an extended export).
    params = getattr(model.config, "rope_parameters", None) or {}
    return params.get("rope_type", "default") == "default"


def run(args: argparse.Namespace) -> int:
    """Load once, evaluate every (method, length), print a table (and write files)."""
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt import RopeSpec
    from longrope_opt.data import check_source
    from longrope_opt.data import load_samples
    from longrope_opt.models import load_model
    from longrope_opt.models import read_config
    from longrope_opt.objectives import evaluate_passkey
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.rope import METHODS

    lengths = int_list(args.lengths, name="lengths")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise InvalidArgumentError(
            f"`--methods` must name at least one method (e.g. none,yarn), got {args.methods!r}."
        )
    if args.output:
        check_output_file(f"{args.output}.csv", flag="--output")
    for m in methods:
        if m not in METHODS and m != "model":
            raise InvalidArgumentError(
                f"`--methods` entries must be in {sorted([*METHODS, 'model'])}, got {m!r}."
            )
    for flag in ("samples", "trials"):
        if getattr(args, flag) < 1:
            raise InvalidArgumentError(f"`--{flag}` must be >= 1, got {getattr(args, flag)}.")
    if args.seed < 0:
        raise InvalidArgumentError(f"`--seed` must be an integer >= 0, got {args.seed}.")
    if args.mode == "sliding" and (args.stride is None or args.stride < 1):
        raise InvalidArgumentError(
            f"`--stride` must be an integer >= 1 with --mode sliding (e.g. 256), got {args.stride}."
        )
    check_source(args.corpus)
    pre = read_config(args.model)  # factors and studies are checked before the weights load
    if pre is not None and (args.factors or args.study_name):
        _searched_scaling(args, RopeSpec.from_config(pre))
    model, tokenizer = load_model(
        args.model, dtype=args.dtype, device=args.device, attn=args.attn, fuse=args.fuse
    )
    spec = RopeSpec.from_config(model.config)
    plain = _is_plain(model)
    searched = _searched_scaling(args, spec)
    if searched is not None:
        methods.append("searched")
    passkey = args.task == "passkey"
    rows: dict[str, dict[int, float]] = {m: {} for m in methods}
    for length in lengths:
        samples = None
        if not passkey:
            samples = load_samples(
                args.corpus,
                tokenizer,
                length,
                args.samples,
                args.seed,
                full=args.mode == "sliding",
            )
        unscaled: tuple[float, str] | None = None  # methods that leave the model as it is
        for method in methods:
            scaling = _scaling_for(method, length, spec, searched, plain)
            start = time.perf_counter()
            if scaling is None and unscaled is not None:
                value, detail = unscaled  # the same model on the same inputs: not run again
            elif passkey:
                res = evaluate_passkey(
                    model, tokenizer, scaling, length, n_trials=args.trials, seed=args.seed,
                    progress=True,
                )  # fmt: skip
                value, detail = res.accuracy, f"{sum(res.correct)}/{len(res.correct)} keys"
            else:
                assert samples is not None  # loaded above for every task but passkey
                result = evaluate_perplexity(
                    model, samples, scaling, mode=args.mode, stride=args.stride, window=length,
                    progress=True,
                )  # fmt: skip
                value, detail = result.ppl, f"{result.n_tokens} tokens"
            if scaling is None:
                unscaled = (value, detail)
            rows[method][length] = value
            print(
                f"  {method:<12} {length:>7}  {args.task} {value:9.3f}  "
                f"({detail}, {time.perf_counter() - start:.1f} s)",
                flush=True,
            )
    print()
    if passkey:
        title = f"passkey accuracy ({args.trials} keys per length, seed {args.seed})"
    else:
        title = (
            f"perplexity on {args.corpus!r} ({args.samples} sample(s), seed {args.seed}, "
            f"{args.mode})"
        )
    title += f" - {args.model}, trained at {spec.original_length}"
    print(title)
    header = f"{'method':<12}" + "".join(f"{L:>10}" for L in lengths)
    print(header)
    print("-" * len(header))
    fmt = "{:>10.0%}" if passkey else "{:>10.3f}"
    for method in methods:
        print(f"{method:<12}" + "".join(fmt.format(rows[method][L]) for L in lengths))
    if args.output:
        _write_outputs(args.output, rows, args.task, title)
    return 0


def _write_outputs(prefix: str, rows: dict[str, dict[int, float]], task: str, title: str) -> None:
    # on use: `--help` and bad input stay light (torch loads in seconds)
    import csv
    import json

    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.viz import length_figure
    from longrope_opt.viz import length_records

    records = length_records(rows)
    value = "accuracy" if task == "passkey" else "ppl"
    with open(f"{prefix}.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "length", value])
        for r in records:
            writer.writerow([r["method"], r["length"], r["ppl"]])
    with open(f"{prefix}.json", "w") as f:
        out = [{"method": r["method"], "length": r["length"], value: r["ppl"]} for r in records]
        json.dump({"task": task, "title": title, "rows": out}, f, indent=1)
    fig = length_figure(records, title=title)
    if task == "passkey":
        fig.update_layout(yaxis_type="linear", yaxis_title="passkey accuracy")
    fig.write_html(f"{prefix}.html", include_plotlyjs=True)
    print(f"wrote {prefix}.csv, {prefix}.json, {prefix}.html")
