"""What a fitness on several documents costs, against one document, at the same number of trials.

Runs (or resumes: each is a stored study) two searches in one process on the same model and CPU:
  several — `extend`'s search: 3 documents taking turns over the corpus's kinds, the population
            pruner (a candidate stops once it cannot enter the population) and the retrieval
            constraint (passkeys only for a candidate that would enter);
  one     — the same search on 1 document, without the constraint (the baseline);
then prints, per search, the documents read, the passkey prompts run, and the machine time of
the fitness (trial time less the retrieval check's) and of everything, with their ratios to the
baseline. Trials time themselves (Optuna's start and end), so a search resumed over several
sittings is still counted trial by trial.

    python bench/fitness_cost.py --storage sqlite:///experiments/results/extend-2x.db \\
        --study-name extend-smollm2-135m-16384 --trials 12    # hours on a CPU
    python bench/fitness_cost.py --model tiny/ --corpus docs/ --length 256 --trials 8  # smoke

With --stored, nothing runs: the several-document study is read from the storage and its counts
are set beside a 1-document search of the same trials (one document per trial, by construction),
with what the plan of `extend` assumes (`longrope_opt.pipeline.search_forwards`):

    python bench/fitness_cost.py --stored --storage sqlite:///experiments/results/extend-2x.db \
        --study-name extend-smollm2-135m-16384
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
from typing import Any

import optuna
from optuna.trial import TrialState


FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))  # fmt: skip
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--corpus", default="builtin")
    p.add_argument("--length", type=int, default=16384)
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--storage", default="sqlite:///fitness-cost.db")
    p.add_argument("--study-name", default=None,
                   help="the several-document study (default extend-<model>-<length>); the "
                   "baseline is cost-1doc-<that name>")  # fmt: skip
    p.add_argument("--dtype", default="auto")
    p.add_argument("--stored", action="store_true",
                   help="run nothing: count the stored several-document study's forwards")  # fmt: skip
    args = p.parse_args()
    if args.trials < 4:
        p.error(f"--trials must be >= 4 (3 seeds and a candidate), got {args.trials}")
    if args.length < 2:
        p.error(f"--length must be >= 2, got {args.length}")
    if args.stored and args.study_name is None:
        p.error("--stored needs --study-name (the several-document study to count)")
    return args


def documents(trials: list[Any]) -> int:
    """Documents the trials read (one NLL recorded per document)."""
    return sum(len(t.user_attrs.get("sample_nll", [])) for t in trials)


def cost(study: optuna.Study) -> dict[str, Any]:
    """Documents read, passkeys run and seconds, from the trials themselves."""
    trials = study.get_trials(deepcopy=False, states=FINISHED)
    total = sum(t.duration.total_seconds() for t in trials if t.duration is not None)
    retrieval = sum(float(t.user_attrs.get("retrieval_seconds", 0.0)) for t in trials)
    stored = (study.user_attrs.get("longrope_opt:retrieval") or {}).get("misses", {})
    return {
        "trials": len(trials),
        "pruned": sum(t.state == TrialState.PRUNED for t in trials),
        "documents": documents(trials),
        "passkeys": sum(len(v) for v in stored.values()),
        "fitness_s": total - retrieval,
        "total_s": total,
    }


def counts(study: optuna.Study) -> dict[str, Any]:
    """Who read how many documents and passkeys, and the seconds per document and per passkey."""
    trials = study.get_trials(deepcopy=False, states=FINISHED)
    seeds = [t for t in trials if t.user_attrs.get("seed")]
    candidates = [t for t in trials if not t.user_attrs.get("seed")]
    pruned = [t for t in candidates if t.state == TrialState.PRUNED]
    row = cost(study)
    retrieval_s = row["total_s"] - row["fitness_s"]
    return {
        **row,
        "seeds": len(seeds),
        "candidates": len(candidates),
        "entered": len(candidates) - len(pruned),
        "samples": max((documents([t]) for t in seeds), default=0),
        "pruned_docs": documents(pruned) / max(len(pruned), 1),
        "retrieval_s": retrieval_s,
        "seconds_per_document": row["fitness_s"] / max(row["documents"], 1),
        "seconds_per_passkey": retrieval_s / max(row["passkeys"], 1),
    }


def stored(args: argparse.Namespace) -> None:
    """Print the stored study's counts against a 1-document search of as many trials."""
    from longrope_opt.pipeline import search_forwards

    study = optuna.load_study(study_name=args.study_name, storage=args.storage)
    c = counts(study)
    keys = (study.user_attrs.get("longrope_opt:search_config") or {}).get("retrieval_keys", 0)
    planned = search_forwards(c["trials"], c["seeds"], c["samples"], 0)
    made = study.user_attrs.get("longrope_opt:provenance") or {}
    compute = made.get("compute") or {}
    print(f"# python bench/fitness_cost.py --stored --study-name {args.study_name} (reads the "
          f"study; runs nothing). Made by {made.get('model')} at {made.get('target_length')} "
          f"on {compute.get('device')} {compute.get('cpu')} ({compute.get('path')}), "
          f"{(made.get('versions') or {}).get('torch')}")  # fmt: skip
    print(f"{c['trials']} trials: {c['seeds']} seeds on {c['samples']} documents each, "
          f"{c['candidates']} candidates: {c['pruned']} "
          f"pruned after {c['pruned_docs']:.2f} documents on average, {c['entered']} entered "
          f"({c['entered'] / max(c['candidates'], 1):.2f})")  # fmt: skip
    print(f"documents read {c['documents']} vs {c['trials']} for 1 document: "
          f"{c['documents'] / max(c['trials'], 1):.2f}x (the plan of extend expects "
          f"{planned:.1f}: {planned / max(c['trials'], 1):.2f}x)")  # fmt: skip
    print(f"retrieval constraint: {c['passkeys']} passkey prompts ({keys} per entrant and the bar)")
    print(f"seconds (trial durations, as run): {c['fitness_s']:.0f} fitness, "
          f"{c['retrieval_s']:.0f} retrieval; {c['seconds_per_document']:.0f} s per "
          f"document, {c['seconds_per_passkey']:.0f} s per passkey prompt "
          f"({c['seconds_per_passkey'] / max(c['seconds_per_document'], 1e-9):.2f} of a document)")


