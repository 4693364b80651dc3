"""A LongRoPE search written as a plain Optuna study, the way a user would, with the public API.

    python studies/search_smollm2.py                          # 16k, short budget
    python studies/search_smollm2.py --target-length 32768 --n-trials 200 --storage sqlite:///smol.db

Rerunning with the same storage and study name continues the search (all state is in the study).
"""

from __future__ import annotations

import argparse

import optuna

from longrope_opt import RopeSpec
from longrope_opt.data import load_samples
from longrope_opt.models import load_model
from longrope_opt.objectives import PerplexityObjective
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import enqueue_seeds
from longrope_opt.space import SearchSpace


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--corpus", default="builtin")
    parser.add_argument("--target-length", type=int, default=16384)
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--n-trials", type=int, default=12)
    parser.add_argument("--storage", default="sqlite:///longrope-study.db")
    parser.add_argument("--study-name", default="smollm2-study")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    model, tokenizer = load_model(args.model)
    spec = RopeSpec.from_config(model.config)
    space = SearchSpace(spec, args.target_length)  # λ ∈ [1, 1.25·s], paper n̂ set, LongRoPE t
    samples = load_samples(args.corpus, tokenizer, args.target_length, args.samples, args.seed)

    sampler = LongRoPESampler(
        space=space,
        population_size=8,
        num_mutations=4,
        num_crossovers=4,
        num_parents=4,
        seed=args.seed,
    )
    study = optuna.create_study(
        study_name=args.study_name,
        storage=args.storage,
        sampler=sampler,
        direction="minimize",
        load_if_exists=True,
    )
    enqueue_seeds(study, sampler)  # PI, NTK, YaRN as visible trials (once)
    done = len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    study.optimize(
        PerplexityObjective(model, samples, space=space), n_trials=max(0, args.n_trials - done)
    )

    for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        if t.user_attrs.get("seed"):
            print(f"seed {t.user_attrs['seed']:<5} perplexity {t.value:.4f}")
    print(f"best       perplexity {study.best_value:.4f} (trial {study.best_trial.number})")


if __name__ == "__main__":
    main()
