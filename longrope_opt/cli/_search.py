"""`longrope-opt search`: run (or resume) a LongRoPE search study."""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from longrope_opt.cli._common import add_evolution_flags
from longrope_opt.cli._common import add_heartbeat_flag
from longrope_opt.cli._common import add_model_flags
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.cli._common import evolution_kwargs
from longrope_opt.errors import InvalidArgumentError


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
  # short-context recovery: short factors at the trained length, lower cap, the long factors' t
  longrope-opt search --model ft-16k/ --target-length 8192 --lambda-max 1.5 --n-hat 0 --attention 1.0377
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
        "--objective", default="perplexity", help="objective name (default perplexity)"
    )
    study.add_argument(
        "--sampler",
        default="longrope",
        help="longrope (default), evolution, ngopt, cma, twopointsde, pso, oneplusone, tpe, "
        "cmaes or random",
    )
    add_heartbeat_flag(study)
    evo = parser.add_argument_group("evolution (paper Table 3 defaults)")
    add_evolution_flags(evo, p=64, n1=16, n2=16, k=32)
    evo.add_argument(
        "--n-hat",
        default="search",
        help="'search' (paper set) or a fixed integer (default search)",
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


def _attention(value: str) -> tuple[str, float | None]:
    try:
        return "none", float(value)
    except ValueError:
        return value, None


def _space(args: argparse.Namespace, spec: Any, base: Any = None) -> Any:
    from longrope_opt.space import PAPER_N_HAT
    from longrope_opt.space import SearchSpace

    if args.n_hat == "search":
        n_hat: Any = PAPER_N_HAT
    else:
        try:
            n_hat = int(args.n_hat)
        except ValueError:
            raise InvalidArgumentError(
                f"`--n-hat` must be 'search' or an integer >= 0, got {args.n_hat!r}."
            ) from None
    recovery = bool(getattr(args, "recovery", False))
    if recovery != (args.target_length <= spec.original_length):
        if recovery:
            raise InvalidArgumentError(
                f"`--target-length` must be <= the trained length {spec.original_length} with "
                f"--recovery, got {args.target_length}."
            )
        spec.scale(args.target_length)  # the usual one-line error, naming the trained length
    if recovery and base is not None:
        raise InvalidArgumentError(
            "`--base` and --recovery exclude each other: short factors are absolute."
        )
    attention, value = _attention(args.attention)
    scaling, length = base if base is not None else (None, None)
    return SearchSpace(
        spec,
        args.target_length,
        n_hat=n_hat,
        attention=attention,
        attention_value=value,
        lambda_high=getattr(args, "lambda_max", None),
        base=scaling,
        base_length=length,
    )


#: The flags a `worker` needs to rebuild the same search (stored in the study's user attrs).
CONFIG_KEYS = (
    "model", "corpus", "samples", "seed", "target_length", "objective", "sampler",
    "population_size", "num_mutations", "num_crossovers", "num_parents", "mutation_prob",
    "n_hat", "attention", "lambda_max", "base", "recovery",
)  # fmt: skip
CONFIG_ATTR = "search_config"


def run(args: argparse.Namespace) -> int:
    """Load, open or resume the study, run to the budget, print best vs seeds."""
    return execute(args, role="search")


def execute(args: argparse.Namespace, *, role: str) -> int:
    """The search loop shared by `search` and `worker` (a worker's args come from the study)."""
    import optuna

    from longrope_opt import RopeSpec
    from longrope_opt.data import load_samples
    from longrope_opt.models import load_model
    from longrope_opt.objectives import get_objective_factory
    from longrope_opt.studies import make_storage
    from longrope_opt.studies import open_study
    from longrope_opt.studies import resolve_storage_url
    from longrope_opt.studies import run_study
    from longrope_opt.studies._compare import check_sampler_names
    from longrope_opt.studies._compare import make_sampler
    from longrope_opt.studies._provenance import provenance_of
    from longrope_opt.studies._stages import BASE_ATTR
    from longrope_opt.studies._stages import base_record
    from longrope_opt.studies._stages import resolve_base

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = resolve_storage_url(args.storage)
    factory = get_objective_factory(args.objective)
    check_sampler_names([args.sampler])
    if args.samples < 1:
        raise InvalidArgumentError(f"`--samples` must be >= 1, got {args.samples}.")
    if args.n_trials is not None and args.n_trials < 1:
        raise InvalidArgumentError(f"`--n-trials` must be >= 1, got {args.n_trials}.")
    # Fail on a bad database before the model loads.
    storage = make_storage(url, heartbeat_interval=args.heartbeat_interval or None)
    model, tokenizer = load_model(args.model, dtype=args.dtype, fuse=args.fuse)
    spec = RopeSpec.from_config(model.config)
    base = None
    if getattr(args, "base", None) is not None:
        base = resolve_base(args.base, model_config=model.config, storage=storage)
        args.base = base_record(*base)  # what the study and its workers keep
    space = _space(args, spec, base)  # validates the target length against the model
    samples = load_samples(args.corpus, tokenizer, args.target_length, args.samples, args.seed)
    evolution = evolution_kwargs(args)
    sampler = make_sampler(
        args.sampler,
        space=space,
        seed=args.seed,
        budget=args.n_trials or 1000,
        evolution=evolution,
    )
    name = args.study_name or f"{args.model.replace('/', '_')}-{args.target_length}"
    provenance = provenance_of(
        model_name=args.model,
        model=model,
        spec=spec,
        target_length=args.target_length,
        samples=samples,
        seed=args.seed,
        objective=args.objective,
    )
    config = {key: getattr(args, key, None) for key in CONFIG_KEYS}
    study = open_study(
        storage=storage,
        study_name=name,
        sampler=sampler,
        provenance=provenance,
        spec=spec,
        config={CONFIG_ATTR: config, **({BASE_ATTR: args.base} if base else {})},
    )
    if role == "search" and args.n_trials is not None:
        study.set_user_attr("n_trials", args.n_trials)  # the study's total, for its workers
    objective = factory(model, samples, space=space, progress=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.perf_counter()
    try:
        done = run_study(
            study, objective, n_trials=args.n_trials, timeout=args.timeout, graceful_interrupt=True
        )
    except KeyboardInterrupt:
        print(f"\ninterrupted: study {name!r} is consistent; rerun the same command to resume.")
        print_summary(study)
        return 130
    print(
        f"\n{done} trial(s) finished in {time.perf_counter() - start:.0f} s; study {name!r} in {url}"
    )
    print_summary(study)
    return 0


def print_summary(study: Any) -> None:
    """Best trial vs the PI/NTK/YaRN seeds."""
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        print("no completed trial yet")
        return
    seeds = {t.user_attrs["seed"]: t for t in complete if t.user_attrs.get("seed")}
    best = min(complete, key=lambda t: t.value)
    rows = [
        (f"seed {m.upper()}", t) for m, t in sorted(seeds.items(), key=lambda kv: kv[1].number)
    ]
    rows.append(("best found", best))
    print(f"{'':<12}{'trial':>7}{'perplexity':>12}{'n_hat':>7}{'attn':>8}{'vs best seed':>14}")
    best_seed = min((t.value for t in seeds.values()), default=math.nan)
    for label, t in rows:
        rel = 100 * (t.value / best_seed - 1) if math.isfinite(best_seed) else math.nan
        print(
            f"{label:<12}{t.number:>7}{t.value:>12.4f}{t.user_attrs.get('n_hat', 0):>7}"
            f"{t.user_attrs.get('attention_scale', 1.0):>8.4f}{rel:>13.2f}%"
        )
    print(f"({len(complete)} completed trials)")
