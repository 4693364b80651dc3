"""`longrope-opt compare`: every sampler × seed on one objective and budget, then a table + plot."""

from __future__ import annotations

import argparse
import time
from typing import Any

from longrope_opt.cli._common import add_evolution_flags
from longrope_opt.cli._common import add_model_flags
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.cli._common import evolution_kwargs
from longrope_opt.errors import InvalidArgumentError


EXAMPLES = """examples:
  # the issue-5 comparison: 9 samplers x 3 seeds x 64 trials on the cheap skip objective (~2 h here)
  longrope-opt compare --budget 64 --seeds 3 --storage sqlite:///bench/results/compare.db
  # a few samplers, quick
  longrope-opt compare --budget 16 --seeds 2 --samplers longrope,evolution,tpe,random
  # only read finished studies (nothing runs when every study has its budget)
  longrope-opt compare --budget 64 --seeds 3 --storage sqlite:///bench/results/compare.db --html cmp.html
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    from longrope_opt.studies._compare import DEFAULT_SAMPLERS

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
        help="comma-separated: longrope, evolution (plain: random start, no dedup, no pruning), "
        "ngopt, cma, twopointsde, pso, oneplusone, tpe, cmaes, random (default: all but oneplusone)",
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
    cmp.add_argument("--skip-tokens", type=int, default=512, help="tokens per sample (512)")
    cmp.add_argument("--skip-chunks", type=int, default=2, help="pieces per sample (2)")
    cmp.add_argument("--study-prefix", default=None, help="default: compare-<model>-<L'>-<mode>")
    cmp.add_argument("--html", default="compare.html", help="plot file (default compare.html)")
    add_storage_flag(cmp)
    evo = parser.add_argument_group("both evolutions (sized for the budget)")
    add_evolution_flags(evo, p=16, n1=8, n2=8, k=8)
    parser.set_defaults(run=run)


def _objective_label(args: argparse.Namespace) -> str:
    if args.mode == "skip":
        return (
            f"skip perplexity (proxy): {args.samples} x {args.skip_tokens} real tokens, each in "
            f"{args.skip_chunks} pieces spread over positions 0..{args.target_length}"
        )
    return f"perplexity of {args.samples} sample(s) truncated to {args.target_length} tokens"


def run(args: argparse.Namespace) -> int:
    """Run the missing studies, then report from storage."""
    from longrope_opt.studies import make_storage
    from longrope_opt.studies import resolve_storage_url
    from longrope_opt.studies._compare import check_sampler_names
    from longrope_opt.studies._compare_report import format_table
    from longrope_opt.studies._compare_report import full_eval_tokens
    from longrope_opt.studies._compare_report import read_comparison
    from longrope_opt.studies._compare_report import write_html

    samplers = [s.strip() for s in args.samplers.split(",") if s.strip()]
    check_sampler_names(samplers)
    for flag in ("budget", "seeds", "samples"):
        if getattr(args, flag) < 1:
            raise InvalidArgumentError(f"`--{flag}` must be >= 1, got {getattr(args, flag)}.")
    seeds = list(range(args.seeds))
    prefix = args.study_prefix or (
        f"compare-{args.model.replace('/', '_')}-{args.target_length}-{args.mode}"
    )
    url = resolve_storage_url(args.storage)
    storage = make_storage(url)
    pending = _pending(storage, prefix, samplers, seeds, args.budget)
    if pending:
        try:
            _run_pending(args, storage, prefix, pending)
        except KeyboardInterrupt:
            print("\ninterrupted: every study is consistent; rerun the same command to resume.")
            return 130
    summaries, missing = read_comparison(storage, prefix, samplers, seeds, args.budget)
    full = full_eval_tokens(summaries)
    label = _objective_label(args)
    print(
        f"\ncomparison '{prefix}' in {url}: {len(samplers)} samplers x {len(seeds)} seeds x "
        f"{args.budget} trials"
    )
    print(f"objective: {label}; one full evaluation = {full} scored tokens")
    print(format_table(summaries, full, args.budget))
    if missing:
        print(f"missing studies: {', '.join(missing)}")
    write_html(summaries, args.html, title=f"{prefix}: {label}", full_tokens=full)
    print(f"plot: {args.html}")
    return 0


def _pending(
    storage: Any, prefix: str, samplers: list[str], seeds: list[int], budget: int
) -> list:
    import optuna

    from longrope_opt.studies import finished_trials
    from longrope_opt.studies._compare import comparison_study_name

    existing = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    pending = []
    # Seed-major: an interrupted comparison still holds complete seeds for every sampler.
    for seed in seeds:
        for sampler in samplers:
            name = comparison_study_name(prefix, sampler, seed)
            if name in existing:
                study = optuna.load_study(study_name=name, storage=storage)
                if finished_trials(study) >= budget:
                    continue
            pending.append((sampler, seed, name))
    return pending


def _run_pending(args: argparse.Namespace, storage: Any, prefix: str, pending: list) -> None:
    import optuna

    from longrope_opt import RopeSpec
    from longrope_opt.data import load_samples
    from longrope_opt.models import load_model
    from longrope_opt.objectives import PerplexityObjective
    from longrope_opt.space import SearchSpace
    from longrope_opt.studies import open_study
    from longrope_opt.studies import run_study
    from longrope_opt.studies._compare import make_pruner
    from longrope_opt.studies._compare import make_sampler
    from longrope_opt.studies._provenance import provenance_of

    for sampler, _, _ in pending:  # fail on a missing extra before the model loads
        make_pruner(args.pruner, sampler)
    model, tokenizer = load_model(args.model, dtype=args.dtype, fuse=args.fuse)
    spec = RopeSpec.from_config(model.config)
    space = SearchSpace(spec, args.target_length)
    length = args.skip_tokens if args.mode == "skip" else args.target_length
    samples = load_samples(args.corpus, tokenizer, length, args.samples, args.seed)
    objective = PerplexityObjective(
        model,
        samples,
        space=space,
        mode=args.mode,
        skip_tokens=args.skip_tokens,
        skip_chunks=args.skip_chunks,
        report="sample",
    )
    provenance = provenance_of(
        model_name=args.model,
        model=model,
        spec=spec,
        target_length=args.target_length,
        samples=samples,
        seed=args.seed,
        objective=f"perplexity-{args.mode}"
        + (f"-{args.skip_tokens}x{args.skip_chunks}" if args.mode == "skip" else ""),
    )
    evolution = evolution_kwargs(args)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for i, (name, seed, study_name) in enumerate(pending):
        sampler = make_sampler(
            name, space=space, seed=seed, budget=args.budget, evolution=evolution
        )
        study = open_study(
            storage=storage,
            study_name=study_name,
            sampler=sampler,
            provenance=provenance,
            spec=spec,
            pruner=make_pruner(args.pruner, name),
        )
        print(f"[{i + 1}/{len(pending)}] {study_name}", flush=True)
        start = time.perf_counter()
        run_study(study, objective, n_trials=args.budget, graceful_interrupt=True)
        print(f"    done in {time.perf_counter() - start:.0f} s", flush=True)
