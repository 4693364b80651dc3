"""`longrope-opt search`: run (or resume) a LongRoPE search study."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING
from typing import Any

from longrope_opt.cli._common import add_evolution_flags
from longrope_opt.cli._common import add_heartbeat_flag
from longrope_opt.cli._common import add_model_flags
from longrope_opt.cli._common import add_space_flags
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.cli._common import add_trained_length_flag
from longrope_opt.cli._common import evolution_kwargs
from longrope_opt.cli._common import text_kwargs
from longrope_opt.objectives import OBJECTIVES
from longrope_opt.samplers import EVOLUTION_SAMPLERS
from longrope_opt.samplers import SAMPLERS
from longrope_opt.urls import redact_url


if TYPE_CHECKING:
    from longrope_opt.studies import SearchConfig


EXAMPLES = """examples:
  # the README's main command: a short real search at 16k on the offline default model
  longrope-opt search --n-trials 16 --population-size 8 --num-parents 4 --num-mutations 4 --num-crossovers 4 --samples 1
  # the paper's defaults (P=64, N1=N2=16, top-32, p=0.3), resumable: rerun to continue
  longrope-opt search --study-name smol-32k --target-length 32768 --n-trials 1344 --samples 5
  # a custom objective installed under the `longrope_opt.objectives` entry-point group
  longrope-opt search --objective my-metric --study-name mine
  # many machines: one PostgreSQL study
  longrope-opt search --storage postgresql://user@db-host/longrope --study-name big --n-trials 500
  # progressive extension: search 32k on a model fine-tuned at 16k (factors relative to its own)
  longrope-opt search --model ft-16k/ --base config --target-length 32768 --study-name ft-32k
  # LongRoPE2's space (critical dimension searched) and needle-driven perplexity, at 4x
  longrope-opt search --space critical --objective needle-ppl --target-length 32768 --study-name smol-32k-cd
  # the same space with c kept at or below theory: every λ at or above YaRN-cd's
  longrope-opt search --space critical --critical-above 0 --attention search --target-length 32768 --study-name smol-32k-floor
  # search on the cheap skip proxy, then re-rank its 4 best at full length (the winner exported)
  longrope-opt search --mode skip --target-length 32768 --n-trials 200 --rerank 4 --study-name smol-32k-skip
  # short-context recovery: short factors at the trained length, lower cap, the long factors' t
  longrope-opt search --model ft-16k/ --recovery --target-length 8192 --lambda-max 1.5 --n-hat 0 --attention 1.0377
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    parser = add_subcommand(
        sub,
        "search",
        summary="search RoPE rescale factors (a resumable Optuna study)",
        description="Evolutionary LongRoPE search, stored as an Optuna study. Rerunning the same "
        "command resumes it; --n-trials is the study's total.",
        examples=EXAMPLES,
    )
    add_model_flags(parser)
    add_trained_length_flag(parser.add_argument_group("the checkpoint"))
    study = parser.add_argument_group("study")
    study.add_argument(
        "--target-length", type=int, default=16384, help="L' to extend to (default 16384)"
    )
    add_storage_flag(study)
    study.add_argument("--study-name", default=None, help="default: '<model>-<target length>'")
    study.add_argument(
        "--n-trials", type=int, default=None, help="total finished trials for the study"
    )
    study.add_argument("--timeout", type=float, default=None, help="stop this run after SECONDS")
    study.add_argument(
        "--objective",
        default="perplexity",
        help=f"objective name (default perplexity): {OBJECTIVES.help_text()}",
    )
    study.add_argument(
        "--mode",
        default=None,
        help="the objective's mode (perplexity: truncate (default), skip; needle-ppl: full "
        "(default), skip): skip = SKIP_TOKENS real tokens at positions spread to L', a cheap proxy",
    )
    study.add_argument(
        "--skip-tokens", type=int, default=None, help="real tokens per sample with --mode skip"
    )
    study.add_argument(
        "--sampler", default="longrope", help=f"sampler name: {SAMPLERS.help_text()}"
    )
    study.add_argument(
        "--seed-all",
        action="store_true",
        help="enqueue the PI/NTK/YaRN seeds whatever --sampler is (the evolution always has them)",
    )
    study.add_argument(
        "--rerank",
        type=int,
        default=0,
        metavar="K",
        help="after the trials, re-evaluate the K best at full fidelity (perplexity at the full "
        "target length) and choose the winner on that; for a proxy objective (default 0: off)",
    )
    study.add_argument(
        "--rerank-samples",
        type=int,
        default=None,
        metavar="N",
        help="documents of the re-rank (default: --samples); more than the search's own, so a "
        "full-length search's winner is chosen on more text",
    )
    study.add_argument(
        "--guard-keys",
        type=int,
        default=0,
        metavar="N",
        help="after the re-rank, a retrieval guard on N passkey prompts at the target length: "
        "the best candidate that retrieves as many as the study's best seed is exported "
        "(default 0: off)",
    )
    study.add_argument(
        "--retrieval-keys",
        type=int,
        default=0,
        metavar="N",
        help="the retrieval constraint: a candidate that would enter the population must "
        "retrieve as many of N passkeys at the target length as the study's best seed, or it "
        "ranks behind every one that does (default 0: off)",
    )
    study.add_argument(
        "--passkey-form",
        default=None,
        choices=["single", "branched"],
        help="how the retrieval constraint and guard measure passkeys: 'single', the paper's "
        "one-key prompt (about 0.6 of a forward a key on a CPU), or 'branched', the haystack "
        "once and every key grafted onto it (one forward for all; CPU only); default: a "
        "study keeps its own, a new one 'single'",
    )
    study.add_argument(
        "--pruner",
        default=None,
        choices=["population", "wilcoxon", "none"],
        help="population (a new study's default with the longrope samplers): a candidate stops "
        "reading documents once it cannot enter the population; wilcoxon: Optuna's "
        "WilcoxonPruner (default: a study keeps its own)",
    )
    add_heartbeat_flag(study)
    evo = parser.add_argument_group("evolution (paper Table 3 defaults)")
    add_evolution_flags(evo, p=64, n1=16, n2=16, k=32)
    evo.add_argument(
        "--seed-methods",
        default=None,
        help="full space: the seeds, comma-separated among pi,ntk,yarn,yarn-cd,ntk-cd (default "
        "for a new study: all five; a study keeps its own)",
    )
    evo.add_argument(
        "--n-hat",
        default="search",
        help="'search' (paper set) or a fixed integer (default search)",
    )
    add_space_flags(
        evo,
        "full: every λ searched in [1, 1.25·s] (the paper); critical: LongRoPE2's critical "
        "dimension searched around theory, λ from it on in [s, 2s], an NTK ramp below",
    )
    evo.add_argument(
        "--attention",
        default="longrope",
        help="attention scale: none, yarn, longrope (sqrt(1+ln s/ln L), default), search, or a "
        "number (a fixed t, e.g. the long factors' t for a short recovery search)",
    )
    stage = parser.add_argument_group("progressive extension")
    stage.add_argument(
        "--base",
        default=None,
        help="search on top of an extended model: 'config' (the model's longrope config, e.g. "
        "a fine-tuned export), 'study:NAME', or a factor JSON from `export`; λ are then relative "
        "to it and exports compose both stages",
    )
    stage.add_argument(
        "--warm-start",
        default=None,
        metavar="FACTORS",
        help="factors to try first after the seeds: a factor JSON from `export`/`extend`, or "
        "'study:NAME'; carried to --target-length (λ^k, k = ln s'/ln s) (full space, no --base)",
    )
    stage.add_argument(
        "--recovery",
        action="store_true",
        help="short-context recovery search: --target-length within the trained window, "
        "λ capped by --lambda-max; the result is the short factors of a longrope pair",
    )
    stage.add_argument(
        "--lambda-max",
        type=float,
        default=None,
        help="largest λ (default 1.25·s; 1.25 for a short recovery search, target <= trained)",
    )
    parser.set_defaults(run=run)


