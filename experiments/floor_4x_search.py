"""The 4x floor search: LongRoPE2's critical space with every λ at or above YaRN-cd's
(`critical_above=0`), warm-started from the trials the 4x "new" search already measured there.

The 4x "new" search (critical space, c free around theory) measured 48 candidates on the same
objective (perplexity of one 32k code document). Those whose λ lies on or above YaRN-cd's floor,
dimension by dimension, are candidates of the floor search too: they are added to the floor study
as its generation 0 (Optuna's `Study.add_trials`, with the values they were measured at), so the
evolution's next generation starts from them instead of measuring 15 candidates again.
Rerunning resumes: the warm start is done once, then `run_search` continues the study.

    python experiments/floor_4x_search.py --trials 4        # 4 new candidates (~9 min each here)
    python experiments/floor_4x_search.py --trials 4 --rerank 3 --rerank-samples 2 --guard-keys 6
"""

from __future__ import annotations

import argparse

import numpy as np
import optuna


SOURCE = "4x-new"
STUDY = "4x-floor"
HELD_OUT = ["pydoc_data.topics", "pydoc_data.topics#32768", "pydoc_data.topics#65536"]


def floor_config(population: int):
    from longrope_opt.studies import SearchConfig

    return SearchConfig(
        model="smollm2-135m", corpus="builtin", samples=1, target_length=32768,
        objective="perplexity", objective_options={"mode": "truncate"}, exclude_docs=HELD_OUT,
        space="critical", attention="search", critical_above=0, sampler="longrope-adaptive",
        sampler_options={"population_size": population, "num_mutations": 2,
                         "num_crossovers": 2, "num_parents": 4},
    )  # fmt: skip


def floor_trials(source: optuna.Study, space) -> list[optuna.trial.FrozenTrial]:
    """The source's complete trials that are valid in `space` (the floor space), re-expressed
    with its distributions and tagged as its sampler's generation 0."""
    dists = space.distributions()
    kept = []
    for t in sorted(source.get_trials(deepcopy=False), key=lambda t: t.number):
        if t.state != optuna.trial.TrialState.COMPLETE:
            continue
        if any(not dists[k]._contains(dists[k].to_internal_repr(v)) for k, v in t.params.items()):
            continue  # e.g. a critical dimension above theory
        if space.decode(t.params) is None:
            continue
        kept.append(t)
    out = []
    for slot, t in enumerate(kept):
        out.append(optuna.trial.create_trial(
            params=dict(t.params), distributions={k: dists[k] for k in t.params}, value=t.value,
            intermediate_values=dict(t.intermediate_values),
            user_attrs={**t.user_attrs, "warm_start": f"{SOURCE} trial {t.number}"},
            system_attrs={"LongRoPESampler:generation": 0, "LongRoPESampler:slot": slot},
        ))  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=4, help="new candidates after the warm start")
    p.add_argument("--storage", default="sqlite:///experiments/results/extend-4x.db")
    p.add_argument("--rerank", type=int, default=0, help="best trials re-ranked at full length")
    p.add_argument("--rerank-samples", type=int, default=None, help="documents of the re-rank")
    p.add_argument("--guard-keys", type=int, default=0, help="passkeys of the retrieval guard")
    args = p.parse_args()
    from longrope_opt.studies import record
    from longrope_opt.studies import run_search

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = optuna.get_all_study_names(args.storage)
    if STUDY not in names:
        source = optuna.load_study(study_name=SOURCE, storage=args.storage)
        spec = record.read_spec(source)
        space = floor_config(16).build_space(spec)
        warm = floor_trials(source, space)
        floor = np.array(space.to_scaling(space.seed_params()[0][1]).factors)
        for t in warm:  # every warm trial is on or above YaRN-cd's λ (the floor)
            assert (space.to_scaling(t.params).factors >= floor - 1e-9).all(), t.user_attrs
        study = optuna.create_study(storage=args.storage, study_name=STUDY)
        study.add_trials(warm)
        print(f"{STUDY}: warm start with {len(warm)} trials of {SOURCE}")
    study = optuna.load_study(study_name=STUDY, storage=args.storage)
    population = sum(1 for t in study.get_trials(deepcopy=False)
                     if t.user_attrs.get("warm_start"))  # fmt: skip
    run_search(floor_config(population), storage=args.storage, study_name=STUDY,
               n_trials=population + args.trials, graceful_interrupt=True, rerank=args.rerank,
               rerank_samples=args.rerank_samples, guard_keys=args.guard_keys)  # fmt: skip
    from longrope_opt.studies import study_winner

    winner = study_winner(study)
    t = winner.trial
    print(f"{STUDY}: {winner.rule} winner trial {t.number} ({t.user_attrs.get('warm_start', 'new')}), "
          f"search value {t.value:.4f}; re-rank {study.user_attrs.get('longrope_opt:rerank')}; "
          f"guard {study.user_attrs.get('longrope_opt:guard')}")


if __name__ == "__main__":
    main()
