"""`longrope-opt compare`: every sampler × seed on one objective and budget, then a table + plot."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING
from typing import Any

from longrope_opt.cli._common import add_evolution_flags
from longrope_opt.cli._common import add_heartbeat_flag
from longrope_opt.cli._common import add_model_flags
from longrope_opt.cli._common import add_space_flags
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.cli._common import check_output_file
from longrope_opt.cli._common import evolution_kwargs
from longrope_opt.cli._common import text_kwargs
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.samplers import DEFAULT_SAMPLERS
from longrope_opt.samplers import SAMPLERS
from longrope_opt.urls import redact_url


if TYPE_CHECKING:
    from longrope_opt.studies import SearchConfig

DEFAULT_SKIP_TOKENS = 512  # real tokens a skip-mode sample scores (cut to L' when L' is shorter)

EXAMPLES = """examples:
  # the issue-5 comparison: 9 samplers x 3 seeds x 64 trials on the cheap skip objective (~2 h here)
  longrope-opt compare --budget 64 --seeds 3 --storage sqlite:///bench/results/compare.db
  # a few samplers, quick
  longrope-opt compare --budget 16 --seeds 2 --samplers longrope,evolution,tpe,random
  # fair baselines: the same seeds for every sampler, in LongRoPE2's critical space
  longrope-opt compare --seed-all --space critical --attention search --samplers longrope,tpe,cmaes,ngopt
  # only read finished studies (nothing runs when every study has its budget)
  longrope-opt compare --budget 64 --seeds 3 --storage sqlite:///bench/results/compare.db --html cmp.html
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    parser = add_subcommand(
        sub,
        "compare",
        summary="compare search strategies at equal budget (one study per sampler and seed)",
        description="Run one study per (sampler, seed) on the same objective, space and budget "
        "in one storage (rerun to resume), then print best perplexity, the cost to reach the "
        "plain evolution's best, pruning and time, and write a plotly HTML of best-so-far "
        "against cost. Studies that already have their budget are only read.",
        examples=EXAMPLES,
    )
    add_model_flags(parser)
    parser.set_defaults(samples=8)
    cmp = parser.add_argument_group("comparison")
    cmp.add_argument("--budget", type=int, default=64, help="finished trials per study (64)")
    cmp.add_argument("--seeds", type=int, default=3, help="sampler seeds 0..N-1 (3)")
    cmp.add_argument(
        "--samplers",
        default=",".join(DEFAULT_SAMPLERS),
        help=f"comma-separated names (default: all but oneplusone): {SAMPLERS.help_text()}",
    )
    cmp.add_argument("--pruner", default="wilcoxon", choices=["wilcoxon", "none"])
    cmp.add_argument("--target-length", type=int, default=16384, help="L' (default 16384)")
    cmp.add_argument(
        "--mode",
        default="skip",
        choices=["skip", "truncate"],
        help="skip: SAMPLES x SKIP_TOKENS real tokens at positions spread to L' (cheap proxy, "
        "default); truncate: the search's own objective at L' (expensive)",
    )
    cmp.add_argument(
        "--objective",
        default="perplexity",
        choices=["perplexity", "needle-ppl"],
        help="perplexity (default) or needle-driven perplexity (answer tokens of needle prompts)",
    )
    cmp.add_argument(
        "--skip-tokens",
        type=int,
        default=None,
        help=f"real tokens per sample (default {DEFAULT_SKIP_TOKENS}, or L' when L' is shorter)",
    )
    cmp.add_argument("--skip-chunks", type=int, default=2, help="pieces per sample (2)")
    cmp.add_argument(
        "--seed-all",
        action="store_true",
        help="enqueue the same PI/NTK/YaRN seeds (or the critical space's) for every sampler, "
        "so seeded evolution is compared with seeded TPE/CMA-ES/NGOpt",
    )
    add_space_flags(cmp, "the search space of every study (see `search --help`)")
    cmp.add_argument(
        "--attention",
        default="longrope",
        help="attention scale: a rule (none, yarn, longrope), search, or a number",
    )
    cmp.add_argument(
        "--study-prefix",
        default=None,
        help="default: compare-<model>-<L'>-<mode>[-<space>][-above<N>][-seeded]",
    )
    cmp.add_argument("--html", default="compare.html", help="plot file (default compare.html)")
    add_storage_flag(cmp)
    add_heartbeat_flag(cmp)  # a killed comparison's running trial is failed and retried on resume
    evo = parser.add_argument_group("both evolutions (sized for the budget)")
    add_evolution_flags(evo, p=16, n1=8, n2=8, k=8)
    parser.set_defaults(run=run)