def config_from_args(args: argparse.Namespace) -> SearchConfig:
    """The `SearchConfig` the flags describe (the CLI's only job before `run_search`)."""
    from longrope_opt.studies import SearchConfig  # on use: torch stays out of `--help`

    return SearchConfig(
        **text_kwargs(args),
        n_hat=args.n_hat,
        attention=args.attention,
        lambda_max=args.lambda_max,
        space=args.space,
        critical_above=args.critical_above,
        recovery=args.recovery,
        base=args.base,
        warm_start=args.warm_start,
        sampler=args.sampler,
        sampler_options=evolution_kwargs(args) if args.sampler in EVOLUTION_SAMPLERS else {},
        objective=args.objective,
        objective_options=objective_options(args),
        seed_all=args.seed_all,
        pruner=args.pruner,
        retrieval_keys=args.retrieval_keys,
        passkey_form=args.passkey_form,
        trained_length=args.trained_length,
        seed_methods=None if args.seed_methods is None else tuple(
            n.strip() for n in args.seed_methods.split(",") if n.strip()
        ),
    )


def objective_options(args: argparse.Namespace) -> dict[str, Any]:
    """--mode / --skip-tokens as objective options (absent: the objective's defaults, so a study
    made without them resumes unchanged)."""
    options: dict[str, Any] = {}
    if args.mode is not None:
        options["mode"] = args.mode
    if args.skip_tokens is not None:
        options["skip_tokens"] = args.skip_tokens
    return options


