"""SmolLM2-135M to 4x its trained window (32,768 tokens) without fine-tuning, on the public API.

Three stages, each resumable (rerun the same command; every result is kept as it is made):

1. search — studies in one SQLite file: the new search (LongRoPE2's critical space, t
   searched, the adaptive evolution, on the objective `--objective` names: by default full-length
   perplexity, the only variant bench/proxy.py found to rank like held-out text), the plain LongRoPE
   search (full space, the paper's operators) on the same objective, documents and budget, and
   (`--studies floor`) the floor search: the new one with c <= c₀, so every λ is at or above
   YaRN-cd's (the band swap of bench/retrieval_intervention.py traced the 32k passkey loss to
   less interpolation on dims 0-19);
2. rerank — the top `--rerank` trials of each study re-evaluated at full fidelity (perplexity of
   the search documents at the full target length); the winner is chosen on that, and the
   re-ranking is stored in the study (`rerank_study`, user attr ``longrope_opt:rerank``);
   With `--guard-keys` N, a retrieval guard follows: the re-ranked trials are checked in order
   for passkey retrieval at the target on N validation prompts (seed 1; the table's prompts use
   seed 0), and the first that retrieves at least as many keys as the study's best seed is the
   ``<study>-guarded`` winner (the seed itself when none does); stored in the study (user attr
   ``longrope_opt:passkey_guard``: trial number → per-key results), checked key by key, a
   candidate dropped as soon as it misses more keys than the seed;
3. table — on `--held-out` documents no search saw: perplexity at the target, and passkey
   accuracy (`--keys` keys at L/2 and L) for none, PI, NTK, YaRN, YaRN/NTK with the
   critical-dimension correction, the plain search and the new one; paired differences against
   the best classic method with a bootstrap 95 % interval over documents (perplexity) or keys.

`--stage classic` runs the table for the classic rows alone, with no search: at 8x (65,536) one
forward takes ~23 min on 2 CPU cores, so the rows come before any search could. `--methods`
measures some rows now, the rest in a later run.

    python studies/extend_4x_smollm2.py                        # all stages (many hours on CPU)
    python studies/extend_4x_smollm2.py --stage search --trials 64 --studies new   # one study
    python studies/extend_4x_smollm2.py --studies new,plain,floor --trials 32 --rerank 4   # + floor
    python studies/extend_4x_smollm2.py --stage table --guard-keys 10   # + retrieval-guarded rows
    python studies/extend_4x_smollm2.py --stage classic --target-length 65536 --held-out 1 \
        --keys 0 --methods yarn-cd,ntk-cd --out bench/results/extend-8x   # 8x: two rows, no search
    python studies/extend_4x_smollm2.py --model tiny/ --corpus docs/ --target-length 256   # smoke

Results: <out>.db (studies), <out>.json (the table's raw numbers) and <out>.txt (the table),
default bench/results/extend-4x.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


ROOT = Path(__file__).resolve().parents[1]
# studies/ is not a package; this file is also loaded by path (tests, bench/heldout_prose.py).
sys.path.insert(0, str(Path(__file__).resolve().parent))
import extend_4x_report as stats  # noqa: E402
from extend_4x_rows import STUDIES  # noqa: E402
from extend_4x_rows import above_trained  # noqa: E402
from extend_4x_rows import classic_methods  # noqa: E402
from extend_4x_rows import fail  # noqa: E402
from extend_4x_rows import held_out  # noqa: E402
from extend_4x_rows import load  # noqa: E402
from extend_4x_rows import load_table  # noqa: E402, F401  (the benches read the table through here)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--stage", choices=["search", "rerank", "table", "all", "classic"], default="all",
        help="classic: the table's classic rows only, no search (e.g. at 8x, where one forward "
        "takes 23 min on 2 CPU cores and a search does not fit)",
    )  # fmt: skip
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--corpus", default="builtin")
    p.add_argument("--target-length", type=int, default=32768)
    # bench/proxy.py at 16k: only full-length perplexity ranked near-optimal candidates like
    # held-out perplexity (ρ 0.945); the skip and needle variants did not (ρ ≤ 0.48).
    p.add_argument("--objective", default="perplexity", choices=["perplexity", "needle-ppl"])
    p.add_argument(
        "--mode", default="truncate", help="the objective's mode (truncate, skip, full)"
    )
    p.add_argument("--skip-tokens", type=int, default=2048)
    # One 32k forward of SmolLM2 is ~70 s on 2 CPU cores: one search document keeps a trial at
    # one forward; the re-rank then checks the finalists on more documents.
    p.add_argument("--samples", type=int, default=1, help="search documents")
    p.add_argument("--trials", type=int, default=64, help="trials per study")
    p.add_argument("--rerank", type=int, default=6, help="top trials re-evaluated at full length")
    p.add_argument(
        # bench/proxy.py at 32k: one document orders candidates within 3 % of each other
        # nothing like two others do (ρ 0.18): the winner is picked on several documents (2: the
        # built-in corpus has only 2 outside the held-out set at 32k).
        "--rerank-samples", type=int, default=2,
        help="documents of the re-rank (search-side, never held-out; more than --samples, so "
        "the re-rank adds information even when the search objective is full-length)",
    )  # fmt: skip
    p.add_argument(
        "--studies", default="new,plain", help="which searches, in order (new, plain, floor)"
    )
    p.add_argument(
        # Both perplexity searches lost passkeys at 32k that their best seed retrieves (the 4x
        # table, session 8): the guard keeps the best candidate that does not.
        "--guard-keys", type=int, default=0,
        help="validation passkeys at the target for the retrieval guard (0: no guard)",
    )  # fmt: skip
    p.add_argument("--held-out", type=int, default=3)
    p.add_argument("--keys", type=int, default=20, help="passkeys per length")
    p.add_argument(
        "--methods", default="",
        help="comma-separated rows whose perplexity to measure now (default all); the table "
        "reports every row measured so far",
    )  # fmt: skip
    p.add_argument(
        "--passkey-methods", default="",
        help="comma-separated methods to run passkey for (default all: none, pi, ntk, yarn, "
        "yarn-cd, ntk-cd, plain-search, new-search, floor-search)",
    )  # fmt: skip
    p.add_argument(
        "--passkey-lengths", default="half,target",
        help="where passkey runs: half (target/2), target, or both (comma-separated)",
    )  # fmt: skip
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "extend-4x"))
    p.add_argument("--dtype", default="auto")
    args = p.parse_args()
    args.studies = [n.strip() for n in args.studies.split(",") if n.strip()]
    args.passkey_methods = [n.strip() for n in args.passkey_methods.split(",") if n.strip()]
    args.methods = [n.strip() for n in args.methods.split(",") if n.strip()]
    lengths = [n.strip() for n in args.passkey_lengths.split(",") if n.strip()]
    if not lengths or set(lengths) - {"half", "target"}:
        p.error(f"--passkey-lengths must name half and/or target, got {args.passkey_lengths!r}")
    args.passkey_lengths = [args.target_length // (2 if n == "half" else 1) for n in lengths]
    for flag, low in (("target-length", 2), ("samples", 1), ("trials", 1), ("rerank", 1),
                      ("rerank-samples", 1), ("held-out", 1), ("keys", 0), ("guard-keys", 0),
                      ("skip-tokens", 0)):  # fmt: skip  # (before the model loads)
        if (value := getattr(args, flag.replace("-", "_"))) < low:
            p.error(f"--{flag} must be an integer >= {low}, got {value}")
    if not Path(args.out).expanduser().parent.is_dir():  # <out>.db, .json, .txt go there
        p.error(f"--out: folder {str(Path(args.out).parent)!r} does not exist; create it first")
    if not args.studies or set(args.studies) - set(STUDIES):
        p.error(f"--studies must name some of {', '.join(STUDIES)} (comma-separated), got "
                f"{args.studies!r}")  # fmt: skip
    return args


def configs(args: argparse.Namespace, held: list[str]) -> dict:
    from longrope_opt.studies import SearchConfig

    options = {"mode": args.mode}
    if args.mode == "skip":
        options["skip_tokens"] = args.skip_tokens
    if args.objective == "perplexity" and args.mode == "skip":
        options["skip_chunks"] = 2
    common = dict(
        model=args.model, corpus=args.corpus, samples=args.samples, target_length=args.target_length,
        objective=args.objective, objective_options=options, exclude_docs=held,
    )  # fmt: skip
    evolution = dict(population_size=16, num_mutations=8, num_crossovers=8, num_parents=8)
    return {
        "new": SearchConfig(**common, space="critical", attention="search",
                            sampler="longrope-adaptive", sampler_options=evolution),
        "plain": SearchConfig(**common, sampler="longrope", sampler_options=evolution),
        "floor": SearchConfig(**common, space="critical", attention="search", critical_above=0,
                              sampler="longrope-adaptive", sampler_options=evolution),
    }  # fmt: skip


def rerank(study, model, docs, top: int) -> tuple:
    """Full-length perplexity of the study's `top` best trials, stored in the study (resumable)."""
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.studies import rerank_study

    def full(scaling) -> float:
        value = evaluate_perplexity(model, docs, scaling).ppl
        print(f"  rerank {study.study_name}: {value:.4f}")
        return value

    return rerank_study(study, full, top=top)


