"""SmolLM2-135M to 4x its trained window (32,768 tokens) without fine-tuning: the recipe on the
public API. Copy it for your model.

1. search: LongRoPE2's critical space with every λ at or above YaRN-cd's (`critical_above=0`:
   the 32k passkey losses of unconstrained searches came from interpolating the high and middle
   frequencies less than YaRN-cd does), t searched, the adaptive evolution; the fitness is
   perplexity on 3 documents taking turns over the corpus's kinds of text (the built-in corpus
   is prose and code: a fitness on one document of one kind overfit it), a candidate stops
   reading documents once it cannot enter the population, and one that would enter must
   retrieve `retrieval_keys` passkeys at 32k as well as the study's best seed;
2. re-rank (optional): the best trials again at full length on more documents;
3. guard: the best candidate that retrieves as many of `guard_keys` other passkeys at 32k as
   the study's best seed becomes the exported winner;
4. validate: the study's winners against the classic rows on documents no stage saw, with
   perplexity intervals over documents, passkeys, the in-sample ratio beside the held-out one,
   and a verdict.

Every stage is stored as it is made: rerun the same command to resume.

    python studies/extend_4x_smollm2.py --corpus ./prose/          # hours on a CPU
    python studies/extend_4x_smollm2.py --corpus ./prose/ --classic yarn,yarn-cd,ntk-cd --keys 20
    python studies/extend_4x_smollm2.py --model tiny/ --corpus docs/ --target-length 256 \\
        --trials 6 --population 4 --keys 2 --guard-keys 2 --retrieval-keys 2 --docs 2  # smoke
"""

from __future__ import annotations

import argparse

import optuna


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )  # fmt: skip
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--target-length", type=int, default=32768)
    p.add_argument("--search-corpus", default="builtin", help="the search's documents")
    p.add_argument("--corpus", required=True, help="held-out text for validate (a folder of .txt)")
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--population", type=int, default=16, help="generation 0 (half after)")
    p.add_argument("--samples", type=int, default=3, help="documents of the fitness")
    p.add_argument("--retrieval-keys", type=int, default=4, help="the retrieval constraint's")
    p.add_argument("--rerank", type=int, default=0)
    p.add_argument("--rerank-samples", type=int, default=5)
    p.add_argument("--guard-keys", type=int, default=6)
    p.add_argument("--docs", type=int, default=5, help="held-out documents")
    p.add_argument("--keys", type=int, default=20, help="validate's passkeys")
    p.add_argument("--classic", default="none,pi,ntk,yarn,yarn-cd,ntk-cd")
    p.add_argument("--storage", default="sqlite:///extend-4x.db")
    p.add_argument("--study-name", default="4x-kinds")
    p.add_argument("--output", default=None, help="validate's PREFIX.csv/.json/.html")
    args = p.parse_args()
    for flag in ("target_length", "trials", "population", "rerank", "rerank_samples",
                 "guard_keys", "docs", "keys", "samples", "retrieval_keys"):  # fmt: skip
        low = {"docs": 2, "keys": 0, "guard_keys": 0, "population": 3, "rerank": 0,
               "retrieval_keys": 0}.get(flag, 1)  # fmt: skip
        if getattr(args, flag) < low:
            p.error(f"--{flag.replace('_', '-')} must be >= {low}, got {getattr(args, flag)}")
    return args


def main() -> None:
    args = parse()
    from longrope_opt.data import load_samples
    from longrope_opt.evaluation import MeasurementStore
    from longrope_opt.evaluation import format_summary
    from longrope_opt.evaluation import study_rows
    from longrope_opt.evaluation import summarize
    from longrope_opt.evaluation import summary_json
    from longrope_opt.models import load_model
    from longrope_opt.studies import SearchConfig
    from longrope_opt.studies import run_search
    from longrope_opt.studies import study_documents

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    half = max(1, args.population // 2)
    config = SearchConfig(
        model=args.model, corpus=args.search_corpus, samples=args.samples,
        target_length=args.target_length, space="critical", critical_above=0,
        attention="search", sampler="longrope-adaptive", pruner="population",
        retrieval_keys=args.retrieval_keys,
        sampler_options={"population_size": args.population, "num_mutations": half // 2 or 1,
                         "num_crossovers": half // 2 or 1, "num_parents": half},
    )  # fmt: skip
    model, tok = load_model(args.model)
    result = run_search(
        config, storage=args.storage, study_name=args.study_name, n_trials=args.trials,
        model=model, tokenizer=tok, rerank=args.rerank, rerank_samples=args.rerank_samples,
        guard_keys=args.guard_keys, graceful_interrupt=True,
    )  # fmt: skip
    study = result.study
    docs = load_samples(args.corpus, tok, args.target_length, args.docs,
                        exclude=study_documents(study))  # fmt: skip
    path = (getattr(model, "longrope_opt_compute", None) or {}).get("path", "float32")
    from longrope_opt.evaluation import validate

    validation = validate(
        model, tok, study_rows(study), docs, lengths=[args.target_length],
        store=MeasurementStore(args.storage, path=path), keys=args.keys,
        classic=[c for c in args.classic.split(",") if c],
    )  # fmt: skip
    summary = summarize(validation)
    print(format_summary(summary))
    print(f"{validation.measured} measurements made now; the rest came from {args.storage}")
    if args.output:
        with open(f"{args.output}.json", "w") as f:
            f.write(summary_json(summary))


if __name__ == "__main__":
    main()