def run(args: argparse.Namespace) -> int:
    """Parse flags into a config, run (or resume) its study, print best vs seeds."""
    return execute(
        config_from_args(args),
        storage=args.storage,
        study_name=args.study_name,
        n_trials=args.n_trials,
        timeout=args.timeout,
        dtype=args.dtype,
        device=args.device,
        attn=args.attn,
        fuse=args.fuse,
        heartbeat_interval=args.heartbeat_interval,
        store_total=True,
        rerank=args.rerank,
        rerank_samples=args.rerank_samples,
        guard_keys=args.guard_keys,
    )


def execute(
    config: SearchConfig, *, storage: str | None, study_name: str | None, **run: Any
) -> int:
    """`run_search` with the CLI's messages (shared by `search` and `worker`)."""
    # on use: `--help` and bad input stay light (torch loads in seconds)
    import optuna

    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.studies import load_named_study
    from longrope_opt.studies import make_storage
    from longrope_opt.studies import resolve_storage_url
    from longrope_opt.studies import run_search

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = resolve_storage_url(storage)
    name = config.default_study_name() if study_name is None else study_name
    try:
        result = run_search(config, storage=url, study_name=name, graceful_interrupt=True, **run)
    except KeyboardInterrupt:
        print(f"\ninterrupted: study {name!r} is consistent; rerun the same command to resume.")
        print_summary(load_named_study(make_storage(url), name))
        return 130
    print(
        f"\n{result.finished} trial(s) finished in {result.seconds:.0f} s; study {name!r} in {redact_url(url)}"
    )
    print_summary(result.study)
    store = "" if storage is None else f" --storage {redact_url(url)}"
    print(f"\nnext, check the winner on documents this search did not use (resumable; it "
          f"measures the classic rows too):\n  longrope-opt validate --study-name {name}{store}")
    return 0


def print_summary(study: Any) -> None:
    """Best trial vs the PI/NTK/YaRN seeds, then the full-fidelity re-rank if there is one."""
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from optuna.trial import TrialState

    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.studies import ranked_trials
    from longrope_opt.studies import record
    from longrope_opt.studies import reranked_best
    from longrope_opt.studies import reranked_order
    from longrope_opt.studies import study_winner

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        print("no completed trial yet")
        return
    ranked = ranked_trials(study)  # best first, in the study's direction
    seeds = {t.user_attrs["seed"]: t for t in complete if t.user_attrs.get("seed")}
    best = ranked[0] if ranked else complete[0]
    rows = [
        (f"seed {m.upper()}", t) for m, t in sorted(seeds.items(), key=lambda kv: kv[1].number)
    ]
    rows.append(("best found", best))
    print(f"{'':<12}{'trial':>7}{'perplexity':>12}{'n_hat':>7}{'attn':>8}{'vs best seed':>14}")
    seed_values = [float(t.value) for t in ranked if t.user_attrs.get("seed") and t.value is not None]
    best_seed = seed_values[0] if seed_values else math.nan
    for label, t in rows:
        rel = 100 * (t.value / best_seed - 1) if math.isfinite(best_seed) else math.nan
        print(
            f"{label:<12}{t.number:>7}{t.value:>12.4f}{t.user_attrs.get('n_hat', 0):>7}"
            f"{t.user_attrs.get('attention_scale', 1.0):>8.4f}{rel:>13.2f}%"
        )
    print(f"({len(complete)} completed trials)")
    reranked = reranked_best(study)
    if reranked is not None:
        values = record.read_rerank(study)
        better = "lower" if study.direction.name == "MINIMIZE" else "higher"
        print(f"re-ranked at full fidelity ({len(values)} trials, {better} is better):")
        for trial in reranked_order(study):
            number, value = trial.number, values[trial.number]
            mark = "  <- re-ranked winner" if int(number) == reranked[1].number else ""
            print(f"  trial {int(number):>5}  {value:.4f}{mark}")
    guard = record.read_guard(study)
    if guard and "winner" in guard:
        keys, results = guard["keys"], guard["results"]
        print(f"retrieval guard: {keys} passkeys at {guard['length']} (seed {guard['seed']}); "
              f"the bar is the best seed, trial {guard['reference']}:")  # fmt: skip
        for number, got in results.items():
            mark = "  <- guarded winner" if int(number) == guard["winner"] else ""
            print(f"  trial {int(number):>5}  {sum(got.values())}/{len(got)} retrieved{mark}")
    winner = study_winner(study)
    print(f"exported winner: trial {winner.trial.number} ({winner.rule})")