GUARD_KEY = "longrope_opt:passkey_guard"
GUARD_SEED = 1  # the guard's validation prompts; the table's passkey prompts use seed 0


def guard(study, check, keys: int):
    """The best re-ranked trial of `study` whose `check` passes at least as many of `keys`
    validation keys as the study's best seed does (that seed when no candidate does).

    `check(trial, i)` says whether `trial` retrieves validation key i. Per-key results are
    stored in the study after every key (resumable); a candidate stops as soon as it has missed
    more keys than the seed, since it can no longer pass.
    """
    from tqdm.auto import tqdm

    from longrope_opt.studies import RERANK_KEY

    trials = study.get_trials(deepcopy=False)
    seeds = [t for t in trials if t.user_attrs.get("seed") and t.value is not None]
    reference = min(seeds, key=lambda t: (t.value, t.number))
    ranked = sorted(study.user_attrs[RERANK_KEY].items(), key=lambda kv: (kv[1], int(kv[0])))
    stored = {k: list(v) for k, v in study.user_attrs.get(GUARD_KEY, {}).items()}

    def retrieved(trial, allowed: int) -> list[bool]:
        got = stored.setdefault(str(trial.number), [])
        bar = tqdm(total=keys, initial=min(len(got), keys), desc=f"guard trial {trial.number}",
                   unit="key", leave=False)  # fmt: skip
        while len(got) < keys and got.count(False) <= allowed:
            got.append(bool(check(trial, len(got))))
            study.set_user_attr(GUARD_KEY, stored)
            bar.update(1)
        bar.close()
        return got[:keys]

    bar_misses = retrieved(reference, keys).count(False)
    print(f"  guard {study.study_name}: seed {reference.user_attrs['seed']} (trial "
          f"{reference.number}) {keys - bar_misses}/{keys}")  # fmt: skip
    for number, _ in ranked:
        trial = trials[int(number)]
        got = retrieved(trial, bar_misses)
        passed = len(got) == keys and got.count(False) <= bar_misses
        print(f"  guard {study.study_name}: trial {trial.number} {got.count(True)}/{len(got)} "
              f"{'passes' if passed else 'fails'}")  # fmt: skip
        if passed:
            return trial
    return reference