def main() -> None:
    args = parse()
    if args.stored:
        stored(args)
        return
    from longrope_opt.models import cpu_features
    from longrope_opt.models import cpu_name
    from longrope_opt.models import load_model
    from longrope_opt.pipeline import extend_config
    from longrope_opt.studies import run_search

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    several = extend_config(args.model, args.length, corpus=args.corpus)
    one = dataclasses.replace(several, samples=1, retrieval_keys=0)
    name = args.study_name or f"extend-{several.default_study_name()}"
    model, tokenizer = load_model(args.model, dtype=args.dtype)
    studies = {}
    for label, config, study_name in (("several", several, name),
                                      ("one", one, f"cost-1doc-{name}")):  # fmt: skip
        studies[label] = run_search(config, storage=args.storage, study_name=study_name,
                                    n_trials=args.trials, model=model, tokenizer=tokenizer,
                                    graceful_interrupt=True).study  # fmt: skip
    rows = {label: cost(study) for label, study in studies.items()}
    base = rows["one"]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    print(f"# python bench/fitness_cost.py --trials {args.trials} --length {args.length} -- "
          f"commit {commit}, {cpu_name()} {cpu_features()}")  # fmt: skip
    print(f"{args.model} at {args.length}, {args.trials} trials each, corpus {args.corpus!r}")
    print(f"{'search':<36}{'trials':>7}{'pruned':>7}{'docs':>6}{'keys':>6}{'fitness s':>11}"
          f"{'x one':>7}{'total s':>10}{'x one':>7}")  # fmt: skip
    labels = {"several": "3 documents, pruner, retrieval (4)", "one": "1 document (baseline)"}
    for label, r in rows.items():
        print(f"{labels[label]:<36}{r['trials']:>7}{r['pruned']:>7}{r['documents']:>6}"
              f"{r['passkeys']:>6}{r['fitness_s']:>11.0f}"
              f"{r['fitness_s'] / max(base['fitness_s'], 1e-9):>7.2f}{r['total_s']:>10.0f}"
              f"{r['total_s'] / max(base['total_s'], 1e-9):>7.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