def _skip_tokens(args: argparse.Namespace) -> int:
    """`--skip-tokens`, or its default cut to L': a short target must not fail on a flag the
    user never set (a stored study keeps the value, so resuming with the default stays the same)."""
    if args.skip_tokens is not None:
        return int(args.skip_tokens)
    return min(DEFAULT_SKIP_TOKENS, args.target_length)


def _objective_label(args: argparse.Namespace) -> str:
    if args.objective == "needle-ppl":
        where = (
            f"{_skip_tokens(args)} real tokens spread over positions 0..{args.target_length}"
            if args.mode == "skip"
            else f"{args.target_length} tokens"
        )
        return f"needle-driven perplexity: {args.samples} document(s) x 4 depths, {where}"
    if args.mode == "skip":
        return (
            f"skip perplexity (proxy): {args.samples} x {_skip_tokens(args)} real tokens, each in "
            f"{args.skip_chunks} pieces spread over positions 0..{args.target_length}"
        )
    return f"perplexity of {args.samples} sample(s) truncated to {args.target_length} tokens"


def config_from_args(args: argparse.Namespace) -> SearchConfig:
    """The search every study of the comparison shares (sampler and seed are set per study)."""
    from longrope_opt.studies import SearchConfig  # on use: torch stays out of `--help`

    options: dict[str, Any]
    if args.objective == "needle-ppl":  # one report per prompt already
        options = {"mode": "full"}
        if args.mode == "skip":
            options.update(mode="skip", skip_tokens=_skip_tokens(args))
    else:
        options = {"report": "sample"}
        if args.mode == "skip":
            options.update(mode="skip", skip_tokens=_skip_tokens(args), skip_chunks=args.skip_chunks)
    return SearchConfig(
        objective=args.objective,
        **text_kwargs(args),
        sampler_options=evolution_kwargs(args),
        objective_options=options,
        pruner=args.pruner,
        space=args.space,
        critical_above=args.critical_above,
        attention=args.attention,
        seed_all=args.seed_all,
    )


def run(args: argparse.Namespace) -> int:
    """Run the missing studies, then report from storage."""
    # on use: `--help` and bad input stay light (torch loads in seconds)
    import optuna

    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.samplers import check_sampler_names
    from longrope_opt.studies import format_table
    from longrope_opt.studies import full_eval_tokens
    from longrope_opt.studies import make_storage
    from longrope_opt.studies import read_comparison
    from longrope_opt.studies import resolve_storage_url
    from longrope_opt.studies import run_comparison
    from longrope_opt.studies import write_html

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the table says it; not every trial
    samplers = [s.strip() for s in args.samplers.split(",") if s.strip()]
    if not samplers:
        raise InvalidArgumentError(
            f"`--samplers` must name at least one sampler (e.g. longrope,tpe), got {args.samplers!r}."
        )
    check_sampler_names(samplers)
    check_output_file(args.html, flag="--html")  # before hours of studies, not after them
    for flag in ("budget", "seeds", "samples"):
        if getattr(args, flag) < 1:
            raise InvalidArgumentError(
                f"`--{flag.replace('_', '-')}` must be >= 1, got {getattr(args, flag)}."
            )
    config = config_from_args(args)
    seeds = list(range(args.seeds))
    prefix = args.study_prefix or (
        f"compare-{args.model.replace('/', '_')}-{args.target_length}-{args.mode}"
        + ("" if args.space == "full" else f"-{args.space}")
        + ("" if args.critical_above is None else f"-above{args.critical_above}")
        + ("-seeded" if args.seed_all else "")
    )
    url = resolve_storage_url(args.storage)
    storage = make_storage(url, heartbeat_interval=args.heartbeat_interval or None)

    def announce(i: int, n: int, name: str) -> None:
        print(f"[{i + 1}/{n}] {name}", flush=True)

    try:
        run_comparison(
            config, storage=storage, prefix=prefix, samplers=samplers, seeds=seeds,
            budget=args.budget, dtype=args.dtype, device=args.device, attn=args.attn, fuse=args.fuse,
            on_study=announce,
        )  # fmt: skip
    except KeyboardInterrupt:
        print("\ninterrupted: every study is consistent; rerun the same command to resume.")
        return 130
    summaries, missing = read_comparison(storage, prefix, samplers, seeds, args.budget)
    full = full_eval_tokens(summaries)
    label = _objective_label(args)
    print(
        f"\ncomparison '{prefix}' in {redact_url(url)}: {len(samplers)} samplers x {len(seeds)} seeds x "
        f"{args.budget} trials"
    )
    print(f"objective: {label}; one full evaluation = {full} scored tokens")
    print(format_table(summaries, full, args.budget))
    if missing:
        print(f"missing studies: {', '.join(missing)}")
    write_html(summaries, args.html, title=f"{prefix}: {label}", full_tokens=full)
    print(f"plot: {args.html}")
    return 0