def main() -> None:
    args = parse()
    sys.path.insert(0, str(ROOT))
    import optuna

    from longrope_opt.data import load_samples
    from longrope_opt.errors import LongRopeOptError
    from longrope_opt.files import write_text_atomic
    from longrope_opt.objectives import evaluate_passkey
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.studies import run_search
    from longrope_opt.studies import space_of_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    L = args.target_length
    storage = f"sqlite:///{args.out}.db"
    model, tok = load(args.model, args.dtype)
    above_trained(model, "--target-length", L)
    # The built-in corpus has 3 documents of >= 32k tokens: the reference manual (113k tokens,
    # 3 windows) and two modules. Windows let the manual alone be the held-out set, leaving
    # both modules (other documents, code rather than prose) to the search and the re-rank.
    try:
        held = held_out(args.corpus, tok, L, args.held_out)
    except LongRopeOptError as exc:  # a corpus too small or missing: one line, exit 2
        fail(str(exc))
    studies = {}
    every = configs(args, held.doc_ids)
    for name, config in ((n, every[n]) for n in args.studies if args.stage != "classic"):
        if args.stage in ("search", "all"):
            print(f"search {name}: {args.trials} trials")
        run = args.stage in ("search", "all")
        studies[name] = run_search(
            config, storage=storage, study_name=f"4x-{name}", n_trials=args.trials if run else None,
            timeout=None if run else 0, model=model, tokenizer=tok, graceful_interrupt=True,
        ).study  # fmt: skip
    if args.stage == "search":
        return
    winners = {}
    if studies:
        docs = load_samples(args.corpus, tok, L, args.rerank_samples, seed=0, exclude=held.doc_ids)
        winners = {name: rerank(study, model, docs, args.rerank) for name, study in studies.items()}
    if args.stage == "rerank":
        return

    methods = classic_methods(model.config, L)
    possible = [*methods, *(f"{k}-{r}" for r in ("search", "guarded") for k in winners)]
    for flag, chosen in (("--methods", args.methods), ("--passkey-methods", args.passkey_methods)):
        unknown = set(chosen) - set(possible)
        if unknown:  # before the guard, which can take an hour
            fail(f"{flag}: unknown {sorted(unknown)}; choose from {possible}")
    trial_of = {}  # a search row's trial: a row made for another trial is measured again
    for key in (k for k in STUDIES if k in winners):
        methods[f"{key}-search"], trial = winners[key]
        trial_of[f"{key}-search"] = trial.number
        if args.guard_keys:
            study = studies[key]

            def check(candidate, i: int, study=study) -> bool:  # validation key i at L
                sc = space_of_study(study, candidate).to_scaling(candidate.params)
                r = evaluate_passkey(model, tok, sc, L, n_trials=i + 1, seed=GUARD_SEED, start=i)
                return r.correct[0]

            guarded = guard(study, check, args.guard_keys)
            if guarded.number == trial.number:
                print(f"  guard {key}: the re-ranked winner passes; no separate row")
            else:
                sc = space_of_study(study, guarded).to_scaling(guarded.params)
                methods[f"{key}-guarded"], trial_of[f"{key}-guarded"] = sc, guarded.number
    raw_path = Path(f"{args.out}.json")
    raw = json.loads(raw_path.read_text()) if raw_path.exists() else {}
    for key in (k for k in winners if args.guard_keys and f"{k}-guarded" not in methods):
        raw.pop(f"{key}-guarded", None)  # the guard now keeps the re-ranked winner: no row

    # "auto" is the fastest compute path of this CPU, which differs between CPUs: each cell
    # records the path its numbers came from (cells from before this record have none).
    path = getattr(model, "longrope_opt_compute", {}).get("path", args.dtype)

    def save() -> None:  # after every piece, atomic: an interruption loses one piece at most
        write_text_atomic(raw_path, json.dumps(raw, indent=1))

    # Perplexity of every method first (3 forwards each), then passkey in pieces of 5 keys:
    # the numbers the goal is about come before the long passkey runs.
    for name, scaling in methods.items():
        if args.methods and name not in args.methods:
            continue
        row = raw.setdefault(name, {})
        if name in trial_of and row.setdefault("trial", trial_of[name]) != trial_of[name]:
            row.clear()
            row["trial"] = trial_of[name]
        if row.get("docs") != held.doc_ids:  # new, or measured on other held-out text
            row["ppl"] = evaluate_perplexity(model, held, scaling, progress=True).sample_ppl
            row["docs"] = held.doc_ids
            row.setdefault("compute", {})["ppl"] = path
            save()
        print(f"  {name:<14} ppl {np.round(row['ppl'], 3).tolist()}")
    wanted = [m for m in args.passkey_methods or args.methods or methods if m in methods]
    for length in args.passkey_lengths if args.keys else []:  # --keys 0: no passkey
        for name in wanted:
            correct = raw.setdefault(name, {}).setdefault(f"passkey{length}", [])
            while len(correct) < args.keys:
                n = min(len(correct) + 5, args.keys)
                r = evaluate_passkey(model, tok, methods[name], length, n_trials=n,
                                     start=len(correct), progress=True)  # fmt: skip
                correct += [bool(c) for c in r.correct]
                paths = raw[name].setdefault("compute", {}).setdefault(f"passkey{length}", {})
                paths[f"{n - len(r.correct)}-{n - 1}"] = path  # keys first-last
                save()
            print(f"  {name:<14} passkey {length}: {sum(correct)}/{len(correct)}")
    table = stats.report(raw, L, held.doc_ids)
    print(table)
    Path(f"{args.out}.txt").write_text(table + "\n")


if __name__ == "__main__":
    main()
